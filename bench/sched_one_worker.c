/*
 * bench/sched_one_worker.c: how a StarPU policy copes when every task may run on one worker only,
 * as when the GPU build puts each kind with a CUDA kernel on the one CUDA worker and the CPU
 * workers idle (sched/runtime.c picks the default policy from this).
 *
 *   zt-sched-one-worker [TASKS [HANDLES]]      (default 5000 tasks over 500 handles)
 *
 * Submits TASKS small tasks (a short spin), task i reading and writing handle i % HANDLES, whose
 * can_execute admits worker 0 alone, and prints the microseconds per task from the first
 * submission to the last completion. The policy and the worker count are StarPU's own
 * variables: STARPU_SCHED=lws STARPU_NCPU=8 zt-sched-one-worker (bench/README.md has a loop).
 */
#include <stdio.h>
#include <stdlib.h>
#include <starpu.h>

static void spin(void *buffers[], void *arg) {
    (void)buffers, (void)arg;
    volatile double x = 0;
    for (int i = 0; i < 2000; i++) x += i;
}

static int worker0_only(unsigned workerid, struct starpu_task *task, unsigned nimpl) {
    (void)task, (void)nimpl;
    return workerid == 0;
}

static struct starpu_codelet g_cl = {.cpu_funcs = {spin}, .nbuffers = 1, .modes = {STARPU_RW},
                                     .can_execute = worker0_only, .name = "spin"};

int main(int argc, char **argv) {
    int ntasks = argc > 1 ? atoi(argv[1]) : 5000, nh = argc > 2 ? atoi(argv[2]) : 500;
    if (ntasks < 1 || nh < 1) {
        fprintf(stderr, "usage: zt-sched-one-worker [TASKS >= 1 [HANDLES >= 1]]\n");
        return 2;
    }
    if (starpu_init(NULL) != 0) {
        fprintf(stderr, "zt-sched-one-worker: starpu_init failed\n");
        return 1;
    }
    starpu_data_handle_t *h = malloc((size_t)nh * sizeof *h);
    float *v = calloc((size_t)nh * 16, sizeof *v);
    if (!h || !v) return 1;
    for (int i = 0; i < nh; i++)
        starpu_vector_data_register(&h[i], STARPU_MAIN_RAM, (uintptr_t)(v + 16 * i), 16,
                                    sizeof(float));
    double t0 = starpu_timing_now();
    for (int i = 0; i < ntasks; i++) starpu_task_insert(&g_cl, STARPU_RW, h[i % nh], 0);
    starpu_task_wait_for_all();
    double us = starpu_timing_now() - t0;
    const char *sched = getenv("STARPU_SCHED");
    printf("sched %-6s workers %2u tasks %d: %.1f ms, %.1f us/task\n", sched ? sched : "(default)",
           starpu_worker_get_count(), ntasks, us / 1e3, us / ntasks);
    for (int i = 0; i < nh; i++) starpu_data_unregister(h[i]);
    free(h);
    free(v);
    starpu_shutdown();
    return 0;
}
