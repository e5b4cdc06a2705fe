/*
 * tests/graph/test_memory_model.c: zt_memory_predict gives, to the byte, what the engine reports.
 *
 * For a grid of configs on one rank (ZeRO stages 0-3, fp32 and bf16, micro-batch 1-2,
 * accumulation 1-2, offload_optimizer none/cpu/nvme at stages 1-3, offload_param nvme at stage
 * 3, each offload with activation checkpointing whose recomputing layer's input stays in
 * host memory (cpu) or goes to NVMe, ZT_GRAPH_CHUNKS 1 and 4, small reduction buckets so that
 * the gradient slots grow) a real engine and GPT-2 are built and the prediction's params,
 * grads, optim, acts, value_slots, swap_buffers and nvme must equal zt_engine_memory before
 * step 1, and grad_slots after one training step. ZT_GRAPH_CHUNKS comes once from the knob (chunks 0) and once from the inputs.
 * Under mpirun every rank checks its own prediction (world size and rank from MPI); on 2 ranks
 * also as the 2 stages of a pipeline (1F1B and GPipe, ZeRO 0-1, fp32 and bf16, with and
 * without the optimizer in host memory or on NVMe and checkpointed layers). The
 * predicted peak against the measured one is tests/graph/test_memory_model.py's.
 *
 * Usage: [mpirun -np N] test_memory_model WORKDIR
 */
#include <stdio.h>      /* snprintf, fopen */
#include <stdlib.h>     /* setenv */
#include <sys/stat.h>   /* mkdir */
#include "zerotask.h"   /* the public API */
#include "zt_test.h"    /* ZT_TEST_* */

static const struct zt_model_shape g_shape = {.vocab_size = 96, .seq_len = 16, .n_embd = 64,
                                              .n_layer = 3, .n_head = 4};

enum offload { OFF_NONE, OFF_CPU, OFF_NVME, OFF_NVME_PARAMS };

/* a token file in llm.c's format: header (magic, version, count) then uint16 tokens */
static int write_tokens(const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int32_t h[256] = {20240520, 1, 4000};
    fwrite(h, sizeof h, 1, f);
    for (int i = 0; i < 4000; i++) {
        uint16_t t = (uint16_t)((i * 5 + i / 7) % g_shape.vocab_size);
        fwrite(&t, sizeof t, 1, f);
    }
    return fclose(f);
}

/* the DeepSpeed JSON of one case into path */
static int write_config(const char *path, const char *nvme, int world, int stage, int bf16,
                        int micro, int accum, enum offload off, int stages, int gpipe) {
    char opt[700] = "", par[700] = "", ckpt[700] = "", pipe[100] = "";
    if (stages > 1)
        snprintf(pipe, sizeof pipe, ", \"pipeline\": {\"stages\": %d, \"schedule\": \"%s\"}",
                 stages, gpipe ? "gpipe" : "1f1b");
    if (off != OFF_NONE)
        snprintf(opt, sizeof opt, ", \"offload_optimizer\": {\"device\": \"%s\", \"nvme_path\": "
                 "\"%s\"}", off == OFF_CPU ? "cpu" : "nvme", nvme);
    if (off == OFF_NVME_PARAMS)
        snprintf(par, sizeof par, ", \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": "
                 "\"%s\", \"buffer_size\": 100000}", nvme);
    /* with offload, activation checkpointing too: the inputs in host memory, or on NVMe */
    if (off != OFF_NONE)
        snprintf(ckpt, sizeof ckpt, ", \"activation_checkpointing\": {\"offload\": {\"device\": "
                 "\"%s\", \"nvme_path\": \"%s\"}}", off == OFF_CPU ? "cpu" : "nvme", nvme);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "{\"train_batch_size\": %d, \"train_micro_batch_size_per_gpu\": %d, "
            "\"gradient_accumulation_steps\": %d, \"optimizer\": {\"type\": \"AdamW\", "
            "\"params\": {\"lr\": 0.001}}, \"bf16\": {\"enabled\": %s}, \"zero_optimization\": "
            "{\"stage\": %d, \"reduce_bucket_size\": 5000, "
            "\"stage3_param_persistence_threshold\": 300, \"stage3_prefetch_bucket_size\": 20000"
            "%s%s}%s%s}", micro * accum * (world / stages), micro, accum, bf16 ? "true" : "false",
            stage, opt, par, ckpt, pipe);
    return fclose(f);
}

#define SAME(field, got, want)                                                                   \
    ZT_TEST_TRUE((got) == (want), "%s: %s predicted %lld, engine %lld", label, field,           \
                 (long long)(got), (long long)(want))

