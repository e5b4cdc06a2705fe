/*
 * kernels/zt_kernels.h: every CPU compute kernel of zerotask, grouped by layer.
 *
 * Layer: bottom (pure maths). No StarPU, no MPI, no zerotask headers; callers are tasks/ codelets
 * and tests. All tensors are fp32, row-major, contiguous unless a leading dimension is given.
 *
 * Shape letters (llm.c): B batch rows (sequences), T sequence length, C channels (n_embd),
 * V vocabulary, NH heads, hs = C/NH head size, N = number of token rows (B*T or a chunk of it),
 * OC output channels.
 *
 * Weight layouts are Hugging Face GPT-2's (Conv1D): a linear layer's weight is W[C, OC] and
 * y = x @ W + b. The tied output head uses wte[V, C] as y = x @ wte^T.
 *
 * Accumulation rule (decided once, here):
 *   - parameter gradients (dw, db, dwte, dwpe) ACCUMULATE (+=): micro-batches and several
 *     producers (tied wte) add into the same buffer, which the engine zeroes once per step;
 *   - activation gradients are OVERWRITTEN (=) unless the prototype says "+=": the residual
 *     stream gradient is the exception, layernorm_backward adds into dinp so that one buffer
 *     carries d(residual) through the whole backward pass.
 * Every kernel is deterministic: a fixed summation order that depends only on its arguments.
 *
 * Mixed precision (bf16/fp16 storage): tasks/ widens 16-bit tensors to fp32 with the converters
 * below, runs the fp32 kernel and narrows the results (round to nearest even), except where a
 * kernel says it reads bf16 itself: the bf16 products (zt_kern_gemm_bf16*), the bf16 attention
 * and the few-rows products with 16-bit weights.
 */
#ifndef ZT_KERNELS_H
#define ZT_KERNELS_H

#include <stddef.h> /* size_t */
#include <stdint.h> /* int32_t, uint16_t */

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * 16-bit storage formats (round to nearest even, as PyTorch's .to(); NaN -> 0x7FC0 for bf16,
 * sign | 0x7E00 for fp16; fp16 overflows to inf from 65520 up, and has subnormals below 2^-14).
 * Widening is exact. dst and src must not overlap. */
void zt_kern_f32_to_bf16(uint16_t *dst, const float *src, size_t n);
void zt_kern_bf16_to_f32(float *dst, const uint16_t *src, size_t n);
void zt_kern_f32_to_f16(uint16_t *dst, const float *src, size_t n);
void zt_kern_f16_to_f32(float *dst, const uint16_t *src, size_t n);

/* Make BLAS single-threaded: parallelism comes from StarPU workers, one kernel per worker. */
void zt_kern_blas_init(void);

/* ---------------------------------------------------------------------------------------------
 * single-precision product, row-major (kernels/cpu/gemm.c): C[M,N] = alpha op(A) op(B) + beta C,
 * op(A) = A[M,K] (ta = 0) or A[K,M]^T (ta = 1), op(B) = B[K,N] (tb = 0) or B[N,K]^T (tb = 1),
 * leading dimensions as BLAS; beta = 0 never reads C. Every matmul and attention kernel uses it.
 * Engine, per process, set before any kernel runs: ZT_GEMM_AVX512 (ours; the default where the
 * CPU has AVX-512F; each element's summation order depends on K only) or ZT_GEMM_OPENBLAS. */
enum zt_gemm_engine { ZT_GEMM_OPENBLAS = 0, ZT_GEMM_AVX512 = 1 };
int zt_kern_gemm_avx512_available(void);
enum zt_gemm_engine zt_kern_gemm_get(void);
/* -1 (and no change) when asked for ZT_GEMM_AVX512 on a CPU without AVX-512F */
int zt_kern_gemm_set(enum zt_gemm_engine e);
void zt_kern_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc);
/* The same product (alpha 1, ta 0) for a few rows of A (M <= ZT_KERN_FEW_ROWS: decode) with op(B)
 * in 16 bits, bf16 or (is_f16) fp16, read as stored: the bits of zt_kern_sgemm on B widened to
 * fp32. Returns 0, or -1 (nothing done) off the AVX-512 engine or past ZT_KERN_FEW_ROWS rows: the
 * caller then widens B. */
