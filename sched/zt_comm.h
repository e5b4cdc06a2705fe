/*
 * sched/zt_comm.h: the MPI communicator zerotask runs on (data parallelism across ranks).
 *
 * Layer: sched/. zerotask initialises MPI itself with MPI_THREAD_MULTIPLE (collectives run inside
 * StarPU codelets on worker threads) and works on a duplicate of MPI_COMM_WORLD, so an app's own
 * MPI traffic never mixes with ours (PLATFORM.md item 11). A process started without mpirun is a
 * world of size 1. If the app initialised MPI already it must have asked for
 * MPI_THREAD_MULTIPLE; zerotask then leaves MPI_Finalize to the app.
 */
#ifndef ZT_COMM_H
#define ZT_COMM_H

#include <stddef.h>    /* size_t */
#include <stdint.h>    /* uint64_t */
#include "zt_status.h" /* enum zt_status */

#ifdef __cplusplus
extern "C" {
#endif

/* Initialise MPI and the communicator (idempotent, reference counted), then check every ZT_*
 * knob. After a bad knob (or no memory) MPI stays up and the rank is known: the caller reports
 * the error (rank 0 alone: every rank found it) and then calls zt_comm_free. */
enum zt_status zt_comm_init(void);
void zt_comm_free(void);
int zt_comm_rank(void); /* 0 before zt_comm_init */
int zt_comm_size(void); /* 1 before zt_comm_init */
/* The collectives' group (tasks/collective.c): world ranks base..base+size-1, this rank among
 * them; the whole world unless set (a pipeline's stage: its data-parallel replicas). Every rank
 * of the group sets the same before submitting a collective. zt_comm_group_rank is this rank's
 * place in it. The host-side helpers below always span the whole world. */
enum zt_status zt_comm_set_group(int base, int size);
int zt_comm_group_rank(void);
int zt_comm_group_size(void);
int zt_comm_group_base(void);
/* Rank among the ranks of this machine, and their number. */
int zt_comm_local_rank(void);
int zt_comm_local_size(void);

/* Host-side helpers, called by the application thread while no collective task runs. */
/* Every rank passes the same `what`; fails on every rank, naming the ranks whose digest differs
 * from rank 0's, when the digests are not all equal (e.g. different config files). */
enum zt_status zt_comm_check_same(uint64_t digest, const char *what);
/* Sum of one double per rank, added in rank order (the same result on every rank). */
enum zt_status zt_comm_sum_double(double *x);
/* The same for x[0..n-1], element by element (watched, as the sum of one). */
enum zt_status zt_comm_sum_doubles(double *x, int n);
/* How many ranks report failed != 0 (the same count on every rank; failed itself on one rank):
 * how ranks agree that a step worked everywhere, so that none goes on alone into a collective
 * the others will not reach. Returns the communication's status. */
enum zt_status zt_comm_count_failed(int failed, int *nfailed);
/* Gather n bytes from every rank to rank 0 (out: size * n bytes on rank 0, may be NULL
 * elsewhere). */
enum zt_status zt_comm_gather_bytes(const void *in, size_t n, void *out);
/* Gather a variable number of bytes to rank 0; *out (malloc'd, rank 0) holds them in rank
 * order, *total their count (any size: past MPI's int counts and displacements it goes in
 * rounds). A failure on rank 0 (memory) is every rank's. */
enum zt_status zt_comm_gatherv_bytes(const void *in, size_t n, void **out, size_t *total);
/* The same in rounds of at most `round` bytes per rank (and of INT_MAX bytes in all): what
 * zt_comm_gatherv_bytes does past INT_MAX bytes, with a round a test can make small. */
enum zt_status zt_comm_gatherv_rounds(const void *in, size_t n, void **out, size_t *total,
                                      size_t round);
void zt_comm_barrier(void);
/* End every rank of the job after a fatal error on this one (MPI_Abort); a no-op in a world
 * of size 1. */
void zt_comm_abort(int code);

/* 64-bit FNV-1a of bytes, for zt_comm_check_same. */
uint64_t zt_hash_bytes(uint64_t h, const void *p, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* ZT_COMM_H */
