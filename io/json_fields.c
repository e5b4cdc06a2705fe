/*
 * io/json_fields.c: reading checked fields out of a JSON document (cJSON), for the training
 * config and the model-shape JSON (io/config.c, io/model_shape.c).
 *
 * Layer: io/ (platform; no StarPU). Every problem becomes ZT_ERR_CONFIG with one line
 * "<kind> <file>: <json.path>: <what was expected>, got <what was there>", and an unknown key
 * gets a "did you mean" from the key tables of its section.
 */
#include "json_fields.h"

#include <cjson/cJSON.h> /* cJSON_ParseWithLengthOpts, cJSON_Is*, cJSON_Delete */
#include <ctype.h>       /* isspace, tolower */
#include <errno.h>       /* errno */
#include <limits.h>      /* INT_MAX */
#include <math.h>        /* isfinite, floor */
#include <stdarg.h>      /* va_list */
#include <stdio.h>       /* snprintf */
#include <stdlib.h>      /* malloc, free, strtod */
#include <string.h>      /* strcmp, strlen, strerror */

#include "zt_file.h"   /* zt_file_read_all */
#include "zt_status.h" /* zt_error_set, ZT_ERR_CONFIG */

#define ZT_JSON_FILE_MAX (64u << 20) /* the largest JSON input read */

// ----------------------------------------------------------------------------
// error context: "<kind> <file>: <path>: <message>"

enum zt_status zt_json_err(const struct zt_json_ctx *c, const char *path, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (path && *path)
        return zt_error_set(ZT_ERR_CONFIG, "%s %s: %s: %s", c->kind, c->file, path, msg);
    return zt_error_set(ZT_ERR_CONFIG, "%s %s: %s", c->kind, c->file, msg);
}

void zt_json_path(char *out, const char *parent, const char *key) {
    if (parent && *parent)
        snprintf(out, ZT_JSON_PATH_MAX, "%s.%s", parent, key);
    else
        snprintf(out, ZT_JSON_PATH_MAX, "%s", key);
}

/* Describe a JSON value for "got ..." in messages. */
const char *zt_json_describe(const cJSON *v, char *buf, size_t n) {
    if (cJSON_IsNumber(v)) {
        snprintf(buf, n, "%.17g", v->valuedouble);
        /* shorten the common case: print with %g when it round-trips */
        char s[64];
        snprintf(s, sizeof s, "%g", v->valuedouble);
        if (strtod(s, NULL) == v->valuedouble) snprintf(buf, n, "%s", s);
    } else if (cJSON_IsString(v)) {
        snprintf(buf, n, "a string (\"%.40s\")", v->valuestring);
    } else if (cJSON_IsBool(v)) {
        snprintf(buf, n, "%s", cJSON_IsTrue(v) ? "true" : "false");
    } else if (cJSON_IsNull(v)) {
        snprintf(buf, n, "null");
    } else if (cJSON_IsArray(v)) {
        snprintf(buf, n, "an array");
    } else if (cJSON_IsObject(v)) {
        snprintf(buf, n, "an object");
    } else {
        snprintf(buf, n, "an invalid value");
    }
    return buf;
}

// ----------------------------------------------------------------------------
// key tables and "did you mean"

/* Optimal string alignment distance (Levenshtein + adjacent transposition), case-insensitive. */
static int edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64) return 1000;
    int d[65][65];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            int cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            int v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < v) v = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 &&
                tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == tolower((unsigned char)b[j - 1]) &&
                d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    }
    return d[la][lb];
}

/* Closest name among the NULL-terminated lists, or NULL when none is a near miss. The allowed
 * distance grows with the length of the candidate (1 for short names, at most 3). */
const char *zt_json_near_miss(const char *key, const char *const *a, const char *const *b) {
    const char *best = NULL;
    int bestd = 1000;
    const char *const *lists[2] = {a, b};
    for (int l = 0; l < 2; l++) {
        for (const char *const *p = lists[l]; p && *p; p++) {
            size_t n = strlen(*p);
            int lim = n <= 3 ? 1 : n <= 7 ? 2 : 3;
            int d = edit_distance(key, *p);
            if (d <= lim && d < (int)n && d < bestd) {
                bestd = d;
                best = *p;
            }
        }
    }
    return best;
}

int zt_json_in_list(const char *key, const char *const *list) {
    for (const char *const *p = list; p && *p; p++)
        if (strcmp(key, *p) == 0) return 1;
    return 0;
}

/* Check every key of obj: no duplicates, each either implemented (impl) or an error. Keys in
 * notimpl are DeepSpeed keys we know but do not implement yet. */
