/*
 * apps/zt_prepare/main.c: zt-prepare, turns text files into token files in llm.c's format, the
 * input of zt-train --data: byte-level (vocabulary 256: every byte is one token), or with
 * --tokenizer DIR the ids of a GPT-2-style BPE (io/zt_tokenizer.h), tokenized on --threads
 * threads; into one file (--out) or into shards and a data spec (--out-dir). With
 * --train-tokenizer DIR it learns such a BPE from the same inputs and writes it to DIR.
 *
 * Layer: apps/. This room: the command line, the three modes (bytes, tokens, training) and the
 * summary line; the others are listed in prepare.h. Errors: exactly one line
 * "zerotask: error: <message>" on stderr; exit 2 for a bad command line, 1 for anything else
 * (unreadable file, malformed JSONL, empty corpus, write failure).
 */
#include <errno.h>      /* errno */
#include <stdio.h>      /* printf, snprintf */
#include <stdlib.h>     /* calloc, free, strtoll */
#include <string.h>     /* strcmp, strerror, strlen */
#include <sys/stat.h>   /* stat */
#include <unistd.h>     /* access, isatty, sysconf */
#include "cli.h"        /* option values, one-line usage errors */
#include "prepare.h"
#include "zt_sched.h"   /* zt_knobs_check */

#define MAX_THREADS 1024
#define MAX_SHARD_TOKENS 2147483647LL /* the header's int32 token count */

static const char *usage_text =
    "usage: zt-prepare [--fortunes | FILE...] (--out F | --out-dir D) [--tokenizer DIR] [...]\n"
    "       zt-prepare [--fortunes | FILE...] --train-tokenizer DIR --vocab-size N\n"
    "                  [--out F | --out-dir D]\n"
    "\n"
    "Turn text into token files for zt-train --data, in llm.c's format (256 x int32 header:\n"
    "magic 20240520, version 1, token count; then one uint16 per token), each written\n"
    "atomically: bytes (vocabulary 256: every byte of the input is one token), or with\n"
    "--tokenizer the ids of a GPT-2-style BPE.\n"
    "\n"
    "input (exactly one of):\n"
    "  FILE...          text files, in the order given. With a tokenizer each file is one\n"
    "                   document, and a FILE ending in .jsonl holds one document per line, a\n"
    "                   JSON object with a string \"text\"; byte-level, the files are\n"
    "                   concatenated byte for byte (.jsonl files too).\n"
    "  --fortunes       every plain fortune file in " FORTUNES_DIR "\n"
    "                   (Debian packages fortunes, fortunes-min), sorted by name; *.dat, *.u8,\n"
    "                   hidden files and directories are skipped. ZT_FORTUNES_DIR overrides\n"
    "                   the directory.\n"
    "output (exactly one of, except with --train-tokenizer, where both are optional):\n"
    "  --out F          one token file\n"
    "  --out-dir D      shards D/train_000000.bin, train_000001.bin, ... of at most\n"
    "                   --shard-tokens tokens, and the data spec D/data.json for zt-train --data:\n"
    "                     {\"train\": [{\"path\": \"train_000000.bin\", \"tokens\": N}, ...],\n"
    "                      \"validation\": [{\"path\": \"val_000000.bin\", \"tokens\": N}, ...]}\n"
    "                   (paths relative to D; \"validation\" only with --valid-docs). D is\n"
    "                   created; an old D/data.json is removed first, a failed run removes the\n"
    "                   shards it wrote, and data.json is written last. A document is never\n"
    "                   split between shards, except one longer than a shard: it fills whole\n"
    "                   shards and its rest starts the next.\n"
    "  --shard-tokens N at most N tokens a shard, 2..2147483647 (the header's int32); a suffix\n"
    "                   K, M or G multiplies by 10^3, 10^6, 10^9 (default 100M, llm.c's size)\n"
    "  --valid-docs N   the first N documents kept go to validation shards D/val_000000.bin,\n"
    "                   ... (the first, as llm.c's first fineweb shard is its validation: the\n"
    "                   split is known while the input streams)\n"
    "options:\n"
    "  --tokenizer DIR  BPE tokens instead of bytes: DIR/tokenizer.json, or vocab.json +\n"
    "                   merges.txt (Hugging Face / GPT-2 byte-level BPE, at most 65536 tokens).\n"
    "                   Each document is preceded by <|endoftext|> when the tokenizer has it\n"
    "                   (llm.c's rule).\n"
    "  --threads N      tokenize on N threads (default: the online CPU count). The documents\n"
    "                   are spread over them and written in input order: the output is the same\n"
    "                   for every N. Byte-level tokens are a copy, made on one thread.\n"
    "  --bad-utf8 skip|replace|error\n"
    "                   a document that is not valid UTF-8 (with a tokenizer): skip it (the\n"
    "                   default), replace each invalid sequence by U+FFFD as Python's\n"
    "                   bytes.decode(\"utf-8\", errors=\"replace\") does, or stop with an error\n"
    "                   naming the file, line and byte (the default with --train-tokenizer)\n"
    "  --max-bytes N    byte-level only: stop after N bytes of input (N >= 2)\n"
    "  --progress       draw the progress bar (bytes done, MB/s, time left) on stderr even when\n"
    "                   stderr is not a terminal\n"
    "  --quiet          no progress bar (by default there is one when stderr is a terminal)\n"
    "  --train-tokenizer DIR\n"
    "                   learn a GPT-2-style byte-level BPE from the input (documents as for\n"
    "                   --tokenizer) with the merges Hugging Face's BpeTrainer learns, and\n"
    "                   write DIR/tokenizer.json, vocab.json and merges.txt (DIR is created;\n"
    "                   its parent must exist). Ids: the 256 bytes, the merges, then\n"
    "                   <|endoftext|> last. With --out or --out-dir, the input is then\n"
    "                   tokenized with it. Counting runs on one thread.\n"
    "  --vocab-size N   the trained vocabulary's size, 257..65536 (<|endoftext|> included)\n"
    "  --help           this text\n"
    "\n"
    "Skipped and counted, never dropped unseen: empty documents (an empty file, a blank JSONL\n"
    "line, \"text\": \"\"), JSONL objects without \"text\" or with \"text\": null (an error with\n"
    "--train-tokenizer), and documents that are not UTF-8 (--bad-utf8 skip). A JSONL line\n"
    "that is not one JSON object, or whose \"text\" is not a string, is an error naming the\n"
    "file and line.\n"
    "Prints one summary line: documents kept and skipped, bytes, tokens, the output and its\n"
    "shards, MB/s (input bytes over the whole run's wall time).\n"
    "Exit status: 0 ok, 2 bad command line, 1 any other error (unreadable input, malformed\n"
    "JSONL, fewer than 2 tokens, output not writable).\n";