#define ZT_KERN_FEW_ROWS 8
int zt_kern_sgemm_w16(int tb, int M, int N, int K, const float *A, int lda, const uint16_t *B,
                      int is_f16, int ldb, float beta, float *C, int ldc);
/* bytes of the packing buffers a thread that ran products of at most M x N x K keeps resident
 * until it exits: the parts of them its packing wrote (the AVX-512 and bf16 engines share the
 * buffers; 0 on OpenBLAS, which has its own) */
size_t zt_kern_gemm_thread_bytes(int64_t M, int64_t N, int64_t K);
/* test only: 1 makes the AVX-512 and bf16 engines pack on their stacks, as when their buffers
 * cannot be had */
void zt_kern_gemm_test_nobuf(int on);

/* ---------------------------------------------------------------------------------------------
 * bf16 product (kernels/cpu/gemm_bf16.c): C[M,N] (fp32) = op(A) op(B) + beta C with A and B
 * bf16, products exact and summed in fp32, on the CPU's bf16 instructions. Engine, per process,
 * set before any kernel runs: ZT_GEMM16_AMX (AMX-BF16 tiles), ZT_GEMM16_AVX512BF16 (VDPBF16PS)
 * or ZT_GEMM16_WIDEN (none: zt_kern_gemm_bf16 returns -1 and the caller widens its operands
 * for zt_kern_sgemm). The default is the first the CPU has. Each element's sum depends on K
 * only (the file comment); the engines round differently. bf16 subnormal inputs and fp32
 * subnormal results are flushed to zero on the bf16 engines. */
enum zt_gemm16_engine { ZT_GEMM16_WIDEN = 0, ZT_GEMM16_AVX512BF16 = 1, ZT_GEMM16_AMX = 2 };
int zt_kern_gemm16_available(enum zt_gemm16_engine e);
enum zt_gemm16_engine zt_kern_gemm16_get(void);
/* -1 (and no change) for an engine the CPU (or the OS, for AMX) does not give */
int zt_kern_gemm16_set(enum zt_gemm16_engine e);
/* 0, or -1 (nothing done) under ZT_GEMM16_WIDEN */
int zt_kern_gemm_bf16(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                      const uint16_t *B, int ldb, float beta, float *C, int ldc);
/* A weight packed once for the bf16 engines (inference: resident bf16 weights): B[K, N]
 * (rows ldb apart) into P, zt_kern_bf16_packed_elems(K, N) values, in the tile layout the
 * products read (gemm_bf16.c), so that a product reads it without packing B again;
 * zt_kern_bf16_packed_at reads element (k, n) back. zt_kern_bf16_pack returns -1 (nothing
 * done) on ZT_GEMM16_WIDEN. */
size_t zt_kern_bf16_packed_elems(int K, int N);
int zt_kern_bf16_pack(const uint16_t *B, int ldb, int K, int N, uint16_t *P);
uint16_t zt_kern_bf16_packed_at(const uint16_t *P, int K, int N, int k, int n);
/* C[M, nc] = A[M, K] B[:, j0 : j0 + nc] + beta C with B packed (P, of N columns): the bits of
 * zt_kern_gemm_bf16 on B as stored. j0 a multiple of 32; -1 (nothing done) otherwise or on
 * ZT_GEMM16_WIDEN. */
int zt_kern_gemm_bf16_packed(int M, int nc, int K, const uint16_t *A, int lda,
                             const uint16_t *P, int N, int j0, float beta, float *C, int ldc);
/* The same product into a bf16 C: C = round(start + op(A) op(B)) (nearest even, once), each
 * element started from bias[j] (bias != NULL), from C widened (accumulate) or from 0: the bits
 * of zt_kern_gemm_bf16 on an fp32 C holding the start, then zt_kern_f32_to_bf16. scratch:
 * zt_kern_gemm_bf16_c16_scratch_floats(M, N, K) floats (0, and scratch may be NULL, unless the
 * product is deeper than the kernel's k blocks). 0, or -1 (nothing done) under
 * ZT_GEMM16_WIDEN. */
int zt_kern_gemm_bf16_c16(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                          const uint16_t *B, int ldb, const float *bias, int accumulate,
                          uint16_t *C, int ldc, float *scratch);
