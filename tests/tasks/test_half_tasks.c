/*
 * tests/tasks/test_half_tasks.c: proves that task kinds run on bf16 and fp16 tensors as
 * round(fp32 kernel(widened inputs)), bit for bit against a direct computation: a linear layer
 * (16-bit activations, weight and bias, two row blocks), an accumulating weight gradient (+= on
 * a 16-bit gradient rounds once per task), a layernorm mixing a 16-bit output with fp32
 * mean/rstd, the loss task overwriting 16-bit logits in place, and on one rank a collective sum
 * into 16-bit and fp32 accumulators and an all-gather of 16-bit blocks (moved as 16-bit data).
 * Also that a slot listing blocks of two element types is refused, and that fp32 tensors are
 * untouched by the widening path (the same task on fp32 gives the kernel's bits). The same holds
 * for the tasks that convert only the rows or chunks they touch: the embedding (repeated tokens,
 * with and without positions), GELU and residual over several dispatcher chunks, the bias
 * gradient, the gradient norm over several conversion chunks, zeroing.
 */
#include <stdint.h>       /* uint16_t */
#include <stdlib.h>       /* malloc */
#include <string.h>       /* memcmp */
#include "zt_kernels.h"   /* the kernels, converters */
#include "zt_sched.h"     /* zt_runtime_wait_all */
#include "zt_tasks.h"     /* tasks under test */
#include "zt_test.h"      /* ZT_TEST_TRUE */

static uint32_t g_rng = 12345;
static float rnd(void) {
    g_rng = g_rng * 1103515245u + 12345u;
    return ((float)((g_rng >> 9) & 0xFFFF) / 65536.0f - 0.5f) * 4.0f;
}

/* a tensor of dtype dt filled with random values, and their exact fp32 widening in *wide */
static zt_tensor_t make(const char *name, int64_t rows, int64_t cols, enum zt_dtype dt, int nblk,
                        float **wide) {
    zt_tensor_t t = NULL;
    if (zt_tensor_init_dtype(&t, name, NULL, rows, cols, dt, nblk, NULL) != ZT_OK) {
        ZT_TEST_FAIL("tensor %s: %s", name, zt_error_last());
        exit(1);
    }
    size_t n = (size_t)(rows * cols);
    float *f = malloc(n * sizeof *f);
    for (size_t i = 0; i < n; i++) f[i] = rnd();
    void *d = zt_tensor_data(t);
    if (dt == ZT_DTYPE_BF16) zt_kern_f32_to_bf16(d, f, n);
    else if (dt == ZT_DTYPE_F16) zt_kern_f32_to_f16(d, f, n);
    else memcpy(d, f, n * 4);
    if (dt == ZT_DTYPE_BF16) zt_kern_bf16_to_f32(f, d, n);
    else if (dt == ZT_DTYPE_F16) zt_kern_f16_to_f32(f, d, n);
    *wide = f;
    return t;
}

/* the tensor's contents equal round(want) in its type */
static int same(zt_tensor_t t, const float *want, const char *what, enum zt_dtype dt) {
    size_t n = (size_t)zt_tensor_numel(t), bytes = n * zt_dtype_size(dt);
    unsigned char *exp = malloc(bytes);
    if (dt == ZT_DTYPE_BF16) zt_kern_f32_to_bf16((uint16_t *)exp, want, n);
    else if (dt == ZT_DTYPE_F16) zt_kern_f32_to_f16((uint16_t *)exp, want, n);
    else memcpy(exp, want, bytes);
    zt_tensor_acquire(t, 0);
    int ok = memcmp(zt_tensor_data(t), exp, bytes) == 0;
    zt_tensor_release(t);
    free(exp);
    ZT_TEST_TRUE(ok, "%s (%s): the task's bits differ from round(fp32 kernel)", what,
                 zt_dtype_name(dt));
    return ok;
}

