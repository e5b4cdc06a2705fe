/*
 * apps/zt_prepare/prepare.h: what the rooms of zt-prepare share: the command line's choices,
 * the input files, a batch (input bytes in, the tokens of its documents out), the counts of
 * kept and skipped documents, the output (one token file, or shards and their data spec) and
 * the pipeline that runs batches on threads and hands them back in input order.
 *
 * Layer: apps/ (private to zt-prepare). The rooms: main.c (command line, the modes, the
 * summary line), inputs.c (the input files, read into batches), documents.c (a batch's
 * documents: JSONL lines, the empty and bad-UTF-8 rules, encoding), pipeline.c (threads, input
 * order, the progress bar), shards.c (the token file, or the shards and data.json). Errors go
 * through zt_error_set; main.c prints the one line.
 */
#ifndef ZT_PREPARE_H
#define ZT_PREPARE_H

#include <stddef.h>       /* size_t */
#include <stdint.h>       /* int64_t, uint16_t, uint64_t */
#include <stdio.h>        /* FILE */
#include "zt_status.h"    /* enum zt_status */
#include "zt_tokenizer.h" /* struct zt_tokenizer, struct zt_bpe_counts */

#define FORTUNES_DIR "/usr/share/games/fortunes"

/* what becomes of a document that is not valid UTF-8 (--bad-utf8) */
enum bad_utf8 {
    BAD_UTF8_SKIP,    /* left out, counted */
    BAD_UTF8_REPLACE, /* each maximal invalid subpart becomes U+FFFD (Python's "replace") */
    BAD_UTF8_ERROR,   /* the run stops, naming the file, line and byte */
};

/* what the command line asked for */
struct prepare_args {
    const char *out;       /* --out F: one token file */
    const char *out_dir;   /* --out-dir D: shards and D/data.json */
    int fortunes;          /* --fortunes: the fortune files are the input */
    const char **files;    /* [nfiles] the input files otherwise, in order */
    int nfiles;
    int64_t max_bytes;     /* --max-bytes, or -1: all of the input */
    const char *tokenizer; /* --tokenizer DIR, or NULL: byte-level tokens */
    const char *train_dir; /* --train-tokenizer DIR, or NULL */
    int64_t vocab_size;    /* --vocab-size, or -1 */
    int64_t threads;       /* --threads, or 0: the online CPU count */
    int64_t shard_tokens;  /* --shard-tokens, or -1: SHARD_TOKENS_DEFAULT */
    int64_t valid_docs;    /* --valid-docs, or -1: no validation split */
    int bad_utf8;          /* enum bad_utf8, or -1: skip (error with --train-tokenizer) */
    int progress;          /* 1 --progress, 0 --quiet, -1 when stderr is a terminal */
    int help;              /* --help came before any error */
};

/* llm.c's shard size (fineweb.py writes 10^8 tokens a shard) */
#define SHARD_TOKENS_DEFAULT 100000000

// ---------------------------------------------------------------------------------------------
// the input (inputs.c)

/* the input files, in order: the paths given, or the fortune files sorted by name */
struct inputs {
    char **path;          /* [n] */
    int n;
    uint64_t total_bytes; /* the sum of their sizes (for the progress bar) */
};

/* The files a names, each checked to be readable now: a bad one fails before any work
 * ("input PATH: cannot read (why)"). */
enum zt_status inputs_list(const struct prepare_args *a, struct inputs *in);
void inputs_free(struct inputs *in);

/* one unit of work: some input bytes in, the tokens of their documents out */
struct batch {
    /* in: set by reader_next */
    const char *path;    /* its file (borrowed from struct inputs) */
    int jsonl;           /* buf holds whole JSONL lines; else buf is one document */
    size_t line0;        /* JSONL: the number of buf's first line (from 1) */
    char *buf;           /* [len + 1], NUL-terminated */
    size_t len;
    /* out: set by batch_run */
    uint16_t *tok;       /* [ntok] the kept documents' tokens, one after the other */
    size_t ntok, tokcap;
    size_t *doc_end;     /* [ndoc] kept document i ends before tok[doc_end[i]] */
    size_t ndoc, doccap;
    size_t empty;        /* documents skipped as empty (empty file, blank line, "text": "") */
    size_t no_text;      /* JSONL objects skipped without "text" (or with "text": null) */
    size_t bad_utf8;     /* documents with invalid UTF-8, skipped or replaced */
    enum zt_status rc;   /* ZT_OK, or the first error: err holds its line */
    char err[1024];
};

