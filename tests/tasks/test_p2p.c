/*
 * tests/tasks/test_p2p.c: proves the point-to-point tasks (tasks/p2p.c) on any number of ranks
 * (under mpirun with 2 and 3 ranks, and alone, where a rank sends to itself):
 *  - a ring: each round, rank r computes a block (a task: S = R + A_r) from what it received the
 *    round before, sends it to r+1 and receives r-1's, four blocks on four tags, three rounds
 *    submitted at once; the values are checked exactly against the same ring run on the host;
 *  - 16-bit tensors travel as their raw bytes: bf16 blocks holding arbitrary bit patterns (NaN
 *    payloads among them, which any widening would change) arrive unchanged;
 *  - order, and no worker held by a pending recv (run with STARPU_NCPU=1): rank 1 submits three
 *    recvs on one tag, then a compute task independent of them, then a reply to rank 0 computed
 *    from the second recv's block; rank 0 computes the first of its three sends on the tag from
 *    that reply, while its second and third are ready at once. So the first send cannot even
 *    be issued before the second has arrived: the three blocks must still land in submission
 *    order, and if a recv occupied rank 1's only worker, the compute tasks would never run and
 *    the job would hang (ZT_COMM_TIMEOUT ends it);
 *  - bad arguments (peer, tag, block) are refused with ZT_ERR_INVALID;
 *  - the trace records every send and recv once, on the communication lane, as kinds send/recv;
 *  - zt_comm_gatherv_bytes / _rounds (the host gather that the trace and a pipeline's export
 *    use): rank r's 10 r + 3 bytes (none from rank 1) reach rank 0 in rank order, whole and in
 *    rounds of 1, 4 and 7 bytes per rank (how a gather past 2 GiB goes);
 *  - MPI runs with Open MPI's mpi_yield_when_idle at 1 (zt_comm_init's default: its waits
 *    yield the core to the workers), or at the value the environment gave it (read back through
 *    MPI_T, so the library really took it).
 * Modes for tests/tasks/test_p2p.py, which checks the one error line and the exit status:
 *  mismatch: rank 1 receives 128 bytes where rank 0 sends 64;
 *  silent:   rank 1 receives from rank 0, which never sends (the job must end after
 *            ZT_COMM_TIMEOUT, not hang).
 *
 * Usage: test_p2p [main OUTDIR | mismatch | silent]
 */
#include <errno.h>        /* EEXIST */
#include <mpi.h>          /* MPI_T_cvar_* */
#include <stdint.h>       /* uint16_t */
#include <stdio.h>        /* fopen */
#include <stdlib.h>       /* calloc */
#include <string.h>       /* strcmp, memcmp */
#include <sys/stat.h>     /* mkdir */
#include <time.h>         /* nanosleep */
#include "zt_comm.h"      /* zt_comm_rank, zt_comm_size */
#include "zt_sched.h"     /* zt_runtime_wait_all, zt_trace_* */
#include "zt_tasks.h"     /* the tasks under test */
#include "zt_test.h"      /* ZT_TEST_TRUE */

#define ROUNDS 3
#define NB 4      /* blocks (and tags) of the ring */
#define ROWS 8
#define COLS 16
#define NB16 2    /* bf16 blocks */
#define ORDER_TAG 50
#define REPLY_TAG 51

static int g_rank, g_size;

static zt_tensor_t make(const char *name, int64_t rows, int64_t cols, enum zt_dtype dt, int nblk) {
    zt_tensor_t t = NULL;
    if (zt_tensor_init_dtype(&t, name, NULL, rows, cols, dt, nblk, NULL) != ZT_OK) {
        fprintf(stderr, "test_p2p: tensor %s: %s\n", name, zt_error_last());
        exit(1);
    }
    return t;
}

static void ok(enum zt_status rc, const char *what) {
    if (rc != ZT_OK) {
        fprintf(stderr, "test_p2p: rank %d: %s: %s\n", g_rank, what, zt_error_last());
        exit(1);
    }
}

static float a_value(int r, int j) { return (float)(r * 1000 + j); }

