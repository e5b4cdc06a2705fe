/*
 * io/json_fields.h: checked field readers over cJSON, shared by the JSON inputs of io/ (the
 * DeepSpeed-style config and the model shape). Private to io/: not installed.
 *
 * Every reader returns ZT_OK or ZT_ERR_CONFIG with the one-line message
 * "<kind> <file>: <path>: <what was expected>, got <what was there>" already set
 * (zt_error_last). <path> is the dotted JSON path ("zero_optimization.stage").
 */
#ifndef ZT_IO_JSON_FIELDS_H
#define ZT_IO_JSON_FIELDS_H

#include <stddef.h>      /* size_t */
#include <cjson/cJSON.h> /* cJSON */
#include "zt_status.h"   /* enum zt_status */

#define ZT_JSON_PATH_MAX 256 /* longest dotted path of a key */

/* Who is reading what: "config" or "model shape", and the file (or a caller's name for it). */
struct zt_json_ctx {
    const char *kind;
    const char *file;
};

/* The error "<kind> <file>: <path>: <printf message>" (without the path when it is empty). */
enum zt_status zt_json_err(const struct zt_json_ctx *c, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* out = "parent.key" (or "key" at the top level); out holds ZT_JSON_PATH_MAX bytes. */
void zt_json_path(char *out, const char *parent, const char *key);
/* A value as "got ..." names it: a number, a string ("..."), true, null, an array, ... */
const char *zt_json_describe(const cJSON *v, char *buf, size_t n);

/* Whether key is in the NULL-terminated list. */
int zt_json_in_list(const char *key, const char *const *list);
/* The closest name of the two NULL-terminated lists (either may be NULL) within a small edit
 * distance of key ("did you mean"), or NULL. */
const char *zt_json_near_miss(const char *key, const char *const *a, const char *const *b);
/* Every key of obj given once and implemented (impl); a key of notimpl is "a DeepSpeed key
 * that zerotask does not implement yet", any other unknown (with a "did you mean"). */
enum zt_status zt_json_check_keys(const struct zt_json_ctx *c, const cJSON *obj,
                                  const char *path, const char *const *impl,
                                  const char *const *notimpl);

/* Typed readers of the value v found at path. */
enum zt_json_range {
    ZT_JSON_GT0,            /* > 0 */
    ZT_JSON_GE0,            /* >= 0 */
    ZT_JSON_UNIT_HALF_OPEN, /* [0, 1) */
    ZT_JSON_UNIT_CLOSED     /* [0, 1] */
};
enum zt_status zt_json_object(const struct zt_json_ctx *c, const cJSON *v, const char *path);
/* An integer in [lo, hi] (a number with a fraction is refused). */
enum zt_status zt_json_int(const struct zt_json_ctx *c, const cJSON *v, const char *path,
                           long long lo, long long hi, long long *out);
/* An integer in [lo, INT_MAX]. */
enum zt_status zt_json_int32(const struct zt_json_ctx *c, const cJSON *v, const char *path,
                             int lo, int *out);
/* A finite number in the range r. */
enum zt_status zt_json_num(const struct zt_json_ctx *c, const cJSON *v, const char *path,
                           enum zt_json_range r, double *out);
enum zt_status zt_json_bool(const struct zt_json_ctx *c, const cJSON *v, const char *path,
                            int *out);
/* The string inside v (owned by v). */
enum zt_status zt_json_string(const struct zt_json_ctx *c, const cJSON *v, const char *path,
                              const char **out);

/* Parse json[0, len) into one JSON object (owner: caller, cJSON_Delete); an empty text, a syntax
 * error (line and column) or another top-level value is an error. */
enum zt_status zt_json_parse_object(const struct zt_json_ctx *c, const char *json, size_t len,
                                    cJSON **out);
/* Read the regular file path (at most 64 MiB) into a NUL-terminated buffer (owner: caller,
 * free); kind names it in errors. */
enum zt_status zt_json_read_file(const char *kind, const char *path, char **buf, size_t *len);

#endif /* ZT_IO_JSON_FIELDS_H */
