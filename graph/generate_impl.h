/*
 * graph/generate_impl.h: what the files of the generator share (never installed).
 *
 * generate.c (requests, slots, the step loop) -> generate_step.c (one step's task graph)
 * -> generate_weights.c (the weights as tensors: resident, or a window of layers streamed from
 * a swap file). Layer: graph/. No starpu_* calls: everything goes through tasks/.
 */
#ifndef ZT_GENERATE_IMPL_H
#define ZT_GENERATE_IMPL_H

#include <stdint.h>       /* int32_t, int64_t */
#include "zt_generate.h"  /* public API */
#include "zt_gpt2.h"      /* ZT_GPT2_LAYER_PARAMS */
#include "zt_swapdir.h"   /* struct zt_swapdir, struct zt_swapfile */
#include "zt_tasks.h"     /* zt_task_*, zt_tensor_t */

/* one layer's 12 parameters, in zt_gpt2_param_info's order */
struct gen_layer {
    zt_tensor_t p[ZT_GPT2_LAYER_PARAMS];
};

struct gen_weights {
    struct zt_model_shape s;
    enum zt_dtype dtype;
    int tiles;                   /* bf16 matrices packed for the bf16 engine (zt_bf16_tiles_*) */
    int workers;                 /* the workers a decode step's parts split among
                                  * (gen_split_workers): the layers' matrices are kept in
                                  * column panels of the parts' widths (unpacked, > 1) */
    zt_tensor_t wte, wpe, lnfw, lnfb; /* wte transposed: [C, V] (load_wte_t) */
    void *resident;              /* the buffer of every resident tensor */
    int64_t resident_bytes;
    int nbuf;                    /* layers held in memory: L when resident, else the window */
    struct gen_layer *buf;       /* [nbuf] */
    void *window;                /* streamed: the window's buffer */
    int64_t layer_bytes;         /* one layer's parameters, each padded to 4096 bytes */
    int64_t staging_bytes;       /* loading's conversion buffers (the largest parameter in fp32,
                                  * and in bf16 to pack it), freed before the KV cache is made */
    int64_t param_off[ZT_GPT2_LAYER_PARAMS]; /* offset of each inside a layer's bytes */
    /* streamed: */
    int streamed, prefetch;
    struct zt_swapdir dir;
    struct zt_swapfile file;     /* layer l at l * layer_bytes */
    int loaded_until;            /* layers [0, loaded_until) have had their swap-in submitted
                                  * for the current pass (or, past the last layer, the next) */
    int next_pass;               /* layers of the next pass already submitted */
    int resident_pass;           /* the window holds every layer: read once, kept */
    int64_t step;                /* the step being submitted (trace) */
    int io_up;                   /* the I/O service was started here */
    int64_t bytes_read;
};

/* Load the weights (checked against the shape) as cfg says, the layers' matrices in column
 * panels for a decode step's parts on `workers` workers. Before allocating them, the host
 * bytes they need plus the larger of the others' (the KV cache, kv_f32 bytes in fp32 and half
 * of them in its 16-bit type, gen_kv_dtype; the activations, acts) and loading's
 * conversion buffers (staging_bytes) are checked against ZT_HOST_MEM_LIMIT: the peak. */
enum zt_status gen_weights_load(struct gen_weights *w, const struct zt_model_shape *s,
                                const struct zt_gen_weights *src,
                                const struct zt_gen_config *cfg, int workers, int64_t kv_f32,
                                int64_t acts);
void gen_weights_free(struct gen_weights *w);
/* Before the tasks of layer l in a pass over the layers (of step `step`, for the trace): the
 * tensors that hold its parameters (streamed: the swap-ins of layers up to l + prefetch are
 * submitted, l's included). */
enum zt_status gen_weights_layer(struct gen_weights *w, int l, int64_t step,
                                 struct gen_layer **out);
/* After the tasks of a pass's last layer: streamed, the swap-ins of the next pass's first layers,
 * so that the disk works while the step ends and the next begins. */
enum zt_status gen_weights_pass_end(struct gen_weights *w);
/* the KV cache's type: a bf16 model's (bf16 weights on a bf16 engine, packed) is bf16 and an
 * fp16 model's fp16, as transformers and llama.cpp keep theirs in the model's 16-bit type; else
 * fp32 (bf16 weights without an engine compute as fp32) */
enum zt_dtype gen_kv_dtype(const struct gen_weights *w);
/* host bytes of the weights (resident tensors and the window) */
int64_t gen_weights_host_bytes(const struct gen_weights *w);
/* the host bytes at the peak: the weights and, beside them, the larger of others (the KV cache
 * and activations) and loading's conversion buffers (freed before the cache is made) */
int64_t gen_weights_peak_bytes(const struct gen_weights *w, int64_t others);

/* a request in the engine */
struct gen_request {
    int64_t id;
    int32_t *ids;        /* prompt then generated ids, room for the context */
    int nprompt, n;      /* prompt length; ids so far */
    int fed;             /* ids whose K/V are in the cache */
    int generated;
    int64_t admitted_step;  /* the generator's step count when it took a slot */
    struct zt_gen_params p;
    zt_gen_token_fn fn;
    void *user;
    float *prompt_logits;
    enum zt_finish finish;
    struct gen_request *next; /* the waiting queue */
};

/* one step's rows and where their logits go */
struct gen_batch {
    int64_t step;              /* 1-based, for the trace */
    int n;                     /* rows */
    int32_t *tokens;           /* [n] */
    struct zt_row_pos *rows;   /* [n] */
    int nlogits;
    int32_t *logit_rows;       /* [nlogits] rows whose logits are wanted */
    zt_tensor_t fed;           /* not NULL: row r's token is fed[r] (tokens unused), picked by
                                * the step before while this one was submitted */
};

/* The activation buffers of steps of up to max_rows rows (generate_step.c); decode steps split
 * each product's columns in `parts` (the workers; 1: no split). */
struct gen_acts;
enum zt_status gen_acts_create(struct gen_acts **a, const struct zt_model_shape *s,
                               int max_rows, int parts);
void gen_acts_free(struct gen_acts *a);
/* the bytes gen_acts_create allocates for these arguments */
int64_t gen_acts_bytes(const struct zt_model_shape *s, int max_rows, int parts);
/* Submit the task graph of one step: b's rows (in nblk row blocks) through every layer, and
 * *logits [nlogits, V] for the wanted rows. Read *logits after zt_tensor_acquire, then call
 * gen_step_end, which frees the step's tensors (*logits included). */
enum zt_status gen_step_submit(struct gen_acts *a, struct gen_weights *w, zt_tensor_t *kv,
                               const struct gen_batch *b, int nblk, zt_tensor_t *logits);
void gen_step_end(struct gen_acts *a);

#endif /* ZT_GENERATE_IMPL_H */
