/*
 * apps/generate_input.h: zt-generate's inputs: the prompts (one, or a JSONL file of them, each
 * with its own sampling), and the DeepSpeed inference config.
 *
 * Layer: apps/ (compiled into zt-generate). Errors are recorded with zt_error_set: ZT_ERR_IO for
 * a file that cannot be read, ZT_ERR_CONFIG for content (a prompts-file error names FILE:LINE).
 */
#ifndef ZT_APPS_GENERATE_INPUT_H
#define ZT_APPS_GENERATE_INPUT_H

#include <stdio.h>     /* FILE */
#include "gen_text.h"  /* struct gen_text */
#include "zerotask.h"  /* struct zt_gen_params, struct zt_tokenizer */

/* a prompt and what became of it */
struct gen_prompt {
    int32_t *ids;            /* the prompt */
    int nids, line;          /* line: in the prompts file (1-based; 0 otherwise) */
    struct zt_gen_params p;
    int32_t *out;            /* generated ids (room for the context) */
    int nout;
    struct gen_text text;    /* their text (with a tokenizer), up to the stop string */
    int shown;               /* bytes (or ids) already streamed */
    enum zt_finish finish;   /* NONE while running */
    double ms_first, ms_done;
};

/* A JSONL file of prompts (empty lines skipped), each line's sampling over defaults. */
enum zt_status gen_prompts_load(const char *path, const struct zt_tokenizer *tok,
                                const struct zt_gen_params *defaults, struct gen_prompt **out,
                                int *n);
/* One prompt: text (encoded with tok), or "1,2,3". */
enum zt_status gen_prompt_text(const char *text, const struct zt_tokenizer *tok,
                               const struct zt_gen_params *defaults, struct gen_prompt **out,
                               int *n);
enum zt_status gen_prompt_ids(const char *list, const struct zt_gen_params *defaults,
                              struct gen_prompt **out, int *n);
void gen_prompts_free(struct gen_prompt *p, int n);

/* JSON text[0..len) holds the escape \u0000 in a string: cJSON would cut that string there, so
 * the readers refuse it instead of reading less than was sent */
int gen_json_has_nul(const char *text, size_t len);

/* text with each invalid UTF-8 sequence replaced by U+FFFD, as Hugging Face's byte-level
 * decoder does (Rust's String::from_utf8_lossy); malloc'd, NULL when out of memory */
char *gen_utf8_lossy(const char *text);
/* s as a JSON string (quoted, escaped) */
void gen_print_json_string(FILE *f, const char *s);

/* DeepSpeed inference keys into cfg and *dtype (ZT_GEN_DTYPE_*): dtype, zero_optimization
 * {stage, offload_param {device, nvme_path, buffer_count, pin_memory}}, aio {block_size,
 * queue_depth, thread_count, single_submit, overlap_events}; any other key is an error. */
enum zt_status gen_ds_config_load(const char *path, struct zt_gen_config *cfg, int *dtype);

#endif /* ZT_APPS_GENERATE_INPUT_H */
