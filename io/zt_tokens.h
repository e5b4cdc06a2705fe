/*
 * io/zt_tokens.h: token files in llm.c's format, read batch by batch from an open descriptor.
 *
 * Layer: io/. Format: 256 x int32 header (magic, version, token count, rest 0), then `count`
 * tokens: magic 20240520 version 1 holds uint16 tokens (GPT-2's vocabulary and any below 65,536),
 * magic 20240801 version 7 uint32 tokens (llm.c's Llama-3 header; needed above 65,535). Opening
 * validates the header and the file size, and, for files up to ZT_TOKENS_SCAN_BYTES of tokens,
 * that every token is below vocab_size, so a bad file fails before training starts; a larger
 * file (it may exceed memory) is not read at open, and its tokens are checked as they are read.
 * The file may still change while training runs (truncated, rewritten in place): rows are read
 * with pread (the page cache does what a mapping would, without turning a truncation into
 * SIGBUS) and every token read is checked again, so such a change is an error naming the file,
 * never a crash. A file replaced by rename keeps being read as it was when opened.
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

#define ZT_TOKENS_MAGIC 20240520      /* uint16 tokens */
#define ZT_TOKENS_VERSION 1
#define ZT_TOKENS_MAGIC_WIDE 20240801 /* uint32 tokens */
#define ZT_TOKENS_VERSION_WIDE 7
#define ZT_TOKENS_HEADER_INTS 256
/* files with at most this many bytes of tokens are checked whole when opened */
#define ZT_TOKENS_SCAN_BYTES ((size_t)64 << 20)

struct zt_tokens {
    char path[512];
    int fd;         /* open for reading; -1 when closed */
    size_t count;   /* tokens, from the header */
    int width;      /* bytes per token: 2 (uint16) or 4 (uint32) */
    int vocab_size; /* every token must be below it */
};

/* One row of a batch: seq_len + 1 consecutive tokens of file `file` (an index into the caller's
 * array of open files) from token `pos`, wrapping to the file's start when it runs out. */
struct zt_data_row {
    int32_t file;
    int64_t pos;
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

/* The step rule's first token of the run's row g (0-based; row k of step i is g = (i-1)*B + k):
 * (g * T) mod count, for any g. zt_tokens_batch and the sampler's step rule both use it. */
uint64_t zt_tokens_step_pos(const struct zt_tokens *t, uint64_t g, int T);

/* One row: the T + 1 tokens of `row` in files[row->file]; inputs[t] = token t, targets[t] =
 * token t + 1, except targets[t] = -1 (no loss) for t >= active (0 < active <= T; the
 * sequence-length curriculum). Errors as zt_tokens_batch. */
enum zt_status zt_tokens_row(const struct zt_tokens *files, const struct zt_data_row *row, int T,
                             int active, int32_t *inputs, int32_t *targets);

/* Ask the kernel to read the row's tokens ahead (posix_fadvise WILLNEED); never fails. */
void zt_tokens_prefetch(const struct zt_tokens *files, const struct zt_data_row *row, int T);

/* Write a token file (used by zt-prepare and tests); atomic (tmp + rename). zt_tokens_write
 * writes uint16 tokens (magic 20240520, version 1), zt_tokens_write_wide uint32 tokens (magic
 * 20240801, version 7). */
enum zt_status zt_tokens_write(const char *path, const uint16_t *tok, size_t count);
enum zt_status zt_tokens_write_wide(const char *path, const uint32_t *tok, size_t count);

#ifdef __cplusplus
}
#endif
#endif /* ZT_TOKENS_H */
