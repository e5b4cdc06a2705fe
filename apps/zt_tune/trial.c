/*
 * apps/zt_tune/trial.c: a measured trial (zt-train on the candidate's config and environment
 * for end_profile_step steps, traced, under mpirun when there are several ranks; its step time
 * is the median over the profiled steps, its memory the largest rank's VmHWM) and a predicted
 * one (zt-trace replay of a measured trial's trace with the candidate's policy and workers).
 *
 * Layer: apps/ (private to zt-tune). Programs run with fork/exec in their own process group,
 * their output in files of the trial's directory; one past the trial timeout is killed.
 */
#include <errno.h>      /* errno */
#include <fcntl.h>      /* open */
#include <math.h>       /* NAN */
#include <signal.h>     /* kill */
#include <stdlib.h>     /* qsort, setenv */
#include <string.h>     /* strerror, strncmp */
#include <sys/prctl.h>  /* prctl */
#include <sys/wait.h>   /* waitpid */
#include <time.h>       /* nanosleep */
#include <unistd.h>     /* fork, execvp, geteuid */
#include "tune.h"
#include "zt_clock.h"   /* zt_clock_ms */
#include "zt_file.h"    /* zt_file_mkdirs, zt_file_read_all, zt_file_remove_dir */

enum { MAX_ARGS = 64 };

static volatile sig_atomic_t g_interrupted;

static void on_interrupt(int sig) {
    (void)sig;
    g_interrupted = 1;
}

void trial_catch_interrupts(void) {
    struct sigaction sa = {.sa_handler = on_interrupt};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int trial_interrupted(void) { return g_interrupted != 0; }

// ----------------------------------------------------------------------------
// running a program

/* The child: its own process group, stdout and stderr into files, env set, then argv. */
static void exec_child(char *const *argv, const char *const *env, const char *out,
                       const char *err) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* zt-tune killed outright: its trial goes too */
    int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fo < 0 || fe < 0) _exit(126);
    dup2(fo, 1);
    dup2(fe, 2);
    for (int i = 0; env && env[i]; i += 2) setenv(env[i], env[i + 1], 1);
    execvp(argv[0], argv);
    _exit(127);
}

/* End the process group of pid: SIGTERM (mpirun passes it to its ranks and cleans up), then
 * SIGKILL after a grace of 3 s; pid reaped. */
static void stop_group(pid_t pid) {
    int status;
    kill(-pid, SIGTERM);
    for (int i = 0; i < 150; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid) {
            kill(-pid, SIGKILL); /* what the leader left behind */
            return;
        }
        nanosleep(&(struct timespec){0, 20000000}, NULL);
    }
    kill(-pid, SIGKILL);
    waitpid(pid, &status, 0);
}

/* Run argv (env: NAME, VALUE pairs, NULL-ended) to completion or timeout_s; *code its exit
 * status (128 + signal when killed by one, -1 on timeout). */
static enum zt_status run_program(char *const *argv, const char *const *env, const char *out,
                                  const char *err, int timeout_s, int *code) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return zt_error_set(ZT_ERR_IO, "fork: %s", strerror(errno));
    if (pid == 0) exec_child(argv, env, out, err);
    setpgid(pid, pid);
    double t0 = zt_clock_ms();
    int status = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR)
            return zt_error_set(ZT_ERR_IO, "waitpid: %s", strerror(errno));
        if (g_interrupted) {
            stop_group(pid);
            return zt_error_set(ZT_ERR_INVALID, "interrupted: the trial in %s was stopped; "
                                "--resume goes on from the trials done", out);
        }
        if (zt_clock_ms() - t0 > timeout_s * 1000.0) {
            stop_group(pid);
            *code = -1;
            return ZT_OK;
        }
        nanosleep(&(struct timespec){0, 20000000}, NULL);
    }
    *code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return ZT_OK;
}

/* s into out[n], cut to fit */
static void copy_cut(char *out, size_t n, const char *s) {
    size_t len = strlen(s);
    if (len >= n) len = n - 1;
    memcpy(out, s, len);
    out[len] = '\0';
}

/* the first line of a file with "error:" in it (the program's error line), else its first */
static void first_error_line(const char *path, char *out, size_t n) {
    FILE *f = fopen(path, "r");
    char line[1024];
    out[0] = '\0';
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (!out[0]) copy_cut(out, n, line);
        if (strstr(line, "error:")) {
            copy_cut(out, n, line);
            break;
        }
    }
    if (f) fclose(f);
}

