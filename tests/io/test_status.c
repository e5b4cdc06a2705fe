/*
 * tests/io/test_status.c: proves io/status.c and io/log.c keep their contract:
 * - zt_status_str names every code and describes -errno values;
 * - zt_error_set stores one message per thread (another thread's error does not leak), returns
 *   its code, accepts zt_error_last() as an argument, and prints nothing at the default level
 *   (apps print it once), but does appear at debug level;
 * - an invalid ZT_LOG_LEVEL is reported on stderr exactly once and ignored; a valid one works;
 * - ZT_ASSERT_MSG aborts with file:line and the hint.
 * Child processes (fork) capture stderr so that the once-only and abort behaviour is observable.
 */
#include <errno.h>     /* ENOENT */
#include <pthread.h>   /* pthread_create, pthread_join */
#include <signal.h>    /* SIGABRT */
#include <stdio.h>     /* fopen, fread */
#include <stdlib.h>    /* setenv, _exit */
#include <string.h>    /* strstr, strcmp */
#include <sys/wait.h>  /* waitpid, WIFSIGNALED */
#include <unistd.h>    /* fork, dup2, execl */

#include "zt_log.h"    /* zt_log, zt_log_set_level */
#include "zt_status.h" /* zt_error_set, zt_status_str */
#include "zt_test.h"   /* ZT_TEST_TRUE, zt_test_finish */

/* Re-run this binary as "test_status <mode>" with ZT_LOG_LEVEL set (or unset) and stderr
 * redirected to a file; return the wait status and the text. A fresh exec matters: the level is
 * read once per process, and this process has already read it. */
static int run_child(const char *mode, const char *env_level, char *out, size_t outn) {
    char path[] = "/tmp/zt-test-status-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return -1;
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 2);
        if (env_level)
            setenv("ZT_LOG_LEVEL", env_level, 1);
        else
            unsetenv("ZT_LOG_LEVEL");
        execl("/proc/self/exe", "test_status", mode, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    close(fd);
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(out, 1, outn - 1, f) : 0;
    out[n] = '\0';
    if (f) fclose(f);
    unlink(path);
    return st;
}

static int count(const char *hay, const char *needle) {
    int c = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++) c++;
    return c;
}

static void child_logs(void) {
    zt_log_level();
    zt_log(ZT_LOG_INFO, "info line %d", 1);
    zt_log(ZT_LOG_DEBUG, "debug line %d", 2);
    zt_log(ZT_LOG_WARN, "warn line %d", 3);
    zt_error_set(ZT_ERR_CONFIG, "config x.json: lr: expected a number > 0, got 0");
}

static void child_assert(void) {
    int five = 5;
    ZT_ASSERT_MSG(five == 4, "misuse hint %d", five);
}

static void child_rank(void) {
    zt_log_set_rank(1, 2);
    zt_log(ZT_LOG_INFO, "rank info");
    zt_log(ZT_LOG_WARN, "rank warn");
}

static void *thread_fn(void *arg) {
    (void)arg;
    ZT_TEST_TRUE(zt_error_last()[0] == '\0', "a new thread must start with no error, got '%s'",
                 zt_error_last());
    zt_error_set(ZT_ERR_IO, "thread error");
    return NULL;
}

