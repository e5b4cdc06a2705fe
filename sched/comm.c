/*
 * sched/comm.c: MPI start-up, the host-side helpers of zt_comm.h, and the collective watchdog
 * of zt_comm_mpi.h.
 *
 * Layer: sched/ (zt_runtime_init starts MPI here before StarPU); the collective tasks in
 * tasks/collective.c send on this communicator and wait through the watchdog.
 *
 * Watchdog: a rank entering a collective sends a 64-byte note (its sequence number and name)
 * to every other rank on a second duplicated communicator; a rank waiting in a collective
 * drains the notes it received while it polls its requests. When the wait passes
 * ZT_COMM_TIMEOUT seconds, the notes say which ranks never entered this collective and where
 * each of them is instead; the rank prints that and aborts the job (MPI_Abort), so nobody is
 * left with a bare "timeout" (or a hang). A rank that has waited a second sends a heartbeat
 * note every second until its wait ends, so that when every rank has entered the collective
 * the report can still tell a rank that went silent (stopped, descheduled) from a stuck
 * transport; a wait shorter than a second sends none. Notes go out through a ring of NOTE_RING
 * requests that is only ever tested, never waited on: a heartbeat that finds every slot still in
 * flight (a peer stopped receiving) is dropped, and a collective's note polls for a slot under
 * the same ZT_COMM_TIMEOUT, so a stopped peer ends in the report, never in a hang.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime (zt_clock.h), nanosleep */
#include <limits.h>        /* INT_MAX */
#include <signal.h>        /* raise (a test's stopped rank) */
#include <stdarg.h>        /* va_list */
#include <stdio.h>         /* snprintf, vsnprintf */
#include <stdlib.h>        /* malloc, free, setenv */
#include <string.h>        /* memcpy, strcmp */
#include <time.h>          /* nanosleep */
#include "zt_clock.h"      /* zt_clock_ms */
#include "zt_comm.h"       /* our API */
#include "zt_comm_mpi.h"   /* MPI_Comm */
#include "zt_sched.h"      /* zt_knob_int */
#include "zt_swapdir.h"    /* zt_swapdir_remove_all */

#define NOTE_TAG 7
#define BEAT_TAG 8        /* a heartbeat: the sender is still waiting in the collective it names */
#define BEAT_EVERY_S 1.0  /* seconds between a waiting rank's heartbeats */
#define SILENT_S 3.0      /* a rank not heard from for this long is reported as silent */
#define NOTE_RING 256     /* notes in flight per process */
#define NOTE_SEEN 64      /* collectives remembered per rank */

static int g_refs = 0;
static int g_we_init = 0;
static int g_rank = 0, g_size = 1;
static int g_group_base = 0, g_group_size = 1; /* the collectives' ranks (zt_comm_set_group) */
static MPI_Comm g_comm = MPI_COMM_NULL;
static MPI_Comm g_note = MPI_COMM_NULL; /* progress notes of the watchdog */
static MPI_Comm g_p2p = MPI_COMM_NULL;  /* point-to-point tasks (tasks/p2p.c) */
static int g_lrank = 0, g_lsize = 1; /* rank and count on this machine */
static int64_t g_timeout_s = 300;
static int g_skip_rank = -1;
static int64_t g_skip_seq = -1;
static int g_stop_rank = -1; /* test only: RANK:SEQ:stop, this rank stops itself in SEQ */
static int64_t g_stop_seq = -1;
static int g_tag_ub = 32767;
/* sent notes (buffers stay valid until their request completes) */
static struct zt_coll_id g_ring[NOTE_RING];
static MPI_Request g_ring_req[NOTE_RING];
static int g_ring_pos = 0;
/* received notes: the last NOTE_SEEN collectives each rank entered, and its latest */
static struct zt_coll_id (*g_seen)[NOTE_SEEN] = NULL;
static struct zt_coll_id *g_last = NULL;
static double *g_heard = NULL; /* when each rank's last note arrived (now_s) */
static double g_beat_sent = 0; /* when this rank last sent a heartbeat */

static void drain_notes(void);
static void timeout_report(const struct zt_coll_id *id, double waited);
static double now_s(void) { return zt_clock_ms() / 1e3; }