static const struct cli_program cli = {"zt-prepare", "zerotask", 1};

// ----------------------------------------------------------------------------
// the summary line

/* "skipped 1 empty, 2 without "text", 3 bad UTF-8" (or "...; replaced bad UTF-8 in 3") */
static void skipped_clause(const struct run_totals *t, int bad_utf8, int text_rules, char *buf,
                           size_t n) {
    if (!text_rules) {
        snprintf(buf, n, "skipped %zu empty", t->empty);
    } else if (bad_utf8 == BAD_UTF8_REPLACE) {
        snprintf(buf, n, "skipped %zu empty, %zu without \"text\"; replaced bad UTF-8 in %zu",
                 t->empty, t->no_text, t->bad_utf8);
    } else {
        snprintf(buf, n, "skipped %zu empty, %zu without \"text\", %zu bad UTF-8", t->empty,
                 t->no_text, t->bad_utf8);
    }
}

/* where the tokens went: the file, or the spec and its shards */
static void output_clause(const struct sink *s, char *buf, size_t n) {
    if (!s->dir) {
        snprintf(buf, n, "%s", s->out);
        return;
    }
    int w = snprintf(buf, n, "%s/data.json (%zu train shard%s", s->dir, s->nshards[0],
                     s->nshards[0] == 1 ? "" : "s");
    if (s->valid_docs > 0 && w > 0 && (size_t)w < n)
        w += snprintf(buf + w, n - (size_t)w, ", %zu validation shard%s", s->nshards[1],
                      s->nshards[1] == 1 ? "" : "s");
    if (w > 0 && (size_t)w < n) snprintf(buf + w, n - (size_t)w, ")");
}

static double mb_per_s(const struct run_totals *t) {
    return t->seconds > 0 ? (double)t->bytes / 1e6 / t->seconds : 0.0;
}

// ----------------------------------------------------------------------------
// the modes

static int online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
}

