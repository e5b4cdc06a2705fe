/*
 * tests/tasks/test_matmul_cols.c: proves that a decode product's column parts that read the
 * slabs of the product before, add them to the residual stream, keep the sum and layer-norm it
 * (zt_task_matmul_cols with base, keep and ln_w) give the bits of the tasks they replace: the
 * concatenation with the residual (zt_task_concat_cols), the layernorm task and the whole
 * product (zt_task_matmul_forward), for fp32 and bf16 weights; and that a base with an input
 * block, a keep without a base, a keep that is the base and a base or keep of other columns
 * are refused (ZT_ERR_INVALID, "do not agree").
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

int main(void) {
    if (zt_tasks_init() != ZT_OK) {
        fprintf(stderr, "FAIL: zt_tasks_init: %s\n", zt_error_last());
        return 1;
    }
    bits(ZT_DTYPE_F32);
    bits(ZT_DTYPE_BF16); /* the bf16 model's products on a bf16 engine, else widened */
    refusals();
    zt_tasks_free();
    return zt_test_finish("test_matmul_cols");
}
