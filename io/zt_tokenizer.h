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

/* Whether id is one of the tokenizer's (a model's vocabulary may be padded past it). */
int zt_tokenizer_known(const struct zt_tokenizer *t, int32_t id);

/* The id of an added token such as "<|endoftext|>", or -1. */
int zt_tokenizer_special_id(const struct zt_tokenizer *t, const char *content);

/* text[0..len) -> *ids (malloc'd, owner: caller; *n of them). ZT_ERR_DATA on invalid UTF-8. */
enum zt_status zt_tokenizer_encode(const struct zt_tokenizer *t, const char *text, size_t len,
                                   int32_t **ids, size_t *n);

/* ids -> *text (malloc'd, NUL-terminated, owner: caller; *len bytes, added tokens as their
 * content). ZT_ERR_DATA for an id outside the vocabulary, naming it and its index. */
enum zt_status zt_tokenizer_decode(const struct zt_tokenizer *t, const int32_t *ids, size_t n,
                                   char **text, size_t *len);

/* ---------------------------------------------------------------------------------------------
 * Training (io/tokenizer_train.c, io/tokenizer_save.c): a byte-level BPE learned from a corpus
 * with the semantics of `tokenizers`' BpeTrainer (models/bpe/trainer.rs), so that the merges
 * equal those it learns from the same documents:
 *   - each document is split by GPT-2's regex (as the encoder does; "<|endoftext|>" in the text
 *     is plain text here) and the pieces are counted;
 *   - the first 256 tokens are the bytes, in the order of their byte-level characters' code
 *     points (GPT-2's order: "!" is 0);
 *   - the pair of adjacent tokens with the highest count over all pieces is merged next (a tie
 *     goes to the pair with the smaller left id, then the smaller right id), until the
 *     vocabulary holds vocab_size - 1 tokens or no pair is left; a merge whose string is
 *     already a token reuses its id.
 * "<|endoftext|>" is then added as the last id (GPT-2's place for it: 50256 of 50257).
 *
 *   struct zt_bpe_counts *c;   zt_bpe_counts_new(&c);
 *   zt_bpe_counts_add(c, doc, len);  ...one call per document...
 *   struct zt_bpe_vocab v;     zt_bpe_train(c, 4096, &v);   zt_bpe_save(&v, "tok");
 *   zt_bpe_vocab_free(&v);     zt_bpe_counts_free(c);
 */

/* the pieces of the documents fed so far, with their counts */
struct zt_bpe_counts;

enum zt_status zt_bpe_counts_new(struct zt_bpe_counts **c);
void zt_bpe_counts_free(struct zt_bpe_counts *c);

/* Split one document text[0..len) and count its pieces. ZT_ERR_DATA on invalid UTF-8, naming
 * the byte offset. */
enum zt_status zt_bpe_counts_add(struct zt_bpe_counts *c, const char *text, size_t len);

/* How many pieces were counted (0: nothing to train on). */
size_t zt_bpe_counts_pieces(const struct zt_bpe_counts *c);

/* a learned vocabulary: tokens as raw bytes, merges by rank (the first is applied first) */
struct zt_bpe_vocab {
    int32_t ntok;     /* tokens, not counting <|endoftext|> (whose id is ntok) */
    char **tok;       /* [ntok] each token's bytes */
    size_t *tok_len;  /* [ntok] */
    int32_t nmerges;
    int32_t *merges;  /* [2 * nmerges]: the left and the right id of each merge */
};

/* Learn the merges from c for a vocabulary of vocab_size ids (257..65536: the bytes, the merged
 * tokens, <|endoftext|>). A small corpus may give fewer (v->ntok + 1 < vocab_size). */
enum zt_status zt_bpe_train(const struct zt_bpe_counts *c, int vocab_size,
                            struct zt_bpe_vocab *v);
void zt_bpe_vocab_free(struct zt_bpe_vocab *v);

/* Write v to dir as tokenizer.json, vocab.json and merges.txt (the files zt_tokenizer_load and
 * `tokenizers` read), each replaced atomically; dir is created when missing (its parent must
 * exist) and removed again when a write fails. ZT_ERR_IO names the file and the reason. */
enum zt_status zt_bpe_save(const struct zt_bpe_vocab *v, const char *dir);

#ifdef __cplusplus
}
#endif
#endif /* ZT_TOKENIZER_H */
