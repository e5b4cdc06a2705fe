/*
 * io/ckpt_format.h: the byte layout the shard writer (io/ckpt.c) and reader (io/ckpt_read.c)
 * share: the fixed prefix before the header JSON and the alignment of the records. The layout
 * itself is described in zt_ckpt.h. Private to io/: not installed.
 */
#ifndef ZT_CKPT_FORMAT_H
#define ZT_CKPT_FORMAT_H

#include <stdint.h> /* uint32_t */

#define SHARD_MAGIC "ZTSHARD1"  /* bytes 0..7 */
#define SHARD_PREFIX_BYTES 16   /* magic, header length, header CRC32C */
#define SHARD_ALIGN 4096        /* records start on this boundary (O_DIRECT's block) */

/* little-endian u32 at p (the header length and the header CRC32C) */
static inline void shard_put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint32_t shard_get_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

#endif /* ZT_CKPT_FORMAT_H */
