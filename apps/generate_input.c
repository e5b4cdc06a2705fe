/*
 * apps/generate_input.c: zt-generate's prompts (a JSONL file, one text, or a list of ids) and
 * its DeepSpeed inference config, read with cJSON; every error one line naming the file, the
 * line or key, and what was expected.
 *
 * Layer: apps/ (compiled into zt-generate).
 */
#include <cjson/cJSON.h>    /* cJSON_ParseWithLengthOpts */
#include <errno.h>          /* errno */
#include <stdint.h>         /* INT32_MIN */
#include <stdlib.h>         /* calloc, free, strtol */
#include <string.h>         /* strcmp, strerror */
#include "generate_input.h" /* our prototypes */

static enum zt_status grow(struct gen_prompt **p, int n, int *cap) {
    if (n < *cap) return ZT_OK;
    int c = *cap ? 2 * *cap : 16;
    struct gen_prompt *q = realloc(*p, (size_t)c * sizeof *q);
    if (!q) return zt_error_set(ZT_ERR_NOMEM, "out of memory for the prompts");
    memset(q + *cap, 0, (size_t)(c - *cap) * sizeof *q);
    *p = q;
    *cap = c;
    return ZT_OK;
}

/* text's ids into p; a text the tokenizer refuses (invalid UTF-8) is named by where */
static enum zt_status encode(const struct zt_tokenizer *tok, const char *text,
                             struct gen_prompt *p, const char *where) {
    size_t n = 0;
    enum zt_status rc = zt_tokenizer_encode(tok, text, strlen(text), &p->ids, &n);
    if (rc != ZT_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", zt_error_last());
        return zt_error_set(rc == ZT_ERR_NOMEM ? rc : ZT_ERR_CONFIG, "%s: %s", where, msg);
    }
    p->nids = (int)n;
    return ZT_OK;
}

/* a number field of a prompts line: absent is fine; present must be a number in [lo, hi] */
static enum zt_status number(const cJSON *o, const char *key, double lo, double hi, double *v,
                             const char *where) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x) return ZT_OK;
    if (!cJSON_IsNumber(x) || x->valuedouble < lo || x->valuedouble > hi)
        return zt_error_set(ZT_ERR_CONFIG, "%s: \"%s\": expected a number in [%.16g, %.16g]",
                            where, key, lo, hi); /* 2^53 as 9007199254740992, not 9.0072e+15 */
    *v = x->valuedouble;
    return ZT_OK;
}

static enum zt_status line_params(const cJSON *o, struct zt_gen_params *p, const char *where) {
    double mnt = p->max_new_tokens, t = p->temperature, k = p->top_k, tp = p->top_p;
    double seed = (double)p->seed;
    ZT_CHECK(number(o, "max_new_tokens", 1, 1 << 30, &mnt, where));
    ZT_CHECK(number(o, "temperature", 0, 1e30, &t, where));
    ZT_CHECK(number(o, "top_k", 0, 1 << 30, &k, where));
    ZT_CHECK(number(o, "top_p", 1e-30, 1, &tp, where));
    ZT_CHECK(number(o, "seed", 0, 9007199254740992.0, &seed, where));
    if (mnt != (int)mnt || k != (int)k || seed != (double)(uint64_t)seed)
        return zt_error_set(ZT_ERR_CONFIG, "%s: max_new_tokens, top_k and seed must be integers",
                            where);
    p->max_new_tokens = (int)mnt;
    p->temperature = (float)t;
    p->top_k = (int)k;
    p->top_p = (float)tp;
    if (cJSON_GetObjectItemCaseSensitive(o, "seed")) /* else the default, not rounded */
        p->seed = (uint64_t)seed;
    return ZT_OK;
}

static const char *const g_line_keys[] = {"prompt", "prompt_ids", "max_new_tokens",
                                          "temperature", "top_k", "top_p", "seed"};

static enum zt_status line_keys(const cJSON *o, const char *where) {
    for (const cJSON *x = o->child; x; x = x->next) {
        int known = 0;
        for (size_t k = 0; k < sizeof g_line_keys / sizeof *g_line_keys; k++)
            known |= !strcmp(x->string, g_line_keys[k]);
        if (!known)
            return zt_error_set(ZT_ERR_CONFIG, "%s: unknown key \"%s\" (expected prompt or "
                                "prompt_ids, and optionally max_new_tokens, temperature, top_k, "
                                "top_p, seed)", where, x->string);
    }
    return ZT_OK;
}

