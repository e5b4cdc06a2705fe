/*
 * tests/kernels/test_attention.c: proves zt_kern_attention_forward (out and the saved softmax
 * att, zero above the diagonal) and zt_kern_attention_backward (dqkv) against PyTorch float64
 * (nanoGPT's masked-softmax attention) and autograd, for B=2,T=5,C=8,NH=2 and for
 * B=1,T=130,C=8,NH=2 (three causal row blocks of the blocked sgemm, the last one partial); that
 * dqkv is fully overwritten (destination and scratch pre-filled with NaN); that repeated calls
 * are bit-identical; and dqkv against central finite differences of the float forward (every
 * input for T=5, every 7th for T=130).
 * Tolerances vs PyTorch: 1e-5 * max(1,|ref|) (float sgemm with K <= T, float softmax).
 * Where the CPU has a bf16 engine, the bf16 kernels on bf16-rounded qkv and dout against the fp32
 * kernels on the same values: att within 4e-3 (one bf16 rounding, 2^-9 relative, of values <= 1),
 * out within 1e-2 and dqkv within 2e-2 * max(1,|ref|) (the rounded probabilities and softmax
 * gradients enter K <= T products, and the results are rounded once more); and one sequence at a
 * time gives the bits of the batch. The inference cache in bf16 or fp16 (zt_kern_kv_store16)
 * attends with the bits of an fp32 cache holding the same rounded values.
 * Finite differences: step 1e-2; softmax curvature gives truncation ~1e-5, float rounding of
 * L = sum dout*out (~1e-6 for T=5, ~1e-5 for T=130) over 2e-2 gives <= 5e-4: tol 2e-3.
 */
#include <math.h>   /* NAN */
#include <stdio.h>  /* printf, snprintf */
#include <stdlib.h> /* EXIT_FAILURE */
#include <string.h> /* memcmp */

#include "kernels_ref.h" /* reference readers, checks */
#include "zt_kernels.h"  /* kernels under test */

struct att_ctx {
    float *out, *att;
    const float *qkv, *dout;
    int B, T, C, NH;
};

static double att_loss(void *p) {
    struct att_ctx *c = p;
    zt_kern_attention_forward(c->out, c->att, c->qkv, c->B, c->T, c->C, c->NH);
    return kref_dot(c->out, c->dout, (size_t)c->B * c->T * c->C);
}

static void run_case(const char *cs, size_t fd_stride) {
    const int B = kref_meta(cs, "B"), T = kref_meta(cs, "T"), C = kref_meta(cs, "C"),
              NH = kref_meta(cs, "NH");
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C,
                 natt = (size_t)B * NH * T * T;
    float *qkv = kref_f32(cs, "qkv", nqkv);
    const float *dout = kref_f32(cs, "dout", nout);
    char lbl[128];

    float *out = kref_floats(nout, NAN), *att = kref_floats(natt, NAN);
    zt_kern_attention_forward(out, att, qkv, B, T, C, NH);
    snprintf(lbl, sizeof lbl, "%s forward out", cs);
    KREF_CHECK(out, kref_f64(cs, "out", nout), nout, 1e-5, lbl);
    snprintf(lbl, sizeof lbl, "%s forward att (incl. zeros above the diagonal)", cs);
    KREF_CHECK(att, kref_f64(cs, "att", natt), natt, 1e-5, lbl);
    for (int bh = 0; bh < B * NH; bh++)
        for (int i = 0; i < T; i++)
            for (int j = i + 1; j < T; j++)
                if (att[((size_t)bh * T + i) * T + j] != 0.0f) {
                    ZT_TEST_FAIL("%s: att[%d][%d][%d] above the diagonal is not 0", cs, bh, i, j);
                    i = T;
                    bh = B * NH;
                    break;
                }

    const size_t nscr = zt_kern_attention_scratch_floats(T);
    float *scratch = kref_floats(nscr, NAN);
    float *dqkv = kref_floats(nqkv, NAN);
    zt_kern_attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH);
    snprintf(lbl, sizeof lbl, "%s backward dqkv", cs);
    KREF_CHECK(dqkv, kref_f64(cs, "dqkv", nqkv), nqkv, 1e-5, lbl);

    // determinism: same inputs, bit-identical outputs (scratch now holds old values)
    float *out2 = kref_floats(nout, 1), *att2 = kref_floats(natt, 1), *dqkv2 = kref_floats(nqkv, 1);
    zt_kern_attention_forward(out2, att2, qkv, B, T, C, NH);
    zt_kern_attention_backward(dqkv2, scratch, dout, qkv, att2, B, T, C, NH);
    snprintf(lbl, sizeof lbl, "%s repeated forward out", cs);
    KREF_CHECK_BITS(out2, out, nout, lbl);
    snprintf(lbl, sizeof lbl, "%s repeated backward dqkv", cs);
    KREF_CHECK_BITS(dqkv2, dqkv, nqkv, lbl);

    struct att_ctx ctx = {kref_floats(nout, 0), kref_floats(natt, 0), qkv, dout, B, T, C, NH};
    snprintf(lbl, sizeof lbl, "%s dqkv", cs);
    KREF_CHECK_FD(dqkv, qkv, nqkv, fd_stride, 1e-2, 2e-3, att_loss, &ctx, lbl);
}

