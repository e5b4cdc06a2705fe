/*
 * io/zt_tokenizer.h: GPT-2-style byte-level BPE, the ids of Hugging Face `tokenizers`.
 *
 * Layer: io/. A tokenizer is read from a directory: DIR/tokenizer.json (model.type "BPE",
 * model.vocab, model.merges as "a b" strings or [a, b] pairs, added_tokens, a ByteLevel
 * pre-tokenizer without add_prefix_space, no normalizer), or, when that file is absent,
 * DIR/vocab.json + DIR/merges.txt (GPT-2's two files; "<|endoftext|>" in the vocabulary is
 * then the one special token, as in GPT-2).
 *
 * Encoding follows `tokenizers`: added tokens are matched in the text first (leftmost, longest);
 * each stretch between them is split by GPT-2's regex, each piece becomes its UTF-8 bytes, and
 * the merges are applied lowest rank first. Input must be valid UTF-8 (HF works on Unicode
 * strings, so there is no id sequence to match for anything else): invalid bytes are an error
 * naming their offset. Decoding concatenates the tokens' bytes, so decode(encode(s)) == s.
 * Letters and digits are PCRE2's Unicode tables: a character assigned in a Unicode version newer
 * than the installed PCRE2 knows (e.g. CJK extension H with PCRE2 10.42) may split differently
 * from `tokenizers`.
 * A loaded tokenizer is read-only: encode and decode may run on many threads at once.
 */
#ifndef ZT_TOKENIZER_H
#define ZT_TOKENIZER_H

#include <stddef.h>    /* size_t */
#include <stdint.h>    /* int32_t */
#include "zt_status.h" /* enum zt_status */

#ifdef __cplusplus
extern "C" {
#endif

struct zt_tokenizer;

/* Load DIR's tokenizer. Errors (ZT_ERR_IO, ZT_ERR_CONFIG) are one line naming the file and
 * what was expected; *t is then NULL. */
enum zt_status zt_tokenizer_load(struct zt_tokenizer **t, const char *dir);
void zt_tokenizer_free(struct zt_tokenizer *t);

/* One past the largest id (the size of an embedding table that holds every token). */
int zt_tokenizer_vocab_size(const struct zt_tokenizer *t);

/* The id of an added token such as "<|endoftext|>", or -1. */
int zt_tokenizer_special_id(const struct zt_tokenizer *t, const char *content);

/* text[0..len) -> *ids (malloc'd, owner: caller; *n of them). ZT_ERR_DATA on invalid UTF-8. */
enum zt_status zt_tokenizer_encode(const struct zt_tokenizer *t, const char *text, size_t len,
                                   int32_t **ids, size_t *n);

/* ids -> *text (malloc'd, NUL-terminated, owner: caller; *len bytes, added tokens as their
 * content). ZT_ERR_DATA for an id outside the vocabulary, naming it and its index. */
enum zt_status zt_tokenizer_decode(const struct zt_tokenizer *t, const int32_t *ids, size_t n,
                                   char **text, size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* ZT_TOKENIZER_H */
