/*
 * io/model_shape.c: the model-shape JSON (vocab_size, seq_len, n_embd, n_layer, n_head).
 *
 * Layer: io/ (platform; no StarPU). Errors are one line naming the file and the key
 * (io/json_fields.h).
 */
#include <stdlib.h>      /* free */
#include <string.h>      /* strlen */
#include <cjson/cJSON.h> /* cJSON_GetObjectItemCaseSensitive, cJSON_Delete */
#include "zt_config.h"   /* struct zt_model_shape */
#include "json_fields.h" /* zt_json_*: checked field readers */

// ----------------------------------------------------------------------------
// model shape

static enum zt_status parse_shape(struct zt_model_shape *out, const char *json, size_t len,
                                  const char *name) {
    struct zt_json_ctx c = {"model shape", name ? name : "(string)"};
    static const char *const keys[] = {"vocab_size", "seq_len", "n_embd",
                                       "n_layer",    "n_head",  NULL};
    cJSON *root = NULL;
    ZT_CHECK(zt_json_parse_object(&c, json, len, &root));
    enum zt_status rc = zt_json_check_keys(&c, root, "", keys, NULL);
    int vals[5] = {0};
    for (int i = 0; i < 5 && rc == ZT_OK; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, keys[i]);
        if (!x)
            rc = zt_json_err(&c, keys[i], "missing (the model shape needs vocab_size, seq_len, "
                                      "n_embd, n_layer and n_head)");
        else
            rc = zt_json_int32(&c, x, keys[i], 1, &vals[i]);
    }
    cJSON_Delete(root);
    if (rc != ZT_OK) return rc;
    if (vals[2] % vals[4] != 0)
        return zt_json_err(&c, "n_embd", "expected a multiple of n_head %d, got %d", vals[4],
                           vals[2]);
    out->vocab_size = vals[0];
    out->seq_len = vals[1];
    out->n_embd = vals[2];
    out->n_layer = vals[3];
    out->n_head = vals[4];
    return ZT_OK;
}

enum zt_status zt_model_shape_parse(struct zt_model_shape *m, const char *json, const char *name) {
    if (!m || !json) return zt_error_set(ZT_ERR_INVALID, "zt_model_shape_parse: NULL argument");
    return parse_shape(m, json, strlen(json), name);
}

enum zt_status zt_model_shape_load(struct zt_model_shape *m, const char *path) {
    if (!m || !path) return zt_error_set(ZT_ERR_INVALID, "zt_model_shape_load: NULL argument");
    char *buf;
    size_t len;
    ZT_CHECK(zt_json_read_file("model shape", path, &buf, &len));
    enum zt_status rc = parse_shape(m, buf, len, path);
    free(buf);
    return rc;
}