int main(int argc, char **argv) {
    if (argc == 2) {
        if (strcmp(argv[1], "logs") == 0) child_logs();
        if (strcmp(argv[1], "assert") == 0) child_assert();
        if (strcmp(argv[1], "rank") == 0) child_rank();
        return 0;
    }
    /* names */
    ZT_TEST_TRUE(strcmp(zt_status_str(ZT_OK), "ZT_OK") == 0, "ZT_OK name");
    ZT_TEST_TRUE(strcmp(zt_status_str(ZT_ERR_CONFIG), "ZT_ERR_CONFIG") == 0, "config name");
    ZT_TEST_TRUE(strcmp(zt_status_str(ZT_ERR_CKPT_CORRUPT), "ZT_ERR_CKPT_CORRUPT") == 0, "ckpt");
    ZT_TEST_TRUE(strcmp(zt_status_str(ZT_ERR_USAGE), "ZT_ERR_USAGE") == 0, "usage name");
    ZT_TEST_TRUE(strcmp(zt_status_str(ZT_ERR_PEER), "ZT_ERR_PEER") == 0, "peer name");
    ZT_TEST_TRUE(strcmp(zt_status_str(-ENOENT), strerror(ENOENT)) == 0, "-errno text");
    ZT_TEST_TRUE(strcmp(zt_status_str(-999), "ZT_ERR_UNKNOWN") == 0, "unknown code");

    /* last error: set, returned, wrapped, cleared, thread-local */
    ZT_TEST_TRUE(zt_error_last_code() == ZT_OK && zt_error_last()[0] == '\0', "initially empty");
    enum zt_status rc = zt_error_set(ZT_ERR_DATA, "tokens %s: bad magic %d", "a.bin", 7);
    ZT_TEST_TRUE(rc == ZT_ERR_DATA, "zt_error_set returns its code");
    ZT_TEST_TRUE(strcmp(zt_error_last(), "tokens a.bin: bad magic 7") == 0, "msg '%s'",
                 zt_error_last());
    zt_error_set(ZT_ERR_IO, "while loading: %s", zt_error_last());
    ZT_TEST_TRUE(strcmp(zt_error_last(), "while loading: tokens a.bin: bad magic 7") == 0,
                 "wrapping own message: '%s'", zt_error_last());
    ZT_TEST_TRUE(zt_error_last_code() == ZT_ERR_IO, "code updated");
    pthread_t th;
    pthread_create(&th, NULL, thread_fn, NULL);
    pthread_join(th, NULL);
    ZT_TEST_TRUE(zt_error_last_code() == ZT_ERR_IO && strstr(zt_error_last(), "while loading"),
                 "another thread's error must not leak into this one: '%s'", zt_error_last());
    zt_error_clear();
    ZT_TEST_TRUE(zt_error_last_code() == ZT_OK && zt_error_last()[0] == '\0', "cleared");

    char out[8192];
    /* default level (info): info and warn lines print, debug and zt_error_set do not */
    int st = run_child("logs", NULL, out, sizeof out);
    ZT_TEST_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child exit");
    ZT_TEST_TRUE(strstr(out, "[zerotask] info: info line 1") != NULL, "info printed: [%s]", out);
    ZT_TEST_TRUE(strstr(out, "[zerotask] warn: warn line 3") != NULL, "warn printed: [%s]", out);
    ZT_TEST_TRUE(strstr(out, "debug line") == NULL, "debug hidden at info: [%s]", out);
    ZT_TEST_TRUE(strstr(out, "expected a number") == NULL,
                 "zt_error_set must not print at the default level (apps print it once): [%s]", out);

    /* invalid ZT_LOG_LEVEL: reported exactly once, then ignored (info stays) */
    st = run_child("logs", "loud", out, sizeof out);
    ZT_TEST_TRUE(count(out, "ZT_LOG_LEVEL='loud'") == 1, "invalid level reported once: [%s]", out);
    ZT_TEST_TRUE(strstr(out, "info line 1") && !strstr(out, "debug line"), "default kept: [%s]", out);

    /* valid levels, case-insensitive */
    st = run_child("logs", "DEBUG", out, sizeof out);
    ZT_TEST_TRUE(strstr(out, "[zerotask] debug: debug line 2") != NULL, "debug shown: [%s]", out);
    ZT_TEST_TRUE(count(out, "expected a number > 0") == 1, "error visible once at debug: [%s]", out);
    ZT_TEST_TRUE(strstr(out, "ZT_LOG_LEVEL") == NULL, "valid level not reported: [%s]", out);
    st = run_child("logs", "error", out, sizeof out);
    ZT_TEST_TRUE(strstr(out, "warn line") == NULL && strstr(out, "info line") == NULL,
                 "error level hides warn/info: [%s]", out);

    /* rank prefix; info only on rank 0 */
    st = run_child("rank", NULL, out, sizeof out);
    ZT_TEST_TRUE(strstr(out, "[zerotask r1] warn: rank warn") != NULL, "rank prefix: [%s]", out);
    ZT_TEST_TRUE(strstr(out, "rank info") == NULL, "info only from rank 0: [%s]", out);

    /* tier-1 assert: file:line + hint, then abort */
    st = run_child("assert", NULL, out, sizeof out);
    ZT_TEST_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "assert must abort (status %d)", st);
    ZT_TEST_TRUE(strstr(out, "test_status.c:") && strstr(out, "misuse hint 5") &&
                     strstr(out, "five == 4"),
                 "assert message: [%s]", out);
    return zt_test_finish("test_status");
}
