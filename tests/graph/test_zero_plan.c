/*
 * tests/graph/test_zero_plan.c: the ZeRO plan (graph/zero_plan.h) alone, without StarPU or MPI.
 *
 * Proves, for ZeRO stages 0-3, 1..8 ranks, several block and group sizes and parameter sets with
 * odd sizes (not multiples of 16, tiny ones, one huge one, 3-d ones):
 *   - offsets are 16-element aligned, slices padded, blocks split rows evenly in flat order;
 *   - every rank computes the same shards; each starts at the first block at or after r/N of the
 *     elements, so the shards are contiguous, cover every block exactly once, and each rank's
 *     share is within one block of even; each parameter's own blocks are its part of the shard;
 *   - optimizer groups tile the blocks, never cross a shard boundary, and each rank updates its
 *     own (all of them at stage 0);
 *   - reduction and all-gather buckets cover the parameters in order, within their budget;
 *   - the stage-3 persistent set is exactly the parameters at or under the threshold, with their
 *     blocks' owners;
 *   - swap units tile each of the rank's groups, 1024/2048-aligned, at increasing file offsets;
 * and checks one small plan against values worked out by hand.
 */
#include <stdio.h>      /* printf */
#include <stdlib.h>     /* calloc, free */
#include "zero_plan.h"  /* the unit under test */
#include "zt_test.h"    /* ZT_TEST_TRUE, zt_test_failures */

#define MAXP 64

struct model {
    const char *name;
    int n;
    struct zt_plan_shape s[MAXP];
};

static int64_t numel(const struct zt_plan_shape *s) { return s->rows * s->cols; }

/* a tiny GPT-2: wte, wpe, L layers of 12 tensors, ln_f */
static void gpt2(struct model *m, int V, int T, int C, int L) {
    *m = (struct model){.name = "gpt2"};
    m->s[m->n++] = (struct zt_plan_shape){V, C, 2};
    m->s[m->n++] = (struct zt_plan_shape){T, C, 2};
    for (int l = 0; l < L; l++) {
        const struct zt_plan_shape layer[12] = {
            {1, C, 1},     {1, C, 1},     {C, 3 * C, 2}, {1, 3 * C, 1},
            {C, C, 2},     {1, C, 1},     {1, C, 1},     {1, C, 1},
            {C, 4 * C, 2}, {1, 4 * C, 1}, {4 * C, C, 2}, {1, C, 1}};
        for (int k = 0; k < 12; k++) m->s[m->n++] = layer[k];
    }
    m->s[m->n++] = (struct zt_plan_shape){1, C, 1};
    m->s[m->n++] = (struct zt_plan_shape){1, C, 1};
}

/* odd sizes: scalars, primes, a 3-d tensor, a single column, one huge matrix */
static void odd(struct model *m) {
    static const struct zt_plan_shape s[] = {
        {1, 1, 1},     {1, 3, 1},        {5, 7, 2},       {1, 17, 1},   {33, 33, 2},
        {4096, 1, 2},  {1, 4097, 1},     {2, 15, 3},      {1000, 13, 2}, {50257, 768, 2},
        {7, 4099, 2},  {1, 100000, 1},   {1, 100001, 1},  {3, 5, 2},    {1, 16, 1}};
    *m = (struct model){.name = "odd", .n = (int)(sizeof s / sizeof *s)};
    for (int i = 0; i < m->n; i++) m->s[i] = s[i];
}

/* a single parameter, smaller than the world */
static void single(struct model *m) {
    *m = (struct model){.name = "single", .n = 1};
    m->s[0] = (struct zt_plan_shape){3, 5, 2};
}

/* ---------------------------------------------------------------------------------------------
 * checks of one rank's plan */

