/*
 * graph/loss_scale.c: fp16 loss scaler.
 *
 * Layer: graph/ (behind zt_engine.h). No starpu_* call: work goes through tasks/.
 */
#include "engine_impl.h" /* struct zt_engine, internal functions */
/* DeepSpeed's DynamicLossScaler.update_scale (deepspeed/runtime/fp16/loss_scaler.py), after each
 * step, with its defaults for what the config cannot set: scale_factor 2 and
 * raise_error_at_min_scale (an overflow at the minimum scale ends the run). A static scale
 * (fp16.loss_scale > 0) never changes; its overflowing steps are skipped all the same. */
enum zt_status zt_loss_scale_update(zt_engine_t e, int overflow) {
    struct zt_scaler *sc = &e->sc;
    const struct zt_config *c = &e->cfg;
    if (c->loss_scale > 0) return ZT_OK;
    if (overflow) {
        if (c->hysteresis == 1 || sc->cur_hysteresis == 1) {
            if (sc->scale == c->min_loss_scale)
                return zt_error_set(ZT_ERR_NUMERIC, "fp16: the gradients of step %lld overflow "
                                    "at the minimum loss scale %g (fp16.min_loss_scale); the "
                                    "loss scale cannot go lower (DeepSpeed stops here too)",
                                    (long long)e->step, c->min_loss_scale);
            double next = sc->scale / 2 > c->min_loss_scale ? sc->scale / 2 : c->min_loss_scale;
            if (e->rank == 0)
                ZT_LOG_I("fp16: overflow in step %lld, skipped; loss scale %g -> %g",
                         (long long)e->step, sc->scale, next);
            sc->scale = next;
        } else {
            if (e->rank == 0)
                ZT_LOG_I("fp16: overflow in step %lld, skipped; loss scale %g kept (hysteresis "
                         "%d -> %d)", (long long)e->step, sc->scale, sc->cur_hysteresis,
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

float zt_engine_loss_scale(zt_engine_t e) { return (float)e->sc.scale; }
enum zt_dtype zt_engine_dtype(zt_engine_t e) { return e->wdt; }

void zt_engine_get_train_state(zt_engine_t e, struct zt_train_state *st) {
    *st = (struct zt_train_state){.applied = e->applied, .skipped = e->skipped,
                                  .loss_scale = e->sc.scale, .cur_iter = e->sc.cur_iter,
                                  .last_overflow_iter = e->sc.last_overflow_iter,
                                  .cur_hysteresis = e->sc.cur_hysteresis};
}

void zt_engine_set_train_state(zt_engine_t e, const struct zt_train_state *st) {
    e->applied = st->applied;
    e->skipped = st->skipped;
    e->sc.scale = st->loss_scale;
    e->sc.cur_iter = st->cur_iter;
    e->sc.last_overflow_iter = st->last_overflow_iter;
    e->sc.cur_hysteresis = st->cur_hysteresis;
}
