/*
 * tasks/p2p.c: point-to-point tasks: zt_task_send / zt_task_recv move one tensor block to or
 * from another rank (the building block of pipeline parallelism: activations forward to the
 * next stage, their gradients back).
 *
 * Layer: tasks/. Like a swap (io_service.c), a send or recv is not a codelet: its block is
 * acquired asynchronously in submission order (starpu_data_acquire_cb: R for a send, W for a
 * recv), so StarPU's sequential consistency orders it among the tasks like any task. Once the
 * block is held, the request goes to the communication thread, which posts it on sched/'s
 * point-to-point communicator (MPI_Isend; for a recv a matched probe, then MPI_Imrecv into the
 * block) and polls every outstanding request together; a finished one releases its block, and
 * that starts its successors. A pending recv therefore holds no worker: a pipeline submits it
 * long before its data comes, and a worker blocked in it would stall the compute.
 *
 * Streams: the k-th send to a peer with a tag matches the k-th recv from that rank with that
 * tag, in submission order on both sides, whatever order their blocks become ready in. The MPI
 * tag carries the tag and the message's number in its stream modulo P2P_WINDOW, so messages
 * posted out of order still meet their own recv (MPI matches by source and tag, and never
 * reorders the messages of one tag between two ranks).
 *
 * Failures are fatal for the job, as in a collective (sched/comm.c): a size mismatch, a failing
 * MPI call or a stream silent for longer than ZT_COMM_TIMEOUT while a message of it is due
 * prints one line naming the peer, the tag and the task, and aborts every rank, since the peer
 * would otherwise wait for this one forever.
 *
 * Lifetime: the thread starts with the first send or recv, since most runs never use one and
 * then pay nothing for it, and stops in zt_tasks_free (the last one), once every request has
 * finished, before zt_runtime_free takes MPI down.
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <limits.h>        /* INT_MAX */
#include <pthread.h>       /* pthread_* */
#include <stdio.h>         /* fprintf, snprintf */
#include <stdlib.h>        /* calloc, free */
#include <time.h>          /* nanosleep */
#include "tasks_impl.h"    /* zt_check_blk */
#include "zt_comm.h"       /* zt_comm_rank, zt_comm_size */
#include "zt_comm_mpi.h"   /* zt_comm_p2p_mpi, zt_comm_timeout_s, zt_comm_abort_job */
#include "zt_sched.h"      /* zt_trace_submit, zt_trace_record, zt_runtime_io_thread */

#define P2P_WINDOW 4096  /* messages of one stream that may be in flight at once */
#define P2P_BUCKETS 64   /* hash buckets of the stream table */
#define P2P_SPIN 50      /* polls without sleeping after the last progress (then 50 us naps,
                          * 500 us after 20 times as many: the cores belong to the workers) */

/* one (peer, tag) pair: how many sends to it and recvs from it were submitted, and finished,
 * and when its last recv [0] and send [1] finished (the communication thread's clock) */
struct p2p_stream {
    int peer, tag;
    int64_t nsend, nrecv;
    int64_t done_send, done_recv;
    double progress_us[2];
    struct p2p_stream *next;
};

/* one send or recv, from its submission to the release of its block */
struct p2p_req {
    starpu_data_handle_t h;
    int is_send;
    int peer, tag, mpi_tag;
    int64_t seq;   /* its number in its stream (0, 1, ...) */
    struct p2p_stream *stream;
    int64_t bytes; /* of the block */
    int layer, mb, blk, recompute;
    int64_t step;
    int64_t trace_id;
    double posted_us; /* when the thread posted it (starpu_timing_now) */
    int matched;      /* a recv: its message has been probed and is being received */
    int done;         /* its MPI request has completed */
    struct p2p_req *next;
};

static struct {
    pthread_mutex_t mu;  /* the queue, inflight, started, stop */
    pthread_mutex_t sub; /* submission: stream numbers in the order StarPU sees the acquires */
    pthread_cond_t cv;   /* a request was queued, or stop */
    pthread_cond_t idle; /* inflight dropped to 0 */
    pthread_t th;
    int started, stop;
    struct p2p_req *head, *tail; /* blocks held, waiting to be posted */
    int64_t inflight;            /* submitted and not yet released */
    struct p2p_stream *streams[P2P_BUCKETS];
} g = {.mu = PTHREAD_MUTEX_INITIALIZER,
       .sub = PTHREAD_MUTEX_INITIALIZER,
       .cv = PTHREAD_COND_INITIALIZER,
       .idle = PTHREAD_COND_INITIALIZER};