static void check_layout(const struct zt_zero_plan *pl, const struct model *m,
                         const struct zt_plan_cfg *c) {
    int64_t off = 0;
    int nb = 0;
    for (int i = 0; i < m->n; i++) {
        const struct zt_plan_param *p = &pl->param[i];
        const struct zt_plan_shape *s = &m->s[i];
        ZT_TEST_TRUE(p->off == off && p->off % ZT_PLAN_ALIGN == 0, "%s: param %d at %lld, not %lld",
                     m->name, i, (long long)p->off, (long long)off);
        int want = s->ndim < 2 || numel(s) < 4096 ? 1 : s->rows < c->chunks ? (int)s->rows
                                                                          : c->chunks;
        ZT_TEST_TRUE(p->nblk == want && p->first_blk == nb, "%s: param %d has %d blocks from %d",
                     m->name, i, p->nblk, p->first_blk);
        for (int j = 0; j < p->nblk; j++) {
            int64_t r0 = s->rows * j / p->nblk, r1 = s->rows * (j + 1) / p->nblk;
            ZT_TEST_TRUE(r1 > r0, "%s: param %d block %d is empty", m->name, i, j);
            ZT_TEST_TRUE(pl->blk_start[nb + j] == off + r0 * s->cols && pl->blk_param[nb + j] == i,
                         "%s: param %d block %d starts at %lld", m->name, i, j,
                         (long long)pl->blk_start[nb + j]);
        }
        off += (numel(s) + 15) / 16 * 16;
        nb += p->nblk;
    }
    ZT_TEST_TRUE(pl->flat_n == off && pl->nblk == nb && pl->blk_start[nb] == off,
                 "%s: flat layout %lld elements, %d blocks", m->name, (long long)pl->flat_n,
                 pl->nblk);
}

static void check_shards(const struct zt_zero_plan *pl, const struct model *m,
                         const struct zt_plan_cfg *c) {
    const int N = c->world_size;
    const int *s = pl->shard_first_blk;
    int64_t maxblk = 0;
    for (int b = 0; b < pl->nblk; b++)
        if (pl->blk_start[b + 1] - pl->blk_start[b] > maxblk)
            maxblk = pl->blk_start[b + 1] - pl->blk_start[b];
    ZT_TEST_TRUE(s[0] == 0 && s[N] == pl->nblk, "%s N=%d: shards span [%d, %d)", m->name, N, s[0],
                 s[N]);
    for (int r = 0; r < N; r++) {
        ZT_TEST_TRUE(s[r] <= s[r + 1], "%s N=%d: shard %d runs backwards", m->name, N, r);
        /* the first block at or after r/N of the elements */
        const int64_t target = pl->flat_n * r / N;
        ZT_TEST_TRUE(s[r] == pl->nblk || pl->blk_start[s[r]] >= target,
                     "%s N=%d: shard %d starts before r/N", m->name, N, r);
        ZT_TEST_TRUE(s[r] == 0 || pl->blk_start[s[r] - 1] < target,
                     "%s N=%d: shard %d starts a block late", m->name, N, r);
        const int64_t share = pl->blk_start[s[r + 1]] - pl->blk_start[s[r]];
        const int64_t even = pl->flat_n / N;
        ZT_TEST_TRUE(share <= even + maxblk + 1 && share + maxblk + 1 >= even,
                     "%s N=%d: rank %d holds %lld elements, even is %lld, a block %lld", m->name,
                     N, r, (long long)share, (long long)even, (long long)maxblk);
    }
    /* this rank's blocks of each parameter: its part of the shard */
    for (int i = 0; i < m->n; i++) {
        const struct zt_plan_param *p = &pl->param[i];
        int lo = s[c->rank] - p->first_blk, hi = s[c->rank + 1] - p->first_blk;
        lo = lo < 0 ? 0 : lo > p->nblk ? p->nblk : lo;
        hi = hi < lo ? lo : hi > p->nblk ? p->nblk : hi;
        ZT_TEST_TRUE(p->own0 == lo && p->own1 == hi, "%s N=%d rank %d: param %d owns [%d, %d)",
                     m->name, N, c->rank, i, p->own0, p->own1);
    }
}

