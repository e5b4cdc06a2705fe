/*
 * tests/tasks/test_matmul_cols.c: proves that a decode product's column parts that read the
 * slabs of the product before, add them to the residual stream, keep the sum and layer-norm it
 * (zt_task_matmul_cols with base, keep and ln_w) give the bits of the tasks they replace: the
 * concatenation with the residual (zt_task_concat_cols), the layernorm task and the whole
 * product (zt_task_matmul_forward), for fp32 and bf16 weights; and that a base with an input
 * block, a keep without a base, a keep that is the base and a base or keep of other columns
 * are refused (ZT_ERR_INVALID, "do not agree"). And that a weight in column panels gives the
 * row-major weight's bits in the forward product and in each panel's part (fp32, f16), and
 * that a part across panels, a backward product over panels and bad widths are refused.
 */
#include <stdlib.h>     /* malloc */
#include <string.h>     /* memcmp */
#include "zt_sched.h"   /* zt_runtime_wait_all */
#include "zt_tasks.h"   /* tasks under test */
#include "zt_test.h"    /* ZT_TEST_TRUE */

enum { N = 3, C = 64, OC = 96 };

static uint32_t g_rng = 777;
static float rnd(void) {
    g_rng = g_rng * 1103515245u + 12345u;
    return ((float)((g_rng >> 9) & 0xFFFF) / 65536.0f - 0.5f) * 2.0f;
}

/* a tensor of random values of element type dt, one block */
static zt_tensor_t make(const char *name, int64_t rows, int64_t cols, enum zt_dtype dt) {
    zt_tensor_t t = NULL;
    if (zt_tensor_init_dtype(&t, name, NULL, rows, cols, dt, 1, NULL) != ZT_OK) {
        ZT_TEST_FAIL("tensor %s: %s", name, zt_error_last());
        exit(1);
    }
    size_t n = (size_t)(rows * cols);
    float *f = malloc(n * sizeof *f);
    for (size_t i = 0; i < n; i++) f[i] = rnd();
    zt_tensor_acquire(t, 1);
    zt_dtype_from_f32(dt, zt_tensor_data(t), f, n);
    zt_tensor_release(t);
    free(f);
    return t;
}

/* columns [o0, o0 + w) of the whole product [N, OC] equal the slab's */
static int slab_is_part(zt_tensor_t whole, zt_tensor_t slab, int64_t o0, int64_t w) {
    zt_tensor_acquire(whole, 0);
    zt_tensor_acquire(slab, 0);
    const float *a = zt_tensor_data(whole), *b = zt_tensor_data(slab);
    int ok = 1;
    for (int r = 0; r < N; r++)
        ok &= memcmp(a + (size_t)r * OC + o0, b + (size_t)r * w, (size_t)w * sizeof *a) == 0;
    zt_tensor_release(slab);
    zt_tensor_release(whole);
    return ok;
}

static int same_bytes(zt_tensor_t a, zt_tensor_t b) {
    zt_tensor_acquire(a, 0);
    zt_tensor_acquire(b, 0);
    int ok = memcmp(zt_tensor_data(a), zt_tensor_data(b), (size_t)zt_tensor_numel(a) * 4) == 0;
    zt_tensor_release(b);
    zt_tensor_release(a);
    return ok;
}

