/*
 * apps/zt_prepare.c: zt-prepare, turns text files into a byte-level token file (vocabulary 256:
 * every byte is one token) in llm.c's format, the input of zt-train --data.
 *
 * Layer: apps/. Uses io/'s zt_tokens_write (atomic write of the llm.c header + uint16 tokens),
 * the last-error API of zt_status.h and the shared command-line pieces (apps/cli.h). Inputs are
 * concatenated byte for byte in the order given (--fortunes: every plain fortune file, sorted by
 * name), optionally cut at --max-bytes.
 * Errors: exactly one line "zerotask: error: <message>" on stderr; exit 2 for a bad command
 * line, 1 for anything else (unreadable file, empty corpus, write failure).
 */
#include <dirent.h>     /* opendir, readdir */
#include <errno.h>      /* errno */
#include <stdint.h>     /* uint16_t, int64_t */
#include <stdio.h>      /* fopen, fread, printf */
#include <stdlib.h>     /* malloc, realloc, qsort, getenv */
#include <string.h>     /* strcmp, strerror, strlen */
#include <sys/stat.h>   /* stat, S_ISREG */
#include "cli.h"        /* option values, one-line usage errors */
#include "zt_sched.h"   /* zt_knobs_check */
#include "zt_status.h"  /* zt_error_set */
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

static const struct cli_program cli = {"zt-prepare", "zerotask", 1};

/* what the command line asked for */
struct prepare_args {
    const char *out;     /* the token file to write */
    int fortunes;        /* --fortunes: the fortune files are the input */
    const char **files;  /* [nfiles] the input files otherwise, in order */
    int nfiles;
    int64_t max_bytes;   /* --max-bytes, or -1: all of the input */
    int help;            /* --help came before any error */
};

/* growable byte buffer of the whole corpus */
struct corpus {
    unsigned char *buf;
    size_t len, cap, max; /* max: --max-bytes (SIZE_MAX when unlimited) */
    int nfiles;
};

// ----------------------------------------------------------------------------
// reading the input

/* room for n more bytes */
static enum zt_status corpus_reserve(struct corpus *c, size_t n, const char *path) {
    if (c->len + n <= c->cap) return ZT_OK;
    size_t cap = c->cap ? c->cap : 1 << 20;
    while (cap < c->len + n) cap *= 2;
    unsigned char *grown = realloc(c->buf, cap);
    if (!grown)
        return zt_error_set(ZT_ERR_NOMEM, "input %s: out of memory at %zu bytes", path, c->len);
    c->buf = grown;
    c->cap = cap;
    return ZT_OK;
}