static void check_groups(const struct zt_zero_plan *pl, const struct model *m,
                         const struct zt_plan_cfg *c) {
    const int N = c->world_size;
    int b = 0;
    for (int g = 0; g < pl->ngroups; g++) {
        const struct zt_plan_group *gr = &pl->group[g];
        ZT_TEST_TRUE(gr->first == b && gr->n >= 1, "%s N=%d: group %d at block %d", m->name, N, g,
                     gr->first);
        ZT_TEST_TRUE(gr->elems == pl->blk_start[b + gr->n] - pl->blk_start[b],
                     "%s N=%d: group %d elements", m->name, N, g);
        /* cut at the size (the last block may take it past), at every shard boundary */
        ZT_TEST_TRUE(gr->n == 1 || pl->blk_start[b + gr->n - 1] - pl->blk_start[b] <
                                       c->group_elems,
                     "%s N=%d: group %d too large", m->name, N, g);
        for (int r = 1; r < N; r++)
            ZT_TEST_TRUE(!(pl->shard_first_blk[r] > b && pl->shard_first_blk[r] < b + gr->n),
                         "%s N=%d: group %d crosses shard %d", m->name, N, g, r);
        b += gr->n;
    }
    ZT_TEST_TRUE(b == pl->nblk, "%s N=%d: groups cover %d of %d blocks", m->name, N, b, pl->nblk);
    for (int r = 0; r <= N; r++) {
        const int g = pl->rank_first_group[r];
        ZT_TEST_TRUE(g == pl->ngroups ? pl->shard_first_blk[r] == pl->nblk
                                      : pl->group[g].first == pl->shard_first_blk[r] ||
                                            pl->shard_first_blk[r] == pl->nblk,
                     "%s N=%d: rank %d's first group %d", m->name, N, r, g);
    }
    const int lo = c->stage >= 1 ? pl->rank_first_group[c->rank] : 0;
    const int hi = c->stage >= 1 ? pl->rank_first_group[c->rank + 1] : pl->ngroups;
    ZT_TEST_TRUE(pl->group_lo == lo && pl->group_hi == hi, "%s N=%d stage %d: groups [%d, %d)",
                 m->name, N, c->stage, pl->group_lo, pl->group_hi);
    for (int g = 0; g < pl->ngroups; g++)
        for (int k = pl->group[g].first; k < pl->group[g].first + pl->group[g].n; k++)
            ZT_TEST_TRUE(pl->blk_local_group[k] == (g >= lo && g < hi ? g - lo : -1),
                         "%s N=%d: block %d's local group", m->name, N, k);
}

static void check_buckets(const struct zt_zero_plan *pl, const struct model *m,
                          const struct zt_plan_bucket *bk, int n, int64_t budget, int reduce) {
    int i = 0;
    for (int k = 0; k < n; k++) {
        ZT_TEST_TRUE(bk[k].i0 == i && bk[k].i1 > bk[k].i0 && bk[k].nparams == bk[k].i1 - bk[k].i0,
                     "%s: bucket %d holds params [%d, %d)", m->name, k, bk[k].i0, bk[k].i1);
        ZT_TEST_TRUE(bk[k].b0 == pl->param[bk[k].i0].first_blk &&
                         bk[k].b1 == pl->param[bk[k].i1 - 1].first_blk +
                                         pl->param[bk[k].i1 - 1].nblk,
                     "%s: bucket %d blocks [%d, %d)", m->name, k, bk[k].b0, bk[k].b1);
        const int64_t el = pl->blk_start[bk[k].b1] - pl->blk_start[bk[k].b0];
        ZT_TEST_TRUE(el <= budget || bk[k].nparams == 1, "%s: bucket %d over budget", m->name, k);
        /* cut only when the next parameter would not fit */
        if (k + 1 < n) {
            const struct zt_plan_param *nx = &pl->param[bk[k].i1];
            ZT_TEST_TRUE(pl->blk_start[nx->first_blk + nx->nblk] - pl->blk_start[bk[k].b0] >
                             budget,
                         "%s: bucket %d cut early", m->name, k);
        }
        for (int j = bk[k].i0; reduce && j < bk[k].i1; j++)
            ZT_TEST_TRUE(pl->param[j].reduce_bucket == k, "%s: param %d not in bucket %d",
                         m->name, j, k);
        i = bk[k].i1;
    }
    ZT_TEST_TRUE(i == m->n, "%s: buckets cover %d of %d params", m->name, i, m->n);
}

static void check_persistent(const struct zt_zero_plan *pl, const struct model *m,
                             const struct zt_plan_cfg *c) {
    int k = 0;
    for (int i = 0; i < m->n; i++) {
        const struct zt_plan_param *p = &pl->param[i];
        const int want = c->stage >= 3 && numel(&m->s[i]) <= c->persistence_threshold;
        ZT_TEST_TRUE(p->persistent == want, "%s stage %d: param %d persistent %d", m->name,
                     c->stage, i, p->persistent);
        ZT_TEST_TRUE(p->offloaded == (c->stage >= 3 && !want && c->params_on_nvme),
                     "%s stage %d: param %d offloaded %d", m->name, c->stage, i, p->offloaded);
        for (int j = 0; want && j < p->nblk; j++, k++) {
            const int b = p->first_blk + j;
            ZT_TEST_TRUE(k < pl->npersist && pl->persist_blk[k] == b,
                         "%s: persistent block %d is not %d", m->name, k, b);
            int r = 0;
            while (r + 1 < c->world_size && pl->shard_first_blk[r + 1] <= b) r++;
            ZT_TEST_TRUE(k < pl->npersist && pl->persist_owner[k] == r &&
                             b >= pl->shard_first_blk[r] && b < pl->shard_first_blk[r + 1],
                         "%s: persistent block %d's owner", m->name, b);
        }
    }
    ZT_TEST_TRUE(k == pl->npersist, "%s: %d persistent blocks, plan has %d", m->name, k,
                 pl->npersist);
}