static enum zt_status line_ids(const cJSON *a, struct gen_prompt *p, const char *where) {
    int n = cJSON_GetArraySize(a);
    p->ids = calloc((size_t)(n > 0 ? n : 1), sizeof *p->ids);
    if (!p->ids) return zt_error_set(ZT_ERR_NOMEM, "out of memory for the prompts");
    const cJSON *x;
    cJSON_ArrayForEach(x, a) {
        if (!cJSON_IsNumber(x) || !(x->valuedouble >= INT32_MIN && x->valuedouble <= INT32_MAX) ||
            x->valuedouble != (int32_t)x->valuedouble)
            return zt_error_set(ZT_ERR_CONFIG, "%s: \"prompt_ids\": expected integers", where);
        p->ids[p->nids++] = (int32_t)x->valuedouble;
    }
    return ZT_OK;
}

/* s[0, n) holds only spaces, tabs and line ends */
static int blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n') return 0;
    return 1;
}

/* the JSON value that is the whole of text[0, len), or NULL: cJSON stops after the first value,
 * and anything but blanks after it (a second object, a NUL byte) would be dropped unread */
int gen_json_has_nul(const char *text, size_t len) {
    for (size_t i = 0; i + 6 <= len; i++) {
        if (text[i] != '\\') continue;
        if (!memcmp(text + i + 1, "u0000", 5)) return 1; /* an escape: the backslashes before
                                                          * it were consumed in pairs */
        i++; /* the escaped character */
    }
    return 0;
}

static cJSON *parse_whole(const char *text, size_t len) {
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (v && !blank(end, len - (size_t)(end - text))) {
        cJSON_Delete(v);
        v = NULL;
    }
    return v;
}

static enum zt_status parse_line(const char *text, size_t len, const struct zt_tokenizer *tok,
                                 struct gen_prompt *p, const char *where) {
    cJSON *o = parse_whole(text, len);
    enum zt_status rc = ZT_OK;
    const cJSON *pt = o ? cJSON_GetObjectItemCaseSensitive(o, "prompt") : NULL;
    const cJSON *pi = o ? cJSON_GetObjectItemCaseSensitive(o, "prompt_ids") : NULL;
    if (!cJSON_IsObject(o))
        rc = zt_error_set(ZT_ERR_CONFIG, "%s: expected one JSON object (the whole line)", where);
    else if (gen_json_has_nul(text, len))
        rc = zt_error_set(ZT_ERR_CONFIG, "%s: a string holds \\u0000 (a NUL character): not "
                          "supported", where);
    else if (!pt == !pi || (pt && !cJSON_IsString(pt)) || (pi && !cJSON_IsArray(pi)))
        rc = zt_error_set(ZT_ERR_CONFIG, "%s: expected either \"prompt\" (a string) or "
                          "\"prompt_ids\" (an array of ids)", where);
    else if (pt && !tok)
        rc = zt_error_set(ZT_ERR_CONFIG, "%s: a \"prompt\" text needs --tokenizer", where);
    if (rc == ZT_OK) rc = line_keys(o, where);
    if (rc == ZT_OK) rc = line_params(o, &p->p, where);
    if (rc == ZT_OK) rc = pt ? encode(tok, pt->valuestring, p, where) : line_ids(pi, p, where);
    if (rc == ZT_OK && p->nids == 0)
        rc = zt_error_set(ZT_ERR_CONFIG, "%s: the prompt is empty (expected at least one token)",
                          where);
    cJSON_Delete(o);
    return rc;
}

