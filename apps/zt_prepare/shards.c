/*
 * apps/zt_prepare/shards.c: where zt-prepare's tokens go: one token file (--out), or shards of
 * at most --shard-tokens tokens in a directory (--out-dir) and the data spec that lists them.
 *
 * Layer: apps/ (private to zt-prepare, prepare.h). Every file is llm.c's token format, written
 * atomically by io/'s zt_tokens_write. Shards: the first --valid-docs documents go to
 * val_000000.bin, val_000001.bin, ..., the rest to train_000000.bin, ...; a document never
 * straddles two shards: a shard closes before a document that does not fit in it, and only a
 * document longer than a whole shard is cut, into full shards and a last part that later
 * documents join. DIR/data.json comes last:
 *   {"train": [{"path": "train_000000.bin", "tokens": N}, ...],
 *    "validation": [{"path": "val_000000.bin", "tokens": N}, ...]}
 * (paths relative to DIR; "validation" only with --valid-docs). An old DIR/data.json is removed
 * before the first shard is written, and a run that fails removes the shards it wrote, so a
 * spec never lists shards of another run.
 */
#include <errno.h>      /* errno */
#include <stdio.h>      /* snprintf, remove */
#include <stdlib.h>     /* malloc, realloc, free */
#include <string.h>     /* memcpy, strerror */
#include <sys/stat.h>   /* stat */
#include <unistd.h>     /* rmdir, unlink */
#include "prepare.h"
#include "zt_file.h"    /* zt_file_mkdirs, zt_file_replace */
#include "zt_tokens.h"  /* zt_tokens_write */

static const char *const split_name[2] = {"train", "val"};

/* dir/name into path */
static void dir_path(const struct sink *s, const char *name, char *path, size_t n) {
    snprintf(path, n, "%s/%s", s->dir, name);
}

enum zt_status sink_open(struct sink *s, const char *out, const char *dir, size_t shard_tokens,
                         size_t valid_docs) {
    *s = (struct sink){.out = out, .dir = dir, .shard_tokens = shard_tokens,
                       .valid_docs = valid_docs, .split = valid_docs > 0};
    if (!dir) return ZT_OK;
    struct stat sb;
    s->made_dir = stat(dir, &sb) != 0;
    if (zt_file_mkdirs(dir, 0755) != 0)
        return zt_error_set(ZT_ERR_IO, "--out-dir %s: cannot create (%s)", dir, strerror(errno));
    char spec[4096];
    dir_path(s, "data.json", spec, sizeof spec);
    if (unlink(spec) != 0 && errno != ENOENT)
        return zt_error_set(ZT_ERR_IO, "--out-dir %s: cannot remove the old data.json (%s)", dir,
                            strerror(errno));
    return ZT_OK;
}

/* write the open shard and start the next one */
static enum zt_status shard_flush(struct sink *s) {
    if (s->n == 0) return ZT_OK;
    int sp = s->split;
    if (s->nshards[sp] == s->shardcap[sp]) {
        size_t cap = s->shardcap[sp] ? 2 * s->shardcap[sp] : 16;
        struct shard *g = realloc(s->shards[sp], cap * sizeof *g);
        if (!g) return zt_error_set(ZT_ERR_NOMEM, "--out-dir %s: out of memory", s->dir);
        s->shards[sp] = g;
        s->shardcap[sp] = cap;
    }
    struct shard *sh = &s->shards[sp][s->nshards[sp]];
    snprintf(sh->name, sizeof sh->name, "%s_%06zu.bin", split_name[sp], s->nshards[sp]);
    sh->tokens = s->n;
    char path[4096];
    dir_path(s, sh->name, path, sizeof path);
    if (s->n < 2) /* zt-train reads a token and the next one: a 1-token file is no data */
        return zt_error_set(ZT_ERR_DATA, "shard %s would hold 1 token (expected at least 2: a "
                                         "token and the next to predict); choose another "
                                         "--shard-tokens", path);
    ZT_CHECK(zt_tokens_write(path, s->buf, s->n));
    s->nshards[sp]++;
    s->n = 0;
    return ZT_OK;
}