/* the ring on fp32 blocks, checked against the same ring on the host */
static void ring(void) {
    const int next = (g_rank + 1) % g_size, prev = (g_rank + g_size - 1) % g_size;
    const int n = ROWS * COLS;
    zt_tensor_t S = make("S", ROWS, COLS, ZT_DTYPE_F32, NB);
    zt_tensor_t R = make("R", ROWS, COLS, ZT_DTYPE_F32, NB);
    zt_tensor_t A = make("A", ROWS, COLS, ZT_DTYPE_F32, NB);
    float *a = zt_tensor_data(A);
    for (int j = 0; j < n; j++) a[j] = a_value(g_rank, j);
    for (int k = 0; k < ROUNDS; k++) {
        struct zt_task_opts o = {.layer = -1, .mb = -1, .step = k};
        for (int b = 0; b < NB; b++) ok(zt_task_residual_forward(&o, S, b, R, A), "residual");
        for (int b = 0; b < NB; b++) ok(zt_task_send(&o, S, b, next, 10 + b), "ring send");
        for (int b = 0; b < NB; b++) ok(zt_task_recv(&o, R, b, prev, 10 + b), "ring recv");
    }
    /* the host ring: r[rank][j] after each round */
    float *hr = calloc((size_t)g_size * n, sizeof *hr);
    float *hs = calloc((size_t)g_size * n, sizeof *hs);
    for (int k = 0; k < ROUNDS; k++) {
        for (int q = 0; q < g_size; q++)
            for (int j = 0; j < n; j++) hs[q * n + j] = hr[q * n + j] + a_value(q, j);
        for (int q = 0; q < g_size; q++)
            memcpy(hr + q * n, hs + ((q + g_size - 1) % g_size) * n, (size_t)n * 4);
    }
    ok(zt_tensor_acquire(R, 0), "acquire R");
    ok(zt_tensor_acquire(S, 0), "acquire S");
    ZT_TEST_TRUE(!memcmp(zt_tensor_data(R), hr + g_rank * n, (size_t)n * 4),
                 "rank %d: ring: the received blocks differ from rank %d's sent ones", g_rank,
                 prev);
    ZT_TEST_TRUE(!memcmp(zt_tensor_data(S), hs + g_rank * n, (size_t)n * 4),
                 "rank %d: ring: the computed blocks differ", g_rank);
    zt_tensor_release(S);
    zt_tensor_release(R);
    free(hr);
    free(hs);
    zt_tensor_free(S);
    zt_tensor_free(R);
    zt_tensor_free(A);
}

static uint16_t pattern(int r, int j) { return (uint16_t)((r + 1) * 7919 + j * 4099); }

/* bf16 bit patterns to the next rank: the bytes arrive as they were */
static void raw16(void) {
    const int next = (g_rank + 1) % g_size, prev = (g_rank + g_size - 1) % g_size;
    const int n = 4 * COLS;
    zt_tensor_t H = make("H", 4, COLS, ZT_DTYPE_BF16, NB16);
    zt_tensor_t G = make("G", 4, COLS, ZT_DTYPE_BF16, NB16);
    uint16_t *h = zt_tensor_data(H);
    for (int j = 0; j < n; j++) h[j] = pattern(g_rank, j);
    h[0] = 0x7fc1; /* a NaN with a payload */
    for (int b = 0; b < NB16; b++) ok(zt_task_send(NULL, H, b, next, 20 + b), "bf16 send");
    for (int b = 0; b < NB16; b++) ok(zt_task_recv(NULL, G, b, prev, 20 + b), "bf16 recv");
    uint16_t *want = malloc((size_t)n * 2);
    for (int j = 0; j < n; j++) want[j] = pattern(prev, j);
    want[0] = 0x7fc1;
    ok(zt_tensor_acquire(G, 0), "acquire G");
    ZT_TEST_TRUE(!memcmp(zt_tensor_data(G), want, (size_t)n * 2),
                 "rank %d: bf16 blocks changed on their way from rank %d", g_rank, prev);
    zt_tensor_release(G);
    free(want);
    zt_tensor_free(H);
    zt_tensor_free(G);
}