enum zt_status gen_prompts_load(const char *path, const struct zt_tokenizer *tok,
                                const struct zt_gen_params *defaults, struct gen_prompt **out,
                                int *n) {
    *out = NULL;
    *n = 0;
    FILE *f = fopen(path, "r");
    if (!f) return zt_error_set(ZT_ERR_IO, "--prompts %s: %s", path, strerror(errno));
    char *line = NULL, where[600];
    size_t cap = 0;
    int count = 0, lineno = 0;
    enum zt_status rc = ZT_OK;
    ssize_t len;
    while (rc == ZT_OK && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (blank(line, (size_t)len)) continue;
        snprintf(where, sizeof where, "%s:%d", path, lineno);
        rc = grow(out, *n, &count);
        if (rc != ZT_OK) break;
        struct gen_prompt *p = &(*out)[(*n)++];
        p->p = *defaults;
        p->line = lineno;
        rc = parse_line(line, (size_t)len, tok, p, where);
    }
    /* a read error (a directory, a failing disk) is not the end of the file */
    if (rc == ZT_OK && ferror(f))
        rc = zt_error_set(ZT_ERR_IO, "--prompts %s: cannot read (%s)", path, strerror(errno));
    free(line);
    fclose(f);
    if (rc == ZT_OK && *n == 0)
        rc = zt_error_set(ZT_ERR_CONFIG, "--prompts %s: no prompt in the file", path);
    return rc;
}

enum zt_status gen_prompt_text(const char *text, const struct zt_tokenizer *tok,
                               const struct zt_gen_params *defaults, struct gen_prompt **out,
                               int *n) {
    *out = calloc(1, sizeof **out);
    *n = *out ? 1 : 0;
    if (!*out) return zt_error_set(ZT_ERR_NOMEM, "out of memory");
    (*out)->p = *defaults;
    ZT_CHECK(encode(tok, text, *out, "--prompt"));
    if ((*out)->nids == 0)
        return zt_error_set(ZT_ERR_CONFIG, "--prompt: empty (expected at least one token)");
    return ZT_OK;
}

enum zt_status gen_prompt_ids(const char *list, const struct zt_gen_params *defaults,
                              struct gen_prompt **out, int *n) {
    *out = calloc(1, sizeof **out);
    *n = *out ? 1 : 0;
    struct gen_prompt *p = *out;
    if (p) p->ids = calloc(strlen(list) / 2 + 1, sizeof *p->ids);
    if (!p || !p->ids) return zt_error_set(ZT_ERR_NOMEM, "out of memory");
    p->p = *defaults;
    for (const char *s = list; *s;) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < INT32_MIN || v > INT32_MAX || (*end && *end != ','))
            return zt_error_set(ZT_ERR_CONFIG, "--prompt-ids %s: expected integers separated "
                                "by commas", list);
        p->ids[p->nids++] = (int32_t)v;
        s = *end ? end + 1 : end;
    }
    return ZT_OK;
}

void gen_prompts_free(struct gen_prompt *p, int n) {
    for (int i = 0; p && i < n; i++) {
        free(p[i].ids);
        free(p[i].out);
        gen_text_free(&p[i].text);
    }
    free(p);
}

/* length of the valid UTF-8 character at s[0..n), or 0 with *bad = the bytes of its maximal
 * invalid subpart (Unicode's "substitution of maximal subparts", as Rust's from_utf8_lossy) */
static size_t utf8_char(const unsigned char *s, size_t n, size_t *bad) {
    unsigned char c = s[0];
    size_t need = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3
                : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
    *bad = 1;
    if (need <= 1) return need;
    for (size_t k = 1; k < need; k++) {
        unsigned char lo = 0x80, hi = 0xBF;
        if (k == 1 && c == 0xE0) lo = 0xA0;
        if (k == 1 && c == 0xED) hi = 0x9F;
        if (k == 1 && c == 0xF0) lo = 0x90;
        if (k == 1 && c == 0xF4) hi = 0x8F;
        if (k >= n || s[k] < lo || s[k] > hi) {
            *bad = k;
            return 0;
        }
    }
    return need;
}

char *gen_utf8_lossy(const char *text) {
    size_t n = strlen(text), at = 0;
    char *out = malloc(3 * n + 1); /* a byte becomes at most the 3 bytes of U+FFFD */
    if (!out) return NULL;
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < n;) {
        size_t bad, k = utf8_char(s + i, n - i, &bad);
        if (k) {
            memcpy(out + at, s + i, k);
            at += k;
            i += k;
        } else {
            memcpy(out + at, "\xEF\xBF\xBD", 3);
            at += 3;
            i += bad;
        }
    }
    out[at] = '\0';
    return out;
}

