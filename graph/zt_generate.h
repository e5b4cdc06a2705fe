/*
 * graph/zt_generate.h: the inference engine's public API: a generator built from a GPT-2 shape
 * and its weights, to which requests (prompt ids + sampling parameters) are submitted; its step
 * loop decodes every running request at once (continuous batching) as StarPU task graphs.
 *
 * Layer: graph/ (generate.c: requests, slots and the step loop; generate_step.c: one step's
 * task graph; generate_weights.c: the weights, resident or streamed from NVMe; sample.c in
 * kernels/ picks the tokens). One step: the waiting requests take free KV-cache slots; every
 * running request contributes rows (a chunk of its prompt, or its last token); the rows run
 * through the layers as one batch (the training forward's tasks for the dense parts, the KV
 * cache tasks for attention); the rows that end a prompt or decode give logits, sampled on the
 * host. A finished request frees its slot at once for the next waiting one.
 *
 * Determinism (with the AVX-512 GEMM engine, the default where the CPU has AVX-512F): the logits
 * of a row depend only on its sequence's tokens (their bits equal the training forward's for the
 * same tokens), and the sampling of the token at position p of a request uses the random number
 * (seed, p); so the ids do not depend on batching, on the other requests, on STARPU_SCHED or on
 * STARPU_NCPU. With ZT_GEMM=openblas the products' summation order is OpenBLAS's.
 */
#ifndef ZT_GENERATE_H
#define ZT_GENERATE_H

#include <stdint.h>     /* int32_t, int64_t, uint64_t */
#include "zt_config.h"  /* struct zt_model_shape */
#include "zt_status.h"  /* enum zt_status */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zt_generator *zt_generator_t;

/* Where the weights come from. */
struct zt_gen_weights {
    const char *safetensors; /* HF GPT-2 names, F32/BF16/F16 as stored; or NULL and: */
    const char *checkpoint;  /* a zerotask checkpoint: a directory (its latest) or a tag */
    int dtype;               /* ZT_GEN_DTYPE_*: the type the weights are computed in */
};
enum { ZT_GEN_DTYPE_STORED = 0, ZT_GEN_DTYPE_F32, ZT_GEN_DTYPE_BF16, ZT_GEN_DTYPE_F16 };

/* How the engine runs. */
struct zt_gen_config {
    int max_batch;       /* KV-cache slots: requests decoded together (>= 1) */
    int prefill_chunk;   /* prompt rows a request feeds per step (0: 256) */
    /* ZeRO-Inference: the layers' weights stay in a file and are read ahead of their use */
    int stream_weights;  /* 0: resident in host memory; 1: streamed from nvme_path */
    const char *nvme_path;
    int prefetch;        /* layers read ahead (>= 1; buffers: prefetch + 1 layers); 0: as
                          * many buffers as ZT_HOST_MEM_LIMIT leaves room for (all the layers:
                          * read once, kept), at least 2; without a limit, 1 ahead */
    int aio_queue_depth, aio_threads, aio_block_size; /* the training config's aio keys */
};

/* A request's sampling (HF generate's meaning). */
struct zt_gen_params {
    int max_new_tokens;       /* >= 1 */
    float temperature;        /* 0: greedy (lowest id on a tie); else > 0 */
    int top_k;                /* 0: off */
    float top_p;              /* (0, 1]; 1: off */
    float repetition_penalty; /* 1: off; > 0 (CTRL's rule: a logit of a token already in the
                               * sequence is divided by it when > 0, multiplied when < 0) */
    uint64_t seed;
    int32_t eos_id;           /* the request ends when it samples this id; -1: none (a zeroed
                               * struct means id 0) */
};

/* ERROR: a step failed (zt_generator_status says why); every running and waiting request ends
 * with it, and the generator takes no more */
enum zt_finish {
    ZT_FINISH_NONE = 0, ZT_FINISH_LENGTH, ZT_FINISH_STOP, ZT_FINISH_EOS, ZT_FINISH_ERROR
};
const char *zt_finish_name(enum zt_finish f); /* "length", "stop", "eos", "error" ("": NONE) */

/* Called on the stepping thread for each token a request generates (finish NONE), and once
 * when it ends (token -1, its reason). Return nonzero to end the request now (reason STOP:
 * e.g. its text reached a stop string). */
typedef int (*zt_gen_token_fn)(void *user, int64_t request, int32_t token, enum zt_finish finish);

enum zt_status zt_generator_create(zt_generator_t *g, const struct zt_model_shape *shape,
                                   const struct zt_gen_weights *w,
                                   const struct zt_gen_config *cfg);
void zt_generator_free(zt_generator_t g);

/* What zt_generator_submit checks, before any generator exists (a program can refuse a bad
 * prompt before loading the weights). */
enum zt_status zt_generator_check_request(const struct zt_model_shape *shape,
                                         const int32_t *prompt, int n,
                                         const struct zt_gen_params *p);
/* Queue a request (thread-safe; the ids are copied). *id: its number (0, 1, ...), in the order
 * of submission. ZT_ERR_INVALID for an empty prompt, an id outside the vocabulary, a prompt that
 * leaves no room in the context, or bad parameters. prompt_logits (may be NULL): [n, vocab]
 * floats that receive the logits of every prompt position (owned by the caller until the
 * request ends). */
enum zt_status zt_generator_submit(zt_generator_t g, const int32_t *prompt, int n,
                                   const struct zt_gen_params *p, zt_gen_token_fn fn,
                                   void *user, float *prompt_logits, int64_t *id);
/* Withdraw request id while it still waits for a slot (thread-safe): it leaves the queue and
 * ends at once, its callback called on this thread with ZT_FINISH_STOP (and nothing generated);
 * returns 1. 0 when it is not waiting (running: it ends when its callback returns nonzero;
 * ended; unknown). */
int zt_generator_cancel(zt_generator_t g, int64_t id);
/* ZT_OK, or the status of the step that failed (its message recorded as the last error);
 * thread-safe */
enum zt_status zt_generator_status(zt_generator_t g);
/* Run one step: admit waiting requests, run every running one a step. *busy: 1 while any
 * request is running or waiting. */
enum zt_status zt_generator_step(zt_generator_t g, int *busy);
/* Step until no request is left (on the calling thread). */
enum zt_status zt_generator_run(zt_generator_t g);
/* Or let a thread of the generator step while there is work (it sleeps when there is none,
 * and parks the StarPU workers meanwhile, as zt_runtime_pause_if_idle: an idle generator leaves
 * the cores free): requests submitted from any thread then complete on their own, their
 * callbacks running on that thread. _drain waits until nothing runs or waits (or a step
 * failed: its status); _stop ends the thread after its current step (zt_generator_free stops
 * it too). Between _start and _stop, do not call zt_generator_step or _run. */
enum zt_status zt_generator_start(zt_generator_t g);
enum zt_status zt_generator_drain(zt_generator_t g);
void zt_generator_stop(zt_generator_t g);

/* The memory plan, one line (weights resident or streamed, KV cache, buffers), before the
 * first step. */
void zt_generator_plan(zt_generator_t g, char *line, size_t n);
/* Steps run and rows computed so far (prefill and decode). */
struct zt_gen_stats {
    int64_t steps, prefill_rows, decode_rows;
    int64_t weight_bytes_read; /* streamed from the file */
};
void zt_generator_stats(zt_generator_t g, struct zt_gen_stats *s);

#ifdef __cplusplus
}
#endif
#endif /* ZT_GENERATE_H */
