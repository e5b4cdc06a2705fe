/*
 * apps/zt_prepare.c: zt-prepare, turns text files into a byte-level token file (vocabulary 256:
 * every byte is one token) in llm.c's format, the input of zt-train --data.
 *
 * Layer: apps/. Uses io/'s zt_tokens_write (atomic write of the llm.c header + uint16 tokens)
 * and the last-error API of zt_status.h. Inputs are concatenated byte for byte in the order
 * given (--fortunes: every plain fortune file, sorted by name), optionally cut at --max-bytes.
 * Errors: exactly one line "zerotask: error: <message>" on stderr; exit 2 for a bad command
 * line, 1 for anything else (unreadable file, empty corpus, write failure).
 */
#include <dirent.h>     /* opendir, readdir */
#include <errno.h>      /* errno */
#include <stdarg.h>     /* va_list */
#include <stdint.h>     /* uint16_t, int64_t */
#include <stdio.h>      /* fopen, fread, printf */
#include <stdlib.h>     /* malloc, realloc, qsort, strtoll */
#include <string.h>     /* strcmp, strerror, strlen */
#include <sys/stat.h>   /* stat, S_ISREG */
#include "zt_status.h"  /* zt_error_set, zt_error_last */
#include "zt_tokens.h"  /* zt_tokens_write */

#define FORTUNES_DIR "/usr/share/games/fortunes"

static const char *usage_text =
    "usage: zt-prepare [--fortunes | FILE...] --out OUT.bin [--max-bytes N]\n"
    "\n"
    "Turn text into a byte-level token file for zt-train --data: every byte of the input is one\n"
    "token (vocabulary 256), written in llm.c's format (256 x int32 header: magic 20240520,\n"
    "version 1, token count; then one uint16 per token). The output is written atomically.\n"
    "\n"
    "input (exactly one of):\n"
    "  FILE...          text files, concatenated byte for byte in the order given\n"
    "  --fortunes       every plain fortune file in " FORTUNES_DIR "\n"
    "                   (Debian packages fortunes, fortunes-min), sorted by name; *.dat, *.u8,\n"
    "                   hidden files and directories are skipped. ZT_FORTUNES_DIR overrides\n"
    "                   the directory.\n"
    "options:\n"
    "  --out F          output token file (required)\n"
    "  --max-bytes N    stop after N bytes of input (N >= 2; default: all of it)\n"
    "  --help           this text\n"
    "\n"
    "Prints one summary line: files, bytes, tokens, output path.\n"
    "Exit status: 0 ok, 2 bad command line, 1 any other error (unreadable input, fewer than 2\n"
    "bytes of input, output not writable).\n";

/* growable byte buffer of the whole corpus */
struct corpus {
    unsigned char *buf;
    size_t len, cap, max; /* max: --max-bytes (SIZE_MAX when unlimited) */
    int nfiles;
};

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    zt_error_set(ZT_ERR_USAGE, "%s", msg);
    fprintf(stderr, "zerotask: error: %s (see zt-prepare --help)\n", zt_error_last());
    return 2;
}

static int fail(void) {
    fprintf(stderr, "zerotask: error: %s\n", zt_error_last());
    return 1;
}

/* Append the contents of path (up to c->max in total). */
static enum zt_status corpus_add(struct corpus *c, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return zt_error_set(ZT_ERR_IO, "input %s: cannot open (%s)", path, strerror(errno));
    unsigned char chunk[1 << 16];
    size_t n;
    while (c->len < c->max && (n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (n > c->max - c->len) n = c->max - c->len;
        if (c->len + n > c->cap) {
            size_t cap = c->cap ? c->cap : 1 << 20;
            while (cap < c->len + n) cap *= 2;
            unsigned char *nb = realloc(c->buf, cap);
            if (!nb) {
                fclose(f);
                return zt_error_set(ZT_ERR_NOMEM, "input %s: out of memory at %zu bytes", path,
                                    c->len);
            }
            c->buf = nb;
            c->cap = cap;
        }
        memcpy(c->buf + c->len, chunk, n);
        c->len += n;
    }
    int err = ferror(f);
    fclose(f);
    if (err) return zt_error_set(ZT_ERR_IO, "input %s: read error", path);
    c->nfiles++;
    return ZT_OK;
}

static int has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every plain fortune file of dir (sorted by name) into the corpus. */
static enum zt_status corpus_add_fortunes(struct corpus *c, const char *dir) {
    DIR *d = opendir(dir);
    if (!d)
        return zt_error_set(ZT_ERR_IO, "fortunes directory %s: cannot open (%s); install the "
                                       "Debian packages fortunes and fortunes-min", dir,
                            strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    enum zt_status rc = ZT_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *nm = e->d_name;
        if (nm[0] == '.' || has_suffix(nm, ".dat") || has_suffix(nm, ".u8")) continue;
        char path[4096];
        struct stat sb;
        if (snprintf(path, sizeof path, "%s/%s", dir, nm) >= (int)sizeof path) continue;
        if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue; /* dirs, broken links */
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn) { rc = zt_error_set(ZT_ERR_NOMEM, "fortunes %s: out of memory", dir); break; }
            names = nn;
        }
        if (!(names[n] = malloc(strlen(path) + 1))) {
            rc = zt_error_set(ZT_ERR_NOMEM, "fortunes %s: out of memory", dir);
            break;
        }
        strcpy(names[n++], path);
    }
    closedir(d);
    if (rc == ZT_OK && n == 0)
        rc = zt_error_set(ZT_ERR_IO, "fortunes directory %s: no fortune files in it; install "
                                     "the Debian packages fortunes and fortunes-min", dir);
    if (rc == ZT_OK) qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n && rc == ZT_OK && c->len < c->max; i++) rc = corpus_add(c, names[i]);
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