static void run(enum zt_dtype dt) {
    enum { N = 6, C = 5, OC = 7, V = 9 };
    struct zt_task_opts o = {.layer = -1, .mb = -1};
    float *inp, *w, *b, *out0, *dw, *dout, *lw, *lb, *logits, *tmp;
    zt_tensor_t tinp = make("inp", N, C, dt, 2, &inp), tw = make("w", C, OC, dt, 1, &w);
    zt_tensor_t tb = make("b", 1, OC, dt, 1, &b), tout = make("out", N, OC, dt, 2, &out0);
    zt_tensor_t tdw = make("dw", C, OC, dt, 1, &dw), tdout = make("dout", N, OC, dt, 2, &dout);
    /* linear layer */
    for (int blk = 0; blk < 2; blk++)
        ZT_TEST_TRUE(zt_task_matmul_forward(&o, tout, blk, tinp, tw, tb) == ZT_OK, "matmul");
    float *want = malloc(N * OC * 4);
    zt_kern_matmul_forward(want, inp, w, b, N, C, OC);
    same(tout, want, "matmul_forward", dt);
    /* accumulating weight gradient: dw += inp^T dout over both row blocks, one rounding */
    ZT_TEST_TRUE(zt_task_matmul_backward_weight(&o, tdw, 0, tinp, tdout) == ZT_OK, "dw");
    zt_kern_matmul_backward_weight(dw, inp, dout, N, C, OC, 0, C);
    same(tdw, dw, "matmul_backward_weight", dt);
    /* layernorm: 16-bit out, fp32 mean and rstd in the same task */
    zt_tensor_t tlw = make("lw", 1, C, dt, 1, &lw), tlb = make("lb", 1, C, dt, 1, &lb);
    zt_tensor_t tln = make("ln", N, C, dt, 2, &tmp), tmean, trstd;
    free(tmp);
    zt_tensor_init(&tmean, "mean", NULL, N, 1, 4, 2, NULL);
    zt_tensor_init(&trstd, "rstd", NULL, N, 1, 4, 2, NULL);
    for (int blk = 0; blk < 2; blk++)
        ZT_TEST_TRUE(zt_task_layernorm_forward(&o, tln, tmean, trstd, blk, tinp, tlw, tlb) ==
                     ZT_OK, "layernorm");
    float *ln = malloc(N * C * 4), mean[N], rstd[N];
    zt_kern_layernorm_forward(ln, mean, rstd, inp, lw, lb, N, C);
    same(tln, ln, "layernorm_forward", dt);
    same(tmean, mean, "layernorm_forward mean", ZT_DTYPE_F32);
    same(trstd, rstd, "layernorm_forward rstd", ZT_DTYPE_F32);
    /* the loss task: 16-bit logits overwritten by their gradient, fp32 losses */
    zt_tensor_t tlog = make("logits", N, V, dt, 2, &logits), tloss, ttgt;
    zt_tensor_init(&tloss, "losses", NULL, N, 1, 4, 2, NULL);
    zt_tensor_init(&ttgt, "targets", NULL, 2, 3, sizeof(int32_t), 2, NULL); /* Bm = 2, T = 3 */
    int32_t *tg = zt_tensor_data(ttgt);
    for (int i = 0; i < N; i++) tg[i] = (i * 5) % V;
    for (int blk = 0; blk < 2; blk++)
        ZT_TEST_TRUE(zt_task_crossentropy(&o, tlog, tloss, blk, ttgt, 0.125f) == ZT_OK,
                     "crossentropy");
    float losses[N];
    zt_kern_crossentropy_forward_backward(logits, losses, tg, N, V, 0.125f);
    same(tlog, logits, "crossentropy dlogits", dt);
    same(tloss, losses, "crossentropy losses", ZT_DTYPE_F32);
    /* collectives on one rank: the sum of one copy added to a 16-bit and to an fp32 accumulator;
     * an all-gather copies its 16-bit source block into its part */
    zt_tensor_t tok, tacc16, tacc32, tsrc, tdst;
    float *acc16, *acc32, *src, *dstw;
    zt_tensor_init(&tok, "token", NULL, 1, 1, 4, 1, NULL);
    tacc16 = make("acc16", N, OC, dt, 2, &acc16);
    tacc32 = make("acc32", N, OC, ZT_DTYPE_F32, 2, &acc32);
    tsrc = make("src", N, OC, dt, 2, &src);
    tdst = make("dst", N, OC, dt, 2, &dstw);
    struct zt_block_ref refs[2] = {{tout, 0, 0}, {tout, 1, 0}};
    struct zt_block_ref a16[2] = {{tacc16, 0, 0}, {tacc16, 1, 0}};
    struct zt_block_ref a32[2] = {{tacc32, 0, 0}, {tacc32, 1, 0}};
    struct zt_block_ref srcr[2] = {{tsrc, 0, 0}, {tsrc, 1, 0}};
    struct zt_block_ref dstr[2] = {{tdst, 0, 0}, {tdst, 1, 0}};
    int64_t part[2] = {0, 2};
    ZT_TEST_TRUE(zt_task_comm_reduce_scatter(&o, refs, 2, part, a16, 2, tok) == ZT_OK, "rs16");
    ZT_TEST_TRUE(zt_task_comm_reduce_scatter(&o, refs, 2, part, a32, 2, tok) == ZT_OK, "rs32");
    ZT_TEST_TRUE(zt_task_comm_allgather(&o, dstr, 2, part, srcr, 2, 4, tok) == ZT_OK, "ag");
    float *outw = malloc(N * OC * 4);
    const void *od = zt_tensor_data(tout); /* valid: same() acquired it, no task writes it now */
    if (dt == ZT_DTYPE_BF16) zt_kern_bf16_to_f32(outw, od, N * OC);
    else if (dt == ZT_DTYPE_F16) zt_kern_f16_to_f32(outw, od, N * OC);
    else memcpy(outw, od, N * OC * 4);
    for (int i = 0; i < N * OC; i++) {
        acc16[i] += outw[i];
        acc32[i] += outw[i];
    }
    same(tacc16, acc16, "reduce_scatter into a 16-bit accumulator", dt);
    same(tacc32, acc32, "reduce_scatter of 16-bit blocks into an fp32 accumulator", ZT_DTYPE_F32);
    same(tdst, src, "allgather from a 16-bit source", dt);
    /* one slot cannot list blocks of two types */
    zt_tensor_t tpart;
    zt_tensor_init(&tpart, "partial", NULL, 1, 1, sizeof(double), 1, NULL);
    struct zt_block_ref mixed[2] = {{tdw, 0, 0}, {tacc32, 0, 0}};
    if (dt != ZT_DTYPE_F32)
        ZT_TEST_TRUE(zt_task_grad_sumsq(&o, tpart, 0, mixed, 2) == ZT_ERR_INVALID,
                     "a slot of %s and fp32 blocks is refused", zt_dtype_name(dt));
    zt_runtime_wait_all();
    zt_tensor_t all[] = {tinp, tw, tb, tout, tdw, tdout, tlw, tlb, tln, tmean, trstd, tlog, tloss,
                         ttgt, tok, tacc16, tacc32, tsrc, tdst, tpart};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) zt_tensor_free(all[i]);
    float *fl[] = {inp, w, b, out0, dw, dout, lw, lb, logits, want, ln, acc16, acc32, src, dstw,
                   outw};
    for (size_t i = 0; i < sizeof fl / sizeof *fl; i++) free(fl[i]);
}

