/*
 * tests/io/test_ckpt.c: proves the checkpoint shard format keeps its contract:
 * - CRC32C matches the published check values (RFC 3720 B.4: 32 zero bytes 0x8A9136AA, 32 0xFF
 *   bytes 0x62A8AB43, 0..31 0x46DD794E; "123456789" 0xE3069283) at any alignment and when chained;
 * - a shard written in pieces (records split across appends, an empty record) reads back exactly,
 *   with its rank, world size, names, roles, shapes and row ranges, and verifies;
 * - every damaged file is refused naming the file (and the tensor): a flipped data bit (read and
 *   verify), a flipped header bit, truncation inside a tensor, a bad magic, a newer format, and
 *   header numbers out of range (a rank outside the world or beyond int, a size beyond int64_t,
 *   a fraction, rows x cols beyond 2^40 or wrapping to the byte count, a CRC beyond 32 bits);
 * - run ids parse only as exactly 16 hex digits, not all zero;
 * - a write that fails part-way (EFBIG under a file-size limit) leaves the previous shard intact
 *   and no temporary behind; an incomplete record is refused at commit;
 * - records streamed O_DIRECT through one small staging buffer (zt_shard_stream_*: a record
 *   larger than the buffer, neighbours sharing it, records out of file order, an empty one) give
 *   the same bytes as zt_shard_put, and a second open record is refused;
 * - records read O_DIRECT through aio (zt_shard_set_direct) equal buffered reads, whole blocks or
 *   with a partial last block, and a flipped bit in either part is still caught;
 * - a shard records the checkpoint it belongs to (run id, step, rank, world size) and a set is
 *   refused when a shard's run id or step is not the checkpoint's (naming the shard and the
 *   field), when it has none and the checkpoint has, or has one and the checkpoint has none.
 */
#include <fcntl.h>        /* open */
#include <signal.h>       /* signal, SIGXFSZ */
#include <stdio.h>        /* snprintf */
#include <stdlib.h>       /* getenv, malloc */
#include <string.h>       /* memcmp, strstr */
#include <sys/resource.h> /* setrlimit */
#include <sys/stat.h>     /* mkdir */
#include <sys/wait.h>     /* waitpid */
#include <unistd.h>       /* fork, truncate, pread, pwrite */

#include "zt_aio.h"       /* zt_aio_init */
#include "zt_ckpt.h"      /* zt_shard_* */
#include "zt_crc32c.h"    /* zt_crc32c, zt_crc32c_portable, zt_crc32c_copy */
#include "zt_status.h"    /* zt_error_last */
#include "zt_test.h"      /* ZT_TEST_TRUE, zt_test_finish */

static const char *dir;

static void check_crc(void) {
    unsigned char buf[64 + 8];
    memset(buf, 0, sizeof buf);
    for (int a = 0; a < 8; a++) { /* every start alignment */
        memset(buf + a, 0, 32);
        ZT_TEST_TRUE(zt_crc32c(0, buf + a, 32) == 0x8A9136AAu, "crc32c of 32 zeros at +%d", a);
        memset(buf + a, 0xff, 32);
        ZT_TEST_TRUE(zt_crc32c(0, buf + a, 32) == 0x62A8AB43u, "crc32c of 32 0xFF at +%d", a);
        for (int i = 0; i < 32; i++) buf[a + i] = (unsigned char)i;
        ZT_TEST_TRUE(zt_crc32c(0, buf + a, 32) == 0x46DD794Eu, "crc32c of 0..31 at +%d", a);
    }
    ZT_TEST_TRUE(zt_crc32c(0, "123456789", 9) == 0xE3069283u, "crc32c check value");
    ZT_TEST_TRUE(zt_crc32c_portable(0, "123456789", 9) == 0xE3069283u, "table crc32c check value");
    /* the SSE4.2 path (where the CPU has it) against the tables: every start alignment, lengths
     * around the 8-byte steps, chained from a nonzero crc */
    unsigned char big[1100];
    for (int i = 0; i < (int)sizeof big; i++) big[i] = (unsigned char)(i * 131 + 7);
    int same = 1;
    for (int a = 0; a < 8; a++)
        for (int n = 0; n < 1090; n += (n < 40 ? 1 : 97))
            same &= zt_crc32c(0x1234u, big + a, (size_t)n) ==
                    zt_crc32c_portable(0x1234u, big + a, (size_t)n);
    ZT_TEST_TRUE(same, "crc32c: the fast path equals the table path at every alignment and length");
    uint32_t c = zt_crc32c(0, "1234", 4);
    ZT_TEST_TRUE(zt_crc32c(c, "56789", 5) == 0xE3069283u, "crc32c chained");
    /* long buffers (three chains joined) and the checksumming copy: lengths around the
     * three-piece threshold (768) and its 24-byte steps, and large ones, at every alignment */
    const size_t nbig = (1 << 20) + 77;
    unsigned char *src = malloc(nbig + 8), *dst = malloc(nbig + 8);
    for (size_t i = 0; i < nbig + 8; i++) src[i] = (unsigned char)((i * 2654435761u) >> 13);
    static const size_t lens[] = {767, 768, 769, 771, 775, 791, 792, 793, 4096, 65536 + 5,
                                  262144, (1 << 20) + 77};
    int same_crc = 1, same_copy = 1, same_bytes = 1;
    for (int a = 0; a < 8; a++)
        for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
            size_t n = lens[l];
            uint32_t want = zt_crc32c_portable(0xBEEFu, src + a, n);
            same_crc &= zt_crc32c(0xBEEFu, src + a, n) == want;
            memset(dst, 0, nbig + 8);
            same_copy &= zt_crc32c_copy(0xBEEFu, dst + (7 - a), src + a, n) == want;
            same_bytes &= memcmp(dst + (7 - a), src + a, n) == 0 && dst[7 - a + n] == 0;
        }
    ZT_TEST_TRUE(same_crc, "crc32c: long buffers (three joined chains) equal the table path");
    ZT_TEST_TRUE(same_copy, "crc32c_copy: the same CRC as the table path");
    ZT_TEST_TRUE(same_bytes, "crc32c_copy: copies exactly n bytes");
    free(src);
    free(dst);
}

