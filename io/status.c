/*
 * io/status.c: status-code names, the thread-local last-error message, and the tier-1 assert.
 *
 * Layer: io/ (platform; no StarPU). Every zerotask error is born here: the detection site calls
 * zt_error_set(), which stores one line for this thread (like ncclGetLastError) and returns the
 * code. apps/ prints that line exactly once as "zerotask: error: <msg>", so zt_error_set itself
 * logs only at DEBUG level: logging it at WARN as well would show the user the same message
 * twice (STYLE.md 5 says WARN; this is the deliberate exception, see zt_status.h).
 */
#include "zt_status.h"

#include <stdarg.h> /* va_list, va_start, va_end */
#include <stdio.h>  /* vsnprintf, fprintf, fflush, stderr */
#include <stdlib.h> /* abort */
#include <string.h> /* strerror */

#include "zt_log.h" /* zt_log, ZT_LOG_DEBUG */

#define ZT_ERROR_MSG_MAX 1024

static _Thread_local char last_msg[ZT_ERROR_MSG_MAX];
static _Thread_local enum zt_status last_code = ZT_OK;

const char *zt_status_str(int code) {
    switch (code) {
    case ZT_OK: return "ZT_OK";
    case ZT_ERR_INVALID: return "ZT_ERR_INVALID";
    case ZT_ERR_CONFIG: return "ZT_ERR_CONFIG";
    case ZT_ERR_IO: return "ZT_ERR_IO";
    case ZT_ERR_DATA: return "ZT_ERR_DATA";
    case ZT_ERR_NOMEM: return "ZT_ERR_NOMEM";
    case ZT_ERR_CKPT_CORRUPT: return "ZT_ERR_CKPT_CORRUPT";
    case ZT_ERR_NO_DEVICE: return "ZT_ERR_NO_DEVICE";
    case ZT_ERR_RUNTIME: return "ZT_ERR_RUNTIME";
    case ZT_ERR_NUMERIC: return "ZT_ERR_NUMERIC";
    case ZT_ERR_USAGE: return "ZT_ERR_USAGE";
    case ZT_ERR_PEER: return "ZT_ERR_PEER";
    default: break;
    }
    /* codes are kept below -100 so that -1..-100 can only be a -errno (Chameleon's convention) */
    if (code < 0 && code >= -100) return strerror(-code);
    return "ZT_ERR_UNKNOWN";
}

/* dst = src with every control character written as \xNN: a message quotes what the user gave
 * (a JSON key, a file name), and the message must stay one line whatever that holds */
static void one_line(char *dst, const char *src) {
    size_t o = 0;
    for (const unsigned char *c = (const unsigned char *)src; *c && o + 5 < ZT_ERROR_MSG_MAX;
         c++) {
        if (*c < 0x20 || *c == 0x7f)
            o += (size_t)snprintf(dst + o, ZT_ERROR_MSG_MAX - o, "\\x%02x", *c);
        else
            dst[o++] = (char)*c;
    }
    dst[o] = '\0';
}

enum zt_status zt_error_set(enum zt_status code, const char *fmt, ...) {
    /* format into a local buffer first: callers may pass zt_error_last() as an argument
     * (wrapping a lower-level message), and vsnprintf into its own source is undefined */
    char tmp[ZT_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) tmp[0] = '\0';
    one_line(last_msg, tmp);
    last_code = code;
    /* DEBUG only: the app prints this message once (see the file comment) */
    zt_log(ZT_LOG_DEBUG, "error %s: %s", zt_status_str(code), last_msg);
    return code;
}

const char *zt_error_last(void) { return last_msg; }

enum zt_status zt_error_last_code(void) { return last_code; }

void zt_error_clear(void) {
    last_msg[0] = '\0';
    last_code = ZT_OK;
}

void zt_error_trace(int code, const char *file, int line) {
    zt_log(ZT_LOG_DEBUG, "-> %s at %s:%d", zt_status_str(code), file, line);
}

void zt_assert_fail(const char *file, int line, const char *cond, const char *fmt, ...) {
    /* plain stdio, not zt_log: an assertion must print whatever the log level is */
    fprintf(stderr, "zerotask: %s:%d: assertion '%s' failed: ", file, line, cond);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    abort();
}