/* fewer than 2 tokens where zt-train needs them: say how much input gave how little */
static enum zt_status check_enough(const struct prepare_args *a, const struct reader *rd,
                                   const struct run_totals *t, const struct sink *s,
                                   const char *skipped) {
    size_t train = s->tokens[0];
    if (train >= 2) return ZT_OK;
    if (s->valid_docs > 0 && t->docs > 0 && t->docs <= s->valid_docs)
        return zt_error_set(ZT_ERR_DATA, "--valid-docs %zu: all %zu documents kept went to "
                                         "validation, none is left to train on", s->valid_docs,
                            t->docs);
    if (!rd->byte_level)
        return zt_error_set(ZT_ERR_DATA, "empty corpus: %zu token(s) from %llu byte(s) of "
                                         "input (%s), need at least 2", train,
                            (unsigned long long)t->bytes, skipped);
    return zt_error_set(ZT_ERR_DATA, "empty corpus: %llu byte(s) of input from %d file(s) "
                                     "(%s), need at least 2", (unsigned long long)t->bytes,
                        rd->files_read, a->fortunes ? "--fortunes" : a->files[0]);
}

/* the input as tokens (tokdir's BPE, or bytes when NULL) into --out or --out-dir */
static enum zt_status prepare_tokens(const struct prepare_args *a, const struct inputs *in,
                                     const char *tokdir) {
    struct zt_tokenizer *tok = NULL;
    struct doc_rules rules = {.eot = -1, .bad_utf8 = a->bad_utf8 < 0 ? BAD_UTF8_SKIP
                                                                     : (enum bad_utf8)a->bad_utf8};
    int vocab = 256;
    if (tokdir) {
        ZT_CHECK(zt_tokenizer_load(&tok, tokdir));
        vocab = zt_tokenizer_vocab_size(tok);
        if (vocab > 65536) {
            zt_tokenizer_free(tok);
            return zt_error_set(ZT_ERR_DATA, "tokenizer %s: %d tokens do not fit llm.c's uint16 "
                                             "token file (expected at most 65536)", tokdir,
                                vocab);
        }
        rules.tok = tok;
        rules.eot = zt_tokenizer_special_id(tok, "<|endoftext|>");
    }
    struct reader rd = {.in = in, .byte_level = !tokdir, .max_bytes = UINT64_MAX};
    if (a->max_bytes > 0) rd.max_bytes = (uint64_t)a->max_bytes;
    struct sink s;
    struct run_totals t = {0};
    char skipped[160] = "", where[4200] = "";
    int threads = !tokdir ? 1 : a->threads > 0 ? (int)a->threads : online_cpus();
    enum zt_status rc = sink_open(&s, a->out, a->out_dir,
                                  a->shard_tokens > 0 ? (size_t)a->shard_tokens
                                                      : SHARD_TOKENS_DEFAULT,
                                  a->valid_docs > 0 ? (size_t)a->valid_docs : 0);
    if (rc == ZT_OK) rc = pipeline_run(&rd, &rules, threads, a->progress, &s, &t);
    skipped_clause(&t, rules.bad_utf8, tokdir != NULL, skipped, sizeof skipped);
    if (rc == ZT_OK) rc = check_enough(a, &rd, &t, &s, skipped);
    if (rc == ZT_OK) rc = sink_close(&s);
    if (rc == ZT_OK) {
        output_clause(&s, where, sizeof where);
        if (tokdir)
            printf("zt-prepare: %zu document%s, %s, %llu bytes -> %zu tokens (vocab %d, "
                   "tokenizer %s) -> %s, %.1f MB/s\n", t.docs, t.docs == 1 ? "" : "s", skipped,
                   (unsigned long long)t.bytes, s.tokens[0] + s.tokens[1], vocab, tokdir, where,
                   mb_per_s(&t));
        else
            printf("zt-prepare: %zu file%s, %s, %llu bytes -> %zu tokens (vocab 256) -> %s, "
                   "%.1f MB/s\n", t.docs, t.docs == 1 ? "" : "s", skipped,
                   (unsigned long long)t.bytes, s.tokens[0] + s.tokens[1], where, mb_per_s(&t));
    } else {
        sink_abort(&s);
    }
    sink_free(&s);
    zt_tokenizer_free(tok);
    return rc;
}

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