static void fill(zt_tensor_t t, float base) {
    float *p = zt_tensor_data(t);
    for (int64_t j = 0; j < zt_tensor_numel(t); j++) p[j] = base + (float)j;
}

/* rank 1 receives three blocks on one tag before any exists; rank 0's first depends on rank
 * 1's reply, which is computed from the second (see the file's comment) */
static void order(void) {
    if (g_size < 2 || g_rank > 1) return;
    zt_tensor_t X = make("X", 3, COLS, ZT_DTYPE_F32, 3); /* rank 0: P; rank 1: the recvs */
    zt_tensor_t Y = make("Y", 3, COLS, ZT_DTYPE_F32, 3); /* rank 0: the reply; rank 1: U */
    zt_tensor_t Z = make("Z", 3, COLS, ZT_DTYPE_F32, 3); /* rank 0: K; rank 1: V */
    zt_tensor_t T = make("T", 3, COLS, ZT_DTYPE_F32, 3); /* rank 1: the compute tasks' out */
    if (g_rank == 1) {
        fill(Y, 100.0f);
        fill(Z, 200.0f);
        for (int b = 0; b < 3; b++) ok(zt_task_recv(NULL, X, b, 0, ORDER_TAG), "order recv");
        /* independent of the recvs: runs on the only worker while they wait */
        ok(zt_task_residual_forward(NULL, T, 0, Y, Z), "order compute");
        /* the reply, from the second message: rank 0's first send waits for it */
        ok(zt_task_residual_forward(NULL, T, 1, X, Z), "order reply compute");
        ok(zt_task_send(NULL, T, 1, 0, REPLY_TAG), "order reply");
    } else {
        fill(X, 1000.0f);
        fill(Z, 5000.0f);
        ok(zt_task_recv(NULL, Y, 0, 1, REPLY_TAG), "order reply recv");
        ok(zt_task_residual_forward(NULL, X, 0, Y, Z), "order compute");
        for (int b = 0; b < 3; b++) ok(zt_task_send(NULL, X, b, 1, ORDER_TAG), "order send");
    }
    ok(zt_runtime_wait_all(), "wait");
    zt_p2p_wait();
    if (g_rank == 1) {
        float want[3 * COLS], t0[COLS];
        for (int j = COLS; j < 3 * COLS; j++) want[j] = 1000.0f + (float)j;
        for (int i = 0; i < COLS; i++) { /* (X1 + V1) on rank 1, then + K0 on rank 0 */
            float reply = want[COLS + i] + (200.0f + (float)(COLS + i));
            want[i] = reply + (5000.0f + (float)i);
            t0[i] = (100.0f + (float)i) + (200.0f + (float)i);
        }
        ok(zt_tensor_acquire(X, 0), "acquire X");
        ok(zt_tensor_acquire(T, 0), "acquire T");
        const float *x = zt_tensor_data(X);
        for (int b = 0; b < 3; b++)
            ZT_TEST_TRUE(!memcmp(x + b * COLS, want + b * COLS, COLS * 4),
                         "order: recv %d did not get rank 0's send %d (first value %g, want %g)",
                         b, b, (double)x[b * COLS], (double)want[b * COLS]);
        ZT_TEST_TRUE(!memcmp(zt_tensor_data(T), t0, sizeof t0), "order: the compute task");
        zt_tensor_release(T);
        zt_tensor_release(X);
    }
    zt_tensor_free(X);
    zt_tensor_free(Y);
    zt_tensor_free(Z);
    zt_tensor_free(T);
}