static struct zt_shard_rec rec(const char *name, int role, int64_t rows, int64_t cols,
                               int64_t r0, int64_t r1) {
    struct zt_shard_rec r = {.role = role, .rows = rows, .cols = cols, .row0 = r0, .row1 = r1};
    snprintf(r.name, sizeof r.name, "%s", name);
    return r;
}

/* a shard writer of rank `rank` of `world` without a run id and step */
static enum zt_status create(struct zt_shard_writer *w, const char *p, int rank, int world,
                             const struct zt_shard_rec *r, int n) {
    const struct zt_shard_id id = {.run_id = 0, .step = -1, .rank = rank, .world = world};
    return zt_shard_create(w, p, &id, r, n);
}

#define NREC 4
static struct zt_shard_rec recs[NREC];
static float *vals[NREC];

static enum zt_status write_shard(const char *p) {
    struct zt_shard_writer w;
    ZT_CHECK(create(&w, p, 1, 3, recs, NREC));
    for (int i = 0; i < NREC; i++) {
        int64_t n = (recs[i].row1 - recs[i].row0) * recs[i].cols, h = n / 3;
        ZT_CHECK(zt_shard_append(&w, vals[i], h)); /* in two pieces */
        ZT_CHECK(zt_shard_append(&w, vals[i] + h, n - h));
    }
    return zt_shard_commit(&w);
}

static void flip(const char *p, int64_t off) {
    int fd = open(p, O_RDWR);
    unsigned char b = 0;
    if (pread(fd, &b, 1, off) == 1) {
        b ^= 0x10;
        if (pwrite(fd, &b, 1, off) != 1) b = 0;
    }
    close(fd);
}

static void expect_open_fails(const char *p, const char *want, const char *what) {
    struct zt_shard s;
    enum zt_status rc = zt_shard_open(&s, p);
    ZT_TEST_TRUE(rc == ZT_ERR_CKPT_CORRUPT && strstr(zt_error_last(), want) &&
                     strstr(zt_error_last(), p),
                 "%s: refused naming the file (%s)", what, zt_error_last());
    if (rc == ZT_OK) zt_shard_close(&s);
}

/* 1: the two files hold the same bytes */
static int same_file(const char *p1, const char *p2) {
    FILE *a = fopen(p1, "rb"), *b = fopen(p2, "rb");
    int same = a && b;
    for (int ca = 0, cb = 0; same && ca != EOF;) {
        ca = fgetc(a);
        cb = fgetc(b);
        same = ca == cb;
    }
    if (a) fclose(a);
    if (b) fclose(b);
    return same;
}

