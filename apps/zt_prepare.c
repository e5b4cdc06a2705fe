/*
 * apps/zt_prepare.c: zt-prepare, turns text files into a token file in llm.c's format, the input
 * of zt-train --data: byte-level (vocabulary 256: every byte is one token), or with --tokenizer
 * DIR the ids of a GPT-2-style BPE (io/zt_tokenizer.h), JSONL inputs giving their "text" fields.
 * With --train-tokenizer DIR it learns such a BPE from the same inputs and writes it to DIR.
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
#include <unistd.h>     /* access */
#include <cjson/cJSON.h> /* JSONL inputs */
#include "cli.h"        /* option values, one-line usage errors */
#include "zt_sched.h"   /* zt_knobs_check */
#include "zt_file.h"    /* zt_file_read_all */
#include "zt_status.h"  /* zt_error_set */
#include "zt_tokenizer.h" /* --tokenizer */
#include "zt_tokens.h"  /* zt_tokens_write */

#define FORTUNES_DIR "/usr/share/games/fortunes"

static const char *usage_text =
    "usage: zt-prepare [--fortunes | FILE...] --out OUT.bin [--max-bytes N | --tokenizer DIR]\n"
    "       zt-prepare [--fortunes | FILE...] --train-tokenizer DIR --vocab-size N [--out F]\n"
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
    "  --out F          output token file (required, except with --train-tokenizer)\n"
    "  --max-bytes N    stop after N bytes of input (N >= 2; default: all of it)\n"
    "  --tokenizer DIR  BPE tokens instead of bytes: DIR/tokenizer.json, or vocab.json +\n"
    "                   merges.txt (Hugging Face / GPT-2 byte-level BPE, at most 65536 tokens).\n"
    "                   Each input file is one document; a FILE ending in .jsonl holds one\n"
    "                   document per line, a JSON object with a string \"text\". Each document\n"
    "                   is preceded by <|endoftext|> when the tokenizer has it (llm.c's rule).\n"
    "                   Input must be UTF-8.\n"
    "  --train-tokenizer DIR\n"
    "                   learn a GPT-2-style byte-level BPE from the input (documents as for\n"
    "                   --tokenizer) with the merges Hugging Face's BpeTrainer learns, and\n"
    "                   write DIR/tokenizer.json, vocab.json and merges.txt (DIR is created;\n"
    "                   its parent must exist). Ids: the 256 bytes, the merges, then\n"
    "                   <|endoftext|> last. With --out, the input is then tokenized with it.\n"
    "  --vocab-size N   the trained vocabulary's size, 257..65536 (<|endoftext|> included)\n"
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
    const char *tokenizer; /* --tokenizer DIR, or NULL: byte-level tokens */
    const char *train_dir; /* --train-tokenizer DIR, or NULL */
    int64_t vocab_size;  /* --vocab-size, or -1 */
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
// --tokenizer: BPE tokens, one document per file or JSONL line

/* the BPE tokens being produced (or, with train, the pieces counted), and what they came from */
struct bpe_out {
    struct zt_bpe_counts *train; /* --train-tokenizer: documents are counted, not encoded */
    const struct zt_tokenizer *tok;
    int eot;         /* <|endoftext|>'s id, or -1 */
    uint16_t *v;     /* [n] */
    size_t n, cap;
    size_t bytes;    /* input bytes read */
    size_t docs;
};

/* one document: <|endoftext|> (when there is one), then the ids of text[0..len) */
static enum zt_status bpe_document(struct bpe_out *o, const char *path, size_t line,
                                   const char *text, size_t len) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (o->train ? zt_bpe_counts_add(o->train, text, len) != ZT_OK
                 : zt_tokenizer_encode(o->tok, text, len, &ids, &n) != ZT_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", zt_error_last());
        if (line) return zt_error_set(ZT_ERR_DATA, "input %s line %zu: %s", path, line, why);
        return zt_error_set(ZT_ERR_DATA, "input %s: %s", path, why);
    }
    if (o->train) {
        o->docs++;
        return ZT_OK;
    }
    size_t need = o->n + n + 1;
    if (need > o->cap) {
        size_t cap = o->cap ? o->cap : 1 << 20;
        while (cap < need) cap *= 2;
        uint16_t *v = realloc(o->v, cap * sizeof *v);
        if (!v) {
            free(ids);
            return zt_error_set(ZT_ERR_NOMEM, "input %s: out of memory at %zu tokens", path,
                                o->n);
        }
        o->v = v;
        o->cap = cap;
    }
    if (o->eot >= 0) o->v[o->n++] = (uint16_t)o->eot;
    for (size_t i = 0; i < n; i++) o->v[o->n++] = (uint16_t)ids[i]; /* ids < 65536: checked */
    free(ids);
    o->docs++;
    return ZT_OK;
}