// ----------------------------------------------------------------------------
// a measured trial

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* the median "ms" of the log's steps in [start, end]; NAN when there are none */
static double profiled_ms(const char *log, int start, int end) {
    FILE *f = fopen(log, "r");
    double ms[4096];
    int n = 0;
    char line[2048];
    while (f && fgets(line, sizeof line, f) && n < 4096) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "step");
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "ms");
        if (cJSON_IsNumber(s) && cJSON_IsNumber(m) && s->valuedouble >= start &&
            s->valuedouble <= end)
            ms[n++] = m->valuedouble;
        cJSON_Delete(j);
    }
    if (f) fclose(f);
    if (n == 0) return NAN;
    qsort(ms, (size_t)n, sizeof ms[0], cmp_double);
    return n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
}

/* the largest "peak memory (rank r of N): X MiB resident" of zt-train's output */
static double peak_mib(const char *out) {
    FILE *f = fopen(out, "r");
    char line[1024];
    double most = -1, x;
    int r, n;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "peak memory (rank %d of %d): %lf MiB", &r, &n, &x) == 3 && x > most)
            most = x;
    if (f) fclose(f);
    return most;
}

/* the command line: [mpirun -np N -x ...] zt-train ... */
static int trial_argv(const struct tune *t, const struct cand *c, const char *dir, char **argv,
                      char bufs[][1100]) {
    int n = 0, b = 0;
#define ARG(...) (snprintf(bufs[b], sizeof bufs[b], __VA_ARGS__), argv[n++] = bufs[b++])
    if (c->k.ranks > 1) {
        ARG("%s", t->mpirun);
        if (geteuid() == 0) ARG("--allow-run-as-root");
        ARG("--oversubscribe"), ARG("-np"), ARG("%d", c->k.ranks);
        ARG("-x"), ARG("STARPU_NCPU=%d", c->k.workers);
        ARG("-x"), ARG("STARPU_SCHED=%s", c->k.sched);
        ARG("-x"), ARG("ZT_GRAPH_CHUNKS=%d", c->k.chunks);
    }
    ARG("%s", t->zt_train), ARG("--ds-config"), ARG("%s/ds_config.json", dir);
    ARG("--model"), ARG("%s", t->model), ARG("--data"), ARG("%s", t->data);
    ARG("--steps"), ARG("%d", t->at.end_profile_step);
    ARG("--log"), ARG("%s/log.jsonl", dir), ARG("--trace"), ARG("%s/trace.json", dir);
#undef ARG
    argv[n] = NULL;
    return n;
}

static enum zt_status write_config(const struct tune *t, const struct cand *c, const char *dir) {
    char path[1200];
    snprintf(path, sizeof path, "%s/ds_config.json", dir);
    cJSON *js = knobs_config(t, &c->k, 1);
    char *text = js ? cJSON_Print(js) : NULL;
    cJSON_Delete(js);
    FILE *f = text ? fopen(path, "w") : NULL;
    int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f) != 0) ok = 0;
    cJSON_free(text);
    if (!ok) return zt_error_set(ZT_ERR_IO, "%s: cannot write (%s)", path,
                                 strerror(errno));
    return ZT_OK;
}

/* c's trial directory, emptied: the index for people, the key's hash so that no two
 * configurations share one (nothing an earlier trial left in it is read as this one's) */
static enum zt_status fresh_dir(const struct tune *t, struct cand *c, int index) {
    snprintf(c->dir, sizeof c->dir, "%s/exp%03d-%08llx", t->at.exps_dir, index,
             (unsigned long long)(zt_hash_bytes(0, c->key, strlen(c->key)) & 0xffffffffu));
    zt_file_remove_dir(c->dir);
    if (zt_file_mkdirs(c->dir, 0755) != 0)
        return zt_error_set(ZT_ERR_IO, "%s: cannot create (%s)", c->dir, strerror(errno));
    return ZT_OK;
}

