/*
 * io/crc32c.c: CRC32C (Castagnoli) for the checkpoint shard files (see zt_crc32c.h): portable
 * slicing-by-8 tables, and the SSE4.2 crc32 instruction on three interleaved chains where the
 * CPU has it, optionally copying the data in the same pass.
 *
 * Layer: io/ (platform; no StarPU). Used by io/ckpt.c (records and header) and its readers.
 */
#include "zt_crc32c.h"
#include <stdint.h> /* uint32_t, uint64_t, uintptr_t */
#include <string.h> /* memcpy */

/* ---- CRC32C: slicing-by-8 tables of the reflected polynomial 0x82F63B78 ---- */
#define CRC_POLY 0x82F63B78u
static uint32_t tab[8][256];
static uint32_t x2n[32]; /* x^(2^k) mod P, for joining the CRCs of adjacent pieces */
static int tab_ready;

/* a * b mod P, polynomials in the reflected bit order (bit 31: x^0) */
static uint32_t mult_modp(uint32_t a, uint32_t b) {
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ CRC_POLY : b >> 1;
    }
    return p;
}

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ CRC_POLY : c >> 1;
        tab[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) tab[t][i] = (tab[t - 1][i] >> 8) ^ tab[0][tab[t - 1][i] & 0xff];
    uint32_t p = 1u << 30; /* x^1 */
    x2n[0] = p;
    for (int k = 1; k < 32; k++) x2n[k] = p = mult_modp(p, p);
    __atomic_store_n(&tab_ready, 1, __ATOMIC_RELEASE);
}

static void crc_ready(void) {
    if (!__atomic_load_n(&tab_ready, __ATOMIC_ACQUIRE)) crc_init(); /* idempotent */
}

/* the CRC of A then B from crc(A) = a and crc(B) = b (each from 0) and B's length: a times
 * x^(8 len) mod P, plus b (zlib's crc32_combine, for this polynomial) */
static uint32_t crc_join(uint32_t a, uint32_t b, size_t len) {
    uint32_t op = 1u << 31; /* x^0 */
    for (int k = 3; len; len >>= 1, k++)
        if (len & 1) op = mult_modp(x2n[k & 31], op);
    return mult_modp(op, a) ^ b;
}

uint32_t zt_crc32c_portable(uint32_t crc, const void *p, size_t n) {
    crc_ready();
    const unsigned char *b = p;
    uint32_t c = ~crc;
    while (n > 0 && ((uintptr_t)b & 7)) {
        c = (c >> 8) ^ tab[0][(c ^ *b++) & 0xff];
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        w ^= c; /* little-endian */
        c = tab[7][w & 0xff] ^ tab[6][(w >> 8) & 0xff] ^ tab[5][(w >> 16) & 0xff] ^
            tab[4][(w >> 24) & 0xff] ^ tab[3][(w >> 32) & 0xff] ^ tab[2][(w >> 40) & 0xff] ^
            tab[1][(w >> 48) & 0xff] ^ tab[0][(w >> 56) & 0xff];
        b += 8;
        n -= 8;
    }
    while (n-- > 0) c = (c >> 8) ^ tab[0][(c ^ *b++) & 0xff];
    return ~c;
}


#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* SSE4.2's crc32 instruction computes the same CRC32C, 8 bytes per instruction. One chain of
 * them waits for each result (a latency of 3 cycles), so a long buffer is cut into three
 * pieces whose chains run side by side (the instruction issues every cycle) and their
 * CRCs are joined (crc_join). With dst, the words are also stored there as they are read: the
 * checkpoint's staging copy costs one pass over the data instead of two. */
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t crc, void *dst,
                                                               const void *p, size_t n) {
    const unsigned char *b = p;
    unsigned char *d = dst;
    uint64_t c = ~crc & 0xffffffffu;
    if (n >= 3 * 256) {
        crc_ready();
        const size_t k = n / 3 / 8 * 8; /* bytes of the first two pieces; the third the rest */
        uint64_t c1 = 0xffffffffu, c2 = 0xffffffffu;
        for (size_t i = 0; i < k; i += 8) {
            uint64_t w0, w1, w2;
            memcpy(&w0, b + i, 8);
            memcpy(&w1, b + k + i, 8);
            memcpy(&w2, b + 2 * k + i, 8);
            c = __builtin_ia32_crc32di(c, w0);
            c1 = __builtin_ia32_crc32di(c1, w1);
            c2 = __builtin_ia32_crc32di(c2, w2);
            if (d) {
                memcpy(d + i, &w0, 8);
                memcpy(d + k + i, &w1, 8);
                memcpy(d + 2 * k + i, &w2, 8);
            }
        }
        for (size_t i = 3 * k; i < n; i++) { /* the third piece's tail */
            c2 = __builtin_ia32_crc32qi((uint32_t)c2, b[i]);
            if (d) d[i] = b[i];
        }
        uint32_t first = ~(uint32_t)c, mid = ~(uint32_t)c1, last = ~(uint32_t)c2;
        return crc_join(crc_join(first, mid, k), last, n - 2 * k);
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        c = __builtin_ia32_crc32di(c, w);
        if (d) memcpy(d, &w, 8), d += 8;
        b += 8;
        n -= 8;
    }
    while (n-- > 0) {
        if (d) *d++ = *b;
        c = __builtin_ia32_crc32qi((uint32_t)c, *b++);
    }
    return ~(uint32_t)c;
}
#define HAVE_CRC_HW 1

static int crc_hw(void) {
    static int hw = -1; /* racy but idempotent: every thread computes the same answer */
    if (hw < 0) hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    return hw;
}
#endif

uint32_t zt_crc32c(uint32_t crc, const void *p, size_t n) {
#ifdef HAVE_CRC_HW
    if (crc_hw()) return crc_sse42(crc, NULL, p, n);
#endif
    return zt_crc32c_portable(crc, p, n);
}

uint32_t zt_crc32c_copy(uint32_t crc, void *dst, const void *src, size_t n) {
#ifdef HAVE_CRC_HW
    if (crc_hw()) return crc_sse42(crc, dst, src, n);
#endif
    memcpy(dst, src, n);
    return zt_crc32c_portable(crc, src, n);
}
