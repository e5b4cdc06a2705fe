/*
 * tests/io/config_check.h: the checks the config tests share: parse a DeepSpeed config text and
 * expect an error (its code, one line, every given substring, the config left untouched) or
 * success. The text is named "case.json" in messages.
 */
#ifndef ZT_TESTS_CONFIG_CHECK_H
#define ZT_TESTS_CONFIG_CHECK_H

#include <stdarg.h> /* va_list */
#include <stdio.h>  /* fprintf */
#include <string.h> /* strstr, strchr */

#include "zt_config.h" /* zt_config_parse, zt_config_defaults */
#include "zt_status.h" /* zt_error_last, zt_status_str */
#include "zt_test.h"   /* zt_test_failures */

#define NAME "case.json"

/* Parse json for world_size ws and expect code + every NULL-terminated substring. */
static void expect_err_(int line, const char *json, int ws, enum zt_status code, ...) {
    struct zt_config cfg;
    zt_config_defaults(&cfg);
    cfg.train_batch_size = -77; /* must stay untouched on error */
    enum zt_status rc = zt_config_parse(&cfg, json, NAME, ws);
    if (rc != code) {
        fprintf(stderr, "FAIL %s:%d: %s: got %s (%s), want %s\n", __FILE__, line, json,
                zt_status_str(rc), zt_error_last(), zt_status_str(code));
        zt_test_failures++;
        return;
    }
    if (cfg.train_batch_size != -77) {
        fprintf(stderr, "FAIL %s:%d: cfg modified on error\n", __FILE__, line);
        zt_test_failures++;
    }
    const char *msg = zt_error_last();
    if (strchr(msg, '\n')) {
        fprintf(stderr, "FAIL %s:%d: message is not one line: %s\n", __FILE__, line, msg);
        zt_test_failures++;
    }
    va_list ap;
    va_start(ap, code);
    for (const char *s; (s = va_arg(ap, const char *));) {
        if (!strstr(msg, s)) {
            fprintf(stderr, "FAIL %s:%d: %s\n  message: %s\n  lacks: %s\n", __FILE__, line, json,
                    msg, s);
            zt_test_failures++;
        }
    }
    va_end(ap);
}
#define EXPECT_ERR(json, ...) expect_err_(__LINE__, json, 1, ZT_ERR_CONFIG, __VA_ARGS__, NULL)
#define EXPECT_ERR_WS(json, ws, ...)                                                            \
    expect_err_(__LINE__, json, ws, ZT_ERR_CONFIG, __VA_ARGS__, NULL)

/* Parse json for world_size ws and expect success; the parsed config */
static struct zt_config ok_(int line, const char *json, int ws) {
    struct zt_config cfg;
    zt_config_defaults(&cfg);
    enum zt_status rc = zt_config_parse(&cfg, json, NAME, ws);
    if (rc != ZT_OK) {
        fprintf(stderr, "FAIL %s:%d: %s: unexpected %s: %s\n", __FILE__, line, json,
                zt_status_str(rc), zt_error_last());
        zt_test_failures++;
    }
    return cfg;
}
#define OK_WS(json, ws) ok_(__LINE__, json, ws)

#endif /* ZT_TESTS_CONFIG_CHECK_H */