/* n values rounded to bf16, and their widened copy */
static uint16_t *to_bf16(const float *x, size_t n, float **wide) {
    uint16_t *h = (uint16_t *)kref_alloc(n * sizeof *h);
    zt_kern_f32_to_bf16(h, x, n);
    *wide = kref_floats(n, 0);
    zt_kern_bf16_to_f32(*wide, h, n);
    return h;
}

/* the bf16 kernels against the fp32 ones on the same (bf16-rounded) inputs; each sequence on its
 * own gives the bits of the batch */
static void run_case_bf16(const char *cs) {
    const int B = kref_meta(cs, "B"), T = kref_meta(cs, "T"), C = kref_meta(cs, "C"),
              NH = kref_meta(cs, "NH");
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C,
                 natt = (size_t)B * NH * T * T;
    float *qkvw, *doutw;
    uint16_t *qkv = to_bf16(kref_f32(cs, "qkv", nqkv), nqkv, &qkvw);
    uint16_t *dout = to_bf16(kref_f32(cs, "dout", nout), nout, &doutw);
    float *out = kref_floats(nout, NAN), *att = kref_floats(natt, NAN);
    float *dqkv = kref_floats(nqkv, NAN);
    zt_kern_attention_forward(out, att, qkvw, B, T, C, NH);
    zt_kern_attention_backward(dqkv, kref_floats(zt_kern_attention_scratch_floats(T), 0), doutw,
                               qkvw, att, B, T, C, NH);

    float *scr = kref_floats(zt_kern_attention_bf16_scratch_floats(T, C / NH), NAN);
    uint16_t *o16 = (uint16_t *)kref_alloc(nout * 2), *a16 = (uint16_t *)kref_alloc(natt * 2);
    uint16_t *d16 = (uint16_t *)kref_alloc(nqkv * 2);
    ZT_TEST_TRUE(zt_kern_attention_forward_bf16(o16, a16, qkv, scr, B, T, C, NH) == 0 &&
                 zt_kern_attention_backward_bf16(d16, scr, dout, qkv, a16, B, T, C, NH) == 0,
                 "%s: the bf16 kernels declined", cs);
    float *o = kref_floats(nout, 0), *a = kref_floats(natt, 0), *d = kref_floats(nqkv, 0);
    zt_kern_bf16_to_f32(o, o16, nout);
    zt_kern_bf16_to_f32(a, a16, natt);
    zt_kern_bf16_to_f32(d, d16, nqkv);
    char lbl[128];
    snprintf(lbl, sizeof lbl, "%s bf16 att against fp32", cs);
    KREF_CHECK(a, kref_widen(att, natt), natt, 4e-3, lbl);
    snprintf(lbl, sizeof lbl, "%s bf16 out against fp32", cs);
    KREF_CHECK(o, kref_widen(out, nout), nout, 1e-2, lbl);
    snprintf(lbl, sizeof lbl, "%s bf16 dqkv against fp32", cs);
    KREF_CHECK(d, kref_widen(dqkv, nqkv), nqkv, 2e-2, lbl);

    uint16_t *o1 = (uint16_t *)kref_alloc(nout * 2), *a1 = (uint16_t *)kref_alloc(natt * 2);
    uint16_t *d1 = (uint16_t *)kref_alloc(nqkv * 2);
    for (int b = 0; b < B; b++) {
        size_t q0 = (size_t)b * T * 3 * C, o0 = (size_t)b * T * C, a0 = (size_t)b * NH * T * T;
        zt_kern_attention_forward_bf16(o1 + o0, a1 + a0, qkv + q0, scr, 1, T, C, NH);
        zt_kern_attention_backward_bf16(d1 + q0, scr, dout + o0, qkv + q0, a1 + a0, 1, T, C, NH);
    }
    ZT_TEST_TRUE(memcmp(o1, o16, nout * 2) == 0 && memcmp(a1, a16, natt * 2) == 0 &&
                 memcmp(d1, d16, nqkv * 2) == 0,
                 "%s bf16: one sequence at a time changes the bits", cs);
}

