/*
 * graph/zt_memory_model.h: the memory model: the peak resident memory (VmHWM) of one rank of a
 * GPT-2 training run (zt-train), predicted without building the engine or allocating a tensor,
 * so that an autotuner can drop the configurations that would not fit a memory budget before
 * running them.
 *
 * Layer: graph/. Pure: it computes the ZeRO plan the engine would compute (zero_plan.h) and
 * sizes every buffer by the same functions the engine and the model size them with (the flat
 * buffers, the slot pools, the swap buffers, the activation table); nothing is allocated
 * beyond the plan's arrays, no StarPU or MPI call is made, and it may run before the runtime
 * starts. The knobs (ZT_GRAPH_CHUNKS, ZT_OPT_GROUP_ELEMS, ZT_SWAP_BUFFER_MEM,
 * ZT_HOST_MEM_LIMIT) are read as the engine reads them. A rank of a pipeline (pipeline.stages
 * > 1) is sized as its stage: the parameters its layer specs hold, the ZeRO plan over the
 * stage's replicas, the stage's activation sets. docs/architecture.md ("Memory model") lists
 * the terms and the accuracy measured.
 */
#ifndef ZT_MEMORY_MODEL_H
#define ZT_MEMORY_MODEL_H

#include <stdint.h>     /* int64_t */
#include "zt_config.h"  /* struct zt_config, struct zt_model_shape */
#include "zt_status.h"  /* enum zt_status */

#ifdef __cplusplus
extern "C" {
#endif

struct zt_mem_inputs {
    const struct zt_model_shape *shape; /* the GPT-2 */
    const struct zt_config *cfg;        /* batch rule resolved for world_size */
    int world_size, rank;
    int workers;        /* StarPU CPU workers of this rank (STARPU_NCPU) */
    int chunks;         /* ZT_GRAPH_CHUNKS value; 0: the knob's value (its default 4) */
};

/* Bytes on this rank. params..acts and value_slots, swap_buffers and nvme are what
 * zt_engine_memory reports before step 1, to the byte; grad_slots is the gradient slots' size
 * after step 1 (stage >= 2 grows them on demand while the backward runs; grads holds them at
 * their size before step 1). */
struct zt_mem_prediction {
    int64_t params, grads, optim, acts;  /* what zt_engine_memory reports before step 1 */
    int64_t value_slots, grad_slots;     /* parts of params and grads (grad_slots: at their size
                                          * after step 1, when they have grown) */
    int64_t swap_buffers, nvme;          /* NVMe offload */
    int64_t runtime;                     /* process base (StarPU, MPI, OpenBLAS, code) and
                                          * per-worker scratch: GEMM packing, reduction scratch */
    int64_t peak;                        /* predicted VmHWM in bytes */
};

/* Predict rank in->rank's memory. Thread-safe (reads the knobs, allocates only the plan).
 * @retval ZT_OK             *out filled
 * @retval ZT_ERR_INVALID    a bad input (no shape or config, rank outside world_size, workers
 *                           < 1, chunks outside the knob's range)
 * @retval ZT_ERR_CONFIG     a config the engine would refuse (bad shape, offload_param nvme
 *                           without offload_optimizer nvme, a parameter above
 *                           offload_param.buffer_size) or a bad knob
 * @retval ZT_ERR_NOMEM      no memory for the plan */
enum zt_status zt_memory_predict(const struct zt_mem_inputs *in, struct zt_mem_prediction *out);

#ifdef __cplusplus
}
#endif
#endif /* ZT_MEMORY_MODEL_H */
