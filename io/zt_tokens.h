/*
 * io/zt_tokens.h: token files in llm.c's format, read batch by batch from an open descriptor.
 *
 * Layer: io/. Format: 256 x int32 header (magic 20240520, version 1, token count, rest 0), then
 * `count` uint16 tokens. Opening validates the header, the file size and that every token is
 * below vocab_size, so a bad file fails before training starts. The file may still change while
 * training runs (truncated, rewritten in place): each batch is read with pread and every token
 * read is checked again, so such a change is an error naming the file, never a crash. A file
 * replaced by rename keeps being read as it was when opened.
 *
 * Data rule (step i from 1, global batch B rows, sequence length T): row k of step i reads
 * inputs[t] = tokens[((i-1)*B*T + k*T + t) mod count] and targets[t] = the token one position
 * later (also mod count), t = 0..T-1. Reading wraps to the start of the file when it runs out.
 */
#ifndef ZT_TOKENS_H
#define ZT_TOKENS_H

#include <stddef.h>    /* size_t */
#include <stdint.h>    /* int32_t, int64_t, uint16_t */
#include "zt_status.h" /* enum zt_status */

#ifdef __cplusplus
extern "C" {
#endif

#define ZT_TOKENS_MAGIC 20240520
#define ZT_TOKENS_VERSION 1
#define ZT_TOKENS_HEADER_INTS 256

struct zt_tokens {
    char path[512];
    int fd;         /* open for reading; -1 when closed */
    size_t count;   /* tokens, from the header */
    int vocab_size; /* every token must be below it */
};

/* Open and validate. Errors (ZT_ERR_IO / ZT_ERR_DATA) name the file and the problem: missing,
 * truncated header, wrong magic or version, size not matching the count, fewer than 2 tokens,
 * token >= vocab_size (with its index). */
enum zt_status zt_tokens_open(struct zt_tokens *t, const char *path, int vocab_size);
void zt_tokens_close(struct zt_tokens *t);

/* Rows row0 .. row0+nrows-1 of step `step` (1-based) of a global batch of B rows: inputs and
 * targets are [nrows, T] int32. Thread-safe (pread). Errors name the file: ZT_ERR_DATA when it
 * shrank below its header's size ("file shrank to N bytes while training (expected M)") or a
 * token is >= vocab_size (its index, byte offset and value), ZT_ERR_IO when a read fails; the
 * rows are then incomplete. */
enum zt_status zt_tokens_batch(const struct zt_tokens *t, int64_t step, int B, int T, int row0,
                               int nrows, int32_t *inputs, int32_t *targets);

/* Write a token file (used by zt-prepare and tests); atomic (tmp + rename). */
enum zt_status zt_tokens_write(const char *path, const uint16_t *tok, size_t count);

#ifdef __cplusplus
}
#endif
#endif /* ZT_TOKENS_H */