static void bits(enum zt_dtype wdt) {
    const struct zt_task_opts o = {.layer = -1, .mb = -1};
    zt_tensor_t in[2] = {make("in0", N, 32, ZT_DTYPE_F32), make("in1", N, 32, ZT_DTYPE_F32)};
    zt_tensor_t base = make("base", N, C, ZT_DTYPE_F32), keep = make("keep", N, C, ZT_DTYPE_F32);
    zt_tensor_t lnw = make("ln_w", 1, C, ZT_DTYPE_F32), lnb = make("ln_b", 1, C, ZT_DTYPE_F32);
    zt_tensor_t w = make("w", C, OC, wdt), bias = make("bias", 1, OC, ZT_DTYPE_F32);
    zt_tensor_t slab[2] = {make("slab0", N, 64, ZT_DTYPE_F32), make("slab1", N, 32, ZT_DTYPE_F32)};
    /* the tasks replaced: sum = base + slabs, its layernorm, the whole product */
    zt_tensor_t sum = make("sum", N, C, ZT_DTYPE_F32), ln = make("ln", N, C, ZT_DTYPE_F32);
    zt_tensor_t mean = make("mean", N, 1, ZT_DTYPE_F32), rstd = make("rstd", N, 1, ZT_DTYPE_F32);
    zt_tensor_t whole = make("whole", N, OC, ZT_DTYPE_F32);
    ZT_TEST_TRUE(zt_task_concat_cols(&o, sum, 0, in, 2, base) == ZT_OK, "concat");
    ZT_TEST_TRUE(zt_task_layernorm_forward(&o, ln, mean, rstd, 0, sum, lnw, lnb) == ZT_OK, "ln");
    ZT_TEST_TRUE(zt_task_matmul_forward(&o, whole, 0, ln, w, bias) == ZT_OK, "matmul");
    /* the parts: columns [0, 64) keeping the sum, [64, 96) not */
    const struct zt_cols_input first = {.slabs = in, .nin = 2, .base = base, .keep = keep,
                                        .ln_w = lnw, .ln_b = lnb};
    struct zt_cols_input rest = first;
    rest.keep = NULL;
    ZT_TEST_TRUE(zt_task_matmul_cols(&o, slab[0], &first, w, bias, 0, 0) == ZT_OK, "part 0: %s",
                 zt_error_last());
    ZT_TEST_TRUE(zt_task_matmul_cols(&o, slab[1], &rest, w, bias, 64, 0) == ZT_OK, "part 1: %s",
                 zt_error_last());
    zt_runtime_wait_all();
    const char *name = zt_dtype_name(wdt);
    ZT_TEST_TRUE(slab_is_part(whole, slab[0], 0, 64) && slab_is_part(whole, slab[1], 64, 32),
                 "%s weight: the parts' slabs differ from the whole product's columns", name);
    ZT_TEST_TRUE(same_bytes(keep, sum), "%s weight: the kept sum differs from the concat's", name);
    zt_tensor_t all[] = {in[0], in[1], base, keep, lnw, lnb, w, bias, slab[0],
                         slab[1], sum, ln, mean, rstd, whole};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) zt_tensor_free(all[i]);
}

/* each bad input: ZT_ERR_INVALID and an error naming what does not agree */
static void refusals(void) {
    const struct zt_task_opts o = {.layer = -1, .mb = -1};
    zt_tensor_t in[2] = {make("in0", N, 32, ZT_DTYPE_F32), make("in1", N, 32, ZT_DTYPE_F32)};
    zt_tensor_t x = make("x", N, C, ZT_DTYPE_F32), keep = make("keep", N, C, ZT_DTYPE_F32);
    zt_tensor_t narrow = make("narrow", N, 32, ZT_DTYPE_F32);
    zt_tensor_t w = make("w", C, OC, ZT_DTYPE_F32), slab = make("slab", N, 32, ZT_DTYPE_F32);
    const struct {
        const char *what;
        struct zt_cols_input in;
    } bad[] = {
        {"a base with an input block", {.inp = x, .base = keep}},
        {"a keep without a base", {.slabs = in, .nin = 2, .keep = keep}},
        {"a keep that is the base", {.slabs = in, .nin = 2, .base = x, .keep = x}},
        {"a base of other columns", {.slabs = in, .nin = 2, .base = narrow}},
        {"a keep of other columns", {.slabs = in, .nin = 2, .base = x, .keep = narrow}},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        enum zt_status st = zt_task_matmul_cols(&o, slab, &bad[i].in, w, NULL, 0, 0);
        ZT_TEST_TRUE(st == ZT_ERR_INVALID && strstr(zt_error_last(), "do not agree"),
                     "%s: status %d, error '%s'", bad[i].what, (int)st, zt_error_last());
    }
    zt_runtime_wait_all();
    zt_tensor_t all[] = {in[0], in[1], x, keep, narrow, w, slab};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) zt_tensor_free(all[i]);
}

/* a weight in column panels (zt_col_panels_from_f32, zt_tensor_set_col_panels): the forward
 * product and each panel's part give the row-major weight's bits (fp32 and f16 weights); a
 * part that is not a whole panel, a backward product over it and bad widths are refused */
