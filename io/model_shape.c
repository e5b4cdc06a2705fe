/*
 * io/model_shape.c: the model-shape JSON (vocab_size, seq_len, n_embd, n_layer, n_head), and
 * the sizes a shape implies (its largest tensors, which must fit in 64-bit byte counts).
 *
 * Layer: io/ (platform; no StarPU). Errors are one line naming the file and the key
 * (io/json_fields.h).
 */
#include <stdio.h>       /* snprintf */
#include <stdlib.h>      /* free */
#include <string.h>      /* strlen */
#include <cjson/cJSON.h> /* cJSON_GetObjectItemCaseSensitive, cJSON_Delete */
#include "zt_config.h"   /* struct zt_model_shape */
#include "json_fields.h" /* zt_json_*: checked field readers */

// ----------------------------------------------------------------------------
// sizes

/* Elements one array may hold: every byte count zerotask derives from a shape (4 bytes an
 * element, a handful of such arrays added up, times 4 for weights, gradients and the two Adam
 * moments) then fits in int64_t with room to spare. */
#define SHAPE_MAX_ELEMS ((double)((int64_t)1 << 56))

/* the largest arrays a shape implies (micro: sequences per micro-batch, in the last two), in
 * doubles, which cannot overflow; field is the key the array grows with */
struct shape_part {
    const char *field, *what;
    double elems;
};
enum { NPARTS = 6 };
static void shape_parts(const struct zt_model_shape *s, int micro, struct shape_part *p) {
    double V = s->vocab_size, T = s->seq_len, C = s->n_embd, L = s->n_layer, NH = s->n_head;
    double N = (double)micro * T; /* positions of a micro-batch */
    p[0] = (struct shape_part){"vocab_size", "the token embedding (vocab_size x n_embd)", V * C};
    p[1] = (struct shape_part){"seq_len", "the position embedding (seq_len x n_embd)", T * C};
    p[2] = (struct shape_part){"n_embd", "one layer's weights (12 x n_embd^2)", 12 * C * C};
    p[3] = (struct shape_part){"n_layer", "the weights of all layers (n_layer x 12 x n_embd^2)",
                               L * 12 * C * C};
    p[4] = (struct shape_part){"seq_len", "a micro-batch's attention scores (micro-batch x "
                               "n_layer x n_head x seq_len^2)", micro * L * NH * T * T};
    p[5] = (struct shape_part){"vocab_size", "a micro-batch's logits (micro-batch x seq_len x "
                               "vocab_size)", N * V};
}

/* the value of field in s */
static int field_value(const struct zt_model_shape *s, const char *field) {
    return !strcmp(field, "vocab_size") ? s->vocab_size
           : !strcmp(field, "seq_len")  ? s->seq_len
           : !strcmp(field, "n_embd")   ? s->n_embd
                                        : s->n_layer;
}

enum zt_status zt_model_shape_check_sizes(const struct zt_model_shape *s, int micro_batch,
                                          const char *name) {
    struct zt_json_ctx c = {"model shape", name ? name : "(string)"};
    struct shape_part p[NPARTS];
    shape_parts(s, micro_batch, p);
    char batch[48]; /* the last two parts grow with the micro-batch */
    snprintf(batch, sizeof batch, " with a micro-batch of %d", micro_batch);
    for (int i = 0; i < NPARTS; i++)
        if (p[i].elems > SHAPE_MAX_ELEMS)
            return zt_json_err(&c, p[i].field, "%d is too large: %s would hold %.3g elements"
                               "%s, more than %.3g (2^56, the most zerotask sizes in 64-bit "
                               "byte counts)", field_value(s, p[i].field), p[i].what,
                               p[i].elems, i >= 4 ? batch : "", SHAPE_MAX_ELEMS);
    return ZT_OK;
}

void zt_model_shape_largest(const struct zt_model_shape *s, int micro_batch, char *out,
                            size_t n) {
    struct shape_part p[NPARTS];
    shape_parts(s, micro_batch, p);
    int big = 0;
    for (int i = 1; i < NPARTS; i++)
        if (p[i].elems > p[big].elems) big = i;
    snprintf(out, n, "%s: %.3g elements, %s %d", p[big].what, p[big].elems, p[big].field,
             field_value(s, p[big].field));
}

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
    return zt_model_shape_check_sizes(out, 1, name);
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