enum zt_status trial_measure(struct tune *t, struct cand *c, int index) {
    char out[1100], err[1100], log[1100], *argv[MAX_ARGS], bufs[MAX_ARGS][1100];
    ZT_CHECK(fresh_dir(t, c, index));
    const char *dir = c->dir;
    ZT_CHECK(write_config(t, c, dir));
    snprintf(out, sizeof out, "%s/stdout.txt", dir);
    snprintf(err, sizeof err, "%s/stderr.txt", dir);
    snprintf(log, sizeof log, "%s/log.jsonl", dir);
    trial_argv(t, c, dir, argv, bufs);
    char ncpu[16], chunks[16];
    snprintf(ncpu, sizeof ncpu, "%d", c->k.workers);
    snprintf(chunks, sizeof chunks, "%d", c->k.chunks);
    const char *env[] = {"STARPU_NCPU", ncpu, "STARPU_SCHED", c->k.sched, "ZT_GRAPH_CHUNKS",
                         chunks, NULL};
    double t0 = zt_clock_ms();
    int code = 0;
    ZT_CHECK(run_program(argv, env, out, err, t->trial_timeout_s, &code));
    c->trial_s = (zt_clock_ms() - t0) / 1e3;
    t->trials++;
    c->meas_ms = profiled_ms(log, t->at.start_profile_step, t->at.end_profile_step);
    c->meas_peak_mib = peak_mib(out);
    if (code == 0 && !isnan(c->meas_ms) && c->meas_peak_mib > 0) {
        c->state = CAND_MEASURED;
        return ZT_OK;
    }
    c->state = CAND_FAILED;
    char line[200];
    first_error_line(err, line, sizeof line);
    if (code == -1)
        snprintf(c->why, sizeof c->why, "timed out after %d s (--trial-timeout)",
                 t->trial_timeout_s);
    else if (code == 127 && !line[0])
        snprintf(c->why, sizeof c->why, "%s: cannot run it", argv[0]);
    else
        snprintf(c->why, sizeof c->why, "exit %d: %s", code, line);
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// a predicted one: zt-trace replay

/* the replay policy that stands for a StarPU policy: those that honour the tasks' priorities
 * (prio, dmdas, lws) replay as prio, the others as eager (first ready, first served) */
static const char *replay_policy(const char *sched) {
    return !strcmp(sched, "prio") || !strcmp(sched, "dmdas") || !strcmp(sched, "lws")
               ? "prio" : "eager";
}

/* the mean predicted step time over the profiled steps of a replay's JSON; NAN without one */
static double replay_file_ms(const struct tune *t, const char *path) {
    char *text = NULL;
    size_t len = 0;
    cJSON *j = zt_file_read_all(path, 16u << 20, &text, &len) == 0 ? cJSON_Parse(text) : NULL;
    free(text);
    double sum = 0;
    int n = 0;
    const cJSON *s;
    cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(j, "steps")) {
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(s, "step");
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(s, "predicted_ms");
        if (cJSON_IsNumber(st) && cJSON_IsNumber(p) &&
            st->valuedouble >= t->at.start_profile_step)
            sum += p->valuedouble, n++;
    }
    cJSON_Delete(j);
    return n ? sum / n : NAN;
}

/* *ms: the replay of measured candidate m's trace with this policy and workers (NAN when the
 * replay failed). Each (policy, workers) is replayed once per trace: its JSON stays in m's
 * directory, emptied whenever m is measured again. An interruption is an error. */
static enum zt_status replay_ms(const struct tune *t, int m, const char *policy, int workers,
                                double *ms) {
    char trace[1100], out[1200], err[1200], w[16], *argv[MAX_ARGS];
    const char *dir = t->c[m].dir;
    snprintf(trace, sizeof trace, "%s/trace.json", dir);
    snprintf(out, sizeof out, "%s/replay-%s-w%d.json", dir, policy, workers);
    snprintf(err, sizeof err, "%s/replay-%s-w%d.err", dir, policy, workers);
    if (!isnan(*ms = replay_file_ms(t, out))) return ZT_OK;
    snprintf(w, sizeof w, "%d", workers);
    const char *args[] = {t->zt_trace, "replay", trace, "--policy", policy, "--workers", w,
                          "--durations", "cpu", "--json", NULL};
    memcpy(argv, args, sizeof args);
    int code = 0;
    ZT_CHECK(run_program(argv, NULL, out, err, t->trial_timeout_s, &code));
    *ms = code == 0 ? replay_file_ms(t, out) : NAN;
    return ZT_OK;
}

enum zt_status trial_replay(struct tune *t, struct cand *c, int m) {
    const struct cand *ref = &t->c[m];
    double base, mine;
    ZT_CHECK(replay_ms(t, m, replay_policy(ref->k.sched), ref->k.workers, &base));
    ZT_CHECK(replay_ms(t, m, replay_policy(c->k.sched), c->k.workers, &mine));
    c->from = m;
    if (isnan(base) || isnan(mine) || base <= 0) {
        c->state = CAND_PRUNED;
        snprintf(c->why, sizeof c->why, "replay of exp%03d failed (see its replay-*.err)", m);
        return ZT_OK;
    }
    /* the replay's ratio applied to the measured time: the simulator's own bias cancels */
    c->pred_ms = ref->meas_ms * mine / base;
    c->state = CAND_PREDICTED;
    snprintf(c->why, sizeof c->why, "replay of exp%03d: %+.1f%%", m, 100.0 * (mine / base - 1));
    return ZT_OK;
}
