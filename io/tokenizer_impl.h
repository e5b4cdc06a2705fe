/*
 * io/tokenizer_impl.h: what the tokenizer files share (io/tokenizer.c the encoder,
 * io/tokenizer_train.c the trainer, io/tokenizer_save.c the writer): GPT-2's pre-tokenisation
 * pattern, so that encoder and trainer split text the same way; GPT-2's byte-level alphabet;
 * the hashes of their tables.
 *
 * Layer: io/, private to the tokenizer files (not installed). The pattern, as `tokenizers`'
 * ByteLevel uses it:
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * with \s spelled out as Unicode's White_Space, which is what Oniguruma (behind `tokenizers`)
 * matches: PCRE2's \s also takes U+180E, and would split differently around it. Compile it with
 * PCRE2_UTF | PCRE2_UCP.
 */
#ifndef ZT_TOKENIZER_IMPL_H
#define ZT_TOKENIZER_IMPL_H

#include <stddef.h> /* size_t */
#include <stdint.h> /* uint32_t, uint64_t */

#define ZT_GPT2_WS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}" \
                   "\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define ZT_GPT2_PATTERN "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" ZT_GPT2_WS        \
                        "\\p{L}\\p{N}]+|[" ZT_GPT2_WS "]+(?![^" ZT_GPT2_WS "])|[" ZT_GPT2_WS "]+"


/* GPT-2's bytes_to_unicode: printable Latin-1 bytes are their own character, the k-th of the
 * others (by value) is U+0100 + k */
static inline void zt_bpe_byte_alphabet(uint32_t cp_of_byte[256]) {
    int k = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        cp_of_byte[b] = printable ? (uint32_t)b : (uint32_t)(256 + k++);
    }
}

/* FNV-1a of a byte string */
static inline uint64_t zt_bpe_hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* a pair of ids (packed in 64 bits) mixed by the finaliser of MurmurHash3 */
static inline uint64_t zt_bpe_hash_pair(uint64_t p) {
    p ^= p >> 33;
    p *= 0xff51afd7ed558ccdull;
    p ^= p >> 33;
    return p;
}

#endif /* ZT_TOKENIZER_IMPL_H */