/* the 16-bit KV caches (bf16, fp16): zt_kern_kv_store16 rounds K and V, and
 * zt_kern_attention_cached16 has the bits of zt_kern_attention_cached on an fp32 cache holding
 * the rounded values, for new rows at several positions (one decode row, a few rows read as
 * stored, a chunk, the whole sequence) and head ranges */
static void cached16(int is_f16) {
    enum { C = 64, NH = 4, CTX = 80, HS = C / NH };
    static float k[CTX][C], v[CTX][C], kr[CTX][C], vr[CTX][C], q[CTX][3 * C];
    static float kv32[2 * C * CTX], out32[CTX * C], out16[CTX * C];
    static uint16_t kv16[2 * C * CTX];
    static float scratch[CTX * 64 + 2 * CTX * HS + 4096];
    for (int p = 0; p < CTX; p++)
        for (int c = 0; c < C; c++) {
            k[p][c] = sinf(0.37f * (float)(p * C + c)) * 1.7f;
            v[p][c] = cosf(0.11f * (float)(p * C + c) + 0.5f);
            for (int j = 0; j < 3; j++) q[p][j * C + c] = sinf(0.05f * (float)(p * 3 * C + c) + j);
        }
    uint16_t tmp[C];
    for (int p = 0; p < CTX; p++) {
        if (is_f16) {
            zt_kern_f32_to_f16(tmp, k[p], C), zt_kern_f16_to_f32(kr[p], tmp, C);
            zt_kern_f32_to_f16(tmp, v[p], C), zt_kern_f16_to_f32(vr[p], tmp, C);
        } else {
            zt_kern_f32_to_bf16(tmp, k[p], C), zt_kern_bf16_to_f32(kr[p], tmp, C);
            zt_kern_f32_to_bf16(tmp, v[p], C), zt_kern_bf16_to_f32(vr[p], tmp, C);
        }
        zt_kern_kv_store(kv32, CTX, p, kr[p], vr[p], C, NH);
        zt_kern_kv_store16(kv16, is_f16, CTX, p, k[p], v[p], C, NH);
    }
    ZT_TEST_TRUE(zt_kern_attention_cached16_scratch_floats(CTX, HS) <=
                     sizeof scratch / sizeof *scratch, "cached16 scratch");
    static const int CASES[][4] = {{0, 1, 0, 4},  {37, 1, 1, 3}, {79, 1, 0, 4}, {20, 5, 0, 4},
                                   {0, 8, 1, 3},  {71, 8, 0, 2}, {10, 20, 2, 4}, {0, 80, 0, 4}};
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        int p0 = CASES[i][0], m = CASES[i][1], h0 = CASES[i][2], h1 = CASES[i][3];
        int ldo = (h1 - h0) * HS;
        zt_kern_attention_cached(out32, ldo, scratch, q[p0], 3 * C, kv32, CTX, p0, m, C, NH, h0,
                                 h1);
        zt_kern_attention_cached16(out16, ldo, scratch, q[p0], 3 * C, kv16, is_f16, CTX, p0, m,
                                   C, NH, h0, h1);
        ZT_TEST_TRUE(memcmp(out32, out16, (size_t)m * ldo * sizeof(float)) == 0,
                     "%s cache, rows %d..%d, heads %d..%d: not the bits of the fp32 cache "
                     "holding the rounded values", is_f16 ? "f16" : "bf16", p0, p0 + m - 1, h0,
                     h1 - 1);
    }
}

int main(void) {
    zt_kern_blas_init();
    cached16(0);
    cached16(1);
    kref_init();
    run_case("attention", 1);
    run_case("attention_t130", 7);
    if (zt_kern_gemm16_get() != ZT_GEMM16_WIDEN) {
        run_case_bf16("attention");
        run_case_bf16("attention_t130");
    } else {
        printf("bf16 attention: no bf16 engine on this CPU\n");
    }
    kref_free_all();
    return zt_test_finish("test_attention");
}
