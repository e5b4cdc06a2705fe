/*
 * io/trace_json.c: the Chrome trace-event JSON writer (Perfetto and chrome://tracing open it).
 *
 * Layer: io/ (platform; no StarPU). sched/trace.c writes a run's tasks through these calls, next
 * to the replay file of io/tracefile.c; declared in zt_tracefile.h, described in
 * docs/traces.md. A process per rank, a thread per worker, a complete ("X") event per task with
 * its record in args (a recompute task's name marked " (recompute)"), and a flow arrow per
 * dependency (an "s" event at the end of the dependency's slice, an "f" event with "bp": "e" at
 * the start of the task, one id per arrow).
 */
#include <stdio.h>       /* snprintf */
#include <stdlib.h>      /* atoi */
#include "zt_tracefile.h"

/* the separator before an event: none before the first */
static const char *next_event(struct zt_tracefile_json *j) { return j->nevents++ ? ",\n" : ""; }

void zt_tracefile_json_begin(struct zt_tracefile_json *j, FILE *f, double origin_us,
                             const struct zt_tracefile_meta *meta) {
    *j = (struct zt_tracefile_json){.f = f, .origin_us = origin_us};
    const char *st = zt_tracefile_meta_get(meta, "pipeline_stages"),
               *wo = zt_tracefile_meta_get(meta, "world");
    j->stages = st ? atoi(st) : 1;
    j->world = wo ? atoi(wo) : 1;
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{");
    for (int i = 0; i < meta->n; i++)
        fprintf(f, "%s\"%s\":\"%s\"", i ? "," : "", meta->key[i], meta->value[i]);
    fprintf(f, "},\"traceEvents\":[\n");
}

void zt_tracefile_json_process(struct zt_tracefile_json *j, int rank) {
    char name[64];
    const int dp = j->stages > 1 && j->world >= j->stages ? j->world / j->stages : 0;
    if (dp) /* a pipeline: the stage is what a viewer lays out */
        snprintf(name, sizeof name, "rank %d: stage %d of %d", rank, rank / dp, j->stages);
    else
        snprintf(name, sizeof name, "rank %d", rank);
    fprintf(j->f, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,"
                  "\"args\":{\"name\":\"%s\"}}", next_event(j), rank, name);
}

void zt_tracefile_json_thread(struct zt_tracefile_json *j, int rank, int tid, const char *name) {
    fprintf(j->f, "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                  "\"args\":{\"name\":\"%s\"}}", next_event(j), rank, tid, name);
}

void zt_tracefile_json_task(struct zt_tracefile_json *j, const struct zt_tracefile_task *t,
                            int64_t bytes, int submitted) {
    FILE *f = j->f;
    /* a recompute stands out by its name; args.kind stays the kind for tools that group */
    fprintf(f, "%s{\"name\":\"%s%s\",\"cat\":\"task\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
               "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"kind\":\"%s\",\"rank\":%d,\"step\":%lld,"
               "\"layer\":%d,\"mb\":%d,\"blk\":%d,\"worker\":%d,\"node\":%d,\"bytes\":%lld,"
               "\"id\":%lld", next_event(j), t->kind, t->recompute ? " (recompute)" : "",
            t->rank, t->worker, t->start_us - j->origin_us, t->end_us - t->start_us, t->kind,
            t->rank, (long long)t->step, t->layer, t->mb, t->blk, t->worker, t->node,
            (long long)bytes, (long long)t->id);
    if (t->recompute) fprintf(f, ",\"recompute\":1");
    if (t->cpu_us >= 0) fprintf(f, ",\"cpu_us\":%.3f", t->cpu_us);
    if (t->waited_us >= 0) fprintf(f, ",\"waited_us\":%.3f", t->waited_us);
    if (submitted) {
        fprintf(f, ",\"submit\":%.3f,\"bytes_read\":%lld,\"bytes_written\":%lld,\"prio\":%lld,"
                   "\"deps\":[", t->submit_us - j->origin_us, (long long)t->bytes_read,
                (long long)t->bytes_written, (long long)t->prio);
        for (int64_t k = 0; k < t->ndeps; k++)
            fprintf(f, "%s%lld", k ? "," : "", (long long)t->deps[k]);
        fprintf(f, "]");
    }
    fprintf(f, "}}");
}

void zt_tracefile_json_flow(struct zt_tracefile_json *j, int rank, int from_tid,
                            double from_start_us, double from_end_us, int to_tid,
                            double to_start_us) {
    /* the arrow leaves the slice's last instant, inside the slice even when it is that short */
    double from = from_end_us - 0.001 > from_start_us ? from_end_us - 0.001 : from_start_us;
    long long id = (long long)++j->nflows;
    fprintf(j->f, "%s{\"name\":\"dep\",\"cat\":\"dep\",\"ph\":\"s\",\"id\":%lld,\"pid\":%d,"
                  "\"tid\":%d,\"ts\":%.3f}", next_event(j), id, rank, from_tid,
            from - j->origin_us);
    fprintf(j->f, "%s{\"name\":\"dep\",\"cat\":\"dep\",\"ph\":\"f\",\"bp\":\"e\",\"id\":%lld,"
                  "\"pid\":%d,\"tid\":%d,\"ts\":%.3f}", next_event(j), id, rank, to_tid,
            to_start_us - j->origin_us);
}

void zt_tracefile_json_end(struct zt_tracefile_json *j) { fprintf(j->f, "\n]}\n"); }
