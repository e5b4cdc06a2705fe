/*
 * graph/zerotask.h: the umbrella public header. Apps include only this.
 */
#ifndef ZEROTASK_H
#define ZEROTASK_H

#include "zt_status.h"   /* status codes, last error */
#include "zt_log.h"      /* logging */
#include "zt_config.h"   /* DeepSpeed-style config, model shape */
#include "zt_sched.h"    /* runtime, knobs, priorities, tracing */
#include "zt_comm.h"     /* ranks (MPI) */
#include "zt_tensor.h"   /* tensors */
#include "zt_task_kinds.h" /* task kinds */
#include "zt_tasks.h"    /* task insert functions */
#include "zt_engine.h"   /* engine: parameters, step lifecycle */
#include "zt_recompute.h" /* activation checkpointing of a model's blocks */
#include "zt_pipe_plan.h" /* a pipeline's cut of GPT-2 into stages */
#include "zt_gpt2.h"     /* the GPT-2 model */
#include "zt_memory_model.h" /* peak memory of a training run, predicted */
#include "zt_generate.h" /* the inference engine */
#include "zt_checkpoint.h" /* checkpoints */
#include "zt_tokens.h"   /* token files */
#include "zt_tokenizer.h" /* byte-level BPE */
#include "zt_safetensors.h" /* safetensors */

#define ZEROTASK_VERSION "0.1.0"

#endif /* ZEROTASK_H */
