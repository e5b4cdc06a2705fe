/*
 * kernels/cpu/attention.c: causal multi-head self-attention, GPT-2 style, forward and backward
 * (bottom layer, pure compute).
 *
 * Per (b, h) the products are zt_kern_sgemm calls reading q, k, v in place from qkv[B,T,3C]
 * (leading dimension 3C, head h at column offset h*hs): no copies. The causal structure is used
 * by cutting the T rows into blocks of ATT_TB: row block [i0, i1) only needs key columns
 * [0, i1), and column block [j0, j1) of a transposed product only needs rows [j0, T), so about
 * half of the T x T work is skipped. Entries of a block that lie above the diagonal are computed
 * but zeroed before use. Softmax uses a vectorizable exponential (zt_kern_expf, ~2 ulp) and
 * ATT_LANES fixed-order partial sums; every result is bit-identical run to run.
 * Reference: llm.c train_gpt2.c attention_forward / attention_backward; nanoGPT
 * CausalSelfAttention (https://github.com/karpathy/nanoGPT/blob/master/model.py).
 */
#include <assert.h> /* assert */
#include <math.h>   /* sqrtf */
#include <stddef.h> /* size_t */
#include <stdint.h> /* int32_t, uint32_t */
#include <string.h> /* memcpy, memset */

#include "kern_math.h"  /* zt_kern_expf */
#include "zt_kernels.h" /* prototypes */

#define ATT_TB 64 /* causal row block */
#define ATT_LANES 8


static inline float lanes_sum(const float acc[ATT_LANES]) {
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// in-place softmax of row[0..n), n >= 1
static void softmax_row(float *row, int n) {
    float macc[ATT_LANES];
    for (int l = 0; l < ATT_LANES; l++) macc[l] = row[0];
    int j = 0;
    for (; j + ATT_LANES <= n; j += ATT_LANES) {
        for (int l = 0; l < ATT_LANES; l++) macc[l] = row[j + l] > macc[l] ? row[j + l] : macc[l];
    }
    float mx = macc[0];
    for (int l = 1; l < ATT_LANES; l++) mx = macc[l] > mx ? macc[l] : mx;
    for (; j < n; j++) mx = row[j] > mx ? row[j] : mx;

    for (j = 0; j < n; j++) row[j] = zt_kern_expf(row[j] - mx);

    float acc[ATT_LANES] = {0};
    j = 0;
    for (; j + ATT_LANES <= n; j += ATT_LANES) {
        for (int l = 0; l < ATT_LANES; l++) acc[l] += row[j + l];
    }
    float sum = lanes_sum(acc);
    for (; j < n; j++) sum += row[j];

    const float inv = 1.0f / sum;
    for (j = 0; j < n; j++) row[j] *= inv;
}

size_t zt_kern_attention_scratch_floats(int T) {
    assert(T > 0);
    return (size_t)T * (size_t)T;
}

/* The three blocked products of one (b, h), each cut into row (or column) blocks of ATT_TB so
 * that the causal structure skips the zero half of the T x T matrix P (leading dimension T).
 * Row operands are [T, hs] with their own leading dimension. */
static inline int blk_end(int x0, int T) { return x0 + ATT_TB < T ? x0 + ATT_TB : T; }

/* P[i0:i1, 0:i1] = alpha * X[i0:i1] @ Y[0:i1]^T */
static void causal_xyt(float *P, float alpha, const float *X, int ldx, const float *Y, int ldy,
                       int T, int hs) {
    for (int i0 = 0; i0 < T; i0 += ATT_TB) {
        int i1 = blk_end(i0, T);
        zt_kern_sgemm(0, 1, i1 - i0, i1, hs, alpha,
                    X + (size_t)i0 * ldx, ldx, Y, ldy, 0.0f, P + (size_t)i0 * T, T);
    }
}

/* O[i0:i1] = P[i0:i1, 0:i1] @ Y[0:i1]  (P is 0 above the diagonal) */
static void causal_py(float *O, int ldo, const float *P, const float *Y, int ldy, int T, int hs) {
    for (int i0 = 0; i0 < T; i0 += ATT_TB) {
        int i1 = blk_end(i0, T);
        zt_kern_sgemm(0, 0, i1 - i0, hs, i1, 1.0f,
                    P + (size_t)i0 * T, T, Y, ldy, 0.0f, O + (size_t)i0 * ldo, ldo);
    }
}

/* O[j0:j1] = P[j0:T, j0:j1]^T @ Y[j0:T]  (P is 0 above the diagonal) */
static void causal_pty(float *O, int ldo, const float *P, const float *Y, int ldy, int T,
                       int hs) {
    for (int j0 = 0; j0 < T; j0 += ATT_TB) {
        int j1 = blk_end(j0, T);
        zt_kern_sgemm(1, 0, j1 - j0, hs, T - j0, 1.0f,
                    P + (size_t)j0 * T + j0, T, Y + (size_t)j0 * ldy, ldy, 0.0f,
                    O + (size_t)j0 * ldo, ldo);
    }
}

// ----------------------------------------------------------------------------
// out[B,T,C], att[B,NH,T,T] (softmax probabilities, 0 above the diagonal) from qkv[B,T,3C]
// att = softmax(mask(q k^T / sqrt(hs))), out = att @ v, per head
void zt_kern_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                               int NH) {
    assert(B >= 0 && T > 0 && NH > 0 && C % NH == 0);
    const int hs = C / NH;
    const int C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs;
            const float *k = q + C;
            const float *v = q + 2 * C;
            float *a = att + ((size_t)b * NH + h) * T * T;
            float *o = out + (size_t)b * T * C + (size_t)h * hs;

            // preatt = scale * q @ k^T (lower triangle, by row blocks)
            causal_xyt(a, scale, q, C3, k, C3, T, hs);
            // causal softmax over j <= i; everything above the diagonal becomes 0
            for (int i = 0; i < T; i++) {
                float *row = a + (size_t)i * T;
                softmax_row(row, i + 1);
                memset(row + i + 1, 0, (size_t)(T - i - 1) * sizeof(float));
            }
            // out = att @ v
            causal_py(o, C, a, v, C3, T, hs);
        }
    }
}

