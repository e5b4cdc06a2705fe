/*
 * tests/io/test_tracefile.c: proves the trace file format module (io/zt_tracefile.h) keeps its
 * contract:
 * - the replay file's writer and reader round-trip every column of every task (the recompute
 *   mark included), the metadata (a key set twice keeps its last value, blanks and quotes in a
 *   value become '_') and the dependency lists, with times relative to the origin and the
 *   header at the current version (4, its recompute column before ndeps);
 * - a version 2 file (no cpu_us and waited_us columns) reads with both at -1, and a version 3
 *   file (no recompute column) with its CPU times and recompute 0;
 * - the reader finds the replay file beside the JSON path (F.json -> F.ztr, F -> F.ztr when that
 *   exists, else F itself) and names the replay file it read;
 * - damaged files fail with ZT_ERR_IO or ZT_ERR_DATA and one message naming the file (and the
 *   line for a bad task line): missing, empty, not a replay file, an unknown version, a short
 *   line, fewer dependencies than announced, end before start;
 * - every field of a task line is checked, with one message naming the file, the line, the
 *   field and its value: rank and worker against the "# meta" line's world and workers (I/O
 *   threads 1000 + [0, 64)), times finite in [0, 1e15] with submit <= start <= end, cpu_us and
 *   waited_us -1 or such a time, a kind name that fits, dependencies on earlier tasks that the
 *   file has (none on itself), ids unique per rank, nothing after the dependencies, a whole last
 *   line, no NUL byte, "# meta" values in range and before the tasks, a recompute mark of 0 or
 *   1 (a version 3 line in a version 4 file lacks a column);
 * - a replay file in memory reads as the same file does (zt_tracefile_parse), an empty buffer
 *   is "empty";
 * - the Chrome JSON writer puts the separators, flow ids and optional fields where the JSON's
 *   readers expect them; a recompute task's event is named "KIND (recompute)" with
 *   "recompute": 1 in its args and args.kind the plain kind.
 */
#include <stdio.h>    /* fopen, fprintf, open_memstream */
#include <stdlib.h>   /* getenv, free */
#include <string.h>   /* strcmp, strstr */
#include <sys/stat.h> /* mkdir */

#include "zt_status.h"    /* zt_error_last */
#include "zt_test.h"      /* ZT_TEST_TRUE, zt_test_finish */
#include "zt_tracefile.h" /* the module under test */

static const char *dir;

static void pathof(char *out, const char *name) { snprintf(out, 1024, "%s/%s", dir, name); }

static void write_text(const char *p, const char *text) {
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
}

static const int64_t deps_b[] = {1, 2};
static const struct zt_tracefile_task tasks[] = {
    {.rank = 0, .id = 1, .kind = "load_batch", .step = 1, .layer = -1, .mb = 0, .blk = -1,
     .worker = 0, .node = 0, .submit_us = 1000.5, .start_us = 1001.25, .end_us = 1010.0,
     .cpu_us = 8.5, .waited_us = -1, .bytes_read = 0, .bytes_written = 64, .prio = 3},
    {.rank = 1, .id = 3, .kind = "swap_in", .step = 2, .layer = 4, .mb = 1, .blk = 2,
     .worker = ZT_TRACE_IO_WORKER + 1, .node = 0, .submit_us = 1002, .start_us = 1020,
     .end_us = 1030.125, .cpu_us = -1, .waited_us = 0.5, .bytes_read = 4096,
     .bytes_written = 8192, .prio = -2, .recompute = 1, .ndeps = 2, .deps = deps_b},
    /* the tasks swap_in depends on: a dependency names an earlier task of the same rank */
    {.rank = 1, .id = 1, .kind = "fill_zero", .step = 1, .layer = -1, .mb = -1, .blk = -1,
     .worker = 1, .node = 0, .submit_us = 1000, .start_us = 1003, .end_us = 1004, .cpu_us = 1,
     .waited_us = 0, .bytes_read = 0, .bytes_written = 64, .prio = 0},
    {.rank = 1, .id = 2, .kind = "fill_zero", .step = 1, .layer = -1, .mb = -1, .blk = -1,
     .worker = 0, .node = 0, .submit_us = 1000, .start_us = 1005, .end_us = 1006, .cpu_us = 1,
     .waited_us = 0, .bytes_read = 0, .bytes_written = 64, .prio = 0},
};
#define NTASKS ((int)(sizeof tasks / sizeof tasks[0]))