/* p1 written with zt_shard_put, p2 streamed through an 8 KiB buffer: same bytes */
static void check_stream(const char *p1, const char *p2) {
    enum { NS = 4 };
    struct zt_shard_rec r[NS] = {rec("big", 0, 3000, 1, 0, 3000), rec("next", 1, 5, 1, 0, 5),
                                 rec("later", 2, 10, 100, 0, 10), rec("none", 0, 4, 3, 2, 2)};
    float *v[NS];
    for (int i = 0; i < NS; i++) {
        int64_t n = (r[i].row1 - r[i].row0) * r[i].cols;
        v[i] = malloc((size_t)(n + 1) * sizeof(float));
        for (int64_t k = 0; k < n; k++) v[i][k] = (float)(i * 7919 + k) * 0.25f - 3.0f;
    }
    struct zt_shard_writer w;
    enum zt_status rc = create(&w, p1, 0, 1, r, NS);
    for (int i = 0; i < NS && rc == ZT_OK; i++)
        rc = zt_shard_put(&w, i, v[i], (r[i].row1 - r[i].row0) * r[i].cols);
    ZT_TEST_TRUE(rc == ZT_OK && zt_shard_commit(&w) == ZT_OK, "put shard (%s)", zt_error_last());
    struct zt_aio_cfg cfg = {4096, 4, 0, 1, ZT_AIO_AUTO};
    zt_aio_t a = NULL;
    char *buf = aligned_alloc(4096, 8192);
    ZT_TEST_TRUE(zt_aio_init(&a, &cfg) == ZT_OK, "aio (%s)", zt_error_last());
    ZT_TEST_TRUE(create(&w, p2, 0, 1, r, NS) == ZT_OK, "create for streaming");
    ZT_TEST_TRUE(zt_shard_direct(&w, a), "streamed shard opened O_DIRECT");
    struct zt_shard_stream st;
    zt_shard_stream_begin(&st, &w, buf, 8192);
    const int order[NS] = {0, 1, 3, 2}; /* 1 follows 0; 3 and then 2 do not follow */
    rc = ZT_OK;
    for (int k = 0; k < NS && rc == ZT_OK; k++) {
        int i = order[k];
        int64_t n = (r[i].row1 - r[i].row0) * r[i].cols, h = n / 3;
        rc = zt_shard_stream_record(&st, i);
        if (rc == ZT_OK && k == 0)
            ZT_TEST_TRUE(zt_shard_stream_record(&st, 1) == ZT_ERR_INVALID &&
                             strstr(zt_error_last(), "is open"),
                         "a second record while one is open is refused (%s)", zt_error_last());
        if (rc == ZT_OK) rc = zt_shard_stream_add(&st, v[i], h);
        if (rc == ZT_OK) rc = zt_shard_stream_add(&st, v[i] + h, n - h);
        if (rc == ZT_OK) rc = zt_shard_stream_done(&st);
    }
    if (rc == ZT_OK) rc = zt_shard_stream_end(&st);
    ZT_TEST_TRUE(rc == ZT_OK && zt_shard_commit(&w) == ZT_OK, "streamed shard committed (%s)",
                 zt_error_last());
    ZT_TEST_TRUE(same_file(p1, p2), "streamed: byte-identical to the shard written by put");
    struct zt_shard s;
    ZT_TEST_TRUE(zt_shard_open(&s, p2) == ZT_OK && zt_shard_verify(&s) == ZT_OK,
                 "streamed shard verifies (%s)", zt_error_last());
    zt_shard_close(&s);
    zt_aio_free(a);
    free(buf);
    for (int i = 0; i < NS; i++) free(v[i]);
}

/* records read O_DIRECT through aio (zt_shard_set_direct): a record of whole 4096-byte blocks, one
 * with a partial last block (read buffered), one below the direct threshold; the same values as
 * buffered reads into an unaligned buffer; a flipped bit in the direct part and in the tail are
 * both caught */