/* every ZT_* knob is checked here, the start of every run (zt_runtime_init begins with
 * zt_comm_init), once the rank is known so that rank 0 alone reports a bad one */
static enum zt_status read_knobs(void) {
    ZT_CHECK(zt_knobs_check());
    ZT_CHECK(zt_knob_int("ZT_COMM_TIMEOUT", &g_timeout_s));
    const char *v = getenv("ZT_TEST_SKIP_COLLECTIVE");
    if (v && *v) {
        int r = -1;
        long long q = -1;
        char colon = 0, word[8] = "", tail = 0;
        int n = sscanf(v, "%d:%lld%c%7[a-z]%c", &r, &q, &colon, word, &tail);
        int stop = n == 4 && colon == ':' && !strcmp(word, "stop");
        if ((n != 2 && !stop) || r < 0 || q < 1)
            return zt_error_set(ZT_ERR_CONFIG, "ZT_TEST_SKIP_COLLECTIVE=%s: expected RANK:SEQ or "
                                               "RANK:SEQ:stop (a rank >= 0 and a collective "
                                               "number >= 1)", v);
        *(stop ? &g_stop_rank : &g_skip_rank) = r;
        *(stop ? &g_stop_seq : &g_skip_seq) = q;
    }
    return ZT_OK;
}

/* Open MPI's progress loop spins while a wait finds nothing to do; a rank's waits run on its
 * communication threads beside its StarPU workers, which the spin would keep from their cores.
 * mpi_yield_when_idle makes each fruitless turn yield the core. Set before MPI starts, unless
 * the user set it (an MCA parameter in the environment, as mpirun -x or --mca passes it). */
static void prefer_yield_when_idle(void) {
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
}

