/*
 * tests/io/test_swapdir.c: proves the swap directories of io/zt_swapdir.h keep to themselves:
 * - a process that opens two under one nvme_path (the engine's offload and the checkpointed
 *   inputs) gets two directories, <host>-<pid> and <host>-<pid>.2, and a file in each; opening
 *   the second leaves the first's file in place, closing either leaves the other's;
 * - a closed directory's name is taken again by the next open;
 * - a missing nvme_path or a file in its place is ZT_ERR_CONFIG naming the key (zt_swapdir_check
 *   and zt_swapdir_open alike).
 */
#include <stdio.h>       /* snprintf */
#include <stdlib.h>      /* getenv */
#include <string.h>      /* strcmp, strstr */
#include <sys/stat.h>    /* mkdir, stat */
#include <unistd.h>      /* access */

#include "zt_status.h"  /* zt_error_last */
#include "zt_swapdir.h" /* zt_swapdir_* */
#include "zt_test.h"    /* ZT_TEST_TRUE, zt_test_finish */

static int exists(const char *p) { return access(p, F_OK) == 0; }

static void test_two_under_one_path(const char *base) {
    struct zt_swapdir a, b;
    struct zt_swapfile fa, fb;
    ZT_TEST_TRUE(zt_swapdir_open(&a, base, "offload_optimizer.nvme_path", 4096) == ZT_OK &&
                     zt_swapdir_file(&a, "optim.swp", 4096, &fa) == ZT_OK,
                 "first directory: %s", zt_error_last());
    ZT_TEST_TRUE(zt_swapdir_open(&b, base, "activation_checkpointing.offload.nvme_path",
                                 4096) == ZT_OK &&
                     zt_swapdir_file(&b, "ckpt_inputs.swp", 4096, &fb) == ZT_OK,
                 "second directory: %s", zt_error_last());
    const size_t n = strlen(a.path);
    ZT_TEST_TRUE(strcmp(a.path, b.path) != 0 && !strncmp(a.path, b.path, n) &&
                     !strcmp(b.path + n, ".2"),
                 "two directories, the second named after the first with .2: %s, %s", a.path,
                 b.path);
    ZT_TEST_TRUE(exists(fa.path) && exists(fb.path), "opening the second kept the first's file");
    char second[sizeof b.path], first[sizeof a.path];
    snprintf(second, sizeof second, "%s", b.path);
    snprintf(first, sizeof first, "%s", a.path);
    zt_swapfile_close(&fb);
    zt_swapdir_close(&b);
    ZT_TEST_TRUE(exists(fa.path) && !exists(fb.path), "closing the second kept the first's file");
    struct zt_swapdir c;
    ZT_TEST_TRUE(zt_swapdir_open(&c, base, "k", 0) == ZT_OK && !strcmp(c.path, second),
                 "the closed one's name is taken again: %s", c.path);
    zt_swapdir_close(&c);
    zt_swapfile_close(&fa);
    zt_swapdir_close(&a);
    ZT_TEST_TRUE(!exists(first) && !exists(second), "closed: both removed");
}

static void test_bad_paths(const char *base) {
    char missing[1100], file[1100];
    snprintf(missing, sizeof missing, "%s/missing", base);
    snprintf(file, sizeof file, "%s/a-file", base);
    FILE *f = fopen(file, "w");
    if (f) fclose(f);
    struct zt_swapdir d;
    ZT_TEST_TRUE(zt_swapdir_check(missing, "x.nvme_path") == ZT_ERR_CONFIG &&
                     strstr(zt_error_last(), "x.nvme_path") &&
                     strstr(zt_error_last(), "expected an existing directory"),
                 "check: missing path (%s)", zt_error_last());
    ZT_TEST_TRUE(zt_swapdir_check(file, "x.nvme_path") == ZT_ERR_CONFIG &&
                     strstr(zt_error_last(), "not a directory"),
                 "check: a file (%s)", zt_error_last());
    ZT_TEST_TRUE(zt_swapdir_open(&d, missing, "y.nvme_path", 0) == ZT_ERR_CONFIG &&
                     strstr(zt_error_last(), "y.nvme_path"),
                 "open: missing path (%s)", zt_error_last());
    ZT_TEST_TRUE(zt_swapdir_check(base, "x") == ZT_OK, "check: a directory is fine");
}

int main(void) {
    const char *tmp = getenv("ZT_IO_TEST_TMP");
    char base[1024];
    snprintf(base, sizeof base, "%s", tmp ? tmp : "/tmp/zt-test-swapdir");
    mkdir(base, 0755);
    test_two_under_one_path(base);
    test_bad_paths(base);
    return zt_test_finish("test_swapdir");
}