static void write_sample(const char *p) {
    struct zt_tracefile_meta m = {0};
    zt_tracefile_meta_set(&m, "world", "1");
    zt_tracefile_meta_set(&m, "sched", "a b\"c");
    zt_tracefile_meta_set(&m, "world", "2");
    FILE *f = fopen(p, "w");
    zt_tracefile_write_header(f, &m);
    for (int i = 0; i < NTASKS; i++) zt_tracefile_write_task(f, &tasks[i], 1000.0);
    fclose(f);
}

static void check_round_trip(void) {
    char p[1024];
    pathof(p, "rt.ztr");
    write_sample(p);
    char head[256] = "";
    FILE *f = fopen(p, "r");
    if (f && !fgets(head, sizeof head, f)) head[0] = '\0';
    if (f) fclose(f);
    ZT_TEST_TRUE(ZT_TRACEFILE_VERSION == 4 && !strncmp(head, "# zerotask replay 4: ", 21) &&
                     strstr(head, " prio recompute ndeps deps...\n"),
                 "header line: %s", head);
    struct zt_tracefile_reader r;
    enum zt_status rc = zt_tracefile_open(&r, p);
    ZT_TEST_TRUE(rc == ZT_OK && r.version == ZT_TRACEFILE_VERSION, "open %s: %s", p,
                 zt_error_last());
    int n = 0, got = 0;
    struct zt_tracefile_task t;
    while (rc == ZT_OK && (rc = zt_tracefile_next(&r, &t, &got)) == ZT_OK && got) {
        const struct zt_tracefile_task *w = &tasks[n++];
        ZT_TEST_TRUE(t.rank == w->rank && t.id == w->id && !strcmp(t.kind, w->kind) &&
                         t.step == w->step && t.layer == w->layer && t.mb == w->mb &&
                         t.blk == w->blk && t.worker == w->worker && t.node == w->node,
                     "task %d: ids and placement", n);
        ZT_TEST_TRUE(t.submit_us == w->submit_us - 1000 && t.start_us == w->start_us - 1000 &&
                         t.end_us == w->end_us - 1000 && t.cpu_us == w->cpu_us &&
                         t.waited_us == w->waited_us,
                     "task %d: times relative to the origin", n);
        ZT_TEST_TRUE(t.bytes_read == w->bytes_read && t.bytes_written == w->bytes_written &&
                         t.prio == w->prio && t.recompute == w->recompute &&
                         t.ndeps == w->ndeps,
                     "task %d: bytes, priority, recompute mark, dependency count", n);
        for (int k = 0; k < t.ndeps && k < w->ndeps; k++)
            ZT_TEST_TRUE(t.deps[k] == w->deps[k], "task %d dependency %d", n, k);
    }
    ZT_TEST_TRUE(rc == ZT_OK && n == NTASKS, "read %d of %d tasks: %s", n, NTASKS,
                 zt_error_last());
    const char *world = zt_tracefile_meta_get(&r.meta, "world");
    const char *sched = zt_tracefile_meta_get(&r.meta, "sched");
    ZT_TEST_TRUE(r.meta.n == 2 && world && !strcmp(world, "2") && sched &&
                     !strcmp(sched, "a_b_c") && !zt_tracefile_meta_get(&r.meta, "stage"),
                 "meta: %d keys, world=%s sched=%s", r.meta.n, world, sched);
    zt_tracefile_close(&r);
}