/* Append the contents of path (up to c->max in total). */
static enum zt_status corpus_add(struct corpus *c, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return zt_error_set(ZT_ERR_IO, "input %s: cannot open (%s)", path, strerror(errno));
    unsigned char chunk[1 << 16];
    size_t n;
    while (c->len < c->max && (n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (n > c->max - c->len) n = c->max - c->len;
        if (corpus_reserve(c, n, path) != ZT_OK) {
            fclose(f);
            return ZT_ERR_NOMEM;
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

/* a plain fortune file: not hidden, not a strfile index (.dat) or UTF-8 copy (.u8), a regular
 * file (not a directory or a broken link) */
static int is_fortune_file(const char *dir, const char *name, char *path, size_t n) {
    if (name[0] == '.' || has_suffix(name, ".dat") || has_suffix(name, ".u8")) return 0;
    if (snprintf(path, n, "%s/%s", dir, name) >= (int)n) return 0;
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* the paths of dir's fortune files, in directory order (*names: n strings; caller frees) */
static enum zt_status list_fortune_files(const char *dir, char ***names, size_t *n) {
    DIR *d = opendir(dir);
    if (!d)
        return zt_error_set(ZT_ERR_IO, "fortunes directory %s: cannot open (%s); install the "
                                       "Debian packages fortunes and fortunes-min", dir,
                            strerror(errno));
    size_t cap = 0;
    enum zt_status rc = ZT_OK;
    struct dirent *e;
    char path[4096];
    while (rc == ZT_OK && (e = readdir(d))) {
        if (!is_fortune_file(dir, e->d_name, path, sizeof path)) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            char **grown = realloc(*names, cap * sizeof *grown);
            if (!grown) {
                rc = zt_error_set(ZT_ERR_NOMEM, "fortunes %s: out of memory", dir);
                break;
            }
            *names = grown;
        }
        if (!((*names)[*n] = malloc(strlen(path) + 1)))
            rc = zt_error_set(ZT_ERR_NOMEM, "fortunes %s: out of memory", dir);
        else
            strcpy((*names)[(*n)++], path);
    }
    closedir(d);
    return rc;
}

/* Every plain fortune file of dir (sorted by name) into the corpus. */
static enum zt_status corpus_add_fortunes(struct corpus *c, const char *dir) {
    char **names = NULL;
    size_t n = 0;
    enum zt_status rc = list_fortune_files(dir, &names, &n);
    if (rc == ZT_OK && n == 0)
        rc = zt_error_set(ZT_ERR_IO, "fortunes directory %s: no fortune files in it; install "
                                     "the Debian packages fortunes and fortunes-min", dir);
    if (rc == ZT_OK) qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n && rc == ZT_OK && c->len < c->max; i++) rc = corpus_add(c, names[i]);
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

/* the input the arguments name, at least 2 bytes of it (a token and the next one to predict) */
static enum zt_status read_corpus(const struct prepare_args *a, struct corpus *c) {
    enum zt_status rc = ZT_OK;
    if (a->fortunes) {
        const char *dir = getenv("ZT_FORTUNES_DIR");
        rc = corpus_add_fortunes(c, dir && dir[0] ? dir : FORTUNES_DIR);
    } else {
        for (int i = 0; i < a->nfiles && rc == ZT_OK && c->len < c->max; i++)
            rc = corpus_add(c, a->files[i]);
    }
    if (rc == ZT_OK && c->len < 2)
        rc = zt_error_set(ZT_ERR_DATA, "empty corpus: %zu byte(s) of input from %d file(s) "
                                       "(%s), need at least 2", c->len, c->nfiles,
                          a->fortunes ? "--fortunes" : a->files[0]);
    return rc;
}

/* every byte one token, written atomically in llm.c's format */
static enum zt_status write_tokens(const struct corpus *c, const char *out) {
    uint16_t *tokens = malloc(c->len * sizeof *tokens);
    if (!tokens) return zt_error_set(ZT_ERR_NOMEM, "out of memory for %zu tokens", c->len);
    for (size_t i = 0; i < c->len; i++) tokens[i] = c->buf[i];
    enum zt_status rc = zt_tokens_write(out, tokens, c->len);
    free(tokens);
    return rc;
}

// ----------------------------------------------------------------------------
// the command line

/* The arguments into a (a->files has room for argc entries). --help stops the parse wherever
 * it is. Returns 0 or exit code 2. */
static int parse_args(int argc, char **argv, struct prepare_args *a) {
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        int rc = 0;
        if (cli_is_help(arg)) {
            a->help = 1;
            return 0;
        } else if (!strcmp(arg, "--fortunes")) {
            a->fortunes = 1;
        } else if (!strcmp(arg, "--out")) {
            rc = cli_string_option(&cli, argc, argv, &i, &a->out);
        } else if (!strcmp(arg, "--max-bytes")) {
            rc = cli_int_option(&cli, argc, argv, &i, 2, &a->max_bytes);
        } else if (!strcmp(arg, "--")) { /* the rest are files, even those starting with - */
            while (++i < argc) a->files[a->nfiles++] = argv[i];
        } else if (arg[0] == '-' && arg[1] != '\0') {
            rc = cli_usage_error(&cli, "unknown option '%s'", arg);
        } else {
            a->files[a->nfiles++] = arg;
        }
        if (rc) return rc;
    }
    if (a->fortunes && a->nfiles)
        return cli_usage_error(&cli, "give either --fortunes or input files, not both (first "
                                     "file: %s)", a->files[0]);
    if (!a->fortunes && !a->nfiles)
        return cli_usage_error(&cli, "no input: give text files or %s", "--fortunes");
    if (!a->out) return cli_usage_error(&cli, "missing %s (the output token file)", "--out");
    return 0;
}

/* read the input, write the token file, print the summary line; returns the exit code */
static int prepare(const struct prepare_args *a) {
    struct corpus c = {NULL, 0, 0, a->max_bytes > 0 ? (size_t)a->max_bytes : (size_t)-1, 0};
    enum zt_status rc = read_corpus(a, &c);
    if (rc == ZT_OK) rc = write_tokens(&c, a->out);
    if (rc == ZT_OK)
        printf("zt-prepare: %d file%s, %zu bytes -> %zu tokens (vocab 256) -> %s\n", c.nfiles,
               c.nfiles == 1 ? "" : "s", c.len, c.len, a->out);
    free(c.buf);
    return rc == ZT_OK ? CLI_EXIT_OK : cli_fail(&cli, CLI_EXIT_FAILURE);
}

int main(int argc, char **argv) {
    struct prepare_args a = {.max_bytes = -1, .files = calloc((size_t)argc, sizeof *a.files)};
    if (!a.files) {
        zt_error_set(ZT_ERR_NOMEM, "out of memory");
        return cli_fail(&cli, CLI_EXIT_FAILURE);
    }
    int code = zt_knobs_check() == ZT_OK ? 0 : cli_fail(&cli, CLI_EXIT_USAGE); /* ZT_LOG_LEVEL */
    if (!code) code = parse_args(argc, argv, &a);
    if (!code && a.help)
        fputs(usage_text, stdout);
    else if (!code)
        code = prepare(&a);
    free(a.files);
    return code;
}