static void bad_args(void) {
    zt_tensor_t t = make("bad", 2, COLS, ZT_DTYPE_F32, 2);
    ZT_TEST_TRUE(zt_task_send(NULL, t, 0, g_size, 1) == ZT_ERR_INVALID, "peer = world size");
    ZT_TEST_TRUE(zt_task_recv(NULL, t, 0, -1, 1) == ZT_ERR_INVALID, "peer -1");
    ZT_TEST_TRUE(zt_task_send(NULL, t, 0, 0, -1) == ZT_ERR_INVALID, "tag -1");
    ZT_TEST_TRUE(zt_p2p_tag_max() >= 7, "tag max %d", zt_p2p_tag_max());
    ZT_TEST_TRUE(zt_task_recv(NULL, t, 0, 0, zt_p2p_tag_max() + 1) == ZT_ERR_INVALID,
                 "tag above the max");
    ZT_TEST_TRUE(zt_task_send(NULL, t, 2, 0, 1) == ZT_ERR_INVALID, "block 2 of 2");
    ZT_TEST_TRUE(zt_task_recv(NULL, NULL, 0, 0, 1) == ZT_ERR_INVALID, "no tensor");
    zt_tensor_free(t);
}

/* how many events of kind `kind` rank `rank` has in the JSON trace at path, and whether they
 * all lie on the communication thread's lane */
static int count_events(const char *json, const char *kind, int rank, int *off_lane) {
    char key[64];
    snprintf(key, sizeof key, "{\"name\":\"%s\",\"cat\":\"task\",\"ph\":\"X\",\"pid\":", kind);
    int n = 0;
    for (const char *p = strstr(json, key); p; p = strstr(p + 1, key)) {
        int pid = -1, tid = -1;
        if (sscanf(p + strlen(key), "%d,\"tid\":%d", &pid, &tid) != 2 || pid != rank) continue;
        n++;
        if (tid != ZT_TRACE_COMM_LANE) (*off_lane)++;
    }
    return n;
}

