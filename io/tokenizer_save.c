/*
 * io/tokenizer_save.c: writing a learned byte-level BPE (zt_bpe_save, zt_tokenizer.h) as the
 * files Hugging Face `tokenizers` and io/tokenizer.c read.
 *
 * Layer: io/ (no StarPU). DIR/tokenizer.json is the pipeline `tokenizers` builds for GPT-2-style
 * byte-level BPE (no normalizer, a ByteLevel pre-tokenizer without add_prefix_space, a ByteLevel
 * decoder, a BPE model) with "<|endoftext|>" as a special added token with the last id;
 * DIR/vocab.json + DIR/merges.txt are the same model in GPT-2's two-file form. Tokens are
 * written in GPT-2's byte-level alphabet (bytes_to_unicode: a space is "Ġ"), so no token holds
 * a space and merges are written "left right", the form every `tokenizers` version reads.
 * All three files are written to temporaries first and renamed only when all are written; a
 * directory this call created is removed again when anything fails.
 */
#include "zt_tokenizer.h"

#include <cjson/cJSON.h> /* the JSON files */
#include <errno.h>       /* errno */
#include <stdio.h>       /* snprintf */
#include <stdlib.h>      /* malloc, free */
#include <string.h>      /* strlen, strerror */
#include <sys/stat.h>    /* stat, mkdir */
#include <unistd.h>      /* close, unlink */

#include "tokenizer_impl.h" /* zt_bpe_byte_alphabet */
#include "zt_file.h"   /* zt_afile_*, zt_file_remove_dir */
#include "zt_status.h" /* zt_error_set */

#define EOT "<|endoftext|>"

/* token bytes -> the byte-level string (GPT-2's bytes_to_unicode, each byte one character) */
static char *byte_level(const char *s, size_t n) {
    char *out = malloc(2 * n + 1), *o = out;
    if (!out) return NULL;
    uint32_t cp_of_byte[256];
    zt_bpe_byte_alphabet(cp_of_byte);
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = cp_of_byte[(unsigned char)s[i]];
        if (cp < 0x80) {
            *o++ = (char)cp;
        } else {
            *o++ = (char)(0xc0 | cp >> 6);
            *o++ = (char)(0x80 | (cp & 0x3f));
        }
    }
    *o = '\0';
    return out;
}

/* {"token": id} in id order, <|endoftext|> last */
static cJSON *vocab_object(const struct zt_bpe_vocab *v, char *const *str) {
    cJSON *o = cJSON_CreateObject();
    for (int32_t i = 0; o && i < v->ntok; i++)
        if (!cJSON_AddNumberToObject(o, str[i], i)) goto fail;
    if (o && cJSON_AddNumberToObject(o, EOT, v->ntok)) return o;
fail:
    cJSON_Delete(o);
    return NULL;
}