void gen_print_json_string(FILE *f, const char *s) {
    cJSON *item = cJSON_CreateString(s);
    char *q = item ? cJSON_PrintUnformatted(item) : NULL;
    fputs(q ? q : "\"\"", f);
    free(q);
    cJSON_Delete(item);
}

// ----------------------------------------------------------------------------
// the DeepSpeed inference config

/* every key of o must be one of keys (a NULL-terminated list) */
static enum zt_status only_keys(const cJSON *o, const char *const *keys, const char *path,
                                const char *where) {
    if (!cJSON_IsObject(o))
        return zt_error_set(ZT_ERR_CONFIG, "%s: %s%sexpected an object", path, where,
                            *where ? ": " : "");
    for (const cJSON *x = o->child; x; x = x->next) {
        int known = 0;
        for (int k = 0; keys[k]; k++) known |= !strcmp(x->string, keys[k]);
        if (!known)
            return zt_error_set(ZT_ERR_CONFIG, "%s: %s%s: unknown key \"%s\" for inference", path,
                                where, *where ? "." : "", x->string);
    }
    return ZT_OK;
}

static enum zt_status int_key(const cJSON *o, const char *key, int lo, int *v, const char *path) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x) return ZT_OK;
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= lo && x->valuedouble <= INT32_MAX) ||
        x->valuedouble != (int)x->valuedouble)
        return zt_error_set(ZT_ERR_CONFIG, "%s: %s: expected an integer >= %d", path, key, lo);
    *v = (int)x->valuedouble;
    return ZT_OK;
}

/* a key taken for DeepSpeed's sake and not used here: it must still have DeepSpeed's type */
static enum zt_status bool_key(const cJSON *o, const char *key, const char *path) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (x && !cJSON_IsBool(x))
        return zt_error_set(ZT_ERR_CONFIG, "%s: %s: expected true or false", path, key);
    return ZT_OK;
}

static enum zt_status dtype_key(const cJSON *root, int *dtype, const char *path) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, "dtype");
    if (!x) return ZT_OK;
    const char *v = cJSON_IsString(x) ? x->valuestring : "";
    *dtype = !strcmp(v, "fp32") || !strcmp(v, "float32")    ? ZT_GEN_DTYPE_F32
             : !strcmp(v, "bf16") || !strcmp(v, "bfloat16") ? ZT_GEN_DTYPE_BF16
             : !strcmp(v, "fp16") || !strcmp(v, "float16")  ? ZT_GEN_DTYPE_F16
                                                            : -1;
    if (*dtype < 0)
        return zt_error_set(ZT_ERR_CONFIG, "%s: dtype: expected \"fp32\", \"bf16\" or \"fp16\"",
                            path);
    return ZT_OK;
}

static enum zt_status offload_keys(const cJSON *op, struct zt_gen_config *cfg, const char *path) {
    static const char *const keys[] = {"device", "nvme_path", "buffer_count", "pin_memory",
                                       "buffer_size", "max_in_cpu", NULL};
    ZT_CHECK(only_keys(op, keys, path, "zero_optimization.offload_param"));
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(op, "device");
    const cJSON *np = cJSON_GetObjectItemCaseSensitive(op, "nvme_path");
    const char *d = cJSON_IsString(dev) ? dev->valuestring : dev ? "?" : "none";
    if (strcmp(d, "none") && strcmp(d, "cpu") && strcmp(d, "nvme"))
        return zt_error_set(ZT_ERR_CONFIG, "%s: zero_optimization.offload_param.device: expected "
                            "\"none\", \"cpu\" or \"nvme\"", path);
    cfg->stream_weights = !strcmp(d, "nvme");
    if (cfg->stream_weights && !cJSON_IsString(np))
        return zt_error_set(ZT_ERR_CONFIG, "%s: zero_optimization.offload_param.nvme_path: "
                            "expected a directory (device nvme)", path);
    if (cfg->stream_weights && !(cfg->nvme_path = strdup(np->valuestring)))
        return zt_error_set(ZT_ERR_NOMEM, "%s: out of memory", path);
    int count = 2, unused = 0; /* pin_memory, buffer_size, max_in_cpu: DeepSpeed's, unused */
    ZT_CHECK(bool_key(op, "pin_memory", path));
    ZT_CHECK(int_key(op, "buffer_size", 0, &unused, path));
    ZT_CHECK(int_key(op, "max_in_cpu", 0, &unused, path));
    const cJSON *bc = cJSON_GetObjectItemCaseSensitive(op, "buffer_count");
    if (cJSON_IsString(bc) && !strcmp(bc->valuestring, "auto")) { /* sized by the budget */
        cfg->prefetch = 0;
        return ZT_OK;
    }
    if (cJSON_IsString(bc))
        return zt_error_set(ZT_ERR_CONFIG, "%s: buffer_count: expected an integer >= 2 or "
                            "\"auto\"", path);
    ZT_CHECK(int_key(op, "buffer_count", 2, &count, path));
    cfg->prefetch = count - 1;
    return ZT_OK;
}