static void check_units(const struct zt_zero_plan *pl, const struct model *m,
                        const struct zt_plan_cfg *c) {
    if (!c->optim_on_nvme && !c->params_on_nvme) return;
    const int align = c->params16_on_nvme ? 2048 : 1024, parts = 2 + c->params16_on_nvme;
    const int64_t esize = c->params16_on_nvme ? 2 : 4;
    ZT_TEST_TRUE(pl->unit_elems % align == 0 && pl->unit_elems >= c->group_elems &&
                     pl->unit_elems - c->group_elems < align,
                 "%s: unit size %lld", m->name, (long long)pl->unit_elems);
    int u = 0;
    int64_t optim_off = 0, param_off = 0, maxu = 1024;
    for (int li = 0; li < pl->group_hi - pl->group_lo; li++) {
        const int64_t ge = pl->group[pl->group_lo + li].elems;
        ZT_TEST_TRUE(pl->group_first_unit[li] == u, "%s: group %d's first unit", m->name, li);
        ZT_TEST_TRUE(pl->param_group_off[li] == param_off && param_off % 4096 == 0,
                     "%s: group %d's parameter file offset", m->name, li);
        if (c->params_on_nvme) param_off += (ge * esize + 4095) / 4096 * 4096;
        int64_t x = 0;
        for (; u < pl->group_first_unit[li + 1]; u++) {
            const struct zt_plan_unit *un = &pl->unit[u];
            ZT_TEST_TRUE(un->group == li && un->lo == x && un->hi > un->lo &&
                             un->hi - un->lo <= pl->unit_elems && un->lo % align == 0,
                         "%s: unit %d [%lld, %lld) of group %d", m->name, u, (long long)un->lo,
                         (long long)un->hi, li);
            ZT_TEST_TRUE(un->optim_off == optim_off && optim_off % 4096 == 0,
                         "%s: unit %d's optimizer file offset", m->name, u);
            optim_off += parts * zt_plan_unit_file_bytes(pl, u);
            if (un->hi - un->lo > maxu) maxu = un->hi - un->lo;
            x = un->hi;
        }
        ZT_TEST_TRUE(x == ge, "%s: units tile %lld of group %d's %lld elements", m->name,
                     (long long)x, li, (long long)ge);
    }
    ZT_TEST_TRUE(u == pl->nunits && pl->max_unit_elems == maxu &&
                     pl->optim_file_bytes == optim_off && pl->param_file_bytes == param_off,
                 "%s: %d units, files %lld + %lld bytes", m->name, pl->nunits,
                 (long long)pl->optim_file_bytes, (long long)pl->param_file_bytes);
}

/* ---------------------------------------------------------------------------------------------
 * every rank of one configuration: each plan alone, then the ranks together */

static void check_world(const struct model *m, struct zt_plan_cfg c) {
    const int N = c.world_size;
    struct zt_zero_plan pls[8];
    for (int r = 0; r < N; r++) {
        c.rank = r;
        enum zt_status rc = zt_zero_plan_make(&pls[r], &c, m->s, m->n);
        ZT_TEST_TRUE(rc == ZT_OK, "%s: plan failed: %s", m->name, zt_error_last());
        if (rc != ZT_OK) return;
        check_layout(&pls[r], m, &c);
        check_shards(&pls[r], m, &c);
        check_groups(&pls[r], m, &c);
        check_buckets(&pls[r], m, pls[r].reduce_bucket, pls[r].nreduce, c.reduce_bucket_elems,
                      1);
        check_buckets(&pls[r], m, pls[r].gather_bucket, pls[r].ngather,
                      c.allgather_bucket_elems, 0);
        check_persistent(&pls[r], m, &c);
        check_units(&pls[r], m, &c);
    }
    /* the same shards on every rank; each block owned by exactly one rank */
    int *owners = calloc((size_t)pls[0].nblk + 1, sizeof *owners);
    for (int r = 0; r < N; r++) {
        for (int q = 0; q <= N; q++)
            ZT_TEST_TRUE(pls[r].shard_first_blk[q] == pls[0].shard_first_blk[q],
                         "%s: ranks 0 and %d disagree on shard %d", m->name, r, q);
        for (int i = 0; i < m->n; i++)
            for (int j = pls[r].param[i].own0; j < pls[r].param[i].own1; j++)
                owners[pls[r].param[i].first_blk + j]++;
    }
    for (int b = 0; b < pls[0].nblk; b++)
        ZT_TEST_TRUE(owners[b] == 1, "%s N=%d: block %d owned %d times", m->name, N, b, owners[b]);
    free(owners);
    for (int r = 0; r < N; r++) zt_zero_plan_free(&pls[r]);
}