/* a JSONL file: every non-blank line is {"text": "..."}, one document */
static enum zt_status bpe_jsonl(struct bpe_out *o, const char *path, char *buf, size_t len) {
    size_t line = 0;
    for (char *s = buf, *end = buf + len; s < end; line++) {
        char *nl = memchr(s, '\n', (size_t)(end - s));
        size_t n = nl ? (size_t)(nl - s) : (size_t)(end - s);
        char *next = nl ? nl + 1 : end;
        if (strspn(s, " \t\r") >= n) {
            s = next;
            continue;
        }
        cJSON *obj = cJSON_ParseWithLength(s, n);
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(obj, "text");
        enum zt_status rc = cJSON_IsString(text)
            ? bpe_document(o, path, line + 1, text->valuestring, strlen(text->valuestring))
            : zt_error_set(ZT_ERR_DATA, "input %s line %zu: expected a JSON object with a "
                                        "string \"text\"", path, line + 1);
        cJSON_Delete(obj);
        if (rc != ZT_OK) return rc;
        s = next;
    }
    return ZT_OK;
}

/* one input file: a JSONL file (.jsonl) or one text document */
static enum zt_status bpe_file(struct bpe_out *o, const char *path) {
    char *buf = NULL;
    size_t len = 0;
    if (zt_file_read_all(path, SIZE_MAX / 4, &buf, &len) != 0)
        return zt_error_set(ZT_ERR_IO, "input %s: cannot read (%s)", path, strerror(errno));
    o->bytes += len;
    enum zt_status rc = has_suffix(path, ".jsonl") ? bpe_jsonl(o, path, buf, len)
                                                   : bpe_document(o, path, 0, buf, len);
    free(buf);
    return rc;
}

/* the input files, or the fortune files, through the tokenizer */
static enum zt_status bpe_inputs(const struct prepare_args *a, struct bpe_out *o) {
    if (!a->fortunes) {
        for (int i = 0; i < a->nfiles; i++) ZT_CHECK(bpe_file(o, a->files[i]));
        return ZT_OK;
    }
    const char *dir = getenv("ZT_FORTUNES_DIR");
    dir = dir && dir[0] ? dir : FORTUNES_DIR;
    char **names = NULL;
    size_t n = 0;
    enum zt_status rc = list_fortune_files(dir, &names, &n);
    if (rc == ZT_OK) qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n && rc == ZT_OK; i++) rc = bpe_file(o, names[i]);
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

static enum zt_status prepare_bpe(const struct prepare_args *a, const char *dir) {
    struct bpe_out o = {0};
    struct zt_tokenizer *tok = NULL;
    ZT_CHECK(zt_tokenizer_load(&tok, dir));
    enum zt_status rc = ZT_OK;
    int vocab = zt_tokenizer_vocab_size(tok);
    if (vocab > 65536) {
        rc = zt_error_set(ZT_ERR_DATA, "tokenizer %s: %d tokens do not fit llm.c's uint16 token "
                                       "file (expected at most 65536)", dir, vocab);
        goto out;
    }
    o.tok = tok;
    o.eot = zt_tokenizer_special_id(tok, "<|endoftext|>");
    ZT_CHECK_GOTO(bpe_inputs(a, &o), rc, out);
    if (o.n < 2) {
        rc = zt_error_set(ZT_ERR_DATA, "empty corpus: %zu token(s) from %zu byte(s) of input, "
                                       "need at least 2", o.n, o.bytes);
        goto out;
    }
    ZT_CHECK_GOTO(zt_tokens_write(a->out, o.v, o.n), rc, out);
    printf("zt-prepare: %zu document%s, %zu bytes -> %zu tokens (vocab %d, tokenizer %s) -> %s\n",
           o.docs, o.docs == 1 ? "" : "s", o.bytes, o.n, vocab, dir, a->out);
out:
    free(o.v);
    zt_tokenizer_free(tok);
    return rc;
}

// ----------------------------------------------------------------------------
// --train-tokenizer: a BPE learned from the input

/* dir can be written (or created) before any work is done: a bad one fails at once */
static enum zt_status check_train_dir(const char *dir) {
    struct stat sb;
    if (stat(dir, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode))
            return zt_error_set(ZT_ERR_IO, "tokenizer directory %s: exists and is not a "
                                           "directory (expected a directory to write "
                                           "tokenizer.json into)", dir);
        if (access(dir, W_OK | X_OK) == 0) return ZT_OK;
        return zt_error_set(ZT_ERR_IO, "tokenizer directory %s: cannot write (%s)", dir,
                            strerror(errno));
    }
    char parent[4096]; /* dir without its trailing slashes and its last name */
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    while (n > 0 && dir[n - 1] != '/') n--;
    while (n > 1 && dir[n - 1] == '/') n--;
    snprintf(parent, sizeof parent, "%.*s", n ? (int)n : 1, n ? dir : ".");
    if (access(parent, W_OK | X_OK) != 0)
        return zt_error_set(ZT_ERR_IO, "tokenizer directory %s: cannot create (%s: %s)", dir,
                            parent, strerror(errno));
    return ZT_OK;
}