static void check_version2(void) {
    char p[1024];
    pathof(p, "v2.ztr");
    write_text(p, "# zerotask replay 2: columns\n# meta world=1\n"
                  "0 1 adamw 3 -1 -1 -1 1 0 1.0 2.0 3.5 10 20 0 0\n");
    struct zt_tracefile_reader r;
    struct zt_tracefile_task t;
    int got = 0;
    enum zt_status rc = zt_tracefile_open(&r, p);
    if (rc == ZT_OK) rc = zt_tracefile_next(&r, &t, &got);
    ZT_TEST_TRUE(rc == ZT_OK && got && r.version == 2 && t.cpu_us == -1 && t.waited_us == -1 &&
                     t.end_us == 3.5 && t.bytes_written == 20 && !strcmp(t.kind, "adamw") &&
                     t.recompute == 0,
                 "version 2 line: %s", zt_error_last());
    zt_tracefile_close(&r);
}

static void check_version3(void) {
    char p[1024];
    pathof(p, "v3.ztr");
    write_text(p, "# zerotask replay 3: columns\n# meta world=1\n"
                  "0 1 matmul_forward 3 0 -1 -1 1 0 1.0 2.0 3.5 1.25 0.5 10 20 -4 0\n"
                  "0 2 matmul_forward 3 0 -1 -1 1 0 1.0 4.0 5.0 1.0 0 10 20 1 1 1\n");
    struct zt_tracefile_reader r;
    struct zt_tracefile_task t[2];
    int got[2] = {0, 0};
    enum zt_status rc = zt_tracefile_open(&r, p);
    for (int i = 0; i < 2 && rc == ZT_OK; i++) rc = zt_tracefile_next(&r, &t[i], &got[i]);
    ZT_TEST_TRUE(rc == ZT_OK && got[0] && got[1] && r.version == 3 && t[0].cpu_us == 1.25 &&
                     t[0].waited_us == 0.5 && t[0].prio == -4 && t[0].ndeps == 0 &&
                     t[0].recompute == 0 && t[1].prio == 1 && t[1].ndeps == 1 &&
                     t[1].recompute == 0,
                 "version 3 lines (no recompute column): %s", zt_error_last());
    zt_tracefile_close(&r);
}

/* opening `given` reads the replay file `want` (a name in dir) */
static void expect_reads(const char *given, const char *want) {
    char g[1024], w[1024];
    pathof(g, given);
    pathof(w, want);
    struct zt_tracefile_reader r;
    enum zt_status rc = zt_tracefile_open(&r, g);
    ZT_TEST_TRUE(rc == ZT_OK && !strcmp(r.path, w), "open %s: read %s (%s), want %s", given,
                 rc == ZT_OK ? r.path : "nothing", zt_error_last(), want);
    zt_tracefile_close(&r);
}

static void check_paths(void) {
    char out[64];
    zt_tracefile_replay_path(out, sizeof out, "a/trace.json");
    ZT_TEST_TRUE(!strcmp(out, "a/trace.ztr"), "replay path of a/trace.json: %s", out);
    zt_tracefile_replay_path(out, sizeof out, "run");
    ZT_TEST_TRUE(!strcmp(out, "run.ztr"), "replay path of run: %s", out);
    char p[1024];
    pathof(p, "t.ztr");
    write_sample(p);
    pathof(p, "t");
    write_text(p, "{}\n"); /* the JSON of --trace t */
    pathof(p, "renamed");
    write_sample(p);
    expect_reads("t.json", "t.ztr");
    expect_reads("t.ztr", "t.ztr");
    expect_reads("t", "t.ztr");
    expect_reads("renamed", "renamed");
}

static void expect_fail(const char *name, const char *text, enum zt_status code,
                        const char *want) {
    char p[1024];
    pathof(p, name);
    if (text) write_text(p, text);
    struct zt_tracefile_reader r;
    struct zt_tracefile_task t;
    int got = 1;
    enum zt_status rc = zt_tracefile_open(&r, p);
    while (rc == ZT_OK && got) rc = zt_tracefile_next(&r, &t, &got);
    ZT_TEST_TRUE(rc == code && strstr(zt_error_last(), name) && strstr(zt_error_last(), want),
                 "%s: got %s \"%s\", want %s with \"%s\"", name, zt_status_str(rc),
                 zt_error_last(), zt_status_str(code), want);
    zt_tracefile_close(&r);
}

