/*
 * io/tokenizer_pattern.h: GPT-2's pre-tokenisation pattern, shared by the encoder
 * (io/tokenizer.c) and the trainer (io/tokenizer_train.c) so that both split text the same way.
 *
 * Layer: io/, private to the tokenizer files (not installed). The pattern, as `tokenizers`'
 * ByteLevel uses it:
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * with \s spelled out as Unicode's White_Space, which is what Oniguruma (behind `tokenizers`)
 * matches: PCRE2's \s also takes U+180E, and would split differently around it. Compile it with
 * PCRE2_UTF | PCRE2_UCP.
 */
#ifndef ZT_TOKENIZER_PATTERN_H
#define ZT_TOKENIZER_PATTERN_H

#define ZT_GPT2_WS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}" \
                   "\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define ZT_GPT2_PATTERN "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" ZT_GPT2_WS        \
                        "\\p{L}\\p{N}]+|[" ZT_GPT2_WS "]+(?![^" ZT_GPT2_WS "])|[" ZT_GPT2_WS "]+"

#endif /* ZT_TOKENIZER_PATTERN_H */