static void check_direct_read(const char *p) {
    enum { ND = 4 };
    struct zt_shard_rec r[ND] = {rec("whole", 0, 256, 1024, 0, 256), /* 1 MiB */
                                 rec("tail", 1, 300, 257, 0, 300),   /* 308400 bytes */
                                 rec("small", 2, 10, 7, 0, 10),
                                 rec("big", 0, 1301, 1031, 0, 1301)}; /* 5.1 MiB: read on a
                                                                        helper thread */
    float *v[ND];
    int64_t n[ND];
    for (int i = 0; i < ND; i++) {
        n[i] = (r[i].row1 - r[i].row0) * r[i].cols;
        v[i] = malloc((size_t)n[i] * sizeof(float));
        for (int64_t k = 0; k < n[i]; k++) v[i][k] = (float)(i * 104729 + k) * 0.125f - 7.0f;
    }
    struct zt_shard_writer w;
    enum zt_status rc = create(&w, p, 0, 1, r, ND);
    for (int i = 0; i < ND && rc == ZT_OK; i++) rc = zt_shard_put(&w, i, v[i], n[i]);
    ZT_TEST_TRUE(rc == ZT_OK && zt_shard_commit(&w) == ZT_OK, "shard for direct reads (%s)",
                 zt_error_last());
    struct zt_aio_cfg cfg = {65536, 4, 0, 1, ZT_AIO_AUTO};
    zt_aio_t a = NULL;
    ZT_TEST_TRUE(zt_aio_init(&a, &cfg) == ZT_OK, "aio (%s)", zt_error_last());
    const char *paths[1] = {p};
    struct zt_shard_set set;
    ZT_TEST_TRUE(zt_shard_set_open(&set, paths, 1) == ZT_OK, "set opens (%s)", zt_error_last());
    zt_shard_set_direct(&set, a);
    ZT_TEST_TRUE(set.sh[0].dfd >= 0 && set.sh[0].aio == a, "shard opened O_DIRECT");
    float *got = malloc((size_t)n[3] * sizeof(float) + 8);
    for (int i = 0; i < ND; i++) {
        rc = zt_shard_set_read(&set, r[i].name, r[i].role, r[i].cols, 0, n[i], got);
        ZT_TEST_TRUE(rc == ZT_OK && memcmp(got, v[i], (size_t)n[i] * 4) == 0,
                     "record %s read through aio equals what was written (%s)", r[i].name,
                     zt_error_last());
        float *odd = (float *)((char *)got + 4); /* unaligned: the buffered path */
        rc = zt_shard_read(&set.sh[0], i, odd);
        ZT_TEST_TRUE(rc == ZT_OK && memcmp(odd, v[i], (size_t)n[i] * 4) == 0,
                     "record %s read buffered into an unaligned buffer equals it too", r[i].name);
    }
    /* rows 17-1200 of "big" (the copy made in the checksum's pass), then rows 3-9 (from the
     * record kept since) */
    for (int k = 0; k < 2; k++) {
        int64_t x0 = (k ? 3 : 17) * 1031, x1 = (k ? 10 : 1201) * 1031;
        rc = zt_shard_set_read(&set, "big", 0, 1031, x0, x1, got);
        ZT_TEST_TRUE(rc == ZT_OK && memcmp(got, v[3] + x0, (size_t)(x1 - x0) * 4) == 0,
                     "rows of big read through the helper thread (%s)", zt_error_last());
    }
    int64_t o0 = set.sh[0].rec[0].offset, o1 = set.sh[0].rec[1].offset;
    int64_t o3 = set.sh[0].rec[3].offset;
    zt_shard_set_close(&set);
    flip(p, o0 + 5000);            /* in the direct part of "whole" */
    flip(p, o1 + 308400 - 3);      /* in the buffered tail of "tail" */
    flip(p, o3 + 4 * 1031 * 1200); /* late in "big", after the copied rows 17-20 */
    ZT_TEST_TRUE(zt_shard_set_open(&set, paths, 1) == ZT_OK, "damaged set opens");
    zt_shard_set_direct(&set, a);
    for (int i = 0; i < ND; i += i == 1 ? 2 : 1) { /* whole, tail, big */
        rc = zt_shard_set_read(&set, r[i].name, r[i].role, r[i].cols, i == 3 ? 17 * 1031 : 0,
                               i == 3 ? 21 * 1031 : n[i], got);
        ZT_TEST_TRUE(rc == ZT_ERR_CKPT_CORRUPT && strstr(zt_error_last(), r[i].name) &&
                         strstr(zt_error_last(), "checksum mismatch"),
                     "a flipped bit in %s is caught on the direct path (%s)", r[i].name,
                     zt_error_last());
    }
    zt_shard_set_close(&set);
    zt_aio_free(a);
    free(got);
    for (int i = 0; i < ND; i++) free(v[i]);
}

/* a one-record shard of rank `rank` of 2 with identity (run_id, step); 0: no identity */
static enum zt_status write_id_shard(const char *p, uint64_t run_id, int64_t step, int rank) {
    struct zt_shard_rec r = rec("wte.weight", ZT_ROLE_PARAM, 2, 4, rank, rank + 1);
    const struct zt_shard_id id = {.run_id = run_id, .step = run_id ? step : -1, .rank = rank,
                                   .world = 2};
    const float v[4] = {1, 2, 3, 4};
    struct zt_shard_writer w;
    ZT_CHECK(zt_shard_create(&w, p, &id, &r, 1));
    ZT_CHECK(zt_shard_append(&w, v, 4));
    return zt_shard_commit(&w);
}