static void check_errors(void) {
    const char *head = "# zerotask replay 3: columns\n# meta world=1\n";
    char line[512];
    expect_fail("missing.ztr", NULL, ZT_ERR_IO, "cannot open");
    expect_fail("nosibling.json", NULL, ZT_ERR_IO, "nosibling.ztr");
    expect_fail("empty.ztr", "", ZT_ERR_DATA, "empty");
    expect_fail("hello.ztr", "hello\n", ZT_ERR_DATA, "not a zerotask replay file");
    expect_fail("v9.ztr", "# zerotask replay 9: columns\n", ZT_ERR_DATA, "version 9");
    snprintf(line, sizeof line, "%s0 1 adamw 1 -1 -1 -1 0 0 1.0 2.0\n", head);
    expect_fail("short.ztr", line, ZT_ERR_DATA, "line 3");
    snprintf(line, sizeof line, "%s0 1 adamw 1 -1 -1 -1 0 0 1 2 3 1 0 8 8 0 0\n"
                                "0 2 adamw 1 -1 -1 -1 0 0 1 2 3 1 0 8 8 0 3 1\n", head);
    expect_fail("fewdeps.ztr", line, ZT_ERR_DATA, "line 4: 3 dependencies announced");
    snprintf(line, sizeof line, "%s0 1 adamw 1 -1 -1 -1 0 0 1 5 3 1 0 8 8 0 0\n", head);
    expect_fail("backwards.ztr", line, ZT_ERR_DATA, "line 3");
}

/* version 4's recompute column: 0 or 1, and there in every line */
static void check_recompute_errors(void) {
    const char *head = "# zerotask replay 4: columns\n# meta world=1\n"
                       "0 1 matmul_forward 1 0 0 -1 0 0 1 2 3 1 0 8 8 0 1 0\n";
    const char *marks[] = {"2", "x", "-1", "01", "1.0"};
    char text[512], name[64], want[64];
    for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++) {
        snprintf(text, sizeof text, "%s0 2 matmul_forward 1 0 0 -1 0 0 1 2 3 1 0 8 8 0 %s 0\n",
                 head, marks[i]);
        snprintf(name, sizeof name, "recompute%zu.ztr", i);
        snprintf(want, sizeof want, "line 4: recompute %s: expected 0 or 1", marks[i]);
        expect_fail(name, text, ZT_ERR_DATA, want);
    }
    /* a version 3 line (no recompute) in a version 4 file: a column short */
    snprintf(text, sizeof text, "%s0 2 matmul_forward 1 0 0 -1 0 0 1 2 3 1 0 8 8 0 0\n", head);
    expect_fail("v3line.ztr", text, ZT_ERR_DATA, "line 4: ndeps missing: expected \"rank id");
}

/* one task line, version 3, with the given worker, times and dependencies */
static void task_line(char *out, size_t n, int rank, long long id, int worker, const char *times,
                      const char *deps) {
    snprintf(out, n, "%d %lld adamw 1 -1 -1 -1 %d 0 %s 1 0 8 8 0 %s\n", rank, id, worker, times,
             deps);
}

/* a file of the header, a meta line and the lines given fails naming line and words */
static void expect_field(const char *name, const char *meta, const char *l3, const char *l4,
                         const char *want) {
    char text[1024];
    snprintf(text, sizeof text, "# zerotask replay 3: columns\n%s\n%s%s", meta, l3, l4);
    expect_fail(name, text, ZT_ERR_DATA, want);
}

