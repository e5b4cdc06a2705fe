/*
 * sched/comm.c: MPI start-up and the host-side helpers of zt_comm.h.
 */
#include <stdio.h>         /* snprintf */
#include <stdlib.h>        /* malloc, free */
#include <string.h>        /* memcpy */
#include "zt_comm.h"       /* our API */
#include "zt_comm_mpi.h"   /* MPI_Comm */

static int g_refs = 0;
static int g_we_init = 0;
static int g_rank = 0, g_size = 1;
static MPI_Comm g_comm = MPI_COMM_NULL;
static int g_lrank = 0, g_lsize = 1; /* rank and count on this machine */

enum zt_status zt_comm_init(void) {
    if (g_refs++ > 0) return ZT_OK;
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited) {
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
    /* errors come back as codes, so a failing collective is reported with its name */
    MPI_Comm_set_errhandler(g_comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(g_comm, &g_rank);
    MPI_Comm_size(g_comm, &g_size);
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
    MPI_Comm_free(&g_comm);
    if (g_we_init) MPI_Finalize();
    g_we_init = 0;
    g_rank = 0;
    g_size = 1;
}

int zt_comm_rank(void) { return g_rank; }
int zt_comm_local_rank(void) { return g_lrank; }
int zt_comm_local_size(void) { return g_lsize; }
int zt_comm_size(void) { return g_size; }
MPI_Comm zt_comm_mpi(void) { return g_comm; }

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
    if (MPI_Allgather(&digest, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, g_comm) != MPI_SUCCESS) {
        free(all);
        return zt_error_set(ZT_ERR_RUNTIME, "MPI: allgather of %s digests failed", what);
    }
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

enum zt_status zt_comm_sum_double(double *x) {
    if (g_size == 1) return ZT_OK;
    double *all = malloc((size_t)g_size * sizeof *all);
    if (!all) return zt_error_set(ZT_ERR_NOMEM, "MPI: out of memory");
    if (MPI_Allgather(x, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, g_comm) != MPI_SUCCESS) {
        free(all);
        return zt_error_set(ZT_ERR_RUNTIME, "MPI: allgather of a sum failed");
    }
    double s = 0.0;
    for (int r = 0; r < g_size; r++) s += all[r]; /* rank order: the same on every rank */
    free(all);
    *x = s;
    return ZT_OK;
}

enum zt_status zt_comm_gather_bytes(const void *in, size_t n, void *out) {
    if (g_size == 1) {
        memcpy(out, in, n);
        return ZT_OK;
    }
    if (MPI_Gather(in, (int)n, MPI_BYTE, out, (int)n, MPI_BYTE, 0, g_comm) != MPI_SUCCESS)
        return zt_error_set(ZT_ERR_RUNTIME, "MPI: gather failed");
    return ZT_OK;
}

enum zt_status zt_comm_gatherv_bytes(const void *in, size_t n, void **out, size_t *total) {
    *out = NULL;
    *total = 0;
    int *counts = calloc((size_t)g_size, sizeof *counts);
    int *displs = calloc((size_t)g_size, sizeof *displs);
    if (!counts || !displs) {
        free(counts);
        free(displs);
        return zt_error_set(ZT_ERR_NOMEM, "MPI: out of memory");
    }
    int my = (int)n;
    enum zt_status rc = ZT_OK;
    if (MPI_Gather(&my, 1, MPI_INT, counts, 1, MPI_INT, 0, g_comm) != MPI_SUCCESS) {
        rc = zt_error_set(ZT_ERR_RUNTIME, "MPI: gather of sizes failed");
        goto out;
    }
    size_t sum = 0;
    if (g_rank == 0) {
        for (int r = 0; r < g_size; r++) {
            displs[r] = (int)sum;
            sum += (size_t)counts[r];
        }
        *out = malloc(sum ? sum : 1);
        if (!*out) {
            rc = zt_error_set(ZT_ERR_NOMEM, "MPI: out of memory for %zu gathered bytes", sum);
            /* the others still take part in the gather below; rank 0 receives nothing */
            for (int r = 0; r < g_size; r++) counts[r] = 0;
        }
    }
    if (MPI_Gatherv(in, my, MPI_BYTE, *out, counts, displs, MPI_BYTE, 0, g_comm) != MPI_SUCCESS &&
        rc == ZT_OK)
        rc = zt_error_set(ZT_ERR_RUNTIME, "MPI: gatherv failed");
    *total = sum;
out:
    free(counts);
    free(displs);
    return rc;
}

void zt_comm_barrier(void) {
    if (g_size > 1) MPI_Barrier(g_comm);
}

void zt_comm_abort(int code) {
    if (g_size > 1) MPI_Abort(MPI_COMM_WORLD, code);
}