/* the set {p0, p1} against the checkpoint (run_id, step): ZT_OK or the error naming `want` */
static void expect_ids(const char *p0, const char *p1, uint64_t run_id, int64_t step,
                       const char *want, const char *what) {
    const char *paths[2] = {p0, p1};
    struct zt_shard_set set;
    enum zt_status rc = zt_shard_set_open(&set, paths, 2);
    if (rc == ZT_OK) rc = zt_shard_set_check_id(&set, run_id, step);
    if (!want)
        ZT_TEST_TRUE(rc == ZT_OK, "%s: accepted (%s)", what, rc ? zt_error_last() : "");
    else
        ZT_TEST_TRUE(rc == ZT_ERR_CKPT_CORRUPT && strstr(zt_error_last(), want), "%s: %s", what,
                     zt_error_last());
    zt_shard_set_close(&set);
}

static void check_identity(void) {
    const uint64_t run = 0x0123456789abcdefull, other = 0xfedcba9876543210ull;
    char p0[600], p1[600];
    snprintf(p0, sizeof p0, "%s/id0.zts", dir);
    snprintf(p1, sizeof p1, "%s/id1.zts", dir);
    ZT_TEST_TRUE(write_id_shard(p0, run, 40, 0) == ZT_OK && write_id_shard(p1, run, 40, 1) == ZT_OK,
                 "shards with an identity written (%s)", zt_error_last());
    struct zt_shard s;
    ZT_TEST_TRUE(zt_shard_open(&s, p1) == ZT_OK && s.run_id == run && s.step == 40 &&
                     s.rank == 1 && s.world == 2 && zt_shard_verify(&s) == ZT_OK,
                 "the header's run id, step, rank and world size read back");
    zt_shard_close(&s);
    expect_ids(p0, p1, run, 40, NULL, "both shards of the checkpoint");
    expect_ids(p0, p1, run, 20, "id0.zts: step 40, expected 20", "another step's shards");
    expect_ids(p0, p1, other, 40, "run id 0123456789abcdef, expected fedcba9876543210",
               "another run's shards");
    expect_ids(p0, p1, 0, 40, "expected none", "shards with a run id, checkpoint without");
    ZT_TEST_TRUE(write_id_shard(p1, run, 20, 1) == ZT_OK, "rank 1 from step 20");
    expect_ids(p0, p1, run, 40, "id1.zts: step 20, expected 40", "one shard of another step");
    ZT_TEST_TRUE(write_id_shard(p1, 0, 0, 1) == ZT_OK, "rank 1 without an identity");
    expect_ids(p0, p1, run, 40, "id1.zts: no run id", "a shard without a run id");
    ZT_TEST_TRUE(write_id_shard(p0, 0, 0, 0) == ZT_OK, "rank 0 without an identity");
    expect_ids(p0, p1, 0, 40, NULL, "an older checkpoint: no run ids anywhere");
    unlink(p0);
    unlink(p1);
}

/* the records and their values every case below writes */
static void setup_records(void) {
    recs[0] = rec("wte.weight", ZT_ROLE_PARAM, 10, 7, 3, 8);
    recs[1] = rec("wte.weight", ZT_ROLE_EXP_AVG, 10, 7, 3, 8);
    recs[2] = rec("ln_f.bias", ZT_ROLE_EXP_AVG_SQ, 1, 5, 0, 1);
    recs[3] = rec("empty", ZT_ROLE_PARAM, 4, 3, 2, 2);
    for (int i = 0; i < NREC; i++) {
        int64_t n = (recs[i].row1 - recs[i].row0) * recs[i].cols;
        vals[i] = malloc((size_t)(n + 1) * sizeof(float));
        for (int64_t k = 0; k < n; k++) vals[i][k] = (float)(i * 1000 + k) * 0.37f - 5.0f;
    }
}

/* a shard written in pieces reads back exactly and verifies; returns record 1's offset (-1:
 * the shard did not open) */
