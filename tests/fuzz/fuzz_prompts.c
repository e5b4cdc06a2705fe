/*
 * tests/fuzz/fuzz_prompts.c: zt-generate's input readers (apps/generate_input.c, compiled into
 * this target only) on any bytes: the input as a --prompts JSONL file, read without a tokenizer
 * and with the test fixture's BPE (tests/data/tokenizer, or ZT_FUZZ_TOKENIZER_DIR), and as a
 * --ds-config inference config. Besides the one-line error, a refusal must name the file (and a
 * prompts file's, the line: FILE:LINE); prompts read must be non-empty, in line order, with
 * their sampling in range. (Ids are checked against the model by zt-generate, not here.)
 */
#include <math.h>           /* isfinite */

#include "fuzz_util.h"
#include "generate_input.h" /* gen_prompts_load, gen_ds_config_load */

/* zt-generate's defaults: what a line without options gets */
static const struct zt_gen_params g_defaults = {.max_new_tokens = 32, .temperature = 1.0f,
                                                .top_p = 1.0f, .repetition_penalty = 1.0f,
                                                .eos_id = -1};

/* a refusal names path; with line set, as "path:LINE" (or the file had no prompt at all) */
static void check_named(enum zt_status rc, const char *reader, const char *path, int line) {
    if (rc == ZT_OK) return;
    const char *msg = zt_error_last(), *at = strstr(msg, path);
    if (!at) FUZZ_FAIL("%s: the message does not name the file: %s", reader, msg);
    const char *after = at + strlen(path);
    if (line && !(after[0] == ':' && after[1] >= '0' && after[1] <= '9') &&
        !strstr(msg, "no prompt in the file"))
        FUZZ_FAIL("%s: the message does not name the line: %s", reader, msg);
    fuzz_check_error(rc, reader);
}

/* what a prompts file read must give: prompts in line order, sampling in range */
static void check_prompts(const struct gen_prompt *p, int n) {
    for (int i = 0; i < n; i++) {
        const struct zt_gen_params *s = &p[i].p;
        if (p[i].nids < 1 || !p[i].ids) FUZZ_FAIL("prompt %d is empty", i);
        if (p[i].line < 1 || (i && p[i].line <= p[i - 1].line))
            FUZZ_FAIL("prompt %d: line %d out of order", i, p[i].line);
        if (s->max_new_tokens < 1 || s->top_k < 0 || !(s->temperature >= 0) ||
            !isfinite(s->temperature) || !(s->top_p > 0 && s->top_p <= 1))
            FUZZ_FAIL("prompt %d: sampling out of range", i);
    }
}

static void prompts_file(const char *path, const struct zt_tokenizer *tok) {
    struct gen_prompt *p = NULL;
    int n = 0;
    enum zt_status rc = gen_prompts_load(path, tok, &g_defaults, &p, &n);
    check_named(rc, "gen_prompts_load", path, 1);
    if (rc == ZT_OK) check_prompts(p, n);
    gen_prompts_free(p, n);
}

/* the inference config: on success, what zt-generate relies on */
static void ds_config(const char *path) {
    struct zt_gen_config cfg = {0};
    int dtype = -1;
    enum zt_status rc = gen_ds_config_load(path, &cfg, &dtype);
    check_named(rc, "gen_ds_config_load", path, 0);
    if (rc == ZT_OK && cfg.stream_weights && (!cfg.nvme_path || cfg.prefetch < 1))
        FUZZ_FAIL("nvme offload without a path or a read-ahead (%d)", cfg.prefetch);
    if (rc == ZT_OK && !(dtype == -1 || dtype == ZT_GEN_DTYPE_F32 ||
                         dtype == ZT_GEN_DTYPE_BF16 || dtype == ZT_GEN_DTYPE_F16))
        FUZZ_FAIL("dtype %d", dtype);
    free((char *)cfg.nvme_path); /* the reader's copy, also after a refusal */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_input_file(data, size, ".jsonl");
    prompts_file(path, NULL);
    prompts_file(path, fuzz_fixture_tokenizer());
    ds_config(path);
    return 0;
}
