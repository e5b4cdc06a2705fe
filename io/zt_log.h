/*
 * io/zt_log.h: leveled, rank-prefixed logging to stderr; progress lines to stdout.
 *
 * Layer: io/. Level from ZT_LOG_LEVEL (error|warn|info|debug; default info), read once.
 */
#ifndef ZT_LOG_H
#define ZT_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

enum zt_log_level { ZT_LOG_ERROR = 0, ZT_LOG_WARN = 1, ZT_LOG_INFO = 2, ZT_LOG_DEBUG = 3 };

/* Set the rank shown in the prefix ("[zt r1] ") and whether this rank prints info lines. */
void zt_log_set_rank(int rank, int world_size);
/* The caller checks ZT_LOG_LEVEL itself and stops on a bad value (zt_knobs_check): the log
 * module then takes such a value as info without a warning line of its own. */
void zt_log_env_checked(void);
enum zt_log_level zt_log_level(void);
void zt_log_set_level(enum zt_log_level lvl);
/* Print "[zerotask] <level>: msg" (with the rank when world size > 1) to stderr if lvl allows. */
void zt_log(enum zt_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define ZT_LOG_E(...) zt_log(ZT_LOG_ERROR, __VA_ARGS__)
#define ZT_LOG_W(...) zt_log(ZT_LOG_WARN, __VA_ARGS__)
#define ZT_LOG_I(...) zt_log(ZT_LOG_INFO, __VA_ARGS__)
#define ZT_LOG_D(...) zt_log(ZT_LOG_DEBUG, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif /* ZT_LOG_H */