int main(int argc, char **argv) {
    const char *out = NULL;
    int fortunes = 0, nfiles = 0;
    long long max_bytes = -1;
    const char **files = calloc((size_t)argc, sizeof *files);
    if (!files) {
        zt_error_set(ZT_ERR_NOMEM, "out of memory");
        return fail();
    }
    int rc = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_text, stdout);
            rc = 0;
            goto done;
        } else if (!strcmp(a, "--fortunes")) {
            fortunes = 1;
        } else if (!strcmp(a, "--out")) {
            if (i + 1 >= argc || !argv[i + 1][0]) { rc = usage_error("option %s needs a value", a); goto done; }
            out = argv[++i];
        } else if (!strcmp(a, "--max-bytes")) {
            if (i + 1 >= argc) { rc = usage_error("option %s needs a value", a); goto done; }
            char *end;
            errno = 0;
            max_bytes = strtoll(argv[i + 1], &end, 10);
            if (errno || end == argv[i + 1] || *end || max_bytes < 2) {
                rc = usage_error("--max-bytes %s: expected an integer >= 2", argv[i + 1]);
                goto done;
            }
            i++;
        } else if (!strcmp(a, "--")) {
            while (++i < argc) files[nfiles++] = argv[i];
        } else if (a[0] == '-' && a[1] != '\0') {
            rc = usage_error("unknown option '%s'", a);
            goto done;
        } else {
            files[nfiles++] = a;
        }
    }
    if (fortunes && nfiles) {
        rc = usage_error("give either --fortunes or input files, not both (first file: %s)",
                         files[0]);
        goto done;
    }
    if (!fortunes && !nfiles) {
        rc = usage_error("no input: give text files or %s", "--fortunes");
        goto done;
    }
    if (!out) {
        rc = usage_error("missing %s (the output token file)", "--out");
        goto done;
    }

    struct corpus c = {NULL, 0, 0, max_bytes > 0 ? (size_t)max_bytes : (size_t)-1, 0};
    enum zt_status st = ZT_OK;
    if (fortunes) {
        const char *dir = getenv("ZT_FORTUNES_DIR");
        st = corpus_add_fortunes(&c, dir && dir[0] ? dir : FORTUNES_DIR);
    } else {
        for (int i = 0; i < nfiles && st == ZT_OK && c.len < c.max; i++)
            st = corpus_add(&c, files[i]);
    }
    if (st == ZT_OK && c.len < 2)
        st = zt_error_set(ZT_ERR_DATA, "empty corpus: %zu byte(s) of input from %d file(s) "
                                       "(%s), need at least 2", c.len, c.nfiles,
                          fortunes ? "--fortunes" : files[0]);
    uint16_t *tok = NULL;
    if (st == ZT_OK && !(tok = malloc(c.len * sizeof *tok)))
        st = zt_error_set(ZT_ERR_NOMEM, "out of memory for %zu tokens", c.len);
    if (st == ZT_OK) {
        for (size_t i = 0; i < c.len; i++) tok[i] = c.buf[i];
        st = zt_tokens_write(out, tok, c.len);
    }
    if (st == ZT_OK) {
        printf("zt-prepare: %d file%s, %zu bytes -> %zu tokens (vocab 256) -> %s\n", c.nfiles,
               c.nfiles == 1 ? "" : "s", c.len, c.len, out);
        rc = 0;
    } else {
        rc = fail();
    }
    free(tok);
    free(c.buf);
done:
    free(files);
    return rc;
}
