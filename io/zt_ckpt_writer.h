/*
 * io/zt_ckpt_writer.h: one checkpoint shard (io/zt_ckpt.h) written in the background by several
 * producers.
 *
 * Layer: io/. No StarPU: the producers are whatever threads the caller runs (the engine's host
 * tasks, graph/engine_ckpt.c). They take the shard's stream in turn (zt_ckpt_writer_lock), stage
 * their records into 4 KiB aligned buffers (checksummed while copied), and a writer thread
 * writes the full buffers O_DIRECT through the aio engine while the next ones are staged; the
 * buffers circulate between the producers and the writer (a bounded pool: a producer waits for
 * one to come back). Producers are counted: the opener holds one, each other producer takes one
 * (zt_ckpt_writer_hold) and gives it back when done (zt_ckpt_writer_release); the last release
 * ends the shard: its last bytes written, then committed (header, fsync, rename) or, after any
 * failure, aborted (the temporary removed). Without aio, or on a file system that refuses
 * O_DIRECT, the records are written buffered by the producers themselves.
 */
#ifndef ZT_CKPT_WRITER_H
#define ZT_CKPT_WRITER_H

#include "zt_ckpt.h"   /* struct zt_shard_rec, struct zt_shard_stream */
#include "zt_status.h" /* enum zt_status */

struct zt_aio_cfg; /* io/zt_aio.h */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zt_ckpt_writer *zt_ckpt_writer_t;

/* Create path's temporary for the records recs[0..n) of the shard id names and start the
 * pipeline: direct writes through an aio engine with settings aio (NULL: buffered), served by a
 * writer thread that first calls thread_init (may be NULL; e.g. to lower its priority). The
 * opener holds one producer count. Owner: the caller, with zt_ckpt_writer_wait (also the only
 * way to release it once open). */
enum zt_status zt_ckpt_writer_open(zt_ckpt_writer_t *w, const char *path,
                                   const struct zt_shard_id *id, const struct zt_shard_rec *recs,
                                   int n,
                                   const struct zt_aio_cfg *aio, void (*thread_init)(void));
/* The shard's path (for messages). */
const char *zt_ckpt_writer_path(zt_ckpt_writer_t w);
/* One more producer (before it can run). Thread-safe. */
void zt_ckpt_writer_hold(zt_ckpt_writer_t w);
/* A producer is done; rc != ZT_OK (its message the thread's last error) fails the shard. The
 * last one ends the shard (commit or abort). Thread-safe. */
void zt_ckpt_writer_release(zt_ckpt_writer_t w, enum zt_status rc);
/* Whether the shard already failed (a producer may then skip its work). Thread-safe. */
int zt_ckpt_writer_failed(zt_ckpt_writer_t w);
/* Take the shard's stream for one producer's records (one producer at a time, so records that
 * follow each other in the file share buffers and writes); stage them with zt_shard_stream_*
 * (io/zt_ckpt.h), then unlock. */
struct zt_shard_stream *zt_ckpt_writer_lock(zt_ckpt_writer_t w);
/* Under the lock: give the stream a staging buffer when it needs one and has none. */
enum zt_status zt_ckpt_writer_buffer(zt_ckpt_writer_t w);
/* Give the stream back; rc != ZT_OK: the shard is lost, nothing more is staged. */
void zt_ckpt_writer_unlock(zt_ckpt_writer_t w, enum zt_status rc);
/* Whether the shard is ended (committed or aborted). Thread-safe. */
int zt_ckpt_writer_done(zt_ckpt_writer_t w);
/* Wait for the shard to end, free the writer and return its first failure (the message set on
 * this thread) or ZT_OK; ms (may be NULL): milliseconds from open to the shard's end. */
enum zt_status zt_ckpt_writer_wait(zt_ckpt_writer_t w, double *ms);

#ifdef __cplusplus
}
#endif
#endif /* ZT_CKPT_WRITER_H */
