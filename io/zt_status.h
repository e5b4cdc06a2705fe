/*
 * io/zt_status.h: status codes and the thread-local last-error message (NCCL's ncclGetLastError).
 *
 * Layer: io/ (platform). Every fallible zerotask function returns enum zt_status; the site that
 * detects a problem calls zt_error_set() with a one-line message naming the thing and what was
 * expected, and callers propagate the code with ZT_CHECK / ZT_CHECK_GOTO. Codes are negative and
 * below -100 so that they never collide with -errno.
 */
#ifndef ZT_STATUS_H
#define ZT_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

enum zt_status {
    ZT_OK               = 0,
    ZT_ERR_INVALID      = -101, /* bad argument to an API call (a caller's bug or bad CLI) */
    ZT_ERR_CONFIG       = -102, /* bad DeepSpeed or model JSON */
    ZT_ERR_IO           = -103, /* a file could not be opened, read, written or synced */
    ZT_ERR_DATA         = -104, /* a token file is malformed */
    ZT_ERR_NOMEM        = -105, /* an allocation failed or a plan does not fit in memory */
    ZT_ERR_CKPT_CORRUPT = -106, /* a checkpoint or safetensors file is corrupt or mismatched */
    ZT_ERR_NO_DEVICE    = -107, /* a requested device/worker does not exist */
    ZT_ERR_RUNTIME      = -108, /* StarPU/MPI returned an error */
    ZT_ERR_NUMERIC      = -109, /* a NaN/Inf where none may be */
    ZT_ERR_USAGE        = -110, /* bad command line */
    ZT_ERR_PEER         = -111, /* another rank failed and says why; every rank has learnt it */
};

/* Short constant name of a status ("ZT_ERR_CONFIG"), or strerror text for a -errno value. */
const char *zt_status_str(int code);

/* Record the one-line message of an error for this thread and return code, so a detection site
 * reads `return zt_error_set(...)`. It is logged at DEBUG level only: apps/ print
 * "zerotask: error: <zt_error_last()>" exactly once, and a WARN line here would show the user
 * the same message twice. Thread-safe (the buffer is thread-local). */
enum zt_status zt_error_set(enum zt_status code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The last message recorded by zt_error_set on this thread ("" when none). */
const char *zt_error_last(void);
/* The code recorded with it (ZT_OK when none). */
enum zt_status zt_error_last_code(void);
void zt_error_clear(void);

/* Propagation (NCCLCHECK style): each hop logs "-> <code> at file:line" at debug level. */
void zt_error_trace(int code, const char *file, int line);
#define ZT_CHECK(call)                                                                           \
    do {                                                                                         \
        enum zt_status zt_rc_ = (call);                                                          \
        if (zt_rc_ != ZT_OK) {                                                                   \
            zt_error_trace(zt_rc_, __FILE__, __LINE__);                                          \
            return zt_rc_;                                                                       \
        }                                                                                        \
    } while (0)
#define ZT_CHECK_GOTO(call, rc, label)                                                           \
    do {                                                                                         \
        (rc) = (call);                                                                           \
        if ((rc) != ZT_OK) {                                                                     \
            zt_error_trace((rc), __FILE__, __LINE__);                                            \
            goto label;                                                                          \
        }                                                                                        \
    } while (0)

/* Tier 1 (bugs, API misuse; never user input): always on, prints file:line and aborts. */
void zt_assert_fail(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 4, 5)));
#define ZT_ASSERT_MSG(cond, ...)                                                                 \
    do {                                                                                         \
        if (!(cond)) zt_assert_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                     \
    } while (0)
#ifdef NDEBUG
#define ZT_ASSERT(cond) ((void)0)
#else
#define ZT_ASSERT(cond) ZT_ASSERT_MSG(cond, "internal invariant")
#endif

#ifdef __cplusplus
}
#endif
#endif /* ZT_STATUS_H */