/* one plan worked out by hand: two ranks, 4 row blocks per large matrix, groups of 1024 */
static void check_by_hand(void) {
    const struct zt_plan_shape s[3] = {{64, 64, 2}, {1, 10, 1}, {100, 50, 2}};
    const struct zt_plan_cfg c = {.rank = 1, .world_size = 2, .stage = 1, .chunks = 4,
                                  .group_elems = 1024, .reduce_bucket_elems = 5000,
                                  .allgather_bucket_elems = 100000,
                                  .persistence_threshold = 0};
    struct zt_zero_plan pl;
    ZT_TEST_TRUE(zt_zero_plan_make(&pl, &c, s, 3) == ZT_OK, "hand plan: %s", zt_error_last());
    /* 4096 elements in 4 blocks of 1024; 10 padded to 16 (one block at 4096); 5000 (padded to
     * 5008) in 4 blocks of 25 rows (1250 elements) from 4112 */
    const int64_t starts[10] = {0, 1024, 2048, 3072, 4096, 4112, 5362, 6612, 7862, 9120};
    for (int b = 0; b < 10; b++)
        ZT_TEST_TRUE(pl.blk_start[b] == starts[b], "hand plan: block %d at %lld", b,
                     (long long)pl.blk_start[b]);
    ZT_TEST_TRUE(pl.flat_n == 9120 && pl.nblk == 9, "hand plan: %lld elements",
                 (long long)pl.flat_n);
    /* rank 1 starts at the first block at or after 4560: block 6 (5362) */
    ZT_TEST_TRUE(pl.shard_first_blk[1] == 6, "hand plan: rank 1's shard starts at block %d",
                 pl.shard_first_blk[1]);
    ZT_TEST_TRUE(pl.param[2].own0 == 1 && pl.param[2].own1 == 4 &&
                     pl.param[0].own0 == pl.param[0].own1,
                 "hand plan: rank 1 owns blocks [%d, %d) of param 2", pl.param[2].own0,
                 pl.param[2].own1);
    /* groups: one per block (each reaches 1024), except blocks 4 and 5 (16 + 1250 elements, cut
     * there also because rank 1's shard starts at block 6) */
    ZT_TEST_TRUE(pl.ngroups == 8 && pl.group[4].first == 4 && pl.group[4].n == 2 &&
                     pl.rank_first_group[1] == 5 && pl.group_lo == 5 && pl.group_hi == 8,
                 "hand plan: %d groups, rank 1's from %d", pl.ngroups, pl.rank_first_group[1]);
    /* reduce buckets of 5000: [param 0, param 1] (4112), [param 2] (5000) */
    ZT_TEST_TRUE(pl.nreduce == 2 && pl.reduce_bucket[0].i1 == 2 && pl.param[2].reduce_bucket == 1,
                 "hand plan: %d reduce buckets", pl.nreduce);
    zt_zero_plan_free(&pl);
}

int main(void) {
    struct model models[4];
    gpt2(&models[0], 65, 64, 32, 2);
    gpt2(&models[1], 50257, 1024, 64, 3);
    odd(&models[2]);
    single(&models[3]);
    int plans = 0;
    for (int mi = 0; mi < 4; mi++)
        for (int stage = 0; stage <= 3; stage++)
            for (int N = 1; N <= 8; N++)
                for (int v = 0; v < 4; v++) {
                    struct zt_plan_cfg c = {
                        .world_size = N, .stage = stage, .chunks = v == 0 ? 1 : v == 1 ? 4 : 7,
                        .group_elems = v < 2 ? 1024 : v == 2 ? 5000 : 1 << 20,
                        .reduce_bucket_elems = v == 0 ? 1 : v == 1 ? 3000 : 500000000,
                        .allgather_bucket_elems = v == 3 ? 2048 : 500000000,
                        .persistence_threshold = v == 1 ? 0 : v == 2 ? 100000 : 100,
                        .optim_on_nvme = v >= 2, .params_on_nvme = v == 3,
                        .params16_on_nvme = v == 3 && (N & 1)};
                    check_world(&models[mi], c);
                    plans += N;
                }
    check_by_hand();
    if (zt_test_failures) {
        printf("test_zero_plan: %d failures\n", zt_test_failures);
        return 1;
    }
    printf("test_zero_plan: %d plans checked\n", plans);
    return 0;
}