static int64_t check_round_trip(const char *p) {
    ZT_TEST_TRUE(write_shard(p) == ZT_OK, "shard written (%s)", zt_error_last());
    ZT_TEST_TRUE(zt_test_count_tmp(dir) == 0, "no temporary left after commit");
    struct zt_shard s;
    if (zt_shard_open(&s, p) != ZT_OK) {
        ZT_TEST_FAIL("shard opens (%s)", zt_error_last());
        return -1;
    }
    ZT_TEST_TRUE(s.rank == 1 && s.world == 3 && s.n == NREC, "rank, world size, record count");
    for (int i = 0; i < NREC && i < s.n; i++) {
        const struct zt_shard_rec *r = &s.rec[i];
        int64_t n = (r->row1 - r->row0) * r->cols;
        ZT_TEST_TRUE(strcmp(r->name, recs[i].name) == 0 && r->role == recs[i].role &&
                         r->rows == recs[i].rows && r->cols == recs[i].cols &&
                         r->row0 == recs[i].row0 && r->row1 == recs[i].row1 &&
                         r->offset % 4096 == 0,
                     "record %d: name, role, shape, rows, aligned offset", i);
        float *got = malloc((size_t)(n + 1) * sizeof(float));
        ZT_TEST_TRUE(zt_shard_read(&s, i, got) == ZT_OK && memcmp(got, vals[i], (size_t)n * 4) == 0,
                     "record %d reads back exactly", i);
        free(got);
    }
    ZT_TEST_TRUE(zt_shard_verify(&s) == ZT_OK, "verify passes");
    int64_t off1 = s.rec[1].offset;
    zt_shard_close(&s);
    return off1;
}

/* the shard p with the first `from` of its header replaced by `to` and the header's CRC made
 * valid again (the length may change: the header has room before the first record) */
static int rewrite_header(const char *p, const char *from, const char *to) {
    int fd = open(p, O_RDWR);
    unsigned char pre[16];
    int ok = pread(fd, pre, 16, 0) == 16;
    uint32_t hl = pre[8] | pre[9] << 8 | pre[10] << 16 | (uint32_t)pre[11] << 24;
    char *h = malloc(hl + 1), *out = malloc(hl + strlen(to) + 1);
    ok = ok && pread(fd, h, hl, 16) == (ssize_t)hl;
    h[ok ? hl : 0] = '\0';
    char *f = strstr(h, from);
    if (ok && f) {
        size_t at = (size_t)(f - h);
        memcpy(out, h, at);
        snprintf(out + at, hl + strlen(to) + 1 - at, "%s%s", to, f + strlen(from));
        uint32_t n = (uint32_t)strlen(out), c = zt_crc32c(0, out, n);
        for (int i = 0; i < 4; i++) pre[8 + i] = (unsigned char)(n >> (8 * i));
        for (int i = 0; i < 4; i++) pre[12 + i] = (unsigned char)(c >> (8 * i));
        ok = pwrite(fd, pre, 16, 0) == 16 && pwrite(fd, out, n, 16) == (ssize_t)n;
    }
    free(h);
    free(out);
    close(fd);
    return ok && f;
}

/* every damaged file is refused naming the file (and the tensor) */
static void check_damage(int64_t off1) {
    char p2[1024];
    struct zt_shard s;
    /* a flipped data bit: open succeeds (the header is fine), read and verify fail */
    snprintf(p2, sizeof p2, "%s/flip.zts", dir);
    ZT_TEST_TRUE(write_shard(p2) == ZT_OK, "second shard written");
    flip(p2, off1 + 9);
    ZT_TEST_TRUE(zt_shard_open(&s, p2) == ZT_OK, "damaged data: header still opens");
    float tmp[64];
    ZT_TEST_TRUE(zt_shard_read(&s, 1, tmp) == ZT_ERR_CKPT_CORRUPT &&
                     strstr(zt_error_last(), "wte.weight") && strstr(zt_error_last(), "exp_avg") &&
                     strstr(zt_error_last(), "checksum mismatch"),
                 "flipped bit: read refused naming tensor and role (%s)", zt_error_last());
    ZT_TEST_TRUE(zt_shard_verify(&s) == ZT_ERR_CKPT_CORRUPT, "flipped bit: verify refuses");
    ZT_TEST_TRUE(zt_shard_read(&s, 0, tmp) == ZT_OK, "an intact record still reads");
    zt_shard_close(&s);

    ZT_TEST_TRUE(write_shard(p2) == ZT_OK, "rewritten");
    flip(p2, 40);
    expect_open_fails(p2, "header checksum mismatch", "flipped header bit");

    ZT_TEST_TRUE(write_shard(p2) == ZT_OK, "rewritten");
    ZT_TEST_TRUE(truncate(p2, off1 + 8) == 0, "truncated");
    expect_open_fails(p2, "truncated: tensor wte.weight", "truncation inside a tensor");

    ZT_TEST_TRUE(write_shard(p2) == ZT_OK, "rewritten");
    flip(p2, 2);
    expect_open_fails(p2, "bad magic", "bad magic");

    /* a newer format: rewrite the header's "format": 1 as 2 with a valid CRC */
    ZT_TEST_TRUE(write_shard(p2) == ZT_OK, "rewritten");
    ZT_TEST_TRUE(rewrite_header(p2, "\"format\": 1", "\"format\": 2"),
                 "header rewritten as format 2");
    expect_open_fails(p2, "format 2 (this zerotask reads format 1)", "newer format");
}