// ----------------------------------------------------------------------------
// inference: m new rows of one sequence (positions p0..p0+m-1) against its KV cache, head-major
// (zt_kernels.h): head h's keys are the [ctx, hs] matrix at kv + h*ctx*hs, its values the one
// at kv + (NH + h)*ctx*hs, positions 0..p0+m-1 present. Row i attends to positions 0..p0+i.
// The products are the forward's, cut the same way: the scores of a row block come from one
// product with K = hs, softmax_row over the row's own positions, and out = P @ V with the
// masked entries zero, so (with the AVX-512 engine, whose element order depends on K's
// 384-blocks only and ignores zero terms past the last) every output has the bits that
// zt_kern_attention_forward gives the same position.
void zt_kern_kv_store(float *kv, int ctx, int pos, const float *k, const float *v, int C,
                      int NH) {
    assert(0 <= pos && pos < ctx && NH > 0 && C % NH == 0);
    const size_t hs = (size_t)(C / NH);
    for (int h = 0; h < NH; h++) {
        memcpy(kv + ((size_t)h * ctx + pos) * hs, k + h * hs, hs * sizeof(float));
        memcpy(kv + ((size_t)(NH + h) * ctx + pos) * hs, v + h * hs, hs * sizeof(float));
    }
}

size_t zt_kern_attention_cached_scratch_floats(int npos) {
    assert(npos > 0);
    return (size_t)ATT_TB * (size_t)npos;
}

/* one head of zt_kern_attention_cached: its keys k and values v ([p0 + m, hs]), its queries at
 * q (rows ldq apart), its output at out (rows ldo apart); P: ATT_TB x (p0 + m) floats */