/* count the input's pieces, learn the merges, write DIR; then, with an output, tokenize */
static enum zt_status prepare_train(const struct prepare_args *a, const struct inputs *in) {
    ZT_CHECK(check_train_dir(a->train_dir));
    struct doc_rules rules = {.eot = -1, .strict_text = 1,
                              .bad_utf8 = a->bad_utf8 < 0 ? BAD_UTF8_ERROR
                                                          : (enum bad_utf8)a->bad_utf8};
    struct reader rd = {.in = in, .max_bytes = UINT64_MAX};
    struct zt_bpe_vocab v = {0};
    struct run_totals t = {0};
    char skipped[160];
    ZT_CHECK(zt_bpe_counts_new(&rules.train));
    enum zt_status rc = pipeline_run(&rd, &rules, 1, a->progress, NULL, &t);
    skipped_clause(&t, rules.bad_utf8, 1, skipped, sizeof skipped);
    if (rc == ZT_OK && zt_bpe_counts_pieces(rules.train) == 0)
        rc = zt_error_set(ZT_ERR_DATA, "empty corpus: no text in %llu byte(s) of input from "
                                       "%zu document(s) (%s), nothing to train a tokenizer on",
                          (unsigned long long)t.bytes, t.docs, skipped);
    if (rc == ZT_OK) rc = zt_bpe_train(rules.train, (int)a->vocab_size, &v);
    if (rc == ZT_OK) rc = zt_bpe_save(&v, a->train_dir);
    if (rc == ZT_OK)
        printf("zt-prepare: %zu document%s, %s, %llu bytes, %zu pieces -> trained tokenizer of "
               "%d tokens (%d merges, <|endoftext|> = %d) -> %s\n", t.docs,
               t.docs == 1 ? "" : "s", skipped, (unsigned long long)t.bytes,
               zt_bpe_counts_pieces(rules.train), v.ntok + 1, v.nmerges, v.ntok, a->train_dir);
    zt_bpe_vocab_free(&v);
    zt_bpe_counts_free(rules.train);
    if (rc == ZT_OK && (a->out || a->out_dir)) rc = prepare_tokens(a, in, a->train_dir);
    return rc;
}

/* the outputs can be written, the inputs read: checked before any work */
static enum zt_status prepare_run(const struct prepare_args *a) {
    if (a->out) ZT_CHECK(cli_check_output_file("--out", a->out, 0));
    if (a->out_dir) ZT_CHECK(cli_check_output_dir("--out-dir", a->out_dir));
    struct inputs in;
    ZT_CHECK(inputs_list(a, &in));
    enum zt_status rc = a->train_dir ? prepare_train(a, &in)
                                     : prepare_tokens(a, &in, a->tokenizer);
    inputs_free(&in);
    return rc;
}

// ----------------------------------------------------------------------------
// the command line

/* a count with an optional decimal suffix K, M or G: "100M" is 10^8. 0, or exit code 2. */
static int count_option(int argc, char **argv, int *i, int64_t min, int64_t max, int64_t *v) {
    if (*i + 1 >= argc) return cli_usage_error(&cli, "option %s needs a value", argv[*i]);
    const char *opt = argv[*i], *text = argv[++*i];
    char *end = NULL;
    errno = 0;
    long long n = strtoll(text, &end, 10);
    long long mult = !*end ? 1 : !strcmp(end, "K") || !strcmp(end, "k") ? 1000LL
                   : !strcmp(end, "M") ? 1000000LL : !strcmp(end, "G") ? 1000000000LL : 0;
    if (errno || end == text || text[0] == '-' || text[0] == '+' || !mult ||
        n > max / mult || n * mult < min)
        return cli_usage_error(&cli, "%s %s: expected an integer %lld..%lld, optionally with a "
                                     "suffix K, M or G (x 10^3, 10^6, 10^9)", opt, text,
                               (long long)min, (long long)max);
    *v = n * mult;
    return 0;
}

/* --bad-utf8 skip|replace|error */
static int bad_utf8_option(int argc, char **argv, int *i, int *v) {
    const char *text = NULL;
    int rc = cli_string_option(&cli, argc, argv, i, &text);
    if (rc) return rc;
    *v = !strcmp(text, "skip") ? BAD_UTF8_SKIP : !strcmp(text, "replace") ? BAD_UTF8_REPLACE
       : !strcmp(text, "error") ? BAD_UTF8_ERROR : -1;
    if (*v < 0)
        return cli_usage_error(&cli, "--bad-utf8 %s: expected skip, replace or error", text);
    return 0;
}