/* the requests the thread has posted: r[i]'s MPI request is mr[i] (MPI_REQUEST_NULL for a recv
 * whose message has not come yet) */
struct active {
    struct p2p_req **r;
    MPI_Request *mr;
    int *idx;
    MPI_Status *st;
    int n, cap;
};

// ----------------------------------------------------------------------------
// fatal ends

/* "send to rank 1 tag 7 (step 3 layer 5 mb 1, message #2)" */
static void describe(const struct p2p_req *r, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "%s %s rank %d tag %d (step %lld", r->is_send ? "send" : "recv",
                     r->is_send ? "to" : "from", r->peer, r->tag, (long long)r->step);
    if (r->layer >= 0 && n > 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, " layer %d", r->layer);
    if (r->mb >= 0 && n > 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, " mb %d", r->mb);
    if (n > 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, ", message #%lld of the stream)",
                 (long long)r->seq + 1);
}

/* print "zerotask: error: rank R: <r> <what>" and end the job */
static void die(const struct p2p_req *r, const char *what) {
    char d[160];
    describe(r, d, sizeof d);
    fprintf(stderr, "zerotask: error: rank %d: %s %s; aborting the job\n", zt_comm_rank(), d, what);
    fflush(stderr);
    zt_comm_abort_job();
}

static void die_mpi(const struct p2p_req *r, const char *call, int err) {
    char msg[MPI_MAX_ERROR_STRING] = "", what[MPI_MAX_ERROR_STRING + 64];
    int len = 0;
    MPI_Error_string(err, msg, &len);
    snprintf(what, sizeof what, "failed in %s: %s", call, msg);
    die(r, what);
}

// ----------------------------------------------------------------------------
// the communication thread

static void post(struct p2p_req *r, MPI_Request *mr) {
    r->posted_us = starpu_timing_now();
    *mr = MPI_REQUEST_NULL;
    if (!r->is_send) return; /* a recv is matched by probing (match) */
    int err = MPI_Isend((void *)starpu_vector_get_local_ptr(r->h), (int)r->bytes, MPI_BYTE, r->peer,
                        r->mpi_tag, zt_comm_p2p_mpi(), mr);
    if (err != MPI_SUCCESS) die_mpi(r, "MPI_Isend", err);
}

/* a recv whose message has come: checked against the block's size, then received into it
 * (MPI_Imrecv on the matched message, so no other recv can take it); 1 when it came */
static int match(struct p2p_req *r, MPI_Request *mr) {
    int flag = 0;
    MPI_Message msg;
    MPI_Status st;
    int err = MPI_Improbe(r->peer, r->mpi_tag, zt_comm_p2p_mpi(), &flag, &msg, &st);
    if (err != MPI_SUCCESS) die_mpi(r, "MPI_Improbe", err);
    if (!flag) return 0;
    int got = 0;
    MPI_Get_count(&st, MPI_BYTE, &got);
    if (got != r->bytes) {
        char what[128];
        snprintf(what, sizeof what, "received a message of the wrong size: expected %lld "
                 "bytes, got %d", (long long)r->bytes, got);
        die(r, what);
    }
    err = MPI_Imrecv((void *)starpu_vector_get_local_ptr(r->h), got, MPI_BYTE, &msg, mr);
    if (err != MPI_SUCCESS) die_mpi(r, "MPI_Imrecv", err);
    r->matched = 1;
    return 1;
}

/* a finished request: its trace record, then its block released (its successors start) */
static void finish(struct p2p_req *r) {
    if (zt_trace_enabled()) {
        struct zt_trace_rec t = {.kind = r->is_send ? ZT_KIND_send : ZT_KIND_recv,
                                 .layer = r->layer,
                                 .mb = r->mb,
                                 .blk = r->blk,
                                 .recompute = r->recompute,
                                 .worker = ZT_TRACE_COMM_LANE,
                                 .node = STARPU_MAIN_RAM,
                                 .step = r->step,
                                 .id = r->trace_id,
                                 .start_us = r->posted_us,
                                 .end_us = starpu_timing_now(),
                                 .cpu_us = -1,
                                 .waited_us = -1,
                                 .bytes = r->bytes};
        zt_trace_record(&t);
    }
    pthread_mutex_lock(&g.sub);
    if (r->is_send) r->stream->done_send++;
    else r->stream->done_recv++;
    pthread_mutex_unlock(&g.sub);
    r->stream->progress_us[r->is_send] = starpu_timing_now();
    starpu_data_release(r->h);
    free(r);
    pthread_mutex_lock(&g.mu);
    if (--g.inflight == 0) pthread_cond_broadcast(&g.idle);
    pthread_mutex_unlock(&g.mu);
}