static void head_cached(float *out, int ldo, float *P, const float *q, int ldq, const float *k,
                        const float *v, int p0, int m, int hs) {
    const float scale = 1.0f / sqrtf((float)hs);
    for (int r0 = 0; r0 < m; r0 += ATT_TB) {
        int r1 = blk_end(r0, m), npos = p0 + r1; /* the block's last row sees npos keys */
        zt_kern_sgemm(0, 1, r1 - r0, npos, hs, scale, q + (size_t)r0 * ldq, ldq, k, hs, 0.0f, P,
                      npos);
        for (int i = r0; i < r1; i++) {
            float *row = P + (size_t)(i - r0) * npos;
            int n = p0 + i + 1;
            softmax_row(row, n);
            memset(row + n, 0, (size_t)(npos - n) * sizeof(float));
        }
        zt_kern_sgemm(0, 0, r1 - r0, hs, npos, 1.0f, P, npos, v, hs, 0.0f,
                      out + (size_t)r0 * ldo, ldo);
    }
}

void zt_kern_attention_cached(float *out, int ldo, float *scratch, const float *q, int ldq,
                              const float *kv, int ctx, int p0, int m, int C, int NH, int h0,
                              int h1) {
    assert(p0 >= 0 && m > 0 && p0 + m <= ctx && NH > 0 && C % NH == 0 && 0 <= h0 && h0 < h1 &&
           h1 <= NH);
    const int hs = C / NH;
    for (int h = h0; h < h1; h++)
        head_cached(out + (size_t)(h - h0) * hs, ldo, scratch, q + (size_t)h * hs, ldq,
                    kv + (size_t)h * ctx * hs, kv + (size_t)(NH + h) * ctx * hs, p0, m, hs);
}

// The 16-bit cache: K and V rounded to bf16 or fp16 (nearest even) as they are stored, half the
// bytes a decode step reads; the attention reads them as stored (a few rows) or widens a head's
// positions exactly into scratch, with the bits of an fp32 cache holding the rounded values.
static void round16(uint16_t *dst, const float *src, size_t n, int is_f16) {
    if (is_f16) zt_kern_f32_to_f16(dst, src, n);
    else zt_kern_f32_to_bf16(dst, src, n);
}

static void widen16(float *dst, const uint16_t *src, size_t n, int is_f16) {
    if (is_f16) zt_kern_f16_to_f32(dst, src, n);
    else zt_kern_bf16_to_f32(dst, src, n);
}

void zt_kern_kv_store16(uint16_t *kv, int is_f16, int ctx, int pos, const float *k,
                        const float *v, int C, int NH) {
    assert(0 <= pos && pos < ctx && NH > 0 && C % NH == 0);
    const size_t hs = (size_t)(C / NH);
    for (int h = 0; h < NH; h++) {
        round16(kv + ((size_t)h * ctx + pos) * hs, k + h * hs, hs, is_f16);
        round16(kv + ((size_t)(NH + h) * ctx + pos) * hs, v + h * hs, hs, is_f16);
    }
}

size_t zt_kern_attention_cached16_scratch_floats(int npos, int hs) {
    assert(npos > 0 && hs > 0);
    return zt_kern_attention_cached_scratch_floats(npos) + 2 * (size_t)npos * (size_t)hs;
}

/* one head on a 16-bit cache for a few rows (m <= ZT_KERN_FEW_ROWS): the two products read K and
 * V as stored (zt_kern_sgemm_w16: the bits of zt_kern_sgemm on them widened), the queries
 * scaled first into qs as the blocked product scales its A (alpha * a, rounded once); 0, or -1
 * (nothing done) off the AVX-512 engine */
