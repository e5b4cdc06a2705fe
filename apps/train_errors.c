/*
 * apps/train_errors.c: how a zt-train rank reports a failure: which rank prints the one error
 * line, the ranks' agreement on the start-up outcome, and when a failure ends the whole job.
 *
 * Layer: apps/ (zt-train only).
 */
#include <stdio.h>       /* fprintf */
#include "train_run.h"   /* struct train_run */

/* A bad command line or config is the same on every rank: rank 0 alone reports it. Anything
 * else may be one rank's own trouble (a file missing on its machine): that rank reports it,
 * prefixed with its rank when there are several. Returns exit_code. */
int train_fail(int exit_code) {
    int cfg = zt_error_last_code() == ZT_ERR_CONFIG || zt_error_last_code() == ZT_ERR_USAGE;
    if (zt_comm_size() == 1)
        fprintf(stderr, "zerotask: error: %s\n", zt_error_last());
    else if (!cfg)
        fprintf(stderr, "zerotask: error: rank %d: %s\n", zt_comm_rank(), zt_error_last());
    else if (zt_comm_rank() == 0)
        fprintf(stderr, "zerotask: error: %s\n", zt_error_last());
    return exit_code;
}

/* Every rank passes its start-up outcome (0 or an exit code); all learn whether any failed, so
 * no rank goes on into a collective that the failed one will never reach. */
int train_agree(int code) {
    int nfailed = 0;
    if (zt_comm_count_failed(code != 0, &nfailed) != ZT_OK) return code ? code : 1;
    if (nfailed > 0 && code == 0) {
        if (zt_comm_rank() == 0)
            fprintf(stderr, "zerotask: error: stopping: %d rank(s) failed at start-up (see "
                            "their messages)\n", nfailed);
        return 1;
    }
    return code;
}

/* A failure after start-up. A bad environment knob (STARPU_SCHED, ZT_*) is a configuration
 * error: exit 2, and it stops every rank alike. A rank that failed only because another did
 * (ZT_ERR_PEER: they agreed on it) waits for the job's end, so that the rank with the cause
 * prints it before anything ends the job. Any other failure is this rank's alone and the others
 * may be waiting in a collective for it: end the whole job. */
int train_report_failure(const struct train_run *r) {
    /* a NaN or Inf where none may be (a training step, an export, fp16 at its minimum scale)
     * comes from numbers every rank shares: all stop at the same point and rank 0 alone
     * reports it; no rank needs to end the others */
    if (zt_error_last_code() == ZT_ERR_NUMERIC) {
        if (r->rank == 0) fprintf(stderr, "zerotask: error: %s\n", zt_error_last());
        return 1;
    }
    int config_error = zt_error_last_code() == ZT_ERR_CONFIG;
    int exit_code = train_fail(config_error ? 2 : 1);
    if (!config_error && r->world > 1 && zt_error_last_code() != ZT_ERR_PEER)
        zt_comm_abort(exit_code);
    return exit_code;
}