/* count the input's pieces, learn the merges, write DIR; then, with --out, tokenize */
static enum zt_status prepare_train(const struct prepare_args *a) {
    ZT_CHECK(check_train_dir(a->train_dir));
    struct bpe_out o = {0};
    struct zt_bpe_vocab v = {0};
    ZT_CHECK(zt_bpe_counts_new(&o.train));
    enum zt_status rc = bpe_inputs(a, &o);
    if (rc == ZT_OK && zt_bpe_counts_pieces(o.train) == 0)
        rc = zt_error_set(ZT_ERR_DATA, "empty corpus: no text in %zu byte(s) of input from %zu "
                                       "document(s), nothing to train a tokenizer on", o.bytes,
                          o.docs);
    if (rc == ZT_OK) rc = zt_bpe_train(o.train, (int)a->vocab_size, &v);
    if (rc == ZT_OK) rc = zt_bpe_save(&v, a->train_dir);
    if (rc == ZT_OK)
        printf("zt-prepare: %zu document%s, %zu bytes, %zu pieces -> trained tokenizer of %d "
               "tokens (%d merges, <|endoftext|> = %d) -> %s\n", o.docs, o.docs == 1 ? "" : "s",
               o.bytes, zt_bpe_counts_pieces(o.train), v.ntok + 1, v.nmerges, v.ntok,
               a->train_dir);
    zt_bpe_vocab_free(&v);
    zt_bpe_counts_free(o.train);
    if (rc == ZT_OK && a->out) rc = prepare_bpe(a, a->train_dir);
    return rc;
}

// ----------------------------------------------------------------------------
// the command line

/* --train-tokenizer's companions: a vocabulary size, no other tokenizer, no byte cut */
static int check_train_args(const struct prepare_args *a) {
    if (a->vocab_size < 0)
        return cli_usage_error(&cli, "missing %s (257..65536) for --train-tokenizer",
                               "--vocab-size N");
    if (a->vocab_size > 65536)
        return cli_usage_error(&cli, "--vocab-size %lld: expected at most 65536 (llm.c token "
                                     "files hold uint16 ids)", (long long)a->vocab_size);
    if (a->tokenizer)
        return cli_usage_error(&cli, "give either --tokenizer or --train-tokenizer, not both "
                                     "(%s)", a->tokenizer);
    if (a->max_bytes > 0)
        return cli_usage_error(&cli, "give either --max-bytes or --train-tokenizer, not both (%s)",
                               "a byte cut could split a character");
    return 0;
}

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
        } else if (!strcmp(arg, "--tokenizer")) {
            rc = cli_string_option(&cli, argc, argv, &i, &a->tokenizer);
        } else if (!strcmp(arg, "--train-tokenizer")) {
            rc = cli_string_option(&cli, argc, argv, &i, &a->train_dir);
        } else if (!strcmp(arg, "--vocab-size")) {
            rc = cli_int_option(&cli, argc, argv, &i, 257, &a->vocab_size);
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
    if (a->train_dir) return check_train_args(a);
    if (a->vocab_size > 0)
        return cli_usage_error(&cli, "--vocab-size %lld: only with %s", (long long)a->vocab_size,
                               "--train-tokenizer DIR");
    if (!a->out) return cli_usage_error(&cli, "missing %s (the output token file)", "--out");
    if (a->tokenizer && a->max_bytes > 0)
        return cli_usage_error(&cli, "give either --max-bytes or --tokenizer, not both (%s)",
                               "a byte cut could split a character");
    return 0;
}

/* read the input, write the token file, print the summary line; returns the exit code */
static int prepare(const struct prepare_args *a) {
    if (a->train_dir)
        return prepare_train(a) == ZT_OK ? CLI_EXIT_OK : cli_fail(&cli, CLI_EXIT_FAILURE);
    if (a->tokenizer)
        return prepare_bpe(a, a->tokenizer) == ZT_OK ? CLI_EXIT_OK
                                                     : cli_fail(&cli, CLI_EXIT_FAILURE);
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
    struct prepare_args a = {.max_bytes = -1, .vocab_size = -1,
                             .files = calloc((size_t)argc, sizeof *a.files)};
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