size_t zt_kern_gemm_bf16_c16_scratch_floats(int M, int N, int K);

/* ---------------------------------------------------------------------------------------------
 * encoder: token + position embedding
 * out[N,C] = wte[tokens[n], :] + wpe[(t0 + n) % T, :], n = 0..N-1
 * (t0 is the position of the first row: the global row index of row 0 modulo T). */
void zt_kern_encoder_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                             int N, int T, int t0, int C);
/* dwte[tokens[n], :] += dout[n, :]; dwpe[(t0+n)%T, :] += dout[n, :]; rows in order n = 0..N-1 */
void zt_kern_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                              int N, int T, int t0, int C);

/* ---------------------------------------------------------------------------------------------
 * layernorm over the last dimension, eps = 1e-5 (PyTorch default)
 * out[N,C], mean[N], rstd[N] (saved for backward) from inp[N,C], w[C], b[C] */
void zt_kern_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                               const float *w, const float *b, int N, int C);
/* dinp[N,C] += d/dinp; dw[C] += ; db[C] += (from dout[N,C], inp, w, mean, rstd); dinp, dw, db
 * and dout must not overlap */
void zt_kern_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                const float *inp, const float *w, const float *mean,
                                const float *rstd, int N, int C);

/* ---------------------------------------------------------------------------------------------
 * matmul, HF Conv1D layout: out[N,OC] = inp[N,C] @ w[C,OC] + bias[OC] (bias may be NULL) */
void zt_kern_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                            int N, int C, int OC);
/* dinp[N,C] = dout[N,OC] @ w[C,OC]^T  (accumulate != 0: +=) */
void zt_kern_matmul_backward_inp(float *dinp, const float *dout, const float *w, int N, int C,
                                 int OC, int accumulate);
/* rows c0..c1-1 of the weight gradient: dw[c1-c0, OC] += inp[N, c0:c1]^T @ dout[N,OC]
 * (dw points at row c0 of the full [C,OC] gradient; inp has leading dimension C) */
void zt_kern_matmul_backward_weight(float *dw, const float *inp, const float *dout, int N, int C,
                                    int OC, int c0, int c1);
/* dbias[OC] += sum over rows of dout[N,OC] */
void zt_kern_matmul_backward_bias(float *dbias, const float *dout, int N, int OC);

/* the same two products with 16-bit weights read as stored (zt_kern_sgemm_w16: a few rows on
 * the AVX-512 engine, else -1 and nothing done); bias in fp32 */
int zt_kern_matmul_forward_w16(float *out, const float *inp, const uint16_t *w, int is_f16,
                               const float *bias, int N, int C, int OC);
int zt_kern_matmul_t_forward_w16(float *out, const float *inp, const uint16_t *w, int is_f16,
                                 int N, int C, int OC);

/* The bf16 model's product (inference with bf16 weights on a bf16 engine): out[N, oc] (rows
 * ldo apart) = bf16(inp[N,C]) @ w[C, oc] (rows of w ldw apart), each sum started from 0 or, with
 * add, from out's value (the bias the caller wrote there): each input rounded to bf16 (nearest
 * even, into a16: N * C values), as llama.cpp and autocast round a product's activations, the
 * products on zt_kern_gemm_bf16. The bits of an element depend on C only (not on N, oc or the
 * column offset of w). Returns -1 (nothing done) on ZT_GEMM16_WIDEN. */
int zt_kern_matmul_forward_bf16(float *out, int ldo, const float *inp, const uint16_t *w,
                                int ldw, int add, int N, int C, int oc, uint16_t *a16);
/* The same with the weight packed (zt_kern_bf16_pack of w[C, OC]), columns [o0, o0 + oc) (o0
 * a multiple of 32): the same bits. */
int zt_kern_matmul_forward_bf16_packed(float *out, int ldo, const float *inp, const uint16_t *P,
                                       int OC, int64_t o0, int add, int N, int C, int oc,
                                       uint16_t *a16);

/* tied head, w[OC,C] (wte with OC = V): out[N,OC] = inp[N,C] @ w^T */
void zt_kern_matmul_t_forward(float *out, const float *inp, const float *w, int N, int C, int OC);
/* dinp[N,C] = dout[N,OC] @ w[OC,C]  (accumulate != 0: +=) */
void zt_kern_matmul_t_backward_inp(float *dinp, const float *dout, const float *w, int N, int C,
                                   int OC, int accumulate);