enum zt_status zt_json_check_keys(const struct zt_json_ctx *c, const cJSON *obj, const char *path,
                                 const char *const *impl, const char *const *notimpl) {
    char p[ZT_JSON_PATH_MAX];
    for (const cJSON *it = obj->child; it; it = it->next) {
        const char *k = it->string ? it->string : "";
        zt_json_path(p, path, k);
        /* cJSON keeps duplicated keys as separate children and returns the first on lookup:
         * a later duplicate would be silently ignored, so reject it */
        for (const cJSON *prev = obj->child; prev != it; prev = prev->next)
            if (prev->string && strcmp(prev->string, k) == 0)
                return zt_json_err(c, p, "key appears more than once (each key may be given once)");
        if (zt_json_in_list(k, impl)) continue;
        if (zt_json_in_list(k, notimpl))
            return zt_json_err(c, p, "is a DeepSpeed key that zerotask does not implement yet");
        const char *s = zt_json_near_miss(k, impl, notimpl);
        if (s) return zt_json_err(c, p, "unknown key; did you mean '%s'?", s);
        return zt_json_err(c, p, "unknown key");
    }
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// typed getters

enum zt_status zt_json_object(const struct zt_json_ctx *c, const cJSON *v, const char *path) {
    char g[96];
    if (!cJSON_IsObject(v))
        return zt_json_err(c, path, "expected an object, got %s", zt_json_describe(v, g, sizeof g));
    return ZT_OK;
}

/* Integer in [lo, hi]; JSON numbers with a fraction are rejected. hi of INT_MAX or more is
 * described as ">= lo" unless the value is above it. */
enum zt_status zt_json_int(const struct zt_json_ctx *c, const cJSON *v, const char *path,
                           long long lo, long long hi, long long *out) {
    char g[96];
    int isint = cJSON_IsNumber(v) && isfinite(v->valuedouble) &&
                floor(v->valuedouble) == v->valuedouble;
    double d = isint ? v->valuedouble : 0;
    /* 2^63 and beyond do not convert to long long (undefined behaviour): out of any range */
    const double two63 = 9223372036854775808.0;
    if (isint && d >= -two63 && d < two63 && (long long)d >= lo && (long long)d <= hi) {
        *out = (long long)d;
        return ZT_OK;
    }
    if (hi >= INT_MAX && !(isint && d > (double)hi))
        return zt_json_err(c, path, "expected an integer >= %lld, got %s", lo,
                       zt_json_describe(v, g, sizeof g));
    return zt_json_err(c, path, "expected an integer in [%lld, %lld], got %s", lo, hi,
                   zt_json_describe(v, g, sizeof g));
}

enum zt_status zt_json_int32(const struct zt_json_ctx *c, const cJSON *v, const char *path, int lo,
                                int *out) {
    long long x = 0;
    ZT_CHECK(zt_json_int(c, v, path, lo, INT_MAX, &x));
    *out = (int)x;
    return ZT_OK;
}

enum zt_status zt_json_num(const struct zt_json_ctx *c, const cJSON *v, const char *path,
                           enum zt_json_range r, double *out) {
    static const char *const what[] = {"a number > 0", "a number >= 0", "a number in [0, 1)",
                                       "a number in [0, 1]"};
    char g[96];
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return zt_json_err(c, path, "expected %s, got %s", what[r],
                           zt_json_describe(v, g, sizeof g));
    double d = v->valuedouble;
    int ok = r == ZT_JSON_GT0              ? d > 0
             : r == ZT_JSON_GE0            ? d >= 0
             : r == ZT_JSON_UNIT_HALF_OPEN ? d >= 0 && d < 1
                                           : d >= 0 && d <= 1;
    if (!ok)
        return zt_json_err(c, path, "expected %s, got %s", what[r],
                           zt_json_describe(v, g, sizeof g));
    *out = d;
    return ZT_OK;
}

enum zt_status zt_json_bool(const struct zt_json_ctx *c, const cJSON *v, const char *path,
                            int *out) {
    char g[96];
    if (!cJSON_IsBool(v))
        return zt_json_err(c, path, "expected true or false, got %s",
                           zt_json_describe(v, g, sizeof g));
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return ZT_OK;
}

enum zt_status zt_json_string(const struct zt_json_ctx *c, const cJSON *v, const char *path,
                                 const char **out) {
    char g[96];
    if (!cJSON_IsString(v))
        return zt_json_err(c, path, "expected a string, got %s", zt_json_describe(v, g, sizeof g));
    *out = v->valuestring;
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// JSON text -> cJSON object (empty, syntax error with position, not an object)

enum zt_status zt_json_parse_object(const struct zt_json_ctx *c, const char *json, size_t len,
                                    cJSON **out) {
    *out = NULL;
    size_t i = 0;
    while (i < len && isspace((unsigned char)json[i])) i++;
    if (i == len) return zt_json_err(c, NULL, "file is empty (expected a JSON object)");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    size_t off = end ? (size_t)(end - json) : 0;
    if (root) {
        /* cJSON stops after the first value: anything but whitespace after it is an error */
        while (off < len && isspace((unsigned char)json[off])) off++;
        if (off < len && json[off] != '\0') {
            cJSON_Delete(root);
            root = NULL;
        }
    }
    if (!root) {
        if (off > len) off = len;
        size_t line = 1, col = 1;
        for (size_t k = 0; k < off; k++) {
            if (json[k] == '\n') {
                line++;
                col = 1;
            } else {
                col++;
            }
        }
        return zt_json_err(c, NULL, "invalid JSON at line %zu, column %zu (byte offset %zu)", line,
                       col, off);
    }
    if (!cJSON_IsObject(root)) {
        char g[96];
        zt_json_describe(root, g, sizeof g);
        cJSON_Delete(root);
        return zt_json_err(c, NULL, "expected a JSON object at the top level, got %s", g);
    }
    *out = root;
    return ZT_OK;
}

/* Read a whole file; ZT_ERR_IO when it cannot be opened or read. */
enum zt_status zt_json_read_file(const char *kind, const char *path, char **buf, size_t *len) {
    if (zt_file_read_all(path, ZT_JSON_FILE_MAX, buf, len) == 0) return ZT_OK;
    switch (errno) {
    case EINVAL: return zt_error_set(ZT_ERR_IO, "%s %s: not a regular file", kind, path);
    case EFBIG:
        return zt_error_set(ZT_ERR_CONFIG, "%s %s: file is %lld bytes; a config is at most 64 MiB",
                            kind, path, (long long)*len);
    case ENOMEM: return zt_error_set(ZT_ERR_NOMEM, "%s %s: out of memory", kind, path);
    case EIO: return zt_error_set(ZT_ERR_IO, "%s %s: read error", kind, path);
    default: return zt_error_set(ZT_ERR_IO, "%s %s: cannot open (%s)", kind, path, strerror(errno));
    }
}
