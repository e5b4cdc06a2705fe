/*
 * io/zt_tracefile.h: the trace files' one definition: the replay file (.ztr) with its writer
 * and reader, the Chrome trace-event JSON writer, and the run's metadata both carry.
 *
 * Layer: io/ (platform; no StarPU). sched/trace.c records a run's tasks and writes both files
 * through these functions; the zt-trace tool reads the replay file back with the reader.
 * docs/traces.md describes both formats.
 *
 * The replay file is text: a header line naming the format version and the columns, a
 * "# meta key=value ..." line, then one line per task:
 *
 *   rank id kind step layer mb blk worker node submit_us start_us end_us cpu_us waited_us
 *   bytes_read bytes_written prio recompute ndeps deps...
 */
#ifndef ZT_TRACEFILE_H
#define ZT_TRACEFILE_H

#include <stddef.h>    /* size_t */
#include <stdint.h>    /* int64_t */
#include <stdio.h>     /* FILE */
#include "zt_status.h" /* enum zt_status */

#ifdef __cplusplus
extern "C" {
#endif

/* The replay file's version: the one written, and the oldest the reader accepts (version 3
 * has no recompute column, version 2 neither cpu_us and waited_us). */
#define ZT_TRACEFILE_VERSION     4
#define ZT_TRACEFILE_VERSION_MIN 2

/* Worker id of zerotask's own I/O threads (swaps, checkpoint writes): ZT_TRACE_IO_WORKER +
 * thread index. StarPU's workers are numbered from 0, far below it. */
#define ZT_TRACE_IO_WORKER 1000

#define ZT_TRACEFILE_META_MAX 32 /* key=value pairs in a run's description */
#define ZT_TRACEFILE_META_LEN 64 /* bytes of one key or value, its NUL included */
#define ZT_TRACEFILE_KIND_LEN 32 /* bytes of a kind name the reader accepts, its NUL included */

// ----------------------------------------------------------------------------------------------
// the run's description

/* key=value pairs (world size, ZeRO stage, workers, cores, memory plan, ...): the replay file's
 * "# meta" line and the JSON's otherData. */
struct zt_tracefile_meta {
    int n;
    char key[ZT_TRACEFILE_META_MAX][ZT_TRACEFILE_META_LEN];
    char value[ZT_TRACEFILE_META_MAX][ZT_TRACEFILE_META_LEN];
};

/* Set key to value (a key set again is replaced; beyond ZT_TRACEFILE_META_MAX keys the new key
 * is dropped). Both are cut to ZT_TRACEFILE_META_LEN - 1 bytes, and blanks, quotes and
 * backslashes in the value become '_', so that it stays one word in the replay file and a plain
 * string in the JSON. */
void zt_tracefile_meta_set(struct zt_tracefile_meta *m, const char *key, const char *value);
/* The value of key, or NULL when it is not set. */
const char *zt_tracefile_meta_get(const struct zt_tracefile_meta *m, const char *key);

// ----------------------------------------------------------------------------------------------
// one task

/* A task as both files hold it. Times are microseconds; the writers subtract a time origin
 * (the run's first submission), the reader returns them as written. */
struct zt_tracefile_task {
    int rank;
    int64_t id;              /* its number on its rank, in submission order (1, 2, ...) */
    const char *kind;        /* task kind name (tasks/zt_task_kinds.h) */
    int64_t step;
    int layer, mb, blk;      /* -1: not per layer, micro-batch or row block */
    int worker;              /* StarPU worker, or ZT_TRACE_IO_WORKER + I/O thread index */
    int node;                /* memory node it ran on (0: host memory) */
    double submit_us, start_us, end_us;
    double cpu_us;           /* its worker thread's CPU time in it; < 0: not measured */
    double waited_us;        /* how long its worker waited for a core before it; < 0: unknown */
    int64_t bytes_read, bytes_written;
    int64_t prio;            /* its StarPU priority */
    int recompute;           /* 1: it recomputes a checkpointed block's activations (activation
                              * checkpointing), else 0 (always 0 in versions 2 and 3) */
    int64_t ndeps;
    const int64_t *deps;     /* [ndeps]: ids of the tasks it waits for */
};

// ----------------------------------------------------------------------------------------------
// the replay file: writer

/* The name of the replay file beside the trace JSON at json_path: json_path with ".json"
 * replaced by ".ztr", or followed by ".ztr" when it does not end in ".json". */
void zt_tracefile_replay_path(char *out, size_t n, const char *json_path);
/* The header line (format version and columns) and the "# meta" line. Write errors show at
 * the stream's fclose (callers write to memory and then the file atomically). */
void zt_tracefile_write_header(FILE *f, const struct zt_tracefile_meta *meta);
/* One task's line, its times relative to origin_us. */
void zt_tracefile_write_task(FILE *f, const struct zt_tracefile_task *t, double origin_us);

// ----------------------------------------------------------------------------------------------
// the replay file: reader

/* What the reader accepts (docs/traces.md, "What the reader checks"): times are finite
 * microseconds in [0, ZT_TRACEFILE_TIME_MAX_US] (about 31 years); I/O threads are
 * ZT_TRACE_IO_WORKER + [0, ZT_TRACE_IO_THREADS_MAX); ranks are below ZT_TRACEFILE_RANKS_MAX (and
 * below the "# meta" line's world when it has one); a task lists at most
 * ZT_TRACEFILE_DEPS_MAX dependencies. */
#define ZT_TRACEFILE_TIME_MAX_US 1e15
#define ZT_TRACE_IO_THREADS_MAX  64
/* the lane of the point-to-point communication thread (tasks/p2p.c): the last I/O lane */
#define ZT_TRACE_COMM_LANE (ZT_TRACE_IO_WORKER + ZT_TRACE_IO_THREADS_MAX - 1)
#define ZT_TRACEFILE_RANKS_MAX   65536
#define ZT_TRACEFILE_DEPS_MAX    (1 << 20)

/* a task id or dependency of the file and the line it is on (the reader's whole-file checks) */
struct zt_tracefile_ref {
    int64_t id;
    int rank;
    long line;
};

struct zt_tracefile_reader {
    char *path;                    /* the replay file being read */
    int version;                   /* its format version */
    long line;                     /* number of the line last read (1: the header) */
    struct zt_tracefile_meta meta; /* its "# meta" line (filled as the line is read) */
    /* private */
    FILE *f;
    char *buf;
    size_t cap;
    char kind[ZT_TRACEFILE_KIND_LEN];
    int64_t *deps;
    int64_t depcap;
    int world, workers;            /* from the "# meta" line; 0: not given */
    int64_t ntasks;                /* task lines read */
    struct zt_tracefile_ref *ids, *refs; /* task ids (>= 1) and dependencies read so far */
    int64_t nids, capids, nrefs, caprefs;
};

/* Open the replay file of path and read its header. path may be the replay file itself
 * (F.ztr) or the trace JSON given to zt-train --trace (F.json, whose replay file is F.ztr,
 * zt_tracefile_replay_path); a path ending in neither is the JSON's when that replay file
 * exists beside it, else a replay file under another name.
 * @retval ZT_ERR_IO   the file cannot be opened or read
 * @retval ZT_ERR_DATA it is empty, not a replay file, or of a version this reader does not know
 * @retval ZT_ERR_NOMEM
 * On error the reader holds nothing (zt_tracefile_close is allowed, not needed). */
enum zt_status zt_tracefile_open(struct zt_tracefile_reader *r, const char *path);
/* The same for a replay file held in memory: buf[0..n) (NUL bytes included, not copied: it
 * must outlive the reader), named name in messages. */
enum zt_status zt_tracefile_open_buffer(struct zt_tracefile_reader *r, const char *buf,
                                        size_t n, const char *name);
/* Read the next task into *t (*got = 1), or reach the end of the file (*got = 0). t->kind and
 * t->deps point into the reader and stay valid until the next call. "# meta" lines met on the
 * way fill r->meta. Every field of every line is checked (docs/traces.md); at the end of the
 * file, the ids' uniqueness per rank and every dependency's task.
 * @retval ZT_ERR_DATA a line that is not a valid task line, a "# meta" value out of range, a
 *                     duplicate id or a dependency on a task the file lacks: one line
 *                     "trace FILE line N: FIELD VALUE: expected ..."
 * @retval ZT_ERR_IO, ZT_ERR_NOMEM */
enum zt_status zt_tracefile_next(struct zt_tracefile_reader *r, struct zt_tracefile_task *t,
                                 int *got);
/* Read and check a whole replay file held in memory (buf[0..n), named name in messages), as
 * zt_tracefile_open_buffer and zt_tracefile_next do; *ntasks: its task lines (may be NULL).
 * For fuzzing and tools that only need the verdict. */
enum zt_status zt_tracefile_parse(const char *buf, size_t n, const char *name,
                                  int64_t *ntasks);
void zt_tracefile_close(struct zt_tracefile_reader *r);

// ----------------------------------------------------------------------------------------------
// the Chrome trace-event JSON: writer

/* A JSON being written: a process per rank, a thread per worker, a complete event per task and
 * a flow arrow per dependency (Perfetto and chrome://tracing open it). */
struct zt_tracefile_json {
    FILE *f;
    double origin_us; /* subtracted from every time written */
    int64_t nevents;  /* events written so far */
    int64_t nflows;   /* flow arrows written so far (their ids: 1, 2, ...) */
    int stages, world; /* a pipeline's stages (meta pipeline_stages) and ranks: process names */
};

/* The opening, with meta as otherData. */
void zt_tracefile_json_begin(struct zt_tracefile_json *j, FILE *f, double origin_us,
                             const struct zt_tracefile_meta *meta);
/* A rank's process name ("rank R"), and one of its threads' names. */
void zt_tracefile_json_process(struct zt_tracefile_json *j, int rank);
void zt_tracefile_json_thread(struct zt_tracefile_json *j, int rank, int tid, const char *name);
/* A task's complete event on thread t->worker of process t->rank. bytes: the bytes of its
 * buffers. With submitted == 0 only what is known at its end is written (no submit time,
 * bytes read and written, priority or dependencies). A recompute task's event is named
 * "KIND (recompute)" and has "recompute": 1 in its args (whose kind stays KIND). */
void zt_tracefile_json_task(struct zt_tracefile_json *j, const struct zt_tracefile_task *t,
                            int64_t bytes, int submitted);
/* A dependency's flow arrow on rank's process: from the last instant of the dependency's slice
 * [from_start_us, from_end_us] on thread from_tid to the start of the task on thread to_tid. */
void zt_tracefile_json_flow(struct zt_tracefile_json *j, int rank, int from_tid,
                            double from_start_us, double from_end_us, int to_tid,
                            double to_start_us);
void zt_tracefile_json_end(struct zt_tracefile_json *j);

#ifdef __cplusplus
}
#endif
#endif /* ZT_TRACEFILE_H */