/* Reads the inputs into batches in order: a JSONL file (with a tokenizer) in chunks of whole
 * lines, any other file whole as one document; --max-bytes cuts the byte-level input. */
struct reader {
    const struct inputs *in;
    int byte_level;      /* no tokenizer: every file is raw bytes, JSONL included */
    uint64_t max_bytes;  /* UINT64_MAX: no cut */
    uint64_t read;       /* bytes read so far */
    int file;            /* the file being read in chunks, or the next one to open */
    int files_read;      /* files opened so far */
    FILE *f;             /* the open JSONL file, or NULL */
    size_t line;         /* the number of the next line of f */
    char *carry;         /* [ncarry] the start of an unfinished line */
    size_t ncarry;
};

/* The next batch into b (whose in-fields it sets, buf malloc'd): 1, or 0 at the end of the
 * input, or -1 with the error set ("input PATH: cannot read (why)", "... read error"). */
int reader_next(struct reader *r, struct batch *b);
void reader_close(struct reader *r);

// ---------------------------------------------------------------------------------------------
// documents (documents.c)

/* what happens to each document */
struct doc_rules {
    const struct zt_tokenizer *tok; /* encode with it; NULL: byte-level (every byte a token) */
    struct zt_bpe_counts *train;    /* count its pieces instead (not thread-safe: inline only) */
    int eot;                        /* <|endoftext|>'s id, put before each document, or -1 */
    enum bad_utf8 bad_utf8;
    int strict_text;                /* a JSONL object without "text" is an error, not a skip */
};

/* Every document of b through the rules into b's out-fields (thread-safe for distinct batches
 * unless r->train). Returns b->rc; an error stops at its document, its line in b->err. */
enum zt_status batch_run(struct batch *b, const struct doc_rules *r);
/* free b's buffers and zero it */
void batch_clear(struct batch *b);

/* UTF-8 in Python's terms: the offset of the first byte not in a valid sequence (len when all
 * of text[0..len) is valid); and the text with each maximal invalid subpart replaced by U+FFFD
 * (bytes.decode("utf-8", errors="replace")): malloc'd, *out_len bytes, NULL when out of memory */
size_t utf8_first_invalid(const char *text, size_t len);
char *utf8_replace(const char *text, size_t len, size_t *out_len);

// ---------------------------------------------------------------------------------------------
// the output (shards.c)

/* one written shard */
struct shard {
    char name[32];  /* train_000000.bin, val_000000.bin */
    size_t tokens;
};

/* Where the tokens go: all of them into one file (out), or shards of at most shard_tokens into
 * dir (the first valid_docs documents into val_*.bin), listed in dir/data.json. */
struct sink {
    const char *out;     /* --out, or NULL */
    const char *dir;     /* --out-dir, or NULL */
    size_t shard_tokens;
    size_t valid_docs;
    int made_dir;        /* this run created dir (removed again on failure) */
    uint16_t *buf;       /* [n] the open shard's tokens (with out: all of them) */
    size_t n, cap;
    int split;           /* the open shard's split: 0 train, 1 validation */
    size_t docs;         /* documents received */
    size_t tokens[2];    /* tokens received, per split */
    struct shard *shards[2]; /* [nshards[s]] written, per split */
    size_t nshards[2], shardcap[2];
};

/* Prepare s for out or dir (dir is created, an old dir/data.json removed). */
enum zt_status sink_open(struct sink *s, const char *out, const char *dir, size_t shard_tokens,
                         size_t valid_docs);
/* one document's tokens (a shard closes before a document that does not fit in it) */
enum zt_status sink_doc(struct sink *s, const uint16_t *tok, size_t n);
/* write what is left: the file, or the last shards and data.json */
enum zt_status sink_close(struct sink *s);
/* after a failure: remove the shards this run wrote (and dir, when it made it) */
void sink_abort(struct sink *s);
void sink_free(struct sink *s);

// ---------------------------------------------------------------------------------------------
// the pipeline (pipeline.c)

/* what a run did */
struct run_totals {
    size_t docs, empty, no_text, bad_utf8;
    uint64_t bytes;
    double seconds;
};

/* Read every batch of rd, run it through rules on threads (1: in this thread, as r->train
 * needs) and hand its documents to out (NULL: nothing to keep) in input order, so that the
 * output never depends on the thread count. progress: draw the bar on stderr. The first error
 * in input order stops the run. */
enum zt_status pipeline_run(struct reader *rd, const struct doc_rules *rules, int threads,
                            int progress, struct sink *out, struct run_totals *t);

#endif /* ZT_PREPARE_H */