/* rows o0..o1-1 of the weight gradient: dw[o1-o0, C] += dout[N, o0:o1]^T @ inp[N,C]
 * (dw points at row o0 of the full [OC,C] gradient; dout has leading dimension OC) */
void zt_kern_matmul_t_backward_weight(float *dw, const float *dout, const float *inp, int N, int C,
                                      int OC, int o0, int o1);

/* ---------------------------------------------------------------------------------------------
 * causal multi-head self-attention, GPT-2 style
 * qkv[B,T,3C]: q = qkv[..., 0:C], k = qkv[..., C:2C], v = qkv[..., 2C:3C]; head h uses columns
 * h*hs .. (h+1)*hs-1 of each. out[B,T,C] (heads concatenated), att[B,NH,T,T] softmax
 * probabilities (saved for backward; entries above the diagonal are 0). Scale 1/sqrt(hs). */
void zt_kern_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                               int NH);
/* dqkv[B,T,3C] = gradient of qkv (overwritten) from dout[B,T,C], qkv, att.
 * scratch: at least zt_kern_attention_scratch_floats(T) floats, contents undefined. */
void zt_kern_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                                const float *att, int B, int T, int C, int NH);
size_t zt_kern_attention_scratch_floats(int T);
/* The same in bf16 (qkv, att, out, dout, dqkv), the products on the bf16 engine
 * (zt_kern_gemm_bf16): scores, softmax and its backward in fp32; the probabilities are rounded
 * to bf16 once (att, which att @ v and the backward read) and so is the softmax backward's
 * result before the dq and dk products. scratch: zt_kern_attention_bf16_scratch_floats(T, hs)
 * floats. 0, or -1 (nothing done) under ZT_GEMM16_WIDEN. */
int zt_kern_attention_forward_bf16(uint16_t *out, uint16_t *att, const uint16_t *qkv,
                                   float *scratch, int B, int T, int C, int NH);
int zt_kern_attention_backward_bf16(uint16_t *dqkv, float *scratch, const uint16_t *dout,
                                    const uint16_t *qkv, const uint16_t *att, int B, int T, int C,
                                    int NH);
size_t zt_kern_attention_bf16_scratch_floats(int T, int hs);

/* Inference with a KV cache. A sequence's cache holds ctx positions, head-major: the K of head h
 * at position p is kv[(h * ctx + p) * hs ..][0, hs), its V kv[((NH + h) * ctx + p) * hs ..]
 * (2 * C * ctx floats), so that a head's keys and values are each one contiguous run (a
 * [ctx, 2C] row layout made a head read a few lines every 2C floats: slower from memory). */
/* position pos's K and V (k, v: C floats each, heads as in qkv) into the cache */
void zt_kern_kv_store(float *kv, int ctx, int pos, const float *k, const float *v, int C, int NH);
/* attention of m new rows of one sequence, at positions p0..p0+m-1 < ctx, against its cache
 * (the new rows' K/V already in it). q: the new rows' queries (row i at q + i*ldq, head h at
 * column h*hs); out: row i at out + i*ldo, heads h0..h1-1 only (of NH), head h at column
 * (h - h0)*hs. Row i attends to positions 0..p0+i. scratch: at least
 * zt_kern_attention_cached_scratch_floats(p0 + m) floats.
 * With ZT_GEMM_AVX512 each output row has the bits of zt_kern_attention_forward's row for the
 * same position of the same tokens (each head is computed alone). */
void zt_kern_attention_cached(float *out, int ldo, float *scratch, const float *q, int ldq,
                              const float *kv, int ctx, int p0, int m, int C, int NH, int h0,
                              int h1);
size_t zt_kern_attention_cached_scratch_floats(int npos);
/* The same with a 16-bit cache (a bf16 or fp16 model's, half the bytes; is_f16 picks fp16):
 * zt_kern_kv_store16 rounds K and V to the type (nearest even); zt_kern_attention_cached16
 * widens a head's positions exactly and has the bits of zt_kern_attention_cached on an fp32
 * cache holding the rounded values. scratch: zt_kern_attention_cached16_scratch_floats(p0 + m,
 * C / NH) floats. */