static void add_active(struct active *a, struct p2p_req *r) {
    if (a->n == a->cap) {
        int cap = a->cap ? 2 * a->cap : 64;
        struct p2p_req **nr = realloc(a->r, (size_t)cap * sizeof *nr);
        if (nr) a->r = nr;
        MPI_Request *nm = realloc(a->mr, (size_t)cap * sizeof *nm);
        if (nm) a->mr = nm;
        int *ni = realloc(a->idx, (size_t)cap * sizeof *ni);
        if (ni) a->idx = ni;
        MPI_Status *ns = realloc(a->st, (size_t)cap * sizeof *ns);
        if (ns) a->st = ns;
        if (!nr || !nm || !ni || !ns) die(r, "ran out of memory");
        a->cap = cap;
    }
    a->r[a->n] = r;
    post(r, &a->mr[a->n]);
    a->n++;
}

/* Since when r has been due: as many of its stream's messages in r's direction have finished
 * as come before it (or more: they may finish out of order, then r is overdue), counted from
 * its posting or the stream's last finish, whichever is later; -1 while fewer have. A pipeline
 * posts the recvs of every micro-batch long before the last one's data comes, so a wait counts
 * from when it is due. Only this thread changes the stream's counts. */
static double waiting_since(const struct p2p_req *r) {
    const struct p2p_stream *s = r->stream;
    if (r->seq > (r->is_send ? s->done_send : s->done_recv)) return -1;
    const double last = s->progress_us[r->is_send];
    return last > r->posted_us ? last : r->posted_us;
}

/* one round over the active requests: match the recvs whose message has come, test them all,
 * finish those done, end the job on one waiting past the timeout; 1 when anything moved */
static int poll_active(struct active *a, int64_t timeout_s) {
    int moved = 0, nd = 0;
    if (a->n == 0) return 0;
    for (int i = 0; i < a->n; i++)
        if (!a->r[i]->is_send && !a->r[i]->matched) moved |= match(a->r[i], &a->mr[i]);
    int err = MPI_Testsome(a->n, a->mr, &nd, a->idx, a->st);
    if (nd == MPI_UNDEFINED) nd = 0; /* only null requests: recvs still unmatched */
    for (int k = 0; k < nd; k++) {
        int i = a->idx[k];
        if (err != MPI_SUCCESS && a->st[k].MPI_ERROR != MPI_SUCCESS)
            die_mpi(a->r[i], "MPI_Testsome", a->st[k].MPI_ERROR);
        a->r[i]->done = 1;
    }
    if (err != MPI_SUCCESS && err != MPI_ERR_IN_STATUS) die_mpi(a->r[0], "MPI_Testsome", err);
    const double now = starpu_timing_now();
    int keep = 0;
    for (int i = 0; i < a->n; i++) {
        struct p2p_req *r = a->r[i];
        if (r->done) {
            finish(r);
            moved = 1;
            continue;
        }
        const double since = waiting_since(r);
        if (since >= 0 && now - since > (double)timeout_s * 1e6) {
            char what[128];
            snprintf(what, sizeof what, "timed out: nothing of its stream came for %.0f s "
                     "(ZT_COMM_TIMEOUT=%lld)", (now - since) / 1e6, (long long)timeout_s);
            die(r, what);
        }
        a->r[keep] = r;
        a->mr[keep++] = a->mr[i];
    }
    a->n = keep;
    return moved;
}

/* Posts what is queued and polls what is posted. Spins right after progress (a pipeline's next
 * message is usually close), then sleeps between polls so that the cores go to the workers;
 * sleeps on the condition variable when nothing is outstanding. */