static int head_cached16_few(float *out, int ldo, float *P, float *qs, const float *q, int ldq,
                             const uint16_t *k, const uint16_t *v, int is_f16, int p0, int m,
                             int hs) {
    const float scale = 1.0f / sqrtf((float)hs);
    int npos = p0 + m;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < hs; j++) qs[(size_t)i * hs + j] = scale * q[(size_t)i * ldq + j];
    if (zt_kern_sgemm_w16(1, m, npos, hs, qs, hs, k, is_f16, hs, 0.0f, P, npos) != 0) return -1;
    for (int i = 0; i < m; i++) {
        float *row = P + (size_t)i * npos;
        softmax_row(row, p0 + i + 1);
        memset(row + p0 + i + 1, 0, (size_t)(m - i - 1) * sizeof(float));
    }
    return zt_kern_sgemm_w16(0, m, hs, npos, P, npos, v, is_f16, hs, 0.0f, out, ldo);
}

void zt_kern_attention_cached16(float *out, int ldo, float *scratch, const float *q, int ldq,
                                const uint16_t *kv, int is_f16, int ctx, int p0, int m, int C,
                                int NH, int h0, int h1) {
    assert(p0 >= 0 && m > 0 && p0 + m <= ctx && NH > 0 && C % NH == 0 && 0 <= h0 && h0 < h1 &&
           h1 <= NH);
    const int hs = C / NH, n = p0 + m;
    float *k = scratch + zt_kern_attention_cached_scratch_floats(n), *v = k + (size_t)n * hs;
    for (int h = h0; h < h1; h++) {
        const uint16_t *k16 = kv + (size_t)h * ctx * hs, *v16 = kv + (size_t)(NH + h) * ctx * hs;
        float *o = out + (size_t)(h - h0) * hs;
        if (m <= ZT_KERN_FEW_ROWS &&
            head_cached16_few(o, ldo, scratch, k, q + (size_t)h * hs, ldq, k16, v16, is_f16, p0,
                              m, hs) == 0)
            continue;
        widen16(k, k16, (size_t)n * hs, is_f16);
        widen16(v, v16, (size_t)n * hs, is_f16);
        head_cached(o, ldo, scratch, q + (size_t)h * hs, ldq, k, v, p0, m, hs);
    }
}

// ----------------------------------------------------------------------------
// dqkv[B,T,3C] (overwritten) from dout[B,T,C], qkv[B,T,3C], att[B,NH,T,T]
// scratch[T*T] holds datt, then dpreatt, of one (b, h) at a time
//   datt = dout @ v^T;  dv = att^T @ dout
//   dpreatt[i,j] = scale * att[i,j] (datt[i,j] - sum_k att[i,k] datt[i,k])  (j <= i)
//   dq = dpreatt @ k;  dk = dpreatt^T @ q
void zt_kern_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                                const float *att, int B, int T, int C, int NH) {
    assert(B >= 0 && T > 0 && NH > 0 && C % NH == 0);
    const int hs = C / NH;
    const int C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    float *dp = scratch;
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const size_t qoff = (size_t)b * T * C3 + (size_t)h * hs;
            const float *q = qkv + qoff;
            const float *k = q + C;
            const float *v = q + 2 * C;
            float *dq = dqkv + qoff;
            float *dk = dq + C;
            float *dv = dq + 2 * C;
            const float *a = att + ((size_t)b * NH + h) * T * T;
            const float *d = dout + (size_t)b * T * C + (size_t)h * hs;

            // datt = dout @ v^T (lower triangle); dv = att^T @ dout
            causal_xyt(dp, 1.0f, d, C, v, C3, T, hs);
            causal_pty(dv, C3, a, d, C, T, hs);
            // softmax backward, in place in dp; zero the above-diagonal part of each row's block,
            // which the blocked dq / dk products below read
            for (int i = 0; i < T; i++) {
                const float *ar = a + (size_t)i * T;
                float *row = dp + (size_t)i * T;
                const int n = i + 1;
                float acc[ATT_LANES] = {0};
                int j = 0;
                for (; j + ATT_LANES <= n; j += ATT_LANES) {
                    for (int l = 0; l < ATT_LANES; l++) acc[l] += ar[j + l] * row[j + l];
                }
                float dot = lanes_sum(acc);
                for (; j < n; j++) dot += ar[j] * row[j];
                for (j = 0; j < n; j++) row[j] = scale * (ar[j] * (row[j] - dot));
                int bend = blk_end(i - i % ATT_TB, T); /* end of row i's block */
                if (bend > n) memset(row + n, 0, (size_t)(bend - n) * sizeof(float));
            }
            // dq = dpreatt @ k; dk = dpreatt^T @ q
            causal_py(dq, C3, dp, k, C3, T, hs);
            causal_pty(dk, C3, dp, q, C3, T, hs);
        }
    }
}

