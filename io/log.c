/*
 * io/log.c: leveled, rank-prefixed logging to stderr.
 *
 * Layer: io/ (platform; no StarPU). The level comes from ZT_LOG_LEVEL (error|warn|info|debug,
 * case-insensitive; default info), read once on first use. An invalid value is reported once on
 * stderr and ignored (the default stays), never silently. zt_log_set_level() overrides it.
 * With world size > 1 every line carries the rank and only rank 0 prints info lines (errors,
 * warnings and debug lines come from every rank, since they are about that rank).
 */
#include "zt_log.h"

#include <pthread.h>   /* pthread_once */
#include <stdarg.h>    /* va_list */
#include <stdatomic.h> /* atomic_int */
#include <stdio.h>     /* vfprintf, flockfile, funlockfile, stderr */
#include <stdlib.h>    /* getenv */
#include <strings.h>   /* strcasecmp */

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static atomic_int cur_level = ZT_LOG_INFO;
static atomic_int cur_rank = 0;
static atomic_int cur_world = 1;
static atomic_int env_checked_by_caller = 0; /* zt_log_env_checked: no warning of our own */

static const char *const level_names[] = {"error", "warn", "info", "debug"};

/* Read ZT_LOG_LEVEL once (pthread_once: several threads may log first at the same time). */
static void read_env(void) {
    const char *s = getenv("ZT_LOG_LEVEL");
    if (!s || !*s) return;
    for (int i = 0; i <= ZT_LOG_DEBUG; i++) {
        if (strcasecmp(s, level_names[i]) == 0) {
            atomic_store(&cur_level, i);
            return;
        }
    }
    if (!atomic_load(&env_checked_by_caller))
        fprintf(stderr, "[zerotask] warn: ZT_LOG_LEVEL='%s' is not one of error|warn|info|debug; "
                        "using info\n", s);
}

void zt_log_env_checked(void) { atomic_store(&env_checked_by_caller, 1); }

void zt_log_set_rank(int rank, int world_size) {
    atomic_store(&cur_rank, rank);
    atomic_store(&cur_world, world_size);
}

enum zt_log_level zt_log_level(void) {
    pthread_once(&env_once, read_env);
    return (enum zt_log_level)atomic_load(&cur_level);
}

void zt_log_set_level(enum zt_log_level lvl) {
    /* run the env read first so that it can never overwrite an explicit choice later */
    pthread_once(&env_once, read_env);
    if (lvl < ZT_LOG_ERROR) lvl = ZT_LOG_ERROR;
    if (lvl > ZT_LOG_DEBUG) lvl = ZT_LOG_DEBUG;
    atomic_store(&cur_level, (int)lvl);
}

void zt_log(enum zt_log_level lvl, const char *fmt, ...) {
    if ((int)lvl > (int)zt_log_level()) return;
    int world = atomic_load(&cur_world), rank = atomic_load(&cur_rank);
    if (lvl == ZT_LOG_INFO && world > 1 && rank != 0) return;
    int li = lvl < ZT_LOG_ERROR ? 0 : lvl > ZT_LOG_DEBUG ? ZT_LOG_DEBUG : (int)lvl;
    /* one lock for the whole line so that lines of different threads never interleave */
    flockfile(stderr);
    if (world > 1)
        fprintf(stderr, "[zerotask r%d] %s: ", rank, level_names[li]);
    else
        fprintf(stderr, "[zerotask] %s: ", level_names[li]);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    funlockfile(stderr);
}