static void *comm_thread(void *arg) {
    (void)arg;
    zt_runtime_io_thread(); /* ZT_IO_NICE: a message waiting to be posted delays a peer */
    const int64_t timeout_s = zt_comm_timeout_s();
    struct active a = {0};
    long idle = 0;
    for (;;) {
        pthread_mutex_lock(&g.mu);
        while (!g.head && a.n == 0 && !g.stop) pthread_cond_wait(&g.cv, &g.mu);
        struct p2p_req *r = g.head;
        g.head = g.tail = NULL;
        int stop = g.stop && !r && a.n == 0;
        pthread_mutex_unlock(&g.mu);
        if (stop) break;
        int moved = r != NULL;
        while (r) {
            struct p2p_req *next = r->next;
            add_active(&a, r);
            r = next;
        }
        moved |= poll_active(&a, timeout_s);
        idle = moved ? 0 : idle + 1;
        if (idle > P2P_SPIN) {
            struct timespec ts = {0, idle < 20 * P2P_SPIN ? 50000 : 500000};
            nanosleep(&ts, NULL);
        }
    }
    free(a.r);
    free(a.mr);
    free(a.idx);
    free(a.st);
    return NULL;
}

// ----------------------------------------------------------------------------
// submission

/* the block is held (from whichever thread released its previous user): queue it */
static void acquired(void *arg) {
    struct p2p_req *r = arg;
    pthread_mutex_lock(&g.mu);
    if (g.tail)
        g.tail->next = r;
    else
        g.head = r;
    g.tail = r;
    pthread_cond_signal(&g.cv);
    pthread_mutex_unlock(&g.mu);
}

/* the next number of r's stream in r's direction (under g.sub) */
static enum zt_status next_seq(struct p2p_req *r) {
    unsigned b = ((unsigned)r->peer * 31u + (unsigned)r->tag) % P2P_BUCKETS;
    struct p2p_stream *s = g.streams[b];
    while (s && (s->peer != r->peer || s->tag != r->tag)) s = s->next;
    if (!s) {
        if (!(s = calloc(1, sizeof *s)))
            return zt_error_set(ZT_ERR_NOMEM, "out of memory for a point-to-point stream");
        s->peer = r->peer;
        s->tag = r->tag;
        s->next = g.streams[b];
        g.streams[b] = s;
    }
    /* the MPI tag holds the number modulo the window: two messages of one stream in flight
     * with the same tag could be matched out of order */
    if ((r->is_send ? s->nsend - s->done_send : s->nrecv - s->done_recv) >= P2P_WINDOW)
        return zt_error_set(ZT_ERR_INVALID, "%s %s rank %d tag %d: %d messages of the stream "
                            "in flight already (expected at most %d)",
                            r->is_send ? "zt_task_send" : "zt_task_recv",
                            r->is_send ? "to" : "from", r->peer, r->tag, P2P_WINDOW, P2P_WINDOW);
    r->seq = r->is_send ? s->nsend++ : s->nrecv++;
    r->stream = s;
    r->mpi_tag = r->tag * P2P_WINDOW + (int)(r->seq % P2P_WINDOW);
    return ZT_OK;
}

/* start the thread on first use (under g.sub) */
static enum zt_status start(void) {
    if (g.started) return ZT_OK;
    g.stop = 0;
    if (pthread_create(&g.th, NULL, comm_thread, NULL) != 0)
        return zt_error_set(ZT_ERR_RUNTIME, "point-to-point: cannot start the communication "
                                            "thread");
    g.started = 1;
    return ZT_OK;
}

int zt_p2p_tag_max(void) {
    if (zt_comm_p2p_mpi() == MPI_COMM_NULL) return -1;
    int *ub = NULL, flag = 0;
    int64_t top = 32767; /* the least MPI_TAG_UB the standard allows */
    if (MPI_Comm_get_attr(zt_comm_p2p_mpi(), MPI_TAG_UB, &ub, &flag) == MPI_SUCCESS && flag &&
        ub)
        top = *ub;
    return (int)((top + 1) / P2P_WINDOW - 1);
}

