/*
 * graph/zt_pipe_plan.h: a pipeline's plan for GPT-2: the model as a list of layer specs
 * (DeepSpeed's PipelineModule view: "embed", "block" x n_layer, "ln_f", "head"), cut into
 * consecutive ranges, one per stage, by the config's partition method, and the words that
 * describe a rank's place in it.
 *
 * Layer: graph/. Pure arithmetic: no StarPU, no MPI (the same plan on every rank).
 */
#ifndef ZT_PIPE_PLAN_H
#define ZT_PIPE_PLAN_H

#include <stddef.h>    /* size_t */
#include <stdint.h>    /* int64_t */
#include "zt_config.h" /* struct zt_pipeline_cfg, struct zt_model_shape */
#include "zt_status.h" /* enum zt_status */

#ifdef __cplusplus
extern "C" {
#endif

#define ZT_PIPE_MAX_STAGES 64

struct zt_pipe_plan {
    int stages;
    int nspecs;                          /* n_layer + 3 */
    int first[ZT_PIPE_MAX_STAGES + 1];   /* stage s runs specs first[s] .. first[s + 1] - 1 */
    double weight[ZT_PIPE_MAX_STAGES];   /* the partition's weight of each stage */
};

/* Cut the weights w[0..n) into `parts` consecutive non-empty ranges (first[0..parts]) whose
 * largest sum is the least possible (the bottleneck DeepSpeed's partition_balanced reaches) and,
 * among those, whose sums are the most even (the least sum of squares; ties: the earlier cut). */
enum zt_status zt_pipe_partition_balanced(const double *w, int n, int parts, int *first);
/* as many items per part, the remainder to the first parts (DeepSpeed's partition_uniform) */
enum zt_status zt_pipe_partition_uniform(int n, int parts, int *first);
/* The name of GPT-2's layer spec i (of shape s) and its parameters (the head counts the tied
 * token embedding again: it computes with it, as DeepSpeed counts a TiedLayerSpec). */
const char *zt_pipe_spec_name(const struct zt_model_shape *s, int i);
int64_t zt_pipe_spec_params(const struct zt_model_shape *s, int i);
/* The plan of a GPT-2 of shape s under p: ZT_ERR_CONFIG when there are more stages than specs
 * (or than ZT_PIPE_MAX_STAGES) or when "type:REGEX" matches no spec. */
enum zt_status zt_pipe_plan_gpt2(const struct zt_model_shape *s, const struct zt_pipeline_cfg *p,
                                 struct zt_pipe_plan *out);
/* ZT_ERR_CONFIG naming config_path when the plan cuts between ln_f and the head (a stage that
 * starts at the head): the engine runs them on one stage */
enum zt_status zt_pipe_plan_check_gpt2(const struct zt_pipe_plan *pl,
                                       const struct zt_model_shape *s, const char *config_path);
/* The layer specs [*spec0, *spec1) that stage `stage` of the plan of shape s under p runs,
 * the errors of zt_pipe_plan_gpt2 and zt_pipe_plan_check_gpt2 (config_path named); every spec
 * (0, n_layer + 3) without a pipeline (p->stages <= 1) */
enum zt_status zt_pipe_stage_specs(const struct zt_model_shape *s, const struct zt_pipeline_cfg *p,
                                   const char *config_path, int stage, int *spec0, int *spec1);
/* "stage 1 of 2: specs 7-14 (block 6 .. head), 42.5M parameters" into buf */
void zt_pipe_plan_describe(const struct zt_pipe_plan *pl, const struct zt_model_shape *s,
                           int stage, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* ZT_PIPE_PLAN_H */