// ----------------------------------------------------------------------------
// bf16: qkv, att, out (and their gradients) in bf16, the products on the bf16 engine
// (zt_kern_gemm_bf16; products of bf16 values summed in fp32), scores, softmax and its backward
// in fp32. The probabilities are rounded to bf16 once: the saved att, which both the forward's
// att @ v and the backward read; the softmax backward's result is rounded to bf16 for the dq
// and dk products, as autocast's bf16 matmuls round their operands.

size_t zt_kern_attention_bf16_scratch_floats(int T, int hs) {
    assert(T > 0 && hs > 0);
    return (size_t)T * T + ((size_t)T * T + 1) / 2 + (size_t)ATT_TB * hs;
}

/* O[i0:i1] = P[i0:i1, 0:i1] @ Y[0:i1], bf16 (P is 0 above the diagonal) */
static void causal_py16(uint16_t *O, int ldo, const uint16_t *P, int T, const uint16_t *Y,
                        int ldy, int hs, float *scratch) {
    for (int i0 = 0; i0 < T; i0 += ATT_TB) {
        int i1 = blk_end(i0, T);
        zt_kern_gemm_bf16_c16(0, 0, i1 - i0, hs, i1, P + (size_t)i0 * T, T, Y, ldy, NULL, 0,
                              O + (size_t)i0 * ldo, ldo, scratch);
    }
}

/* O[j0:j1] = P[j0:T, j0:j1]^T @ Y[j0:T], bf16 (P is 0 above the diagonal) */
static void causal_pty16(uint16_t *O, int ldo, const uint16_t *P, int T, const uint16_t *Y,
                         int ldy, int hs, float *scratch) {
    for (int j0 = 0; j0 < T; j0 += ATT_TB) {
        int j1 = blk_end(j0, T);
        zt_kern_gemm_bf16_c16(1, 0, j1 - j0, hs, T - j0, P + (size_t)j0 * T + j0, T,
                              Y + (size_t)j0 * ldy, ldy, NULL, 0, O + (size_t)j0 * ldo, ldo,
                              scratch);
    }
}

/* S[i0:i1, 0:i1] = X[i0:i1] @ Y[0:i1]^T in fp32 */
static void causal_xyt16(float *S, const uint16_t *X, int ldx, const uint16_t *Y, int ldy, int T,
                         int hs) {
    for (int i0 = 0; i0 < T; i0 += ATT_TB) {
        int i1 = blk_end(i0, T);
        zt_kern_gemm_bf16(0, 1, i1 - i0, i1, hs, X + (size_t)i0 * ldx, ldx, Y, ldy, 0.0f,
                          S + (size_t)i0 * T, T);
    }
}

int zt_kern_attention_forward_bf16(uint16_t *out, uint16_t *att, const uint16_t *qkv,
                                   float *scratch, int B, int T, int C, int NH) {
    assert(B >= 0 && T > 0 && NH > 0 && C % NH == 0);
    if (zt_kern_gemm16_get() == ZT_GEMM16_WIDEN) return -1;
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    float *S = scratch, *tail = scratch + (size_t)T * T + ((size_t)T * T + 1) / 2;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const uint16_t *q = qkv + (size_t)b * T * C3 + (size_t)h * hs;
            uint16_t *a = att + ((size_t)b * NH + h) * T * T;
            causal_xyt16(S, q, C3, q + C, C3, T, hs);
            for (int i = 0; i < T; i++) {
                float *row = S + (size_t)i * T;
                for (int j = 0; j <= i; j++) row[j] *= scale;
                softmax_row(row, i + 1);
                memset(row + i + 1, 0, (size_t)(T - i - 1) * sizeof(float));
                zt_kern_f32_to_bf16(a + (size_t)i * T, row, (size_t)T);
            }
            causal_py16(out + (size_t)b * T * C + (size_t)h * hs, C, a, T, q + 2 * C, C3, hs,
                        tail);
        }
    return 0;
}