/* "left right" for each merge, by rank */
static cJSON *merges_array(const struct zt_bpe_vocab *v, char *const *str) {
    cJSON *a = cJSON_CreateArray();
    for (int32_t k = 0; a && k < v->nmerges; k++) {
        const char *l = str[v->merges[2 * k]], *r = str[v->merges[2 * k + 1]];
        size_t n = strlen(l) + strlen(r) + 2;
        char *m = malloc(n);
        cJSON *item = m ? cJSON_CreateString((snprintf(m, n, "%s %s", l, r), m)) : NULL;
        free(m);
        if (!item || !cJSON_AddItemToArray(a, item)) {
            cJSON_Delete(item);
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

static cJSON *byte_level_step(int add_prefix_space) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "ByteLevel");
    cJSON_AddBoolToObject(o, "add_prefix_space", add_prefix_space);
    cJSON_AddBoolToObject(o, "trim_offsets", 1);
    cJSON_AddBoolToObject(o, "use_regex", 1);
    return o;
}

/* tokenizer.json, as `tokenizers` writes it for this pipeline */
static cJSON *tokenizer_object(const struct zt_bpe_vocab *v, char *const *str) {
    cJSON *root = cJSON_CreateObject(), *added = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddNullToObject(root, "truncation");
    cJSON_AddNullToObject(root, "padding");
    cJSON_AddNumberToObject(added, "id", v->ntok);
    cJSON_AddStringToObject(added, "content", EOT);
    static const char *const off[] = {"single_word", "lstrip", "rstrip", "normalized"};
    for (int k = 0; k < 4; k++) cJSON_AddBoolToObject(added, off[k], 0);
    cJSON_AddBoolToObject(added, "special", 1);
    cJSON *list = cJSON_AddArrayToObject(root, "added_tokens");
    cJSON_AddItemToArray(list, added);
    cJSON_AddNullToObject(root, "normalizer");
    cJSON_AddItemToObject(root, "pre_tokenizer", byte_level_step(0));
    cJSON_AddNullToObject(root, "post_processor");
    cJSON_AddItemToObject(root, "decoder", byte_level_step(1));
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    static const char *const nulls[] = {"dropout", "unk_token", "continuing_subword_prefix",
                                        "end_of_word_suffix"};
    for (int k = 0; k < 4; k++) cJSON_AddNullToObject(model, nulls[k]);
    static const char *const no[] = {"fuse_unk", "byte_fallback", "ignore_merges"};
    for (int k = 0; k < 3; k++) cJSON_AddBoolToObject(model, no[k], 0);
    cJSON_AddItemToObject(model, "vocab", vocab_object(v, str));
    cJSON_AddItemToObject(model, "merges", merges_array(v, str));
    /* any failed allocation above leaves a member missing: check the ones that matter */
    if (!cJSON_GetObjectItem(model, "merges") || !cJSON_GetObjectItem(model, "vocab") ||
        cJSON_GetArraySize(list) != 1) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* merges.txt: a version line, then "left right" per merge */
static char *merges_text(const struct zt_bpe_vocab *v, char *const *str) {
    static const char head[] = "#version: 0.2\n";
    size_t n = sizeof head;
    for (int32_t k = 0; k < v->nmerges; k++)
        n += strlen(str[v->merges[2 * k]]) + strlen(str[v->merges[2 * k + 1]]) + 2;
    char *s = malloc(n), *o = s;
    if (!s) return NULL;
    o += snprintf(o, n, "%s", head);
    for (int32_t k = 0; k < v->nmerges; k++)
        o += snprintf(o, n - (size_t)(o - s), "%s %s\n", str[v->merges[2 * k]],
                      str[v->merges[2 * k + 1]]);
    return s;
}

/* the three files' contents ([0] tokenizer.json, [1] vocab.json, [2] merges.txt) */
static enum zt_status render(const struct zt_bpe_vocab *v, char *text[3]) {
    char **str = calloc((size_t)v->ntok + 1, sizeof *str);
    int ok = str != NULL;
    for (int32_t i = 0; ok && i < v->ntok; i++) ok = (str[i] = byte_level(v->tok[i],
                                                                         v->tok_len[i])) != NULL;
    cJSON *tok = ok ? tokenizer_object(v, str) : NULL, *vocab = ok ? vocab_object(v, str) : NULL;
    text[0] = tok ? cJSON_Print(tok) : NULL;
    text[1] = vocab ? cJSON_Print(vocab) : NULL;
    text[2] = ok ? merges_text(v, str) : NULL;
    cJSON_Delete(tok);
    cJSON_Delete(vocab);
    for (int32_t i = 0; str && i < v->ntok; i++) free(str[i]);
    free(str);
    if (text[0] && text[1] && text[2]) return ZT_OK;
    for (int k = 0; k < 3; k++) free(text[k]), text[k] = NULL;
    return zt_error_set(ZT_ERR_NOMEM, "tokenizer training: no memory to write %d tokens",
                        v->ntok + 1);
}

/* dir exists as a directory afterwards; *created when this call made it */
static enum zt_status make_dir(const char *dir, int *created) {
    struct stat sb;
    *created = 0;
    if (stat(dir, &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) return ZT_OK;
        return zt_error_set(ZT_ERR_IO, "tokenizer directory %s: exists and is not a directory "
                                       "(expected a directory to write tokenizer.json into)",
                            dir);
    }
    if (mkdir(dir, 0755) != 0)
        return zt_error_set(ZT_ERR_IO, "tokenizer directory %s: cannot create (%s)", dir,
                            strerror(errno));
    *created = 1;
    return ZT_OK;
}

/* a temporary written but not to be kept: closed and removed, the last error left as it is */
static void discard(struct zt_afile *f) {
    if (f->fd >= 0) close(f->fd);
    if (f->tmp) unlink(f->tmp);
    free(f->tmp);
    f->tmp = NULL;
}

/* every file to a temporary, then every temporary renamed over its file */
static enum zt_status write_files(const char *dir, char *const text[3]) {
    static const char *const name[3] = {"tokenizer.json", "vocab.json", "merges.txt"};
    char path[3][4096];
    struct zt_afile f[3];
    int n = 0; /* temporaries written */
    enum zt_status rc = ZT_OK;
    for (; n < 3; n++) {
        if (snprintf(path[n], sizeof path[n], "%s/%s", dir, name[n]) >= (int)sizeof path[n]) {
            rc = zt_error_set(ZT_ERR_IO, "tokenizer directory %s: path too long", dir);
            break;
        }
        if ((rc = zt_afile_open(&f[n], "tokenizer", path[n])) != ZT_OK) break;
        if (zt_afile_write(&f[n], text[n], strlen(text[n])) != 0) {
            rc = zt_afile_fail(&f[n]); /* removes its own temporary */
            break;
        }
    }
    for (int k = 0; k < n; k++) { /* all written: renamed; otherwise none is */
        if (rc == ZT_OK) rc = zt_afile_commit(&f[k]);
        else discard(&f[k]);
    }
    return rc;
}

enum zt_status zt_bpe_save(const struct zt_bpe_vocab *v, const char *dir) {
    char *text[3] = {NULL, NULL, NULL};
    ZT_CHECK(render(v, text));
    int created = 0;
    enum zt_status rc = make_dir(dir, &created);
    if (rc == ZT_OK) rc = write_files(dir, text);
    if (rc != ZT_OK && created) {
        char why[512];
        snprintf(why, sizeof why, "%s", zt_error_last());
        zt_file_remove_dir(dir);
        rc = zt_error_set(rc, "%s", why);
    }
    for (int k = 0; k < 3; k++) free(text[k]);
    return rc;
}