void zt_kern_kv_store16(uint16_t *kv, int is_f16, int ctx, int pos, const float *k,
                        const float *v, int C, int NH);
void zt_kern_attention_cached16(float *out, int ldo, float *scratch, const float *q, int ldq,
                                const uint16_t *kv, int is_f16, int ctx, int p0, int m, int C,
                                int NH, int h0, int h1);
size_t zt_kern_attention_cached16_scratch_floats(int npos, int hs);

/* ---------------------------------------------------------------------------------------------
 * GELU, tanh approximation (PyTorch gelu(approximate='tanh'))
 * out[n] = gelu(inp[n]) */
void zt_kern_gelu_forward(float *out, const float *inp, size_t n);
/* dinp[n] = gelu'(inp[n]) * dout[n]  (dinp may alias dout) */
void zt_kern_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);

/* ---------------------------------------------------------------------------------------------
 * residual: out = a + b; backward: da += dout, db += dout (either may be NULL) */
void zt_kern_residual_forward(float *out, const float *a, const float *b, size_t n);
void zt_kern_residual_backward(float *da, float *db, const float *dout, size_t n);

/* ---------------------------------------------------------------------------------------------
 * softmax cross-entropy over logits[N,V] with integer targets[N] in [0,V).
 * losses[n] = -log softmax(logits[n])[targets[n]].
 * If dscale != 0, logits is then OVERWRITTEN in place by its gradient
 * dscale * (softmax(logits[n]) - onehot(targets[n])); with dscale == 0 logits is untouched. */
void zt_kern_crossentropy_forward_backward(float *logits, float *losses, const int32_t *targets,
                                           int N, int V, float dscale);

/* ---------------------------------------------------------------------------------------------
 * sampling (kernels/cpu/sample.c): the next token from logits[V] (modified in place), Hugging
 * Face generate's processors in order: repetition penalty (1: off; once per distinct id of
 * history[nhist]: a logit > 0 is divided by it, else multiplied), then temperature <= 0: argmax
 * (the lowest id on a tie; NaN never wins); else the top_k best (0: all; by logit, then id)
 * weighted exp((logit - best) / temperature), the smallest best-first prefix holding top_p of
 * their weight (1: all), and the candidate where u in [0, 1) falls in its cumulative weight.
 * The logits are changed only by the penalty. idx: V ints of scratch. */
int zt_kern_sample(float *logits, int V, const int32_t *history, int nhist, float temperature,
                   int top_k, float top_p, float penalty, double u, int32_t *idx);

/* ---------------------------------------------------------------------------------------------
 * optimizer
 * Adam/AdamW step on n contiguous parameters, PyTorch semantics:
 *   g = grad * grad_scale
 *   decoupled (AdamW): p -= lr * weight_decay * p       else (Adam, L2): g += weight_decay * p
 *   m = beta1 m + (1-beta1) g ;  v = beta2 v + (1-beta2) g^2
 *   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)   with bc1 = 1-beta1^t, bc2 = 1-beta2^t
 */
void zt_kern_adamw(float *param, float *m, float *v, const float *grad, size_t n, float lr,
                   float beta1, float beta2, float eps, float weight_decay, float bc1, float bc2,
                   float grad_scale, int decoupled);
/* sum of squares of x[n], accumulated in double in a fixed order: 8 lanes over the groups of 8,
 * the lanes summed pairwise, then the leftovers in order */
double zt_kern_sumsq(const float *x, size_t n);
/* The same sum fed in parts of any lengths: the bits of zt_kern_sumsq on the parts laid end to
 * end. */
struct zt_sumsq {
    double acc[8];
    float rest[8]; /* the values of the group still open */
    int tail;
};
#define ZT_KERN_SUMSQ_CHUNK 2048 /* a convenient part size */
void zt_kern_sumsq_begin(struct zt_sumsq *a);
void zt_kern_sumsq_add(struct zt_sumsq *a, const float *x, size_t n);
double zt_kern_sumsq_end(const struct zt_sumsq *a);

#ifdef __cplusplus
}
#endif
#endif /* ZT_KERNELS_H */