/* header numbers out of range are refused before any conversion or product: a rank that
 * would truncate into range, a size too large for int64_t, rows x cols x 4 that would wrap to
 * the record's byte count */
static void check_header_numbers(void) {
    static const char *const cases[][3] = {
        {"\"rank\": 1", "\"rank\": 4294967297", "lacks format, rank"},
        {"\"rank\": 1", "\"rank\": 3", "lacks format, rank"},
        {"\"rows\": 10", "\"rows\": 1e300", "record 0 is malformed"},
        {"\"rows\": 10", "\"rows\": 10.5", "record 0 is malformed"},
        {"\"rows\": 4, \"cols\": 3, \"row0\": 2, \"row1\": 2",
         "\"rows\": 1099511627776, \"cols\": 4, \"row0\": 0, \"row1\": 0", "(empty param)"},
        {"\"rows\": 4, \"cols\": 3, \"row0\": 2, \"row1\": 2",
         "\"rows\": 2305843009213693952, \"cols\": 2, \"row0\": 0, \"row1\": 2305843009213693952",
         "record 3 is malformed"},
        {"\"crc32c\": ", "\"crc32c\": 4294967296, \"x\": ", "record 0 is malformed"},
    };
    char p[1024];
    snprintf(p, sizeof p, "%s/numbers.zts", dir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ZT_TEST_TRUE(write_shard(p) == ZT_OK && rewrite_header(p, cases[i][0], cases[i][1]),
                     "header rewritten: %s", cases[i][1]);
        expect_open_fails(p, cases[i][2], cases[i][1]);
    }
    unlink(p);
}

/* run ids: exactly 16 hex digits, not all zero */
static void check_run_id_parse(void) {
    uint64_t id = 0;
    ZT_TEST_TRUE(zt_run_id_parse("0123456789abcdef", &id) == 0 && id == 0x0123456789abcdefull &&
                     zt_run_id_parse("FEDCBA9876543210", &id) == 0 && id == 0xfedcba9876543210ull,
                 "run ids of 16 hex digits parse");
    static const char *const bad_ids[] = {"", "0000000000000000", "0123456789abcde",
                                          "0123456789abcdef0", " 123456789abcdef",
                                          "-123456789abcdef", "0x23456789abcdef",
                                          "+123456789abcdef", "0123456789abcdeg"};
    for (size_t i = 0; i < sizeof bad_ids / sizeof bad_ids[0]; i++)
        ZT_TEST_TRUE(zt_run_id_parse(bad_ids[i], &id) != 0, "run id '%s' refused", bad_ids[i]);
}

/* a write that fails part-way (EFBIG) keeps the previous file and leaves no temporary */
static void check_failed_write(const char *p) {
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {6000, 6000};
        setrlimit(RLIMIT_FSIZE, &rl);
        _exit(write_shard(p) == ZT_ERR_IO && strstr(zt_error_last(), p) ? 0 : 1);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    ZT_TEST_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0, "EFBIG: the save fails with ZT_ERR_IO "
                                                         "naming the shard");
    ZT_TEST_TRUE(zt_test_count_tmp(dir) == 0, "EFBIG: no temporary left");
    struct zt_shard s;
    ZT_TEST_TRUE(zt_shard_open(&s, p) == ZT_OK && zt_shard_verify(&s) == ZT_OK,
                 "EFBIG: the previous shard is intact");
    zt_shard_close(&s);
}

/* an incomplete record is refused at commit; zt_shard_put (the background save's way): records
 * in reverse order, each in two pieces, give the same file as appending them in order */