/* append tok[0..n) to the open shard */
static enum zt_status sink_append(struct sink *s, const uint16_t *tok, size_t n) {
    if (n == 0) return ZT_OK;
    if (s->n + n > s->cap) {
        size_t cap = s->cap ? s->cap : 1 << 20;
        while (cap < s->n + n) cap *= 2;
        uint16_t *b = realloc(s->buf, cap * sizeof *b);
        if (!b) return zt_error_set(ZT_ERR_NOMEM, "out of memory for %zu tokens", s->n + n);
        s->buf = b;
        s->cap = cap;
    }
    memcpy(s->buf + s->n, tok, n * sizeof *tok);
    s->n += n;
    return ZT_OK;
}

enum zt_status sink_doc(struct sink *s, const uint16_t *tok, size_t n) {
    int sp = s->docs++ < s->valid_docs;
    s->tokens[sp] += n;
    if (!s->dir) return sink_append(s, tok, n);
    if (sp != s->split) { /* the last validation document is in: its shard closes */
        ZT_CHECK(shard_flush(s));
        s->split = sp;
    }
    if (s->n + n > s->shard_tokens) ZT_CHECK(shard_flush(s));
    while (n > s->shard_tokens) { /* longer than a shard: full shards, then the rest */
        ZT_CHECK(sink_append(s, tok, s->shard_tokens));
        ZT_CHECK(shard_flush(s));
        tok += s->shard_tokens;
        n -= s->shard_tokens;
    }
    return sink_append(s, tok, n);
}

/* the shards of split sp as a JSON list, appended to buf[0..*len) */
static void spec_list(const struct sink *s, int sp, char *buf, size_t cap, size_t *len) {
    *len += (size_t)snprintf(buf + *len, cap - *len, "  \"%s\": [",
                             sp ? "validation" : "train");
    for (size_t i = 0; i < s->nshards[sp]; i++)
        *len += (size_t)snprintf(buf + *len, cap - *len, "%s\n    {\"path\": \"%s\", "
                                 "\"tokens\": %zu}", i ? "," : "", s->shards[sp][i].name,
                                 s->shards[sp][i].tokens);
    *len += (size_t)snprintf(buf + *len, cap - *len, "\n  ]");
}

/* DIR/data.json, atomically */
static enum zt_status write_spec(const struct sink *s) {
    size_t cap = 128 + 80 * (s->nshards[0] + s->nshards[1]), len = 0; /* 68 a shard at most */
    char *buf = malloc(cap);
    if (!buf) return zt_error_set(ZT_ERR_NOMEM, "--out-dir %s: out of memory", s->dir);
    len += (size_t)snprintf(buf, cap, "{\n");
    spec_list(s, 0, buf, cap, &len);
    if (s->valid_docs > 0) {
        len += (size_t)snprintf(buf + len, cap - len, ",\n");
        spec_list(s, 1, buf, cap, &len);
    }
    len += (size_t)snprintf(buf + len, cap - len, "\n}\n");
    char path[4096];
    dir_path(s, "data.json", path, sizeof path);
    enum zt_status rc = zt_file_replace("data spec", path, buf, len);
    free(buf);
    return rc;
}

enum zt_status sink_close(struct sink *s) {
    if (!s->dir) return zt_tokens_write(s->out, s->buf, s->n);
    ZT_CHECK(shard_flush(s));
    return write_spec(s);
}

void sink_abort(struct sink *s) {
    if (!s->dir) return;
    for (int sp = 0; sp < 2; sp++)
        for (size_t i = 0; i < s->nshards[sp]; i++) {
            char path[4096];
            dir_path(s, s->shards[sp][i].name, path, sizeof path);
            unlink(path);
        }
    if (s->made_dir) rmdir(s->dir); /* only when empty: nothing but ours was in it */
}

void sink_free(struct sink *s) {
    free(s->buf);
    free(s->shards[0]);
    free(s->shards[1]);
    *s = (struct sink){0};
}