enum zt_status zt_comm_init(void) {
    if (g_refs++ > 0) return ZT_OK;
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        prefer_yield_when_idle();
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
            g_refs = 0;
            return zt_error_set(ZT_ERR_RUNTIME, "MPI: MPI_Init_thread failed");
        }
        g_we_init = 1;
    } else {
        MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_MULTIPLE) {
        g_refs = 0;
        return zt_error_set(ZT_ERR_RUNTIME, "MPI: the library gives thread level %d, zerotask "
                                            "needs MPI_THREAD_MULTIPLE (%d)", provided,
                            MPI_THREAD_MULTIPLE);
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &g_comm);
    MPI_Comm_dup(MPI_COMM_WORLD, &g_note);
    MPI_Comm_dup(MPI_COMM_WORLD, &g_p2p);
    /* errors come back as codes, so a failing collective is reported with its name */
    MPI_Comm_set_errhandler(g_comm, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(g_note, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(g_p2p, MPI_ERRORS_RETURN);
    MPI_Comm_rank(g_comm, &g_rank);
    MPI_Comm_size(g_comm, &g_size);
    g_group_base = 0;
    g_group_size = g_size;
    for (int i = 0; i < NOTE_RING; i++) g_ring_req[i] = MPI_REQUEST_NULL;
    int *ub = NULL, flag = 0;
    if (MPI_Comm_get_attr(g_comm, MPI_TAG_UB, &ub, &flag) == MPI_SUCCESS && flag && ub)
        g_tag_ub = *ub;
    g_seen = calloc((size_t)g_size, sizeof *g_seen);
    g_last = calloc((size_t)g_size, sizeof *g_last);
    g_heard = calloc((size_t)g_size, sizeof *g_heard);
    for (int r = 0; g_heard && r < g_size; r++) g_heard[r] = now_s();
    enum zt_status krc = (g_seen && g_last && g_heard) ? read_knobs()
                                            : zt_error_set(ZT_ERR_NOMEM, "MPI: out of memory");
    /* MPI stays up after a bad knob: the caller reports it on rank 0 and then calls
     * zt_comm_free, whose barrier keeps every rank alive until rank 0 has said it (mpirun ends
     * the job when the first rank exits non-zero, and would cut rank 0's line) */
    if (krc != ZT_OK) return krc;
    MPI_Comm node;
    if (MPI_Comm_split_type(g_comm, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
        MPI_Comm_rank(node, &g_lrank);
        MPI_Comm_size(node, &g_lsize);
        MPI_Comm_free(&node);
    }
    return ZT_OK;
}

void zt_comm_free(void) {
    if (g_refs == 0 || --g_refs > 0) return;
    MPI_Waitall(NOTE_RING, g_ring_req, MPI_STATUSES_IGNORE); /* null requests return at once */
    if (g_size > 1) {
        MPI_Barrier(g_comm);
        if (g_seen && g_last && g_heard) drain_notes(); /* leave no unreceived note behind */
    }
    free(g_seen);
    free(g_last);
    free(g_heard);
    g_seen = NULL;
    g_last = NULL;
    g_heard = NULL;
    MPI_Comm_free(&g_p2p);
    MPI_Comm_free(&g_note);
    MPI_Comm_free(&g_comm);
    if (g_we_init) MPI_Finalize();
    g_we_init = 0;
    g_rank = 0;
    g_size = 1;
    g_group_base = 0;
    g_group_size = 1;
}

int zt_comm_rank(void) { return g_rank; }
int zt_comm_local_rank(void) { return g_lrank; }
int zt_comm_local_size(void) { return g_lsize; }
int zt_comm_size(void) { return g_size; }

enum zt_status zt_comm_set_group(int base, int size) {
    if (size < 1 || base < 0 || base + size > g_size || g_rank < base || g_rank >= base + size)
        return zt_error_set(ZT_ERR_INVALID, "MPI: ranks %d..%d are no group of rank %d in a "
                            "world of %d", base, base + size - 1, g_rank, g_size);
    g_group_base = base;
    g_group_size = size;
    return ZT_OK;
}
int zt_comm_group_rank(void) { return g_rank - g_group_base; }
int zt_comm_group_size(void) { return g_group_size; }
int zt_comm_group_base(void) { return g_group_base; }
MPI_Comm zt_comm_mpi(void) { return g_comm; }
MPI_Comm zt_comm_p2p_mpi(void) { return g_p2p; }
int64_t zt_comm_timeout_s(void) { return g_timeout_s; }

uint64_t zt_hash_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = p;
    if (h == 0) h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

enum zt_status zt_comm_check_same(uint64_t digest, const char *what) {
    if (g_size == 1) return ZT_OK;
    uint64_t *all = malloc((size_t)g_size * sizeof *all);
    if (!all) return zt_error_set(ZT_ERR_NOMEM, "MPI: out of memory");
    /* through the watchdog: a rank that never starts is reported after ZT_COMM_TIMEOUT */
    MPI_Request req = MPI_REQUEST_NULL;
    if (MPI_Iallgather(&digest, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, g_comm, &req) !=
        MPI_SUCCESS) {
        free(all);
        return zt_error_set(ZT_ERR_RUNTIME, "MPI: allgather of %s digests failed", what);
    }
    const struct zt_coll_id id = {.seq = 0, .step = -1, .layer = -1, .name = "consistency check"};
    zt_comm_waitall(1, &req, &id);
    char bad[256] = "";
    int nbad = 0;
    for (int r = 1; r < g_size; r++) {
        if (all[r] == all[0]) continue;
        size_t l = strlen(bad);
        if (l + 16 < sizeof bad) snprintf(bad + l, sizeof bad - l, "%s%d", nbad ? ", " : "", r);
        nbad++;
    }
    free(all);
    if (nbad)
        return zt_error_set(ZT_ERR_CONFIG, "ranks differ: the %s of rank%s %s differs from rank "
                                           "0's (every rank must be started with the same one)",
                            what, nbad > 1 ? "s" : "", bad);
    return ZT_OK;
}

/* all[0..g_size) gathered by err's allgather: their sum in rank order (the same on every rank)
 * into *x; all is freed */
/* x[i] = the sum over the ranks of their x[i] (all: each rank's n values, in rank order) */
static enum zt_status sum_gathered(double *x, int n, double *all, int err) {
    if (err != MPI_SUCCESS) {
        free(all);
        return zt_error_set(ZT_ERR_RUNTIME, "MPI: allgather of a sum failed");
    }
    for (int i = 0; i < n; i++) {
        double s = 0.0;
        for (int r = 0; r < g_size; r++) s += all[(size_t)r * (size_t)n + (size_t)i];
        x[i] = s;
    }
    free(all);
    return ZT_OK;
}

/* the sum of one double per rank, waiting as long as the slowest rank takes */
static enum zt_status sum_doubles_blocking(double *x) {
    if (g_size == 1) return ZT_OK;
    double *all = malloc((size_t)g_size * sizeof *all);
    if (!all) return zt_error_set(ZT_ERR_NOMEM, "MPI: out of memory");
    return sum_gathered(x, 1, all, MPI_Allgather(x, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, g_comm));
}

/* the sums of n doubles per rank through the watchdog: a rank that never comes is reported
 * after ZT_COMM_TIMEOUT */
static enum zt_status sum_doubles_watched(double *x, int n) {
    if (g_size == 1) return ZT_OK;
    double *all = malloc((size_t)g_size * (size_t)n * sizeof *all);
    if (!all) return zt_error_set(ZT_ERR_NOMEM, "MPI: out of memory");
    MPI_Request req = MPI_REQUEST_NULL;
    int err = MPI_Iallgather(x, n, MPI_DOUBLE, all, n, MPI_DOUBLE, g_comm, &req);
    if (err == MPI_SUCCESS) {
        const struct zt_coll_id id = {.seq = 0, .step = -1, .layer = -1, .name = "sum"};
        zt_comm_waitall(1, &req, &id);
    }
    return sum_gathered(x, n, all, err);
}

/* blocking: the ranks may agree after work of very different lengths (a checkpoint's shards,
 * rank 0 writing --export), which no timeout should cut short */
enum zt_status zt_comm_count_failed(int failed, int *nfailed) {
    double n = failed != 0;
    enum zt_status rc = sum_doubles_blocking(&n);
    *nfailed = rc == ZT_OK ? (int)n : failed != 0;
    return rc;
}

/* watched: a step's loss, and the ranks starting a load together */
enum zt_status zt_comm_sum_double(double *x) { return sum_doubles_watched(x, 1); }
enum zt_status zt_comm_sum_doubles(double *x, int n) { return sum_doubles_watched(x, n); }

enum zt_status zt_comm_gather_bytes(const void *in, size_t n, void *out) {
    if (g_size == 1) {
        memcpy(out, in, n);
        return ZT_OK;
    }
    if (MPI_Gather(in, (int)n, MPI_BYTE, out, (int)n, MPI_BYTE, 0, g_comm) != MPI_SUCCESS)
        return zt_error_set(ZT_ERR_RUNTIME, "MPI: gather failed");
    return ZT_OK;
}

/* the part of `len` bytes at [off, off + round) */
static size_t round_part(int64_t len, size_t off, size_t round) {
    size_t left = (size_t)len > off ? (size_t)len - off : 0;
    return left < round ? left : round;
}

/* one round of zt_comm_gatherv_rounds: every rank's bytes [off, off + round) to rank 0, into
 * out at at[r] + off directly (tmp NULL: one round whose offsets fit an int), else through tmp;
 * counts and displs: rank 0's scratch */
static int gather_round(const char *in, size_t n, const int64_t *len, const size_t *at,
                        size_t off, size_t round, char *out, char *tmp, int *counts,
                        int *displs) {
    for (int r = 0, d = 0; g_rank == 0 && r < g_size; d += counts[r], r++) {
        counts[r] = (int)round_part(len[r], off, round);
        displs[r] = tmp ? d : (int)at[r];
    }
    const size_t mine = round_part((int64_t)n, off, round);
    int ok = MPI_Gatherv(mine ? in + off : in, (int)mine, MPI_BYTE, tmp ? tmp : out, counts,
                         displs, MPI_BYTE, 0, g_comm) == MPI_SUCCESS;
    for (int r = 0; ok && tmp && g_rank == 0 && r < g_size; r++)
        if (counts[r]) memcpy(out + at[r] + off, tmp + displs[r], (size_t)counts[r]);
    return ok;
}

enum zt_status zt_comm_gatherv_rounds(const void *in, size_t n, void **out, size_t *total,
                                      size_t round) {
    *out = NULL;
    *total = 0;
    int64_t *len = calloc((size_t)g_size, sizeof *len), mine = (int64_t)n;
    size_t *at = calloc((size_t)g_size, sizeof *at);
    int short_of = !len || !at; /* every rank learns of one without memory: none waits alone */
    if (MPI_Allreduce(MPI_IN_PLACE, &short_of, 1, MPI_INT, MPI_MAX, g_comm) != MPI_SUCCESS ||
        short_of ||
        MPI_Allgather(&mine, 1, MPI_INT64_T, len, 1, MPI_INT64_T, g_comm) != MPI_SUCCESS) {
        free(len);
        free(at);
        return short_of ? zt_error_set(ZT_ERR_NOMEM, "MPI: out of memory for a gather's counts")
                        : zt_error_set(ZT_ERR_RUNTIME, "MPI: gathering the byte counts failed");
    }
    size_t most = 0, sum = 0;
    for (int r = 0; r < g_size; r++) {
        at[r] = sum;
        sum += (size_t)len[r];
        most = (size_t)len[r] > most ? (size_t)len[r] : most;
    }
    if (round < 1) round = 1;
    if (round > (size_t)INT_MAX / (size_t)g_size) round = (size_t)INT_MAX / (size_t)g_size;
    const int direct = most <= round && sum <= (size_t)INT_MAX;
    char *all = NULL, *tmp = NULL;
    int *counts = NULL, *displs = NULL;
    int ok = 1; /* rank 0's buffers, told to every rank: all fail together */
    if (g_rank == 0) {
        all = malloc(sum ? sum : 1);
        tmp = direct ? NULL : malloc(round * (size_t)g_size);
        counts = calloc((size_t)g_size, sizeof *counts);
        displs = calloc((size_t)g_size, sizeof *displs);
        ok = all && (direct || tmp) && counts && displs;
    }
    if (MPI_Bcast(&ok, 1, MPI_INT, 0, g_comm) != MPI_SUCCESS) ok = 0;
    const int buffers = ok;
    for (size_t off = 0; ok && off < most; off += round)
        ok = gather_round(in, n, len, at, off, round, all, tmp, counts, displs);
    free(tmp);
    free(counts);
    free(displs);
    free(len);
    free(at);
    if (!ok) {
        free(all);
        return buffers ? zt_error_set(ZT_ERR_RUNTIME, "MPI: gathering %zu bytes to rank 0 failed",
                                      sum)
                       : zt_error_set(ZT_ERR_NOMEM, "MPI: rank 0 has no memory for the %zu "
                                      "gathered bytes", sum);
    }
    *out = all;
    *total = sum;
    return ZT_OK;
}

enum zt_status zt_comm_gatherv_bytes(const void *in, size_t n, void **out, size_t *total) {
    return zt_comm_gatherv_rounds(in, n, out, total, (size_t)INT_MAX);
}

void zt_comm_barrier(void) {
    if (g_size > 1) MPI_Barrier(g_comm);
}

void zt_comm_abort(int code) {
    zt_swapdir_remove_all(); /* MPI_Abort runs no destructor: remove our swap files first */
    if (g_size > 1) MPI_Abort(MPI_COMM_WORLD, code);
}

/* ---------------------------------------------------------------------------------------------
 * collective watchdog */
void zt_comm_abort_job(void) {
    zt_swapdir_remove_all(); /* MPI_Abort runs no destructor: remove our swap files first */
    MPI_Abort(MPI_COMM_WORLD, 1);
}

int zt_comm_tag(int64_t seq) { return (int)(seq % ((int64_t)g_tag_ub + 1)); }

int zt_comm_skip(int64_t seq) { return g_rank == g_skip_rank && seq == g_skip_seq; }

/* the notes received so far: entries (NOTE_TAG) and heartbeats (BEAT_TAG); each says when its
 * sender was last heard from */
static void drain_notes(void) {
    for (;;) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, g_note, &flag, &st) != MPI_SUCCESS || !flag)
            return;
        struct zt_coll_id n;
        if (MPI_Recv(&n, (int)sizeof n, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, g_note,
                     MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return;
        g_heard[st.MPI_SOURCE] = now_s();
        if (st.MPI_TAG != NOTE_TAG) continue;
        n.name[sizeof n.name - 1] = '\0';
        g_seen[st.MPI_SOURCE][n.seq % NOTE_SEEN] = n;
        g_last[st.MPI_SOURCE] = n;
    }
}

/* the ring's next slot whose send has completed, g_ring_pos moved past it: the next one in
 * turn (one MPI_Test, the normal case), else the first free one around the ring; -1 when every
 * one of the NOTE_RING sends is still in flight (a peer has stopped receiving). Never blocks. */
static int free_slot(void) {
    for (int i = 0; i < NOTE_RING; i++) {
        int slot = (g_ring_pos + i) % NOTE_RING, done = 0;
        if (MPI_Test(&g_ring_req[slot], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) done = 1;
        if (done) {
            g_ring_pos = (slot + 1) % NOTE_RING;
            return slot;
        }
    }
    return -1;
}

/* a free slot for id's note, which must be sent: polled, never waited on, so that a ring full of
 * sends to a peer that stopped receiving ends in the timeout report instead of a hang */
static int free_slot_watched(const struct zt_coll_id *id) {
    const double t0 = now_s();
    int slot;
    while ((slot = free_slot()) < 0) {
        drain_notes();
        double w = now_s() - t0;
        if (w > (double)g_timeout_s) timeout_report(id, w);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return slot;
}

/* id to every other rank with tag. A heartbeat (BEAT_TAG) finding no free slot is dropped: it
 * only says "still here", and the next one follows a second later. */
static void send_note(const struct zt_coll_id *id, int tag) {
    for (int k = 1; k < g_size; k++) {
        int r = (g_rank + k) % g_size;
        int slot = tag == BEAT_TAG ? free_slot() : free_slot_watched(id);
        if (slot < 0) continue;
        g_ring[slot] = *id;
        if (MPI_Isend(&g_ring[slot], (int)sizeof *id, MPI_BYTE, r, tag, g_note,
                      &g_ring_req[slot]) != MPI_SUCCESS)
            g_ring_req[slot] = MPI_REQUEST_NULL;
    }
}

void zt_comm_enter(const struct zt_coll_id *id) {
    if (g_size == 1) return;
    g_seen[g_rank][id->seq % NOTE_SEEN] = *id;
    g_last[g_rank] = *id;
    send_note(id, NOTE_TAG);
    drain_notes();
    if (g_rank == g_stop_rank && id->seq == g_stop_seq) { /* test only: a rank that stops */
        MPI_Waitall(NOTE_RING, g_ring_req, MPI_STATUSES_IGNORE); /* the note has left */
        fprintf(stderr, "zerotask: rank %d stops itself in collective #%lld %s "
                        "(ZT_TEST_SKIP_COLLECTIVE)\n", g_rank, (long long)id->seq, id->name);
        raise(SIGSTOP);
    }
}

static int entered(int r, int64_t seq) {
    if (r == g_rank || seq <= 0) return 1; /* a host collective (seq 0) is not announced */
    if (g_last[r].seq >= seq + NOTE_SEEN) return 1; /* far ahead: it has been through seq */
    return g_seen[r][seq % NOTE_SEEN].seq == seq;
}

/* printf at buf + *len, *len moved to the end (never past cap - 1: the text is cut short) */
__attribute__((format(printf, 4, 5))) static void appendf(char *buf, size_t cap, size_t *len,
                                                          const char *fmt, ...) {
    if (*len + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (n > 0) *len = *len + (size_t)n < cap ? *len + (size_t)n : cap - 1;
}

/* seconds since rank r was last heard from, when that makes it silent; else 0 */
static double silent_for(int r, double now) {
    if (r == g_rank || now - g_heard[r] < SILENT_S) return 0;
    return now - g_heard[r];
}

/* the ranks that have not entered collective id, and where each of them is instead, into who;
 * returns their number */
static int report_missing(const struct zt_coll_id *id, char *who, size_t cap, size_t *len) {
    int nmiss = 0;
    double now = now_s();
    /* a collective (seq > 0) runs among the group's ranks; a host one among all */
    const int r0 = id->seq > 0 ? g_group_base : 0, r1 = id->seq > 0 ? r0 + g_group_size : g_size;
    for (int r = r0; r < r1; r++) {
        if (entered(r, id->seq)) continue;
        const struct zt_coll_id *l = &g_last[r];
        /* a collective that r entered and this rank never did: this rank is the one missing */
        int me_missing = l->seq > 0 && l->seq < id->seq &&
                         g_seen[g_rank][l->seq % NOTE_SEEN].seq != l->seq;
        char silent[64] = "";
        if (silent_for(r, now) > 0)
            snprintf(silent, sizeof silent, "; silent for %.0f s", silent_for(r, now));
        if (l->seq > 0)
            appendf(who, cap, len, "%srank %d has not reached it (its last collective: #%lld %s, "
                    "step %lld, layer %d%s%s)", nmiss ? "; " : "", r, (long long)l->seq, l->name,
                    (long long)l->step, l->layer,
                    me_missing ? ", which this rank never entered" : "", silent);
        else
            appendf(who, cap, len, "%srank %d has not reached it (no collective yet%s)",
                    nmiss ? "; " : "", r, silent);
        nmiss++;
    }
    return nmiss;
}

/* every rank has entered id: the ranks that went silent in it (a waiting rank sends a heartbeat
 * every second), into who; returns their number */
static int report_silent(const struct zt_coll_id *id, char *who, size_t cap, size_t *len) {
    int nsilent = 0;
    double now = now_s();
    const int r0 = id->seq > 0 ? g_group_base : 0, r1 = id->seq > 0 ? r0 + g_group_size : g_size;
    for (int r = r0; r < r1; r++) {
        double quiet = silent_for(r, now);
        if (quiet <= 0) continue;
        const struct zt_coll_id *l = &g_last[r];
        appendf(who, cap, len, "%srank %d %shas sent nothing for %.0f s (its last collective: "
                "#%lld %s): stopped or descheduled?", nsilent ? "; " : "", r,
                id->seq > 0 ? "entered it but " : "", quiet, (long long)l->seq,
                l->seq > 0 ? l->name : "none");
        nsilent++;
    }
    return nsilent;
}

static void timeout_report(const struct zt_coll_id *id, double waited) {
    drain_notes();
    char who[1024] = "";
    size_t len = 0;
    if (report_missing(id, who, sizeof who, &len) == 0 &&
        report_silent(id, who, sizeof who, &len) == 0)
        snprintf(who, sizeof who, "every rank has entered it and is still waiting in it, so "
                                  "the transport itself is stuck");
    char what[160];
    if (id->seq > 0)
        snprintf(what, sizeof what, "collective #%lld %s (step %lld, layer %d)",
                 (long long)id->seq, id->name, (long long)id->step, id->layer);
    else /* a host-side helper of zt_comm.h, between steps */
        snprintf(what, sizeof what, "host collective %s (after collective #%lld)", id->name,
                 (long long)g_last[g_rank].seq);
    fprintf(stderr, "zerotask: error: rank %d: %s has waited %.0f s (ZT_COMM_TIMEOUT=%lld): %s; "
                    "aborting the job\n", g_rank, what, waited, (long long)g_timeout_s, who);
    fflush(stderr);
    zt_comm_abort_job();
}

void zt_comm_fail(const struct zt_coll_id *id, const char *what, int err) {
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(err, msg, &len);
    fprintf(stderr, "zerotask: error: rank %d: collective #%lld %s (step %lld, layer %d): %s "
                    "failed: %s\n", g_rank, (long long)id->seq, id->name, (long long)id->step,
            id->layer, what, msg);
    fflush(stderr);
    zt_comm_abort_job();
}

void zt_comm_waitall(int n, MPI_Request *reqs, const struct zt_coll_id *id) {
    const double t0 = now_s();
    long spins = 0;
    for (;;) {
        int done = 0;
        int err = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
        if (err != MPI_SUCCESS) zt_comm_fail(id, "a point-to-point transfer", err);
        if (done) return;
        /* spin briefly (the common case: the peers are there), then back off so that the
         * cores go to compute tasks and to oversubscribed ranks */
        if (++spins < 2000) continue;
        if ((spins & 63) == 0) {
            drain_notes();
            double now = now_s(), w = now - t0;
            if (w >= BEAT_EVERY_S && now - g_beat_sent >= BEAT_EVERY_S && g_size > 1) {
                send_note(id, BEAT_TAG); /* "still here, waiting in id" */
                g_beat_sent = now;
            }
            if (w > (double)g_timeout_s) timeout_report(id, w);
        }
        struct timespec ts = {0, spins < 20000 ? 20000 : 200000};
        nanosleep(&ts, NULL);
    }
}