/* one case: engine + model, the memory before step 1 and the gradient slots after it */
static void check_case(const char *label, const char *ds, const struct zt_tokens *tok,
                       int chunks_in) {
    struct zt_config cfg;
    zt_engine_t e = NULL;
    zt_gpt2_t m = NULL;
    if (zt_config_load(&cfg, ds, zt_comm_size()) != ZT_OK || zt_engine_init(&e, &cfg) != ZT_OK ||
        zt_gpt2_init(&m, e, &g_shape) != ZT_OK) {
        ZT_TEST_FAIL("%s: engine: %s", label, zt_error_last());
        zt_gpt2_free(m);
        zt_engine_free(e);
        return;
    }
    struct zt_engine_mem have;
    zt_engine_memory(e, &have);
    const struct zt_mem_inputs in = {.shape = &g_shape, .cfg = &cfg, .world_size = zt_comm_size(),
                                     .rank = zt_comm_rank(), .workers = zt_runtime_nworkers(),
                                     .chunks = chunks_in};
    struct zt_mem_prediction p;
    if (zt_memory_predict(&in, &p) != ZT_OK) {
        ZT_TEST_FAIL("%s: predict: %s", label, zt_error_last());
    } else {
        SAME("params", p.params, have.params);
        SAME("grads", p.grads, have.grads);
        SAME("optim", p.optim, have.optim);
        SAME("acts", p.acts, have.acts);
        SAME("value_slots", p.value_slots, have.value_slots);
        SAME("swap_buffers", p.swap_buffers, have.swap_buffers);
        SAME("nvme", p.nvme, have.nvme);
        ZT_TEST_TRUE(p.peak > p.runtime + p.params + p.acts, "%s: peak %lld below its parts",
                     label, (long long)p.peak);
        double loss;
        if (zt_gpt2_step_submit(m, tok, 1, 1) != ZT_OK ||
            zt_gpt2_step_wait(m, &loss, NULL) != ZT_OK || zt_engine_finish(e) != ZT_OK) {
            ZT_TEST_FAIL("%s: step 1: %s", label, zt_error_last());
        } else {
            zt_engine_memory(e, &have);
            SAME("grad_slots after step 1", p.grad_slots, have.grad_slots);
        }
    }
    zt_gpt2_free(m);
    zt_engine_free(e);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s WORKDIR\n", argv[0]);
        return 2;
    }
    if (zt_runtime_init() != ZT_OK) { /* one runtime (and MPI) for every engine of the grid */
        fprintf(stderr, "FAIL setup: %s\n", zt_error_last());
        return 1;
    }
    const int rank = zt_comm_rank(), world = zt_comm_size();
    char nvme[512], ds[600], toks[600], label[160];
    snprintf(nvme, sizeof nvme, "%s/nvme", argv[1]);
    snprintf(ds, sizeof ds, "%s/ds-%d.json", argv[1], rank);
    snprintf(toks, sizeof toks, "%s/tokens-%d.bin", argv[1], rank);
    mkdir(argv[1], 0755);
    mkdir(nvme, 0755);
    struct zt_tokens tok;
    if (write_tokens(toks) != 0 || zt_tokens_open(&tok, toks, g_shape.vocab_size) != ZT_OK) {
        fprintf(stderr, "FAIL setup: %s\n", zt_error_last());
        zt_runtime_free();
        return 1;
    }
    int cases = 0;
    /* of the 3 layers, 0 and 1 recompute: with offload nvme their inputs share one set, and
     * layer 0's goes through the swap file */
    setenv("ZT_RECOMPUTE_WINDOW", "1", 1);
    for (int chunks = 1; chunks <= 4; chunks += 3) {
        setenv("ZT_GRAPH_CHUNKS", chunks == 1 ? "1" : "4", 1);
        for (int stage = 0; stage <= 3; stage++)
            for (int off = OFF_NONE; off <= (stage == 3 ? OFF_NVME_PARAMS : OFF_NVME); off++)
                for (int bits = 0; bits < 8; bits++) {
                    const int bf16 = bits & 1, micro = 1 + (bits >> 1 & 1);
                    const int accum = 1 + (bits >> 2);
                    if (stage == 0 && off != OFF_NONE) continue; /* offload needs stage >= 1 */
                    snprintf(label, sizeof label, "rank %d of %d, chunks %d stage %d offload %d "
                             "%s micro %d accum %d", rank, world, chunks, stage, off,
                             bf16 ? "bf16" : "fp32", micro, accum);
                    if (write_config(ds, nvme, world, stage, bf16, micro, accum, off, 1, 0)) {
                        ZT_TEST_FAIL("%s: cannot write %s", label, ds);
                        continue;
                    }
                    /* ZT_GRAPH_CHUNKS from the knob at even stages, from the inputs at odd */
                    check_case(label, ds, &tok, stage % 2 ? chunks : 0);
                    cases++;
                }
    }
    /* a pipeline of 2 stages (2 ranks: one replica each): each rank its stage's parameters
     * (wte on both ends) and activation sets (1F1B: 2, GPipe: one per micro-batch), ZeRO 0-1,
     * with the optimizer offloaded to host memory or NVMe and checkpointed layers too (their
     * kept inputs in host memory, or on NVMe: in sets per activation set, through the thread
     * engine, as a pipeline runs them) */
    setenv("ZT_GRAPH_CHUNKS", "1", 1);
    setenv("ZT_AIO_ENGINE", "threads", 1);
    for (int bits = 0; world == 2 && bits < 24; bits++) {
        const int stage = bits & 1, bf16 = bits >> 1 & 1, gpipe = bits >> 2 & 1;
        const enum offload off = bits >> 3 == 2 ? OFF_NVME : bits >> 3 ? OFF_CPU : OFF_NONE;
        if (off != OFF_NONE && stage == 0) continue; /* offload needs stage >= 1 */
        snprintf(label, sizeof label, "rank %d of %d, 2 stages %s, stage %d offload %d %s", rank,
                 world, gpipe ? "gpipe" : "1f1b", stage, off, bf16 ? "bf16" : "fp32");
        if (write_config(ds, nvme, world, stage, bf16, 1, 3, off, 2, gpipe) != 0) {
            ZT_TEST_FAIL("%s: cannot write %s", label, ds);
            continue;
        }
        check_case(label, ds, &tok, 0);
        cases++;
    }
    zt_runtime_free();
    zt_tokens_close(&tok);
    printf("test_memory_model: rank %d of %d: %d cases, %d failure(s)\n", rank, world, cases,
           zt_test_failures);
    return zt_test_failures ? 1 : 0;
}
