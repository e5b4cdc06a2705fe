/*
 * io/lr_schedule.c: the learning rate of each training step under DeepSpeed's schedules
 * (WarmupLR, WarmupDecayLR, WarmupCosineLR) or a constant lr.
 *
 * Layer: io/ (platform; no StarPU). Pure arithmetic on struct zt_config.
 */
#include <math.h> /* cos, log, M_PI */
#include "zt_config.h" /* struct zt_config, zt_config_lr_at */

// ----------------------------------------------------------------------------
// learning-rate schedules
//
// Source: deepspeed/runtime/lr_schedules.py (DeepSpeed master; classes WarmupLR, WarmupDecayLR,
// WarmupCosineLR), computed in double as Python does. Notation: it = last_batch_iteration,
// W = max(2, warmup_num_steps) ("self.warmup_num_steps = max(2, warmup_num_steps)"),
// N = total_num_steps, min/max = warmup_min_lr/warmup_max_lr, lr0 = optimizer.params.lr.
//
//   warmup gamma(it), it < W:  log:    log(it + 1) / log(W)
//                              linear: it / W
//   WarmupLR:       lr(it) = min + (max - min) * (it < W ? gamma(it) : 1)
//   WarmupDecayLR:  lr(it) = min + (max - min) * (it < W ? gamma(it)
//                                                 : max(0, (N - it) / max(1, N - W)))
//   WarmupCosineLR: ratio(it) = it < W ? wmr + gamma(it) * (1 - wmr)
//                     : max(0, cmr + (1 - cmr) * (1 + cos(pi * (it - W + 1) / (N - W))) / 2)
//                   lr(it) = lr0 * ratio(it)     (wmr = warmup_min_ratio, cmr = cos_min_ratio)
//   it < 0 ("before it has started"): WarmupLR/WarmupDecayLR return min_lrs; WarmupCosineLR
//   returns [0.0] (an lr of 0, not a ratio).
//
// Step convention. The schedule is built with last_batch_iteration = -1 and its __init__ writes
// get_lr() into the optimizer ("if last_batch_iteration == -1: self._last_lr =
// update_lr(self.optimizer.param_groups, self.get_lr())"); the engine then calls
// lr_scheduler.step() after every optimizer step (engine._take_model_step), and step() does
// last_batch_iteration += 1 before recomputing. So training step s (1-based) runs with
//   s == 1: lr(-1)   (warmup_min_lr, or 0 for WarmupCosineLR)
//   s >= 2: lr(s - 2)
// e.g. WarmupLR linear, min 0, max 1e-3, W 10: steps 1..4 use 0, 0, 1e-4, 2e-4.

double zt_config_lr_at(const struct zt_config *cfg, int64_t it) {
    if (cfg->sched == ZT_LR_CONSTANT) return cfg->lr;
    double W = cfg->warmup_num_steps < 2 ? 2.0 : (double)cfg->warmup_num_steps;
    double N = (double)cfg->total_num_steps;
    double lo = cfg->warmup_min_lr, hi = cfg->warmup_max_lr;
    if (it < 0) return cfg->sched == ZT_LR_WARMUP_COSINE ? 0.0 : lo;
    double x = (double)it;
    double gamma = 1.0;
    if (x < W) gamma = cfg->warmup_type == ZT_WARMUP_LOG ? log(x + 1.0) / log(W) : x / W;
    switch (cfg->sched) {
    case ZT_LR_WARMUP: return lo + (hi - lo) * gamma;
    case ZT_LR_WARMUP_DECAY:
        if (x >= W) {
            double den = N - W > 1.0 ? N - W : 1.0;
            gamma = (N - x) / den;
            if (gamma < 0.0) gamma = 0.0;
        }
        return lo + (hi - lo) * gamma;
    case ZT_LR_WARMUP_COSINE: {
        double wmr = cfg->warmup_min_ratio, cmr = cfg->cos_min_ratio, ratio;
        if (x < W) {
            ratio = wmr + gamma * (1.0 - wmr);
        } else {
            double r = (1.0 + cos(M_PI * (x - W + 1.0) / (N - W))) / 2.0;
            ratio = cmr + (1.0 - cmr) * r;
            if (ratio < 0.0) ratio = 0.0;
        }
        return (double)cfg->lr * ratio;
    }
    default: return cfg->lr;
    }
}

float zt_config_lr(const struct zt_config *cfg, int64_t step) {
    if (cfg->sched == ZT_LR_CONSTANT) return cfg->lr;
    return (float)zt_config_lr_at(cfg, step <= 1 ? -1 : step - 2);
}