/* the checks of a send or recv of block blk of t with peer and tag, and its request */
static enum zt_status check(const char *fn, zt_tensor_t t, int blk, int peer, int tag,
                            struct p2p_req **out) {
    ZT_CHECK(zt_check_blk(fn, t, blk));
    if (zt_comm_p2p_mpi() == MPI_COMM_NULL)
        return zt_error_set(ZT_ERR_INVALID, "%s: zt_tasks_init not called", fn);
    if (peer < 0 || peer >= zt_comm_size())
        return zt_error_set(ZT_ERR_INVALID, "%s: peer rank %d: expected 0 to %d", fn, peer,
                            zt_comm_size() - 1);
    if (tag < 0 || tag > zt_p2p_tag_max())
        return zt_error_set(ZT_ERR_INVALID, "%s: tag %d: expected 0 to %d", fn, tag,
                            zt_p2p_tag_max());
    int64_t bytes = zt_tensor_blk_rows(t, blk) * zt_tensor_cols(t) *
                    (int64_t)zt_tensor_elemsize(t);
    if (bytes > INT_MAX)
        return zt_error_set(ZT_ERR_INVALID, "%s: block %d of tensor %s has %lld bytes: expected "
                            "at most %d", fn, blk, zt_tensor_name(t), (long long)bytes, INT_MAX);
    struct p2p_req *r = calloc(1, sizeof *r);
    if (!r) return zt_error_set(ZT_ERR_NOMEM, "%s: out of memory", fn);
    r->h = zt_tensor_handle(t, blk);
    r->peer = peer;
    r->tag = tag;
    r->bytes = bytes;
    r->blk = blk;
    *out = r;
    return ZT_OK;
}

static enum zt_status submit(const struct zt_task_opts *o, zt_tensor_t t, int blk, int peer,
                             int tag, int is_send) {
    const char *fn = is_send ? "zt_task_send" : "zt_task_recv";
    struct p2p_req *r = NULL;
    ZT_CHECK(check(fn, t, blk, peer, tag, &r));
    r->is_send = is_send;
    r->layer = o ? o->layer : -1;
    r->mb = o ? o->mb : -1;
    r->step = o ? o->step : 0;
    r->recompute = o ? o->recompute != 0 : 0;
    const enum starpu_data_access_mode mode = is_send ? STARPU_R : STARPU_W;
    pthread_mutex_lock(&g.sub);
    enum zt_status rc = start();
    if (rc == ZT_OK) rc = next_seq(r);
    if (rc != ZT_OK) {
        pthread_mutex_unlock(&g.sub);
        free(r);
        return rc;
    }
    const struct starpu_data_descr d = {r->h, mode};
    r->trace_id = zt_trace_submit(&d, 1, o ? o->priority : 0);
    pthread_mutex_lock(&g.mu);
    g.inflight++;
    pthread_mutex_unlock(&g.mu);
    /* StarPU refuses only a handle it does not know, which zt_tensor_handle gave: a bug, and
     * the stream has counted the message, so the job cannot go on */
    if (starpu_data_acquire_cb(r->h, mode, acquired, r) != 0) die(r, "could not acquire its block");
    pthread_mutex_unlock(&g.sub);
    return ZT_OK;
}

enum zt_status zt_task_send(const struct zt_task_opts *o, zt_tensor_t t, int blk, int peer,
                            int tag) {
    return submit(o, t, blk, peer, tag, 1);
}

enum zt_status zt_task_recv(const struct zt_task_opts *o, zt_tensor_t t, int blk, int peer,
                            int tag) {
    return submit(o, t, blk, peer, tag, 0);
}

void zt_p2p_wait(void) {
    pthread_mutex_lock(&g.mu);
    while (g.inflight > 0) pthread_cond_wait(&g.idle, &g.mu);
    pthread_mutex_unlock(&g.mu);
}

void zt_p2p_free(void) {
    pthread_mutex_lock(&g.sub);
    if (g.started) {
        zt_p2p_wait();
        pthread_mutex_lock(&g.mu);
        g.stop = 1;
        pthread_cond_signal(&g.cv);
        pthread_mutex_unlock(&g.mu);
        pthread_join(g.th, NULL);
        g.started = 0;
    }
    /* a new run (zt_tasks_init again, on every rank) numbers its streams from 0 */
    for (int b = 0; b < P2P_BUCKETS; b++)
        while (g.streams[b]) {
            struct p2p_stream *s = g.streams[b];
            g.streams[b] = s->next;
            free(s);
        }
    pthread_mutex_unlock(&g.sub);
}

/* never run: sends and recvs are served by the communication thread, not by codelets; the kinds
 * exist for traces */
void send_cpu(void *buffers[], void *cl_arg) { (void)buffers, (void)cl_arg; }
void recv_cpu(void *buffers[], void *cl_arg) { (void)buffers, (void)cl_arg; }
