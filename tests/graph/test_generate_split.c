/*
 * tests/graph/test_generate_split.c: how a decode step shares its products and its attention
 * among the workers (graph/generate_split.c), for every worker count the generator allows
 * (1 to 16) and the shapes of real models: the parts cover the columns (the heads) exactly, in
 * order, none empty, at most one per worker; a product's parts are whole blocks of 32 columns
 * but the last; and the worker count clamped to 1..GEN_SPLIT_MAX_PARTS (gen_split_workers),
 * which the weights' column panels take too.
 */
#include <stdio.h>          /* printf */
#include "generate_split.h" /* gen_split_* */
#include "zt_test.h"        /* ZT_TEST_TRUE, zt_test_failures */

static void columns(int workers, int64_t oc) {
    int n = gen_split_parts(workers, oc);
    ZT_TEST_TRUE(n >= 1 && n <= workers, "%d workers, %lld columns: %d parts", workers,
                 (long long)oc, n);
    int64_t at = 0;
    for (int p = 0; p < n; p++) {
        int64_t o0, w = gen_split_cols(workers, oc, p, &o0);
        ZT_TEST_TRUE(o0 == at && w >= 1 && (p == n - 1 || w % 32 == 0),
                     "%d workers, %lld columns: part %d is [%lld, +%lld) after %lld", workers,
                     (long long)oc, p, (long long)o0, (long long)w, (long long)at);
        at = o0 + w;
    }
    ZT_TEST_TRUE(at == oc, "%d workers, %lld columns: the parts end at %lld", workers,
                 (long long)oc, (long long)at);
}

static void heads(int workers, int n_head) {
    int n = gen_split_heads(workers, n_head), at = 0;
    ZT_TEST_TRUE(n >= 1 && n <= workers && n <= n_head, "%d workers, %d heads: %d parts",
                 workers, n_head, n);
    for (int p = 0; p < n; p++) {
        int h0, h1;
        gen_split_head_range(workers, n_head, p, &h0, &h1);
        ZT_TEST_TRUE(h0 == at && h1 > h0, "%d workers, %d heads: part %d is [%d, %d) after %d",
                     workers, n_head, p, h0, h1, at);
        at = h1;
    }
    ZT_TEST_TRUE(at == n_head, "%d workers, %d heads: the parts end at %d", workers, n_head, at);
}

int main(void) {
    /* C, 3C, 4C of tiny to GPT-2 XL models, vocabularies (GPT-2's is odd), narrow products */
    static const int64_t oc[] = {1,   15,  16,   17,   64,   100,  192,  384,  768,   1024,
                                 1600, 2304, 3072, 4800, 6400, 8192, 50257, 50304};
    /* the step and the weights' panels both clamp the workers the same way */
    ZT_TEST_TRUE(gen_split_workers(0) == 1 && gen_split_workers(7) == 7 &&
                     gen_split_workers(GEN_SPLIT_MAX_PARTS) == GEN_SPLIT_MAX_PARTS &&
                     gen_split_workers(64) == GEN_SPLIT_MAX_PARTS,
                 "gen_split_workers: 0 -> %d, 7 -> %d, 64 -> %d", gen_split_workers(0),
                 gen_split_workers(7), gen_split_workers(64));
    for (int workers = 1; workers <= 16; workers++) {
        for (size_t i = 0; i < sizeof oc / sizeof oc[0]; i++) columns(workers, oc[i]);
        for (int h = 1; h <= 32; h++) heads(workers, h);
    }
    if (zt_test_failures) {
        printf("test_generate_split: %d failures\n", zt_test_failures);
        return 1;
    }
    printf("test_generate_split: ok\n");
    return 0;
}
