/*
 * apps/cli.c: the command-line pieces zerotask's programs share (see cli.h).
 *
 * Layer: apps/. Uses io/'s last-error buffer only, so that zt-prepare and zt-ckpt, which start
 * no runtime, can link it as well as zt-train.
 */
#include "cli.h"
#include <errno.h>      /* errno */
#include <stdarg.h>     /* va_list */
#include <stdio.h>      /* fprintf, vsnprintf */
#include <stdlib.h>     /* strtoll */
#include <string.h>     /* strcmp */
#include "zt_status.h"  /* zt_error_set, zt_error_last */

int cli_is_help(const char *arg) { return !strcmp(arg, "--help") || !strcmp(arg, "-h"); }

int cli_usage_error(const struct cli_program *p, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    zt_error_set(ZT_ERR_USAGE, "%s", msg);
    if (p->print_errors)
        fprintf(stderr, "%s: error: %s (see %s --help)\n", p->error_prefix, zt_error_last(),
                p->name);
    return CLI_EXIT_USAGE;
}

int cli_fail(const struct cli_program *p, int exit_code) {
    fprintf(stderr, "%s: error: %s\n", p->error_prefix, zt_error_last());
    return exit_code;
}

/* base 10, the whole string, within int64_t, at least min: 0; else -1 */
static int parse_int(const char *s, int64_t min, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < min) return -1;
    *out = v;
    return 0;
}

int cli_string_option(const struct cli_program *p, int argc, char **argv, int *i,
                      const char **value) {
    if (*i + 1 >= argc || argv[*i + 1][0] == '\0')
        return cli_usage_error(p, "option %s needs a value", argv[*i]);
    *value = argv[++*i];
    return 0;
}

int cli_int_option(const struct cli_program *p, int argc, char **argv, int *i, int64_t min,
                   int64_t *value) {
    if (*i + 1 >= argc) return cli_usage_error(p, "option %s needs a value", argv[*i]);
    const char *opt = argv[*i], *text = argv[++*i];
    if (parse_int(text, min, value) != 0)
        return cli_usage_error(p, "%s %s: expected an integer >= %lld", opt, text,
                               (long long)min);
    return 0;
}