static void check_field_errors(void) {
    const char *meta = "# meta world=2 workers=2";
    char ok1[256], bad[256];
    task_line(ok1, sizeof ok1, 0, 1, 0, "1.0 2.0 3.0", "0");
    task_line(bad, sizeof bad, 0, 2, -1, "1.0 2.0 3.0", "0");
    expect_field("negworker.ztr", meta, ok1, bad, "line 4: worker -1: expected");
    task_line(bad, sizeof bad, 0, 2, 2, "1.0 2.0 3.0", "0");
    expect_field("bigworker.ztr", meta, ok1, bad, "line 4: worker 2: expected");
    task_line(bad, sizeof bad, 0, 2, 1064, "1.0 2.0 3.0", "0");
    expect_field("iothread.ztr", meta, ok1, bad, "line 4: worker 1064: expected");
    task_line(bad, sizeof bad, 2, 2, 0, "1.0 2.0 3.0", "0");
    expect_field("bigrank.ztr", meta, ok1, bad, "line 4: rank 2: expected");
    task_line(bad, sizeof bad, 0, 2, 0, "1.0 nan 3.0", "0");
    expect_field("nan.ztr", meta, ok1, bad, "line 4: start_us nan: expected");
    task_line(bad, sizeof bad, 0, 2, 0, "1.0 2.0 inf", "0");
    expect_field("inf.ztr", meta, ok1, bad, "line 4: end_us inf: expected");
    task_line(bad, sizeof bad, 0, 2, 0, "-1.0 2.0 3.0", "0");
    expect_field("negtime.ztr", meta, ok1, bad, "line 4: submit_us -1.0: expected");
    task_line(bad, sizeof bad, 0, 2, 0, "1.0 2.0 2e15", "0");
    expect_field("hugetime.ztr", meta, ok1, bad, "line 4: end_us 2e15: expected");
    task_line(bad, sizeof bad, 0, 2, 0, "0x10 20 30", "0");
    expect_field("hextime.ztr", meta, ok1, bad, "line 4: submit_us 0x10: expected");
    task_line(bad, sizeof bad, 0, 2, 0, "3.0 2.0 4.0", "0");
    expect_field("early.ztr", meta, ok1, bad, "line 4: start_us 2.0: expected at least");
    task_line(bad, sizeof bad, 0, 2, 0, "1.0 2.0 3.0 -2", "0");
    expect_field("cpu.ztr", meta, ok1, bad, "line 4: cpu_us -2: expected -1");
    task_line(bad, sizeof bad, 0, 1, 0, "1.0 2.0 3.0", "0");
    expect_field("dupid.ztr", meta, ok1, bad, "line 4: id 1: expected an id no other");
    task_line(bad, sizeof bad, 0, 2, 0, "1.0 2.0 3.0", "1 2");
    expect_field("selfdep.ztr", meta, ok1, bad, "line 4: dependency 2: expected");
    task_line(bad, sizeof bad, 0, 3, 0, "1.0 2.0 3.0", "1 2");
    expect_field("missingdep.ztr", meta, ok1, bad, "line 4: dependency 2: expected the id");
    task_line(bad, sizeof bad, 1, 2, 0, "1.0 2.0 3.0", "1 1");
    expect_field("otherrank.ztr", meta, ok1, bad, "line 4: dependency 1: expected the id");
    task_line(bad, sizeof bad, 0, 2, 0, "1.0 2.0 3.0", "1 1 7");
    expect_field("extra.ztr", meta, ok1, bad, "line 4: 1 dependencies announced, more listed");
    task_line(bad, sizeof bad, 0, 2, 0, "1.0 2.0 3.0", "1 1");
    bad[strlen(bad) - 1] = '\0';
    expect_field("truncated.ztr", meta, ok1, bad, "line 4: truncated");
    expect_field("meta.ztr", "# meta world=2 cores=nan", ok1, "", "line 2: meta cores=nan");
    expect_field("metalate.ztr", meta, ok1, meta, "line 4: a \"# meta\" line after");
    expect_field("kind.ztr", meta, ok1, "0 2 abcdefghijklmnopqrstuvwxyz0123456789 1 -1 -1 -1 0 0 "
                 "1 2 3 1 0 8 8 0 0\n", "line 4: kind abcdefghij");
}

