/*
 * io/zt_crc32c.h: CRC32C (Castagnoli, the checksum of iSCSI and ext4), the checksum of every
 * checkpoint shard record and header (io/zt_ckpt.h).
 *
 * Layer: io/ (platform; no StarPU). Pure functions, safe from any thread: the tables are built
 * once on first use (idempotently, so a race builds the same tables twice).
 */
#ifndef ZT_CRC32C_H
#define ZT_CRC32C_H

#include <stddef.h> /* size_t */
#include <stdint.h> /* uint32_t */

#ifdef __cplusplus
extern "C" {
#endif

/* The CRC32C of p[0, n), continued from crc: zt_crc32c(0, p, n) for a whole buffer; a buffer in
 * pieces is checksummed by passing each piece the previous piece's result. Uses the SSE4.2
 * instruction where the CPU has it, else zt_crc32c_portable; both give the same value. */
uint32_t zt_crc32c(uint32_t crc, const void *p, size_t n);
/* The same with tables only: the reference the SSE4.2 path is tested against. */
uint32_t zt_crc32c_portable(uint32_t crc, const void *p, size_t n);
/* zt_crc32c(crc, src, n) while copying src's n bytes to dst (no overlap), in one pass over the
 * data: the checkpoint's staging copy and its checksum read the memory once. */
uint32_t zt_crc32c_copy(uint32_t crc, void *dst, const void *src, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* ZT_CRC32C_H */