static void check_trace(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/p2p-trace.json", dir);
    if (g_rank == 0 && mkdir(dir, 0755) != 0 && errno != EEXIST)
        ZT_TEST_FAIL("cannot make %s", dir);
    ok(zt_trace_write(path, zt_task_kind_names(), ZT_KIND_COUNT), "trace write");
    if (g_rank != 0) return;
    FILE *f = fopen(path, "rb");
    if (!f) {
        ZT_TEST_FAIL("no trace %s", path);
        return;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *json = calloc((size_t)len + 1, 1);
    if (fread(json, 1, (size_t)len, f) != (size_t)len) ZT_TEST_FAIL("cannot read %s", path);
    fclose(f);
    for (int r = 0; r < g_size; r++) {
        int off = 0, order_send = r == 0 ? 3 : r == 1 ? 1 : 0;
        int order_recv = r == 0 ? 1 : r == 1 ? 3 : 0;
        if (g_size < 2) order_send = order_recv = 0;
        int ns = count_events(json, "send", r, &off), nr = count_events(json, "recv", r, &off);
        const int extra = (g_size == 1 ? 4096 : 0) + 1; /* window_and_large */
        ZT_TEST_TRUE(ns == ROUNDS * NB + NB16 + order_send + extra, "rank %d: %d send records",
                     r, ns);
        ZT_TEST_TRUE(nr == ROUNDS * NB + NB16 + order_recv + extra, "rank %d: %d recv records",
                     r, nr);
        ZT_TEST_TRUE(off == 0, "rank %d: %d records off the communication lane", r, off);
    }
    ZT_TEST_TRUE(strstr(json, "\"args\":{\"name\":\"communication\"}") != NULL,
                 "the communication thread's lane is named");
    free(json);
}

/* "slow": rank 1 posts 4 recvs of one stream at once, rank 0 sends one every 1.2 s: under
 * ZT_COMM_TIMEOUT=2 the last one waits 4.8 s since it was posted but never 2 s since it was
 * due, so none times out; the values arrive in order */
static void slow_stream(void) {
    enum { N = 4 };
    zt_tensor_t t[N];
    for (int i = 0; i < N; i++) {
        char name[16];
        snprintf(name, sizeof name, "slow%d", i);
        t[i] = make(name, 1, COLS, ZT_DTYPE_F32, 1);
        ((float *)zt_tensor_data(t[i]))[0] = g_rank == 0 ? (float)(i + 1) : 0.0f;
    }
    for (int i = 0; i < N; i++) {
        if (g_rank == 1) ok(zt_task_recv(NULL, t[i], 0, 0, 11), "recv");
        if (g_rank != 0) continue;
        struct timespec ts = {1, 200000000};
        nanosleep(&ts, NULL);
        ok(zt_task_send(NULL, t[i], 0, 1, 11), "send");
        zt_p2p_wait();
    }
    zt_p2p_wait();
    for (int i = 0; g_rank == 1 && i < N; i++)
        ZT_TEST_TRUE(((float *)zt_tensor_data(t[i]))[0] == (float)(i + 1),
                     "slow stream: message %d holds %g", i, ((float *)zt_tensor_data(t[i]))[0]);
    for (int i = 0; i < N; i++) zt_tensor_free(t[i]);
}

/* the failure modes: rank 1 receives what rank 0 does not send (as it should) */
static void failure(const char *mode) {
    zt_tensor_t t = make("t", 2, COLS, ZT_DTYPE_F32, 2); /* 64-byte blocks */
    zt_tensor_t big = make("big", 2, COLS, ZT_DTYPE_F32, 1);
    struct zt_task_opts o = {.layer = 5, .mb = 1, .step = 3};
    if (!strcmp(mode, "mismatch")) {
        if (g_rank == 0) ok(zt_task_send(&o, t, 0, 1, 9), "send");
        if (g_rank == 1) ok(zt_task_recv(&o, big, 0, 0, 9), "recv");
    } else if (g_rank == 1) {
        ok(zt_task_recv(&o, t, 0, 0, 7), "recv");
    }
    zt_p2p_wait();
    zt_tensor_free(t);
    zt_tensor_free(big);
}

/* a stream holds at most 4096 messages in flight: 4096 recvs from this rank itself are taken,
 * the 4097th is refused (ZT_ERR_INVALID, one line); 4096 sends then complete them all (on one
 * rank only: 8192 messages are slow under ASan on oversubscribed ranks). And a large block
 * (1 MiB: past the eager limit, the send waits for the recv) reaches a peer. */
static void window_and_large(void) {
    enum { W = 4096 };
    zt_tensor_t in = make("win_in", 1, 4, ZT_DTYPE_F32, 1), out = make("win_out", 1, 4,
                                                                         ZT_DTYPE_F32, 1);
    for (int i = 0; g_size == 1 && i < W; i++) ok(zt_task_recv(NULL, in, 0, 0, 9), "recv");
    ZT_TEST_TRUE(g_size > 1 || (zt_task_recv(NULL, in, 0, 0, 9) == ZT_ERR_INVALID &&
                                strstr(zt_error_last(), "4096 messages of the stream in flight "
                                                        "already")),
                 "the 4097th recv of a stream refused: %s", zt_error_last());
    for (int i = 0; g_size == 1 && i < W; i++) ok(zt_task_send(NULL, out, 0, 0, 9), "send");
    zt_p2p_wait();
    const int peer = (g_rank + 1) % g_size, from = (g_rank + g_size - 1) % g_size;
    zt_tensor_t a = make("large_out", 512, 512, ZT_DTYPE_F32, 1);
    zt_tensor_t b = make("large_in", 512, 512, ZT_DTYPE_F32, 1);
    float *p = zt_tensor_data(a);
    for (int i = 0; i < 512 * 512; i++) p[i] = (float)(g_rank * 1000003 + i);
    ok(zt_task_send(NULL, a, 0, peer, 10), "large send");
    ok(zt_task_recv(NULL, b, 0, from, 10), "large recv");
    zt_p2p_wait();
    const float *q = zt_tensor_data(b);
    int bad = 0;
    for (int i = 0; i < 512 * 512; i++) bad += q[i] != (float)(from * 1000003 + i);
    ZT_TEST_TRUE(!bad, "a 1 MiB block from rank %d: %d values differ", from, bad);
    zt_tensor_free(in);
    zt_tensor_free(out);
    zt_tensor_free(a);
    zt_tensor_free(b);
}

static unsigned char gathered_byte(int r, size_t j) { return (unsigned char)(r * 31 + j * 7); }

/* every rank's bytes to rank 0, in rounds of `round` bytes per rank (0: whole) */
/* Open MPI's mpi_yield_when_idle as MPI holds it (MPI_T; a C bool or an int), or -1 when it
 * has no such variable */
static int yield_when_idle(void) {
    int provided, idx, count, verbosity, bind, scope, value = -1;
    MPI_Datatype type;
    MPI_T_enum enumtype;
    MPI_T_cvar_handle h;
    if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return -1;
    if (MPI_T_cvar_get_index("mpi_yield_when_idle", &idx) == MPI_SUCCESS &&
        MPI_T_cvar_get_info(idx, NULL, NULL, &verbosity, &type, &enumtype, NULL, NULL, &bind,
                            &scope) == MPI_SUCCESS &&
        MPI_T_cvar_handle_alloc(idx, NULL, &h, &count) == MPI_SUCCESS) {
        union { _Bool b; int i; char pad[16]; } v = {0};
        if (MPI_T_cvar_read(h, &v) == MPI_SUCCESS)
            value = type == MPI_C_BOOL ? (int)v.b : type == MPI_INT ? v.i : -1;
        MPI_T_cvar_handle_free(&h);
    }
    MPI_T_finalize();
    return value;
}

static void check_yield(void) {
    const char *env = getenv("OMPI_MCA_mpi_yield_when_idle");
    int want = env ? atoi(env) : -2, got = yield_when_idle();
    ZT_TEST_TRUE(env && got == want && (want == 1 || getenv("ZT_TEST_YIELD_SET")),
                 "mpi_yield_when_idle: MPI holds %d, the environment says %s (expected 1 "
                 "unless the test set another)", got, env ? env : "nothing");
}

static void gather_rounds(size_t round) {
    const size_t n = g_rank == 1 ? 0 : (size_t)(10 * g_rank + 3);
    unsigned char *mine = malloc(n ? n : 1);
    for (size_t j = 0; j < n; j++) mine[j] = gathered_byte(g_rank, j);
    void *all = NULL;
    size_t total = 0, want = 0;
    ok(round ? zt_comm_gatherv_rounds(mine, n, &all, &total, round)
             : zt_comm_gatherv_bytes(mine, n, &all, &total),
       "zt_comm_gatherv_rounds");
    int same = 1;
    for (int r = 0; r < g_size; r++) {
        const size_t nr = r == 1 ? 0 : (size_t)(10 * r + 3);
        for (size_t j = 0; g_rank == 0 && j < nr && same; j++)
            same = want + j < total && ((unsigned char *)all)[want + j] == gathered_byte(r, j);
        want += nr;
    }
    ZT_TEST_TRUE(g_rank != 0 || (same && total == want && all),
                 "gather in rounds of %zu: %zu bytes in rank order (got %zu)", round, want, total);
    ZT_TEST_TRUE(g_rank == 0 || all == NULL, "gather: rank %d holds no result", g_rank);
    free(all);
    free(mine);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "main";
    ok(zt_tasks_init(), "zt_tasks_init");
    g_rank = zt_comm_rank();
    g_size = zt_comm_size();
    if (strcmp(mode, "main")) {
        if (g_size < 2) {
            zt_tasks_free();
            return ZT_TEST_SKIP;
        }
        if (!strcmp(mode, "slow")) slow_stream();
        else failure(mode);
        zt_tasks_free();
        return 0; /* "slow" ends here; the failures end the job before, on rank 1 */
    }
    check_yield();
    zt_trace_enable(1);
    bad_args();
    ring();
    raw16();
    order();
    window_and_large();
    zt_p2p_wait();
    const size_t rounds[] = {0, 1, 4, 7}; /* whole, then rounds of 1, 4 and 7 bytes */
    for (size_t i = 0; i < sizeof rounds / sizeof *rounds; i++) gather_rounds(rounds[i]);
    if (argc > 2) check_trace(argv[2]);
    zt_tasks_free();
    char name[64];
    snprintf(name, sizeof name, "test_p2p (rank %d of %d)", g_rank, g_size);
    return zt_test_finish(name);
}
