/*
 * tests/kernels/test_convert.c: proves the fp32 <-> bf16 / fp16 converters against PyTorch's
 * own conversions (tests/ref/kernels_ref.py, case "convert"): narrowing gives torch's bits for
 * every non-NaN input (specials, exact ties of both formats with even and odd low bits, fp16
 * subnormals and the overflow boundary 65520, random values from 1e-9 to 1e30 and random bit
 * patterns, each with both signs), and a NaN for every NaN (PyTorch's vectorized and scalar paths
 * disagree on NaN payloads, so only NaN-ness is compared); widening every one of the 65536
 * patterns of each format gives torch's fp32 value bit for bit (NaN-ness for NaNs); and widening
 * then narrowing returns every non-NaN pattern unchanged; and the scalar path (one value at a
 * time) gives the bulk path's bits (which may use the F16C instructions).
 */
#include <stdint.h> /* uint16_t */
#include <stdlib.h> /* EXIT_FAILURE */

#include "kernels_ref.h" /* reference readers, checks */
#include "zt_kernels.h"  /* converters under test */

static int is_nan16(uint16_t h, int bf16) {
    return bf16 ? (h & 0x7F80u) == 0x7F80u && (h & 0x7Fu) : (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu);
}

static void check_narrow(const float *x, const int32_t *want, size_t n, int bf16) {
    uint16_t *got = kref_alloc(n * sizeof *got);
    (bf16 ? zt_kern_f32_to_bf16 : zt_kern_f32_to_f16)(got, x, n);
    /* one value at a time: the scalar path (the bulk one may use F16C): the same bits */
    uint16_t one;
    size_t diff = 0;
    for (size_t i = 0; i < n; i++) {
        (bf16 ? zt_kern_f32_to_bf16 : zt_kern_f32_to_f16)(&one, x + i, 1);
        diff += one != got[i];
    }
    ZT_TEST_TRUE(diff == 0, "%s: %zu values narrow differently one at a time than in bulk",
                 bf16 ? "bf16" : "fp16", diff);
    size_t bad = 0, first = n;
    for (size_t i = 0; i < n; i++) {
        int ok = x[i] != x[i] ? is_nan16(got[i], bf16) : got[i] == (uint16_t)want[i];
        if (!ok && bad++ == 0) first = i;
    }
    ZT_TEST_TRUE(bad == 0, "%s narrowing: %zu of %zu differ from torch, first x=%.9g (0x%08x): "
                 "got 0x%04x want 0x%04x", bf16 ? "bf16" : "fp16", bad, n,
                 first < n ? x[first] : 0.0, first < n ? (unsigned)kref_bits(x[first]) : 0u,
                 first < n ? got[first] : 0, first < n ? (unsigned)want[first] & 0xFFFF : 0);
}

static void check_widen(const double *want, int bf16) {
    uint16_t *all = kref_alloc(65536 * sizeof *all);
    float *wide = kref_floats(65536, -7.0f);
    uint16_t *back = kref_alloc(65536 * sizeof *back);
    for (int i = 0; i < 65536; i++) all[i] = (uint16_t)i;
    (bf16 ? zt_kern_bf16_to_f32 : zt_kern_f16_to_f32)(wide, all, 65536);
    (bf16 ? zt_kern_f32_to_bf16 : zt_kern_f32_to_f16)(back, wide, 65536);
    int bad = 0, first = -1, trip = 0;
    for (int i = 0; i < 65536; i++) { /* the scalar path, one at a time */
        float w1;
        (bf16 ? zt_kern_bf16_to_f32 : zt_kern_f16_to_f32)(&w1, all + i, 1);
        if (!(w1 != w1 && wide[i] != wide[i]) && kref_bits(w1) != kref_bits(wide[i])) trip++;
    }
    for (int i = 0; i < 65536; i++) {
        int nan = is_nan16((uint16_t)i, bf16);
        float w = (float)want[i]; /* exact: every 16-bit value is an fp32 value */
        int ok = nan ? wide[i] != wide[i] : kref_bits(wide[i]) == kref_bits(w);
        if (!ok && bad++ == 0) first = i;
        if (!nan && back[i] != i) trip++;
    }
    ZT_TEST_TRUE(bad == 0, "%s widening: %d of 65536 patterns differ from torch, first 0x%04x",
                 bf16 ? "bf16" : "fp16", bad, first);
    ZT_TEST_TRUE(trip == 0, "%s: %d patterns do not survive widening and narrowing",
                 bf16 ? "bf16" : "fp16", trip);
}

int main(void) {
    kref_init();
    const char *cs = "convert";
    const size_t n = (size_t)kref_meta(cs, "n");
    const float *x = kref_f32(cs, "x", n);
    check_narrow(x, kref_i32(cs, "bf16", n), n, 1);
    check_narrow(x, kref_i32(cs, "f16", n), n, 0);
    check_widen(kref_f64(cs, "bf16_wide", 65536), 1);
    check_widen(kref_f64(cs, "f16_wide", 65536), 0);
    /* the boundaries spelled out (they are in the torch set too; this names them) */
    const float edge[] = {65504.0f, 65519.996f, 65520.0f, 0x1p-24f, 0x1p-25f, 0x1.000002p-25f};
    const uint16_t want16[] = {0x7BFF, 0x7BFF, 0x7C00, 0x0001, 0x0000, 0x0001};
    uint16_t got16[6];
    zt_kern_f32_to_f16(got16, edge, 6);
    for (int i = 0; i < 6; i++)
        ZT_TEST_TRUE(got16[i] == want16[i], "fp16(%.9g) = 0x%04x, expected 0x%04x", edge[i],
                     got16[i], want16[i]);
    kref_free_all();
    return zt_test_finish("test_convert");
}