static void panels(enum zt_dtype wdt) {
    const struct zt_task_opts o = {.layer = -1, .mb = -1};
    enum { ROWS = 12, PW = 64 }; /* 12 rows: the prompt path's products (widened 16-bit) */
    zt_tensor_t x = make("x", ROWS, C, ZT_DTYPE_F32), bias = make("bias", 1, OC, ZT_DTYPE_F32);
    zt_tensor_t w = make("w", C, OC, ZT_DTYPE_F32), wd = make("w_rows", C, OC, wdt);
    zt_tensor_t wp = make("w_panels", C, OC, wdt);
    zt_tensor_t want = make("want", ROWS, OC, ZT_DTYPE_F32), got = make("got", ROWS, OC,
                                                                         ZT_DTYPE_F32);
    zt_tensor_acquire(w, 0);
    zt_tensor_acquire(wd, 1);
    zt_tensor_acquire(wp, 1);
    zt_dtype_from_f32(wdt, zt_tensor_data(wd), zt_tensor_data(w), (size_t)C * OC);
    zt_col_panels_from_f32(wdt, zt_tensor_data(wp), zt_tensor_data(w), C, OC, PW);
    zt_tensor_release(wp);
    zt_tensor_release(wd);
    zt_tensor_release(w);
    ZT_TEST_TRUE(zt_tensor_set_col_panels(wp, PW) == ZT_OK, "panels: %s", zt_error_last());
    ZT_TEST_TRUE(zt_task_matmul_forward(&o, want, 0, x, wd, bias) == ZT_OK &&
                 zt_task_matmul_forward(&o, got, 0, x, wp, bias) == ZT_OK, "forward: %s",
                 zt_error_last());
    zt_runtime_wait_all();
    const char *name = zt_dtype_name(wdt);
    ZT_TEST_TRUE(same_bytes(want, got), "%s weight in panels: the forward's bits differ", name);
    /* decode rows: each panel a part */
    zt_tensor_t xs = make("xs", N, C, ZT_DTYPE_F32), whole = make("whole", N, OC, ZT_DTYPE_F32);
    zt_tensor_t slab[2] = {make("slab0", N, PW, ZT_DTYPE_F32),
                           make("slab1", N, OC - PW, ZT_DTYPE_F32)};
    const struct zt_cols_input in = {.inp = xs};
    ZT_TEST_TRUE(zt_task_matmul_forward(&o, whole, 0, xs, wd, bias) == ZT_OK &&
                 zt_task_matmul_cols(&o, slab[0], &in, wp, bias, 0, 0) == ZT_OK &&
                 zt_task_matmul_cols(&o, slab[1], &in, wp, bias, PW, 0) == ZT_OK, "parts: %s",
                 zt_error_last());
    zt_runtime_wait_all();
    ZT_TEST_TRUE(slab_is_part(whole, slab[0], 0, PW) && slab_is_part(whole, slab[1], PW, OC - PW),
                 "%s weight in panels: the parts' slabs differ from the product's columns", name);
    /* refused: a part across panels, a backward product, widths 0 and above the columns */
    zt_tensor_t half = make("half", N, 32, ZT_DTYPE_F32), din = make("din", ROWS, C,
                                                                      ZT_DTYPE_F32);
    enum zt_status st = zt_task_matmul_cols(&o, half, &in, wp, bias, 32, 0);
    ZT_TEST_TRUE(st == ZT_ERR_INVALID && strstr(zt_error_last(), "whole panel"),
                 "a part across panels: status %d, '%s'", (int)st, zt_error_last());
    st = zt_task_matmul_backward_inp(&o, din, 0, got, wp, 0);
    ZT_TEST_TRUE(st == ZT_ERR_INVALID && strstr(zt_error_last(), "column panels"),
                 "a backward product over panels: status %d, '%s'", (int)st, zt_error_last());
    ZT_TEST_TRUE(zt_tensor_set_col_panels(wd, 0) == ZT_ERR_INVALID &&
                 zt_tensor_set_col_panels(wd, OC + 1) == ZT_ERR_INVALID, "bad panel widths");
    zt_runtime_wait_all();
    zt_tensor_t all[] = {x, bias, w, wd, wp, want, got, xs, whole, slab[0], slab[1], half, din};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) zt_tensor_free(all[i]);
}

int main(void) {
    if (zt_tasks_init() != ZT_OK) {
        fprintf(stderr, "FAIL: zt_tasks_init: %s\n", zt_error_last());
        return 1;
    }
    bits(ZT_DTYPE_F32);
    bits(ZT_DTYPE_BF16); /* the bf16 model's products on a bf16 engine, else widened */
    refusals();
    panels(ZT_DTYPE_F32);
    panels(ZT_DTYPE_F16);
    zt_tasks_free();
    return zt_test_finish("test_matmul_cols");
}
