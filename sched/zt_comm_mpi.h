/*
 * sched/zt_comm_mpi.h: the MPI communicator itself, for the collective codelets in tasks/.
 * Internal (not installed): keeps <mpi.h> out of the public headers.
 */
#ifndef ZT_COMM_MPI_H
#define ZT_COMM_MPI_H

#include <mpi.h>
#include <stdint.h> /* int64_t */

MPI_Comm zt_comm_mpi(void);
/* The communicator of the point-to-point tasks (tasks/p2p.c): a duplicate of its own, so that
 * their messages never match a collective's or the watchdog's, whatever their tags. */
MPI_Comm zt_comm_p2p_mpi(void);
/* ZT_COMM_TIMEOUT, in seconds: how long any wait on another rank may last. */
int64_t zt_comm_timeout_s(void);

/* One collective, as progress notes and timeout reports name it. seq numbers the collectives
 * of a process in submission order (the same on every rank: the token orders them). */
struct zt_coll_id {
    int64_t seq, step;
    int32_t layer;
    char name[36];
};

/* Tell every other rank that this one has entered collective id (a small message on a
 * communicator of its own; drained by the waits). */
void zt_comm_enter(const struct zt_coll_id *id);
/* MPI_Waitall with a watchdog: past ZT_COMM_TIMEOUT seconds it reports which ranks have not
 * entered id (and the last collective each of them did enter), then aborts the job. A failing
 * request is reported the same way. */
void zt_comm_waitall(int n, MPI_Request *reqs, const struct zt_coll_id *id);
/* Test-only (ZT_TEST_SKIP_COLLECTIVE=RANK:SEQ): nonzero when this rank must skip collective
 * seq, to prove the timeout report. (RANK:SEQ:stop: that rank enters seq, then stops itself
 * with SIGSTOP inside zt_comm_enter, to prove the report of a silent rank.) */
int zt_comm_skip(int64_t seq);
/* Tag of collective seq's point-to-point messages (messages of two collectives never match). */
int zt_comm_tag(int64_t seq);
/* Report a failed MPI call inside collective id and abort the job. */
void zt_comm_fail(const struct zt_coll_id *id, const char *what, int err);
/* End the whole job from inside a collective, whatever the world size (the caller has said
 * why on stderr): this rank's swap files are removed first, since MPI_Abort runs no destructor. */
void zt_comm_abort_job(void);

#endif /* ZT_COMM_MPI_H */
