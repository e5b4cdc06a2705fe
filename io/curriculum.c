/*
 * io/curriculum.c: the sequence length of each training step under the legacy
 * "curriculum_learning" section (curriculum_type "seqlen"), as DeepSpeed schedules it.
 *
 * Layer: io/ (platform; no StarPU). Pure arithmetic on struct zt_curriculum_cfg; the section is
 * parsed in io/curriculum_config.c.
 */
#include <math.h>      /* floor, pow */
#include <stdint.h>    /* int64_t */
#include "zt_config.h" /* struct zt_curriculum_cfg */

// ----------------------------------------------------------------------------
// DeepSpeed's curriculum schedule
//
// Source: deepspeed/runtime/data_pipeline/curriculum_scheduler.py (CurriculumScheduler), driven
// by the legacy section in deepspeed/runtime/engine.py. Notation: g = the global step given to
// the scheduler, min/max = min_difficulty/max_difficulty, T = total_curriculum_step,
// d = difficulty_step, k = root_degree (1 for fixed_linear).
//
//   fixed_linear, fixed_root:  x = floor((g / T)^(1 / k) * (max - min) + min)
//                              get(g) = min(x - x % d, max)
//     computed in Python doubles: float(g) / T, ** (C's pow), a double multiply and add, then
//     math.floor. C11 in ISO mode (CMake's C_EXTENSIONS OFF) does not contract a * b + c into
//     an fma, so the same double operations give the same bits.
//   fixed_discrete:            get(g) = difficulty[i] for the first i with g <= max_step[i],
//                              difficulty[last] when g > max_step[last]
//
// DeepSpeed 0.19 also raises get(g) to at least ceil(min / d) * d, which the last releases that
// read the legacy section do not; the two agree when min is a multiple of d, which the parser
// requires, and then x >= min makes x - x % d >= min.
//
// State. The scheduler starts at current = min and update_difficulty(g) sets current = get(g)
// only while current < max: once max is reached it stays there, and with min == max it never
// moves. The legacy engine calls update_difficulty(global_steps + 1) before every forward, with
// global_steps the optimizer steps done so far (0 before the first): every micro-batch of
// training step s (1-based) gets update_difficulty(s), and the calls of steps 1..s have been
// made in order. So step s trains with
//   seqlen(s) = min                      if min >= max
//             = max                      if get(t) == max for some t <= s
//             = get(s)                   otherwise.
// fixed_linear and fixed_root never decrease, so only fixed_discrete (whose difficulties may go
// down, all within [1, max]) needs the middle line.

/* get(g) of fixed_linear / fixed_root */
static int root_difficulty(const struct zt_curriculum_cfg *c, int64_t g) {
    double degree = c->schedule == ZT_CURRICULUM_FIXED_ROOT ? c->root_degree : 1.0;
    double ratio = pow((double)g / (double)c->total_curriculum_step, 1.0 / degree);
    double span = (double)c->max_difficulty - (double)c->min_difficulty;
    double scaled = ratio * span;
    double x = floor(scaled + (double)c->min_difficulty);
    int64_t d = c->difficulty_step;
    /* far past max (g beyond T): x - x % d >= x - d + 1 > max, so the cap decides; this also
     * keeps the conversion to int64_t below in range */
    if (x >= (double)c->max_difficulty + (double)d) return c->max_difficulty;
    int64_t n = (int64_t)x; /* >= min >= 1, so % is Python's */
    n -= n % d;
    return n < c->max_difficulty ? (int)n : c->max_difficulty;
}

/* get(g) of fixed_discrete */
static int discrete_difficulty(const struct zt_curriculum_cfg *c, int64_t g) {
    int last = c->n_stages - 1;
    for (int i = 0; i < last; i++)
        if (g <= c->max_step[i]) return c->difficulty[i];
    return c->difficulty[last];
}

/* the first step whose get() is max (INT64_MAX when none): fixed_discrete only */
static int64_t discrete_first_max(const struct zt_curriculum_cfg *c) {
    for (int i = 0; i < c->n_stages; i++)
        if (c->difficulty[i] >= c->max_difficulty) return i == 0 ? 1 : c->max_step[i - 1] + 1;
    return INT64_MAX;
}

int zt_curriculum_seqlen(const struct zt_curriculum_cfg *c, int64_t step) {
    if (!c || !c->enabled) return 0;
    if (step < 1 || c->min_difficulty >= c->max_difficulty) return c->min_difficulty;
    if (c->schedule != ZT_CURRICULUM_FIXED_DISCRETE) return root_difficulty(c, step);
    if (step >= discrete_first_max(c)) return c->max_difficulty;
    return discrete_difficulty(c, step);
}

enum zt_status zt_curriculum_check_seqlen(const struct zt_curriculum_cfg *c, int seq_len) {
    if (!c || !c->enabled || c->max_difficulty <= seq_len) return ZT_OK;
    return zt_error_set(ZT_ERR_CONFIG, "curriculum_learning.max_difficulty %d exceeds the "
                        "model's seq_len %d (the curriculum's longest sequences must fit the "
                        "model)", c->max_difficulty, seq_len);
}

static const char *const schedule_names[] = {"fixed_linear", "fixed_root", "fixed_discrete"};

const char *zt_curriculum_schedule_name(enum zt_curriculum_schedule s) {
    return (unsigned)s <= ZT_CURRICULUM_FIXED_DISCRETE ? schedule_names[s] : "?";
}