/* x[n] rounded to type dt and widened back, in place */
static void round_to(enum zt_dtype dt, float *x, size_t n) {
    uint16_t *h = malloc(n * sizeof *h);
    if (dt == ZT_DTYPE_BF16) {
        zt_kern_f32_to_bf16(h, x, n);
        zt_kern_bf16_to_f32(x, h, n);
    } else if (dt == ZT_DTYPE_F16) {
        zt_kern_f32_to_f16(h, x, n);
        zt_kern_f16_to_f32(x, h, n);
    }
    free(h);
}

/* the tasks that convert only what they touch (hdr.native16 bodies, and the dispatcher's chunks
 * for elementwise kinds) give round(fp32 kernel(widened inputs)) too: the embedding (repeated
 * tokens, with and without positions), GELU and residual over more than one chunk, the bias
 * gradient, the gradient norm over more than one conversion chunk, and zeroing */
static void run_native(enum zt_dtype dt) {
    enum { B = 2, T = 3, N = B * T, C = 5, V = 11, OC = 7, E = 5000, G = 3001 };
    struct zt_task_opts o = {.layer = -1, .mb = -1};
    float *wte, *wpe, *out, *dwte, *dwpe, *dout, *x, *y, *z, *g, *db, *dd;
    zt_tensor_t tt, twte = make("wte", V, C, dt, 1, &wte), twpe = make("wpe", T, C, dt, 1, &wpe);
    zt_tensor_t tout = make("emb", N, C, dt, 2, &out), tdwte = make("dwte", V, C, dt, 1, &dwte);
    zt_tensor_t tdwpe = make("dwpe", T, C, dt, 1, &dwpe), tdout = make("demb", N, C, dt, 2, &dout);
    zt_tensor_init(&tt, "tokens", NULL, B, T, sizeof(int32_t), 2, NULL);
    int32_t *tok = zt_tensor_data(tt);
    for (int i = 0; i < N; i++) tok[i] = (i * 4) % 3 + (i == 5 ? 7 : 0); /* 0 1 2 0 1 9 */
    for (int blk = 0; blk < 2; blk++)
        ZT_TEST_TRUE(zt_task_encoder_forward(&o, tout, blk, tt, twte, twpe) == ZT_OK, "emb");
    ZT_TEST_TRUE(zt_task_encoder_backward(&o, tdwte, tdwpe, tdout, tt) == ZT_OK, "demb");
    float *want = malloc((size_t)E * 2 * sizeof(float));
    zt_kern_encoder_forward(want, tok, wte, wpe, N, T, 0, C);
    same(tout, want, "encoder_forward", dt);
    zt_kern_encoder_backward(dwte, dwpe, dout, tok, N, T, 0, C);
    same(tdwte, dwte, "encoder_backward dwte", dt);
    same(tdwpe, dwpe, "encoder_backward dwpe", dt);
    ZT_TEST_TRUE(zt_task_encoder_backward(&o, tdwte, NULL, tdout, tt) == ZT_OK, "demb, no wpe");
    round_to(dt, dwte, V * C); /* the second pass adds to the stored (rounded) sums */
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) dwte[tok[n] * C + c] += dout[n * C + c];
    same(tdwte, dwte, "encoder_backward without positions", dt);
    /* elementwise kinds over two blocks of E values (more than one chunk each) */
    zt_tensor_t tx = make("x", 2, E, dt, 2, &x), ty = make("y", 2, E, dt, 2, &y);
    zt_tensor_t tz = make("z", 2, E, dt, 2, &z);
    for (int blk = 0; blk < 2; blk++) {
        ZT_TEST_TRUE(zt_task_gelu_forward(&o, ty, blk, tx) == ZT_OK, "gelu");
        ZT_TEST_TRUE(zt_task_gelu_backward(&o, tz, blk, tx) == ZT_OK, "dgelu");
    }
    zt_kern_gelu_forward(want, x, 2 * E);
    same(ty, want, "gelu_forward in chunks", dt);
    zt_kern_gelu_backward(z, x, z, 2 * E);
    same(tz, z, "gelu_backward in chunks (in place)", dt);
    for (int blk = 0; blk < 2; blk++)
        ZT_TEST_TRUE(zt_task_residual_forward(&o, tz, blk, tx, ty) == ZT_OK, "residual");
    zt_tensor_acquire(ty, 0); /* y as the task stored it */
    float *yw = malloc((size_t)2 * E * sizeof(float));
    if (dt == ZT_DTYPE_BF16) zt_kern_bf16_to_f32(yw, zt_tensor_data(ty), 2 * E);
    else if (dt == ZT_DTYPE_F16) zt_kern_f16_to_f32(yw, zt_tensor_data(ty), 2 * E);
    else memcpy(yw, zt_tensor_data(ty), (size_t)2 * E * sizeof(float));
    zt_tensor_release(ty);
    zt_kern_residual_forward(want, x, yw, 2 * E);
    same(tz, want, "residual_forward in chunks", dt);
    /* bias gradient over both row blocks; the gradient norm of G values; zeroing */
    zt_tensor_t tdb = make("db", 1, OC, dt, 1, &db), tdd = make("dd", N, OC, dt, 2, &dd);
    ZT_TEST_TRUE(zt_task_matmul_backward_bias(&o, tdb, tdd) == ZT_OK, "dbias");
    zt_kern_matmul_backward_bias(db, dd, N, OC);
    same(tdb, db, "matmul_backward_bias", dt);
    zt_tensor_t tg = make("g", 1, G, dt, 1, &g), tpart;
    zt_tensor_init(&tpart, "partial", NULL, 1, 1, sizeof(double), 1, NULL);
    struct zt_block_ref gr[1] = {{tg, 0, 0}};
    ZT_TEST_TRUE(zt_task_grad_sumsq(&o, tpart, 0, gr, 1) == ZT_OK, "sumsq");
    zt_tensor_acquire(tpart, 0);
    double got = *(double *)zt_tensor_data(tpart), exp = zt_kern_sumsq(g, G);
    zt_tensor_release(tpart);
    ZT_TEST_TRUE(memcmp(&got, &exp, sizeof got) == 0, "grad_sumsq (%s): %.17g, want %.17g",
                 zt_dtype_name(dt), got, exp);
    ZT_TEST_TRUE(zt_task_zero(&o, tx) == ZT_OK, "zero");
    for (int i = 0; i < 2 * E; i++) want[i] = 0.0f;
    same(tx, want, "fill_zero", dt);
    zt_runtime_wait_all();
    zt_tensor_t all[] = {tt, twte, twpe, tout, tdwte, tdwpe, tdout, tx, ty, tz, tdb, tdd, tg, tpart};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) zt_tensor_free(all[i]);
    float *fl[] = {wte, wpe, out, dwte, dwpe, dout, x, y, z, g, db, dd, want, yw};
    for (size_t i = 0; i < sizeof fl / sizeof *fl; i++) free(fl[i]);
}

int main(void) {
    if (zt_tasks_init() != ZT_OK) {
        fprintf(stderr, "FAIL: zt_tasks_init: %s\n", zt_error_last());
        return 1;
    }
    /* run() states round(fp32 kernel): bf16 matmuls widened, not on the CPU's bf16 engine (whose
     * sums go in another order: test_gemm_bf16 and test_precision prove it) */
    zt_kern_gemm16_set(ZT_GEMM16_WIDEN);
    run(ZT_DTYPE_BF16);
    run(ZT_DTYPE_F16);
    run(ZT_DTYPE_F32); /* the plain path: the same checks hold with no rounding */
    run_native(ZT_DTYPE_BF16);
    run_native(ZT_DTYPE_F16);
    run_native(ZT_DTYPE_F32);
    zt_tasks_free();
    return zt_test_finish("test_half_tasks");
}