/* a file in memory: a good one reads, NUL bytes and an empty buffer fail */
static void check_buffer(void) {
    const char good[] = "# zerotask replay 3: columns\n# meta world=1\n"
                        "0 1 adamw 1 -1 -1 -1 0 0 1 2 3 1 0 8 8 0 0\n"
                        "0 2 adamw 1 -1 -1 -1 1001 0 1 3 4 -1 -1 8 8 0 1 1\n";
    int64_t n = -1;
    enum zt_status rc = zt_tracefile_parse(good, sizeof good - 1, "mem.ztr", &n);
    ZT_TEST_TRUE(rc == ZT_OK && n == 2, "parse from memory: %s, %lld tasks", zt_error_last(),
                 (long long)n);
    char nul[sizeof good];
    memcpy(nul, good, sizeof good);
    nul[50] = '\0';
    rc = zt_tracefile_parse(nul, sizeof nul - 1, "nul.ztr", &n);
    ZT_TEST_TRUE(rc == ZT_ERR_DATA && strstr(zt_error_last(), "nul.ztr line 3: a NUL byte"),
                 "NUL byte in memory: %s", zt_error_last());
    rc = zt_tracefile_parse("", 0, "none.ztr", &n);
    ZT_TEST_TRUE(rc == ZT_ERR_DATA && strstr(zt_error_last(), "none.ztr: empty"),
                 "empty buffer: %s", zt_error_last());
}

static void check_json(void) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    struct zt_tracefile_meta m = {0};
    zt_tracefile_meta_set(&m, "stage", "2");
    struct zt_tracefile_json j;
    zt_tracefile_json_begin(&j, f, 1000.0, &m);
    zt_tracefile_json_process(&j, 0);
    zt_tracefile_json_thread(&j, 0, 0, "CPU 0");
    zt_tracefile_json_task(&j, &tasks[0], 64, 0);
    zt_tracefile_json_task(&j, &tasks[1], 12288, 1);
    zt_tracefile_json_flow(&j, 0, 0, 1001.25, 1010.0, 1001, 1020.0);
    zt_tracefile_json_end(&j);
    fclose(f);
    const char *opening = "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"stage\":\"2\"},"
                          "\"traceEvents\":[\n{\"name\":\"process_name\"";
    ZT_TEST_TRUE(!strncmp(buf, opening, strlen(opening)), "JSON opening: %.120s", buf);
    const char *mark = strstr(buf, "\"recompute\":1"); /* swap_in's, and no other */
    ZT_TEST_TRUE(strstr(buf, "{\"name\":\"load_batch\",") &&
                     strstr(buf, "{\"name\":\"swap_in (recompute)\",") &&
                     strstr(buf, "\"kind\":\"swap_in\",") &&
                     strstr(buf, "\"id\":3,\"recompute\":1,") && mark &&
                     !strstr(mark + 1, "\"recompute\""),
                 "JSON names and recompute marks: %s", buf);
    ZT_TEST_TRUE(strstr(buf, "\"ts\":1.250,\"dur\":8.750") && strstr(buf, "\"cpu_us\":8.500") &&
                     !strstr(buf, "\"submit\":0.500") && strstr(buf, "\"waited_us\":0.500") &&
                     strstr(buf, "\"submit\":2.000,\"bytes_read\":4096") &&
                     strstr(buf, "\"deps\":[1,2]}}"),
                 "JSON task events: %s", buf);
    ZT_TEST_TRUE(strstr(buf, "\"ph\":\"s\",\"id\":1,\"pid\":0,\"tid\":0,\"ts\":9.999}") &&
                     strstr(buf, "\"ph\":\"f\",\"bp\":\"e\",\"id\":1,\"pid\":0,\"tid\":1001,"
                                 "\"ts\":20.000}\n]}\n") &&
                     j.nevents == 6 && j.nflows == 1,
                 "JSON flow arrow and end: %s", buf);
    free(buf);
}

int main(void) {
    dir = getenv("ZT_IO_TEST_TMP");
    if (!dir) dir = "/tmp/zt_test_tracefile";
    mkdir(dir, 0755);
    check_round_trip();
    check_version2();
    check_version3();
    check_paths();
    check_errors();
    check_recompute_errors();
    check_field_errors();
    check_buffer();
    check_json();
    return zt_test_finish("test_tracefile");
}