static enum zt_status zero_keys(const cJSON *root, struct zt_gen_config *cfg, const char *path) {
    static const char *const keys[] = {"stage", "offload_param", NULL};
    const cJSON *z = cJSON_GetObjectItemCaseSensitive(root, "zero_optimization");
    if (!z) return ZT_OK;
    ZT_CHECK(only_keys(z, keys, path, "zero_optimization"));
    int stage = 0;
    ZT_CHECK(int_key(z, "stage", 0, &stage, path));
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(z, "offload_param");
    if (stage != 0 && stage != 3)
        return zt_error_set(ZT_ERR_CONFIG, "%s: zero_optimization.stage: expected 0 or 3 for "
                            "inference (ZeRO-Inference is stage 3 with offload_param)", path);
    if (op) ZT_CHECK(offload_keys(op, cfg, path));
    if (cfg->stream_weights && stage != 3)
        return zt_error_set(ZT_ERR_CONFIG, "%s: zero_optimization.offload_param with device nvme "
                            "needs stage 3 (ZeRO-Inference)", path);
    return ZT_OK;
}

static enum zt_status aio_keys(const cJSON *root, struct zt_gen_config *cfg, const char *path) {
    static const char *const keys[] = {"block_size", "queue_depth", "thread_count",
                                       "single_submit", "overlap_events", NULL};
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "aio");
    if (!a) return ZT_OK;
    ZT_CHECK(only_keys(a, keys, path, "aio"));
    ZT_CHECK(int_key(a, "block_size", 4096, &cfg->aio_block_size, path));
    ZT_CHECK(int_key(a, "queue_depth", 1, &cfg->aio_queue_depth, path));
    ZT_CHECK(bool_key(a, "single_submit", path)); /* DeepSpeed's; the engine decides */
    ZT_CHECK(bool_key(a, "overlap_events", path));
    return int_key(a, "thread_count", 1, &cfg->aio_threads, path);
}

enum zt_status gen_ds_config_load(const char *path, struct zt_gen_config *cfg, int *dtype) {
    static const char *const keys[] = {"dtype", "zero_optimization", "aio", NULL};
    FILE *f = fopen(path, "rb");
    if (!f) return zt_error_set(ZT_ERR_IO, "--ds-config %s: %s", path, strerror(errno));
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    int unread = ferror(f) ? errno : 0, more = n == sizeof buf - 1 && fgetc(f) != EOF;
    fclose(f);
    if (unread)
        return zt_error_set(ZT_ERR_IO, "--ds-config %s: cannot read (%s)", path,
                            strerror(unread));
    if (more)
        return zt_error_set(ZT_ERR_CONFIG, "%s: expected a config of less than 64 KiB", path);
    buf[n] = '\0';
    cJSON *root = parse_whole(buf, n);
    enum zt_status rc = root ? only_keys(root, keys, path, "")
                             : zt_error_set(ZT_ERR_CONFIG, "%s: not valid JSON (expected one "
                                            "JSON object)", path);
    if (rc == ZT_OK) rc = dtype_key(root, dtype, path);
    if (rc == ZT_OK) rc = zero_keys(root, cfg, path);
    if (rc == ZT_OK) rc = aio_keys(root, cfg, path);
    cJSON_Delete(root);
    return rc;
}