/* one option at argv[*i] (not a file); 0 or exit code 2 */
static int parse_option(int argc, char **argv, int *i, struct prepare_args *a) {
    const char *arg = argv[*i];
    if (!strcmp(arg, "--fortunes")) a->fortunes = 1;
    else if (!strcmp(arg, "--progress")) a->progress = 1;
    else if (!strcmp(arg, "--quiet")) a->progress = 0;
    else if (!strcmp(arg, "--out")) return cli_string_option(&cli, argc, argv, i, &a->out);
    else if (!strcmp(arg, "--out-dir")) return cli_string_option(&cli, argc, argv, i, &a->out_dir);
    else if (!strcmp(arg, "--tokenizer"))
        return cli_string_option(&cli, argc, argv, i, &a->tokenizer);
    else if (!strcmp(arg, "--train-tokenizer"))
        return cli_string_option(&cli, argc, argv, i, &a->train_dir);
    else if (!strcmp(arg, "--vocab-size"))
        return cli_int_option(&cli, argc, argv, i, 257, &a->vocab_size);
    else if (!strcmp(arg, "--max-bytes"))
        return cli_int_option(&cli, argc, argv, i, 2, &a->max_bytes);
    else if (!strcmp(arg, "--threads"))
        return count_option(argc, argv, i, 1, MAX_THREADS, &a->threads);
    else if (!strcmp(arg, "--shard-tokens"))
        return count_option(argc, argv, i, 2, MAX_SHARD_TOKENS, &a->shard_tokens);
    else if (!strcmp(arg, "--valid-docs"))
        return count_option(argc, argv, i, 1, INT64_MAX, &a->valid_docs);
    else if (!strcmp(arg, "--bad-utf8")) return bad_utf8_option(argc, argv, i, &a->bad_utf8);
    else return cli_usage_error(&cli, "unknown option '%s'", arg);
    return 0;
}

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

/* the options that only make sense together */
static int check_args(const struct prepare_args *a) {
    if (a->fortunes && a->nfiles)
        return cli_usage_error(&cli, "give either --fortunes or input files, not both (first "
                                     "file: %s)", a->files[0]);
    if (!a->fortunes && !a->nfiles)
        return cli_usage_error(&cli, "no input: give text files or %s", "--fortunes");
    if (a->out && a->out_dir)
        return cli_usage_error(&cli, "give either --out or --out-dir, not both (%s, %s)", a->out,
                               a->out_dir);
    if (!a->out_dir && (a->shard_tokens > 0 || a->valid_docs > 0))
        return cli_usage_error(&cli, "%s: only with --out-dir D (shards)",
                               a->shard_tokens > 0 ? "--shard-tokens" : "--valid-docs");
    if (a->bad_utf8 >= 0 && !a->tokenizer && !a->train_dir)
        return cli_usage_error(&cli, "--bad-utf8: only with %s (byte-level tokens take any "
                                     "bytes)", "--tokenizer or --train-tokenizer");
    if (a->train_dir) return check_train_args(a);
    if (a->vocab_size > 0)
        return cli_usage_error(&cli, "--vocab-size %lld: only with %s", (long long)a->vocab_size,
                               "--train-tokenizer DIR");
    if (!a->out && !a->out_dir)
        return cli_usage_error(&cli, "missing %s (the output token file, or the shards' "
                                     "directory)", "--out F or --out-dir D");
    if (a->tokenizer && a->max_bytes > 0)
        return cli_usage_error(&cli, "give either --max-bytes or --tokenizer, not both (%s)",
                               "a byte cut could split a character");
    return 0;
}

/* The arguments into a (a->files has room for argc entries). --help stops the parse wherever
 * it is. Returns 0 or exit code 2. */
static int parse_args(int argc, char **argv, struct prepare_args *a) {
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (cli_is_help(arg)) {
            a->help = 1;
            return 0;
        } else if (!strcmp(arg, "--")) { /* the rest are files, even those starting with - */
            while (++i < argc) a->files[a->nfiles++] = argv[i];
        } else if (arg[0] == '-' && arg[1] != '\0') {
            int rc = parse_option(argc, argv, &i, a);
            if (rc) return rc;
        } else {
            a->files[a->nfiles++] = arg;
        }
    }
    return check_args(a);
}

int main(int argc, char **argv) {
    struct prepare_args a = {.max_bytes = -1, .vocab_size = -1, .shard_tokens = -1,
                             .valid_docs = -1, .bad_utf8 = -1, .progress = -1,
                             .files = calloc((size_t)argc, sizeof *a.files)};
    if (!a.files) {
        zt_error_set(ZT_ERR_NOMEM, "out of memory");
        return cli_fail(&cli, CLI_EXIT_FAILURE);
    }
    int code = zt_knobs_check() == ZT_OK ? 0 : cli_fail(&cli, CLI_EXIT_USAGE); /* ZT_LOG_LEVEL */
    if (!code) code = parse_args(argc, argv, &a);
    if (a.progress < 0) a.progress = isatty(2);
    if (!code && a.help)
        fputs(usage_text, stdout);
    else if (!code)
        code = prepare_run(&a) == ZT_OK ? CLI_EXIT_OK : cli_fail(&cli, CLI_EXIT_FAILURE);
    free(a.files);
    return code;
}