static void check_incomplete_and_put(const char *p, char *p2, size_t n2) {
    struct zt_shard_writer w;
    snprintf(p2, n2, "%s/short.zts", dir);
    ZT_TEST_TRUE(create(&w, p2, 0, 1, recs, NREC) == ZT_OK, "create");
    ZT_TEST_TRUE(zt_shard_append(&w, vals[0], 3) == ZT_OK, "a partial record");
    ZT_TEST_TRUE(zt_shard_commit(&w) == ZT_ERR_INVALID && strstr(zt_error_last(), "incomplete") &&
                     access(p2, F_OK) != 0 && zt_test_count_tmp(dir) == 0,
                 "incomplete records: commit refused, no file, no temporary (%s)", zt_error_last());

    snprintf(p2, n2, "%s/put.zts", dir);
    ZT_TEST_TRUE(create(&w, p2, 1, 3, recs, NREC) == ZT_OK, "create for put");
    enum zt_status prc = ZT_OK;
    for (int i = NREC - 1; i >= 0 && prc == ZT_OK; i--) {
        int64_t n = (recs[i].row1 - recs[i].row0) * recs[i].cols, h = n / 2;
        prc = zt_shard_put(&w, i, vals[i], h);
        if (prc == ZT_OK) prc = zt_shard_put(&w, i, vals[i] + h, n - h);
    }
    ZT_TEST_TRUE(prc == ZT_OK && zt_shard_put(&w, 0, vals[0], 1) == ZT_ERR_INVALID,
                 "put: every record written; one float more is refused");
    ZT_TEST_TRUE(zt_shard_commit(&w) == ZT_OK, "put: commit (%s)", zt_error_last());
    ZT_TEST_TRUE(write_shard(p) == ZT_OK, "the appended shard again");
    ZT_TEST_TRUE(same_file(p, p2), "put out of order: byte-identical to the shard written by "
                                   "append");
    ZT_TEST_TRUE(create(&w, p2, 0, 1, recs, NREC) == ZT_OK, "create for put");
    ZT_TEST_TRUE(zt_shard_put(&w, 1, vals[1], 5) == ZT_OK &&
                     zt_shard_commit(&w) == ZT_ERR_INVALID &&
                     strstr(zt_error_last(), "incomplete") && zt_test_count_tmp(dir) == 0,
                 "put: a record left short is refused at commit, no temporary (%s)",
                 zt_error_last());
}

/* many records with large offsets: the header reserved at create (offsets unknown) still holds
 * the final one (a gpt2-124M shard has 148 records at offsets up to 1.5e9) */
static void check_many_records(void) {
    enum { MANY = 600 };
    struct zt_shard_rec *many = calloc(MANY, sizeof *many);
    float *z = calloc(4096, sizeof(float));
    for (int i = 0; i < MANY; i++) {
        many[i] = rec("transformer.h.0.mlp.c_fc.weight", i % 3, 4, 1024, 0, 4);
        snprintf(many[i].name, sizeof many[i].name, "t%d.weight", i);
    }
    char p[1024];
    snprintf(p, sizeof p, "%s/many.zts", dir);
    struct zt_shard_writer w;
    enum zt_status mrc = create(&w, p, 0, 1, many, MANY);
    for (int i = 0; i < MANY && mrc == ZT_OK; i++) mrc = zt_shard_append(&w, z, 4096);
    if (mrc == ZT_OK) mrc = zt_shard_commit(&w);
    ZT_TEST_TRUE(mrc == ZT_OK, "600 records up to %d MiB: committed (%s)", MANY * 16 / 1024,
                 zt_error_last());
    struct zt_shard s;
    ZT_TEST_TRUE(zt_shard_open(&s, p) == ZT_OK && s.n == MANY && zt_shard_verify(&s) == ZT_OK,
                 "600 records: opens and verifies");
    zt_shard_close(&s);
    free(many);
    free(z);
}

int main(void) {
    dir = getenv("ZT_IO_TEST_TMP");
    if (!dir) dir = "/tmp/zt-test-ckpt";
    mkdir(dir, 0755);
    check_crc();
    check_run_id_parse();
    setup_records();
    char p[1024], p2[1024], p3[1024];
    snprintf(p, sizeof p, "%s/rank1.zts", dir);
    int64_t off1 = check_round_trip(p);
    if (off1 < 0) return zt_test_finish("test_ckpt");
    check_damage(off1);
    check_header_numbers();
    check_failed_write(p);
    check_incomplete_and_put(p, p2, sizeof p2);
    snprintf(p3, sizeof p3, "%s/streamed.zts", dir);
    check_stream(p2, p3);
    snprintf(p3, sizeof p3, "%s/direct.zts", dir);
    check_direct_read(p3);
    unlink(p3);
    check_many_records();
    check_identity();
    for (int i = 0; i < NREC; i++) free(vals[i]);
    return zt_test_finish("test_ckpt");
}
