/*
 * apps/cli.c: the command-line pieces zerotask's programs share (see cli.h).
 *
 * Layer: apps/. Uses io/'s last-error buffer only, so that zt-prepare and zt-ckpt, which start
 * no runtime, can link it as well as zt-train. Output paths are checked with stat and access
 * only: nothing is created.
 */
#include "cli.h"
#include <errno.h>      /* errno */
#include <limits.h>     /* PATH_MAX */
#include <stdarg.h>     /* va_list */
#include <stdio.h>      /* fprintf, vsnprintf, fdopen */
#include <stdlib.h>     /* strtoll, realpath */
#include <string.h>     /* strcmp, strrchr */
#include <sys/stat.h>   /* stat */
#include <sys/wait.h>   /* waitpid, WIFEXITED */
#include <unistd.h>     /* access, sysconf, fork, pipe, execlp */
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

// ----------------------------------------------------------------------------
// outputs, checked before any work

/* the directory part of path into dir ("." when path has none) */
static void dir_of(const char *path, char *dir, size_t n) {
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, n, ".");
    else if (slash == path)
        snprintf(dir, n, "/");
    else
        snprintf(dir, n, "%.*s", (int)(slash - path), path);
}

/* dir must be an existing directory this process may create files in */
static enum zt_status check_dir_writable(const char *flag, const char *path, const char *dir) {
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return zt_error_set(ZT_ERR_IO, "%s %s: the directory %s %s (expected an existing, "
                            "writable directory)", flag, path, dir,
                            errno == ENOENT ? "does not exist" : strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return zt_error_set(ZT_ERR_IO, "%s %s: %s is not a directory (expected an existing, "
                            "writable directory)", flag, path, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return zt_error_set(ZT_ERR_IO, "%s %s: the directory %s is not writable (%s)", flag,
                            path, dir, strerror(errno));
    return ZT_OK;
}

enum zt_status cli_check_output_file(const char *flag, const char *path, int in_place) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return zt_error_set(ZT_ERR_IO, "%s %s: is a directory (expected a file to write)",
                            flag, path);
    if (in_place && stat(path, &sb) == 0 && access(path, W_OK) != 0)
        return zt_error_set(ZT_ERR_IO, "%s %s: the file is not writable (%s)", flag, path,
                            strerror(errno));
    char dir[4096];
    dir_of(path, dir, sizeof dir);
    return check_dir_writable(flag, path, dir);
}

enum zt_status cli_check_output_dir(const char *flag, const char *path) {
    struct stat sb;
    if (stat(path, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode))
            return zt_error_set(ZT_ERR_IO, "%s %s: exists and is not a directory", flag,
                                path);
        return check_dir_writable(flag, path, path);
    }
    /* the nearest existing ancestor: the run creates the rest (mkdir -p) */
    char up[4096];
    snprintf(up, sizeof up, "%s", path);
    for (;;) {
        char parent[4096];
        dir_of(up, parent, sizeof parent);
        if (stat(parent, &sb) == 0 || !strcmp(parent, up) || !strcmp(parent, "."))
            return check_dir_writable(flag, path, parent);
        snprintf(up, sizeof up, "%s", parent);
    }
}

/* path with its directory resolved (the file itself need not exist), or 0 when the directory
 * cannot be resolved */
static int resolved(const char *path, char *out, size_t n) {
    char dir[4096], real[PATH_MAX];
    dir_of(path, dir, sizeof dir);
    if (!realpath(dir, real)) return 0;
    const char *slash = strrchr(path, '/');
    snprintf(out, n, "%s/%s", real, slash ? slash + 1 : path);
    return 1;
}

int cli_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    char ra[4096 + 256], rb[4096 + 256];
    return resolved(a, ra, sizeof ra) && resolved(b, rb, sizeof rb) && !strcmp(ra, rb);
}

long long cli_peak_rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %lld kB", &kib) == 1) break;
    fclose(f);
    return kib;
}

int64_t cli_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    long long kb = -1;
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    if (f) fclose(f);
    if (kb > 0) return kb * 1024;
    return (int64_t)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE);
}

/* gnuplot gp, its output (stdout and stderr) readable from the stream returned; NULL when it
 * cannot start */
static FILE *start_gnuplot(const char *gp, pid_t *pid) {
    int fd[2];
    if (pipe(fd) != 0) return NULL;
    fflush(stdout);
    if ((*pid = fork()) == 0) { /* no shell: the path is one argument, whatever it holds */
        dup2(fd[1], 1);
        dup2(fd[1], 2);
        close(fd[0]);
        close(fd[1]);
        execlp("gnuplot", "gnuplot", gp, (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    FILE *p = *pid > 0 ? fdopen(fd[0], "r") : NULL;
    if (!p) close(fd[0]);
    return p;
}

enum zt_status cli_run_gnuplot(const char *gp) {
    pid_t pid = -1;
    FILE *p = start_gnuplot(gp, &pid);
    if (!p) return zt_error_set(ZT_ERR_IO, "gnuplot: cannot start (%s)", strerror(errno));
    char out[512] = "", line[512];
    while (fgets(line, sizeof line, p))
        if (!out[0] && (strstr(line, "rror") || strstr(line, "not found")))
            snprintf(out, sizeof out, "%s", line);
    fclose(p);
    int st = 0;
    if (waitpid(pid, &st, 0) != pid) st = -1;
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) == 127)
        return zt_error_set(ZT_ERR_IO, "gnuplot not found (install gnuplot-nox: "
                            "scripts/setup-deps.sh)");
    if (WEXITSTATUS(st) != 0 || out[0]) {
        char *nl = strchr(out, '\n');
        if (nl) *nl = 0;
        return zt_error_set(ZT_ERR_IO, "gnuplot failed on %s: %s", gp,
                            out[0] ? out : "non-zero exit");
    }
    return ZT_OK;
}
