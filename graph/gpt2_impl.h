/*
 * graph/gpt2_impl.h: what the rooms of the GPT-2 model share: the model's struct, its layers'
 * activations and the activation sets of a pipeline stage.
 *
 * Layer: graph/ (private to gpt2.c, the parameters and the task graph, and gpt2_acts.c, the
 * activation tensors).
 */
#ifndef ZT_GPT2_IMPL_H
#define ZT_GPT2_IMPL_H

#include "zt_gpt2.h"      /* zt_gpt2_t */
#include "zt_recompute.h" /* struct zt_recompute_plan, zt_ckpt_swap_t */

enum { P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPW, P_ATTPB, P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPW,
       P_FCPB, P_NLAYER };
_Static_assert(P_NLAYER == ZT_GPT2_LAYER_PARAMS, "zt_gpt2.h lists every layer parameter");

struct zt_layer_acts {
    zt_tensor_t ln1, ln1_mean, ln1_rstd; /* [N,C], [N], [N] */
    zt_tensor_t qkv;                     /* [N,3C] */
    zt_tensor_t atty;                    /* [N,C] */
    zt_tensor_t att;                     /* [Bm, NH*T*T] */
    zt_tensor_t res2;                    /* [N,C] residual after attention */
    zt_tensor_t ln2, ln2_mean, ln2_rstd;
    zt_tensor_t fch, fch_gelu;           /* [N,4C] */
    zt_tensor_t res3;                    /* [N,C] layer output */
};

struct zt_gpt2 {
    zt_engine_t e;
    struct zt_model_shape s;
    zt_param_t wte, wpe, lnfw, lnfb;
    zt_param_t (*layer_params)[P_NLAYER]; /* [L][P_NLAYER] */
    int accum, Bm, B;
    int active;                          /* positions of a row with a loss, of the last submit */
    /* activations (one micro-batch) */
    zt_tensor_t inputs, targets;         /* [Bm,T] int32 */
    zt_tensor_t encoded;                 /* [N,C] */
    struct zt_layer_acts *layer_acts;    /* [L]; a checkpointed layer's are the window's but
                                          * res3, its output (the next layer's input) */
    struct zt_recompute_plan rc;         /* which layers are checkpointed, their sets */
    zt_ckpt_swap_t swap;                 /* the kept inputs on NVMe (NULL: in memory) */
    int inputs_to_host;                  /* offload cpu: the kept inputs leave the devices */
    struct zt_layer_acts *window;        /* [rc.window]: the recompute window (only the
                                          * recomputed activations) */
    enum zt_recompute recompute;         /* what a checkpointed layer recomputes */
    zt_tensor_t lnf, lnf_mean, lnf_rstd;
    zt_tensor_t logits;                  /* [N,V], holds dlogits after the loss task */
    zt_tensor_t *losses;                 /* [accum] x [N] */
    zt_tensor_t proj;                    /* [N,C] matmul output before a residual add */
    /* activation gradients (reused per layer) */
    zt_tensor_t dres, dC, d3C, d4C;      /* [N,C], [N,C], [N,3C], [N,4C] */
    zt_tensor_t lnpart;                  /* [nblk, 2C] layernorm weight-gradient partials */
    /* a pipeline stage (docs/pipeline.md): it runs the layer specs [spec0, spec1) of embed (0),
     * block l (1 + l), ln_f (L + 1), head (L + 2); prev, next: the world ranks of the stages
     * before and after it (-1: none). Without a pipeline every spec, no neighbours. */
    int spec0, spec1, prev, next;
    /* [nsets]: the micro-batch activation sets (act_sets); the fields above hold the current
     * one's: use_set copies set k's in before a micro-batch's tasks are submitted */
    int nsets;
    struct act_set *sets;
};

/* one set: the head and tail tensors of a micro-batch in a shadow model, its layers', and its
 * own recompute window (so that micro-batches of different sets never share a tensor) */
struct act_set {
    struct zt_gpt2 *shadow;
    struct zt_layer_acts *layer_acts; /* [L] */
    struct zt_layer_acts *window;     /* [rc.window]; set 0's is the model's */
};

/* whether this stage runs layer spec k */
static inline int holds(const struct zt_gpt2 *m, int k) { return k >= m->spec0 && k < m->spec1; }

/* gpt2_acts.c: the config's checkpointed layers among layers [layer0, layer1) (a pipeline
 * stage's: its window holds its own layers' values; every layer otherwise) and their recompute
 * window */
enum zt_status zt_gpt2_plan_layers(const struct zt_config *cfg, int L, int layer0, int layer1,
                                   struct zt_recompute_plan *rc);
/* gpt2_acts.c: every activation tensor of m (after zt_engine_finalize): the micro-batch sets,
 * the recompute window aliased into the checkpointed layers, the inputs kept on NVMe */
enum zt_status zt_gpt2_acts_make(zt_gpt2_t m, const struct zt_config *cfg);
/* gpt2_acts.c: the tasks submitted next use activation set k (the model's fields hold its) */
void zt_gpt2_acts_use(zt_gpt2_t m, int k);
/* gpt2_acts.c: the sets' own storage (the tensors belong to the engine) */
void zt_gpt2_acts_free(zt_gpt2_t m);

#endif /* ZT_GPT2_IMPL_H */
