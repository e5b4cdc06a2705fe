/*
 * graph/loss_scale.c: fp16 loss scaling: DeepSpeed's DynamicLossScaler (or a static scale), what
 * a non-finite step does in fp32/bf16 (ZT_ON_NONFINITE), and the training-loop state a
 * checkpoint keeps (updates applied and skipped, the scaler).
 *
 * Layer: graph/, behind the engine (engine_impl.h). Pure state: no tasks.
 */
#include <math.h>        /* ldexp, isfinite, isnan */
#include <stdio.h>       /* fprintf */
#include "engine_impl.h" /* struct zt_loss_scaler, struct zt_engine */
#include "zt_log.h"      /* ZT_LOG_I */

/* the scale of the first step: fp16.loss_scale when static, else 2^initial_scale_power; 1
 * without fp16 */
void zt_loss_scaler_init(struct zt_loss_scaler *sc, const struct zt_config *cfg) {
    sc->scale = cfg->precision != ZT_PREC_FP16 ? 1.0
                : cfg->loss_scale > 0          ? cfg->loss_scale
                                               : ldexp(1.0, cfg->initial_scale_power);
    sc->cur_iter = 0;
    sc->last_overflow_iter = -1;
    sc->cur_hysteresis = cfg->hysteresis;
}

/* DeepSpeed's DynamicLossScaler.update_scale (deepspeed/runtime/fp16/loss_scaler.py), after each
 * step, with its defaults for what the config cannot set: scale_factor 2 and
 * raise_error_at_min_scale (an overflow at the minimum scale ends the run). A static scale
 * (fp16.loss_scale > 0) never changes; its overflowing steps are skipped all the same. */
enum zt_status zt_loss_scaler_update(struct zt_loss_scaler *sc, const struct zt_config *c,
                                     int overflow, int64_t step, int log) {
    if (c->loss_scale > 0) return ZT_OK;
    if (overflow) {
        if (c->hysteresis == 1 || sc->cur_hysteresis == 1) {
            if (sc->scale == c->min_loss_scale)
                return zt_error_set(ZT_ERR_NUMERIC, "fp16: the gradients of step %lld overflow "
                                    "at the minimum loss scale %g (fp16.min_loss_scale); the "
                                    "loss scale cannot go lower (DeepSpeed stops here too)",
                                    (long long)step, c->min_loss_scale);
            double next = sc->scale / 2 > c->min_loss_scale ? sc->scale / 2 : c->min_loss_scale;
            if (log)
                ZT_LOG_I("fp16: overflow in step %lld, skipped; loss scale %g -> %g",
                         (long long)step, sc->scale, next);
            sc->scale = next;
        } else {
            if (log)
                ZT_LOG_I("fp16: overflow in step %lld, skipped; loss scale %g kept (hysteresis "
                         "%d -> %d)", (long long)step, sc->scale, sc->cur_hysteresis,
                         sc->cur_hysteresis - 1);
            sc->cur_hysteresis--;
        }
        sc->last_overflow_iter = sc->cur_iter;
    } else {
        if (c->consecutive_hysteresis) sc->cur_hysteresis = c->hysteresis;
        if ((sc->cur_iter - sc->last_overflow_iter) % c->loss_scale_window == 0) {
            if (!c->consecutive_hysteresis) sc->cur_hysteresis = c->hysteresis;
            sc->scale *= 2;
        }
    }
    sc->cur_iter++;
    return ZT_OK;
}

static const char *nonfinite_name(double x) { return isnan(x) ? "nan" : x > 0 ? "inf" : "-inf"; }

/* The loss and the norm are the same on every rank (reduced over all of them), so every rank
 * decides alike and they stop together. Where the update waits for the norm (gradient clipping)
 * a stopping step's update is skipped; otherwise it is applied, and the run stops before any
 * checkpoint or export of it. */
enum zt_status zt_engine_check_step(zt_engine_t e, double loss, const struct zt_step_info *info) {
    if (!e->st.updated || e->cfg.precision == ZT_PREC_FP16) return ZT_OK;
    const int bad_loss = !isfinite(loss);
    if (!bad_loss && isfinite(info->grad_norm)) return ZT_OK;
    char what[64];
    snprintf(what, sizeof what, "%s is %s", bad_loss ? "loss" : "gradient norm",
             nonfinite_name(bad_loss ? loss : info->grad_norm));
    if (!e->nonfinite_warn)
        return zt_error_set(ZT_ERR_NUMERIC, "step %lld: %s (a learning rate too high? "
                            "ZT_ON_NONFINITE=warn continues)", (long long)info->step, what);
    if (e->nonfinite_step == 0 && zt_engine_talks(e))
        fprintf(stderr, "zerotask: warning: step %lld: %s; training goes on "
                        "(ZT_ON_NONFINITE=warn; no further warning for later steps)\n",
                (long long)info->step, what);
    if (e->nonfinite_step == 0) e->nonfinite_step = info->step;
    return ZT_OK;
}

float zt_engine_loss_scale(zt_engine_t e) { return (float)e->scaler.scale; }

void zt_engine_get_train_state(zt_engine_t e, struct zt_train_state *st) {
    *st = (struct zt_train_state){.applied = e->st.applied, .skipped = e->st.skipped,
                                  .loss_scale = e->scaler.scale, .cur_iter = e->scaler.cur_iter,
                                  .last_overflow_iter = e->scaler.last_overflow_iter,
                                  .cur_hysteresis = e->scaler.cur_hysteresis};
}

void zt_engine_set_train_state(zt_engine_t e, const struct zt_train_state *st) {
    e->st.applied = st->applied;
    e->st.skipped = st->skipped;
    e->scaler.scale = st->loss_scale;
    e->scaler.cur_iter = st->cur_iter;
    e->scaler.last_overflow_iter = st->last_overflow_iter;
    e->scaler.cur_hysteresis = st->cur_hysteresis;
}