#define ATT_CHUNK 512 /* bf16 probabilities widened this many at a time (a multiple of 8) */

/* the softmax backward of row i of one (b, h) from datt (row, fp32) and the bf16 probabilities
 * a: ds[j] = round(scale a[j] (datt[j] - sum_k a[k] datt[k])), j <= i, and 0 after it to the end
 * of the row's block; the dot product in ATT_LANES partial sums as the fp32 kernel's, the
 * leftovers past the last full group summed apart and added last */
static void softmax_backward_row16(uint16_t *ds, const float *row, const uint16_t *a, int i,
                                   int T, float scale) {
    float ar[ATT_CHUNK], acc[ATT_LANES] = {0}, tail = 0;
    const int n = i + 1;
    for (int j0 = 0; j0 < n; j0 += ATT_CHUNK) {
        int m = n - j0 < ATT_CHUNK ? n - j0 : ATT_CHUNK, j = 0;
        zt_kern_bf16_to_f32(ar, a + j0, (size_t)m);
        for (; j + ATT_LANES <= m; j += ATT_LANES)
            for (int l = 0; l < ATT_LANES; l++) acc[l] += ar[j + l] * row[j0 + j + l];
        for (; j < m; j++) tail += ar[j] * row[j0 + j];
    }
    const float dot = lanes_sum(acc) + tail;
    for (int j0 = 0; j0 < n; j0 += ATT_CHUNK) {
        int m = n - j0 < ATT_CHUNK ? n - j0 : ATT_CHUNK;
        zt_kern_bf16_to_f32(ar, a + j0, (size_t)m);
        for (int j = 0; j < m; j++) ar[j] = scale * (ar[j] * (row[j0 + j] - dot));
        zt_kern_f32_to_bf16(ds + j0, ar, (size_t)m);
    }
    int bend = blk_end(i - i % ATT_TB, T);
    if (bend > n) memset(ds + n, 0, (size_t)(bend - n) * sizeof *ds);
}

int zt_kern_attention_backward_bf16(uint16_t *dqkv, float *scratch, const uint16_t *dout,
                                    const uint16_t *qkv, const uint16_t *att, int B, int T, int C,
                                    int NH) {
    assert(B >= 0 && T > 0 && NH > 0 && C % NH == 0);
    if (zt_kern_gemm16_get() == ZT_GEMM16_WIDEN) return -1;
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    float *dp = scratch, *tail = scratch + (size_t)T * T + ((size_t)T * T + 1) / 2;
    uint16_t *ds = (uint16_t *)(scratch + (size_t)T * T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const size_t qoff = (size_t)b * T * C3 + (size_t)h * hs;
            const uint16_t *q = qkv + qoff, *k = q + C, *v = q + 2 * C;
            const uint16_t *a = att + ((size_t)b * NH + h) * T * T;
            const uint16_t *d = dout + (size_t)b * T * C + (size_t)h * hs;
            uint16_t *dq = dqkv + qoff;
            // datt = dout @ v^T (lower triangle); dv = att^T @ dout
            causal_xyt16(dp, d, C, v, C3, T, hs);
            causal_pty16(dq + 2 * C, C3, a, T, d, C, hs, tail);
            for (int i = 0; i < T; i++)
                softmax_backward_row16(ds + (size_t)i * T, dp + (size_t)i * T, a + (size_t)i * T,
                                       i, T, scale);
            // dq = dpreatt @ k; dk = dpreatt^T @ q
            causal_py16(dq, C3, ds, T, k, C3, hs, tail);
            causal_pty16(dq + C, C3, ds, T, q, C3, hs, tail);
        }
    return 0;
}
