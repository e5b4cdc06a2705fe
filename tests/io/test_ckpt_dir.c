/*
 * tests/io/test_ckpt_dir.c: proves the checkpoint directory protocol (io/zt_ckpt_dir.h) keeps
 * its contract without any engine:
 * - prepare creates DIR and its missing parents and an empty DIR/.<tag>.partial, clearing a
 *   stale one; publish renames it into place as DIR/<tag>, writes `latest` ("<tag>\n") and
 *   leaves no .partial and no temporary behind;
 * - publishing a tag again replaces it (the old copy gone after `latest` is written);
 * - resolve follows `latest`, accepts a tag directory itself, falls back to DIR/.<tag>.old when
 *   a re-save stopped between its renames, and refuses a dangling or malformed `latest` and a
 *   directory that is neither (one line naming the path);
 * - sweep removes .partial/.dead leftovers and latest.tmp-* files and nothing else;
 *   remove_tag hides then empties a tag; each_entry lists only the visible entries;
 * - shard paths name rank<R>.zts, and a missing one is ZT_ERR_CKPT_CORRUPT naming it;
 * - publishing a tag without moving `latest` leaves `latest` as it was;
 * - the writer lock (io/zt_ckpt_lock.h): taken once, a second take is refused naming this pid,
 *   the host and the start time; released, the file is gone and the lock can be taken again;
 *   a holder that dies without releasing leaves its file but does not block the next taker.
 */
#include <stdio.h>        /* fopen, snprintf */
#include <stdlib.h>       /* getenv, free */
#include <string.h>       /* strcmp, strstr */
#include <sys/stat.h>     /* mkdir, stat */
#include <sys/wait.h>     /* waitpid */
#include <unistd.h>       /* access, fork, getpid, _exit */

#include "zt_ckpt_dir.h"  /* the unit under test */
#include "zt_ckpt_lock.h" /* the writer lock */
#include "zt_status.h"    /* zt_error_last */
#include "zt_test.h"      /* ZT_TEST_TRUE, zt_test_finish */

static char root[512];

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static int exists(const char *path) { return access(path, F_OK) == 0; }

/* DIR/<tag> with a meta.json whose text is `text`, saved through the protocol */
static enum zt_status save_tag(const char *dir, const char *tag, const char *text) {
    enum zt_status rc = zt_ckpt_dir_prepare(dir, tag);
    if (rc != ZT_OK) return rc;
    char partial[1024], p[1100];
    zt_ckpt_dir_partial_path(partial, sizeof partial, dir, tag);
    snprintf(p, sizeof p, "%s/rank0.zts", partial);
    put(p, "shard");
    snprintf(p, sizeof p, "%s/meta.json", partial);
    put(p, text);
    return zt_ckpt_dir_publish(dir, tag);
}

static int file_is(const char *path, const char *text) {
    char *got = NULL;
    if (zt_ckpt_dir_read_text(path, "file", &got) != ZT_OK) return 0;
    int same = strcmp(got, text) == 0;
    free(got);
    return same;
}

static void check_save_and_resolve(void) {
    char dir[600], p[1100], tagdir[1100];
    snprintf(dir, sizeof dir, "%s/a/b/ck", root); /* parents a/ and a/b/ do not exist yet */
    mkdir(root, 0755);
    ZT_TEST_TRUE(save_tag(dir, "step5", "five") == ZT_OK, "first save: %s", zt_error_last());
    snprintf(p, sizeof p, "%s/latest", dir);
    ZT_TEST_TRUE(file_is(p, "step5\n"), "latest names step5");
    snprintf(p, sizeof p, "%s/step5/meta.json", dir);
    ZT_TEST_TRUE(file_is(p, "five"), "the tag holds what the partial directory held");
    snprintf(p, sizeof p, "%s/.step5.partial", dir);
    ZT_TEST_TRUE(!exists(p) && zt_test_count_tmp(dir) == 0, "no partial, no temporary left");

    /* a stale partial of the same tag is cleared; the re-save replaces the tag */
    snprintf(p, sizeof p, "%s/.step5.partial", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/.step5.partial/junk", dir);
    put(p, "x");
    ZT_TEST_TRUE(save_tag(dir, "step5", "again") == ZT_OK, "re-save: %s", zt_error_last());
    snprintf(p, sizeof p, "%s/step5/meta.json", dir);
    ZT_TEST_TRUE(file_is(p, "again"), "the re-saved tag is the new one");
    snprintf(p, sizeof p, "%s/step5/junk", dir);
    ZT_TEST_TRUE(!exists(p), "a stale partial's files do not reach the tag");
    snprintf(p, sizeof p, "%s/.step5.old", dir);
    ZT_TEST_TRUE(!exists(p), "the previous copy is gone once latest is written");

    ZT_TEST_TRUE(zt_ckpt_dir_resolve(dir, tagdir, sizeof tagdir) == ZT_OK &&
                     strstr(tagdir, "/ck/step5") != NULL,
                 "resolve follows latest (%s)", tagdir);
    snprintf(p, sizeof p, "%s/step5", dir);
    ZT_TEST_TRUE(zt_ckpt_dir_resolve(p, tagdir, sizeof tagdir) == ZT_OK && !strcmp(tagdir, p),
                 "a tag directory resolves to itself");

    /* a re-save stopped between its renames: the tag is at .step5.old only */
    char old[1100];
    snprintf(old, sizeof old, "%s/.step5.old", dir);
    ZT_TEST_TRUE(rename(p, old) == 0, "setup: move step5 aside");
    ZT_TEST_TRUE(zt_ckpt_dir_resolve(dir, tagdir, sizeof tagdir) == ZT_OK &&
                     strstr(tagdir, "/.step5.old") != NULL,
                 "resolve falls back to the previous copy (%s)", tagdir);
    rename(old, p);

    snprintf(p, sizeof p, "%s/latest", dir);
    put(p, "step99\n");
    ZT_TEST_TRUE(zt_ckpt_dir_resolve(dir, tagdir, sizeof tagdir) == ZT_ERR_CKPT_CORRUPT &&
                     strstr(zt_error_last(), "latest names tag 'step99'"),
                 "a dangling latest: %s", zt_error_last());
    put(p, "../elsewhere\n");
    ZT_TEST_TRUE(zt_ckpt_dir_resolve(dir, tagdir, sizeof tagdir) == ZT_ERR_CKPT_CORRUPT &&
                     strstr(zt_error_last(), "does not name a tag"),
                 "a latest naming a path: %s", zt_error_last());
    put(p, "step5\n");
    ZT_TEST_TRUE(zt_ckpt_dir_resolve(root, tagdir, sizeof tagdir) == ZT_ERR_IO &&
                     strstr(zt_error_last(), "neither a tag"),
                 "a directory that is no checkpoint: %s", zt_error_last());
}

/* count the visible entries each_entry reports */
static enum zt_status count_entry(void *arg, const char *name, const char *path) {
    (void)name;
    (void)path;
    ++*(int *)arg;
    return ZT_OK;
}

static void check_sweep_and_remove(void) {
    char dir[600], p[1100];
    snprintf(dir, sizeof dir, "%s/sweep", root);
    ZT_TEST_TRUE(save_tag(dir, "step1", "1") == ZT_OK && save_tag(dir, "step2", "2") == ZT_OK,
                 "two tags: %s", zt_error_last());
    const char *leftovers[] = {".step3.partial", ".step0.dead"};
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, leftovers[i]);
        mkdir(p, 0755);
    }
    snprintf(p, sizeof p, "%s/latest.tmp-1-abc", dir);
    put(p, "x");
    snprintf(p, sizeof p, "%s/notes.txt", dir);
    put(p, "kept");
    zt_ckpt_dir_sweep(dir);
    snprintf(p, sizeof p, "%s/.step3.partial", dir);
    int gone = !exists(p);
    snprintf(p, sizeof p, "%s/.step0.dead", dir);
    gone = gone && !exists(p);
    snprintf(p, sizeof p, "%s/latest.tmp-1-abc", dir);
    gone = gone && !exists(p);
    snprintf(p, sizeof p, "%s/notes.txt", dir);
    ZT_TEST_TRUE(gone && exists(p), "sweep removes the leftovers and nothing else");

    int n = 0;
    ZT_TEST_TRUE(zt_ckpt_dir_each_entry(dir, 256, count_entry, &n) == ZT_OK && n == 4,
                 "each_entry: step1, step2, latest, notes.txt (got %d)", n);
    ZT_TEST_TRUE(zt_ckpt_dir_remove_tag(dir, "step1") == 0, "remove_tag step1");
    snprintf(p, sizeof p, "%s/step1", dir);
    int hidden = !exists(p);
    snprintf(p, sizeof p, "%s/.step1.dead", dir);
    ZT_TEST_TRUE(hidden && !exists(p), "step1 and its .dead copy are gone");
    ZT_TEST_TRUE(zt_ckpt_dir_remove_tag(dir, "step7") == -1, "removing a missing tag fails");
    snprintf(p, sizeof p, "%s/nope", root);
    ZT_TEST_TRUE(zt_ckpt_dir_each_entry(p, 256, count_entry, &n) == ZT_ERR_IO,
                 "each_entry of a missing directory is ZT_ERR_IO");
}

static void check_shard_paths(void) {
    char dir[600], name[32];
    snprintf(dir, sizeof dir, "%s/sweep/step2", root);
    zt_ckpt_dir_shard_name(name, sizeof name, 3);
    ZT_TEST_TRUE(!strcmp(name, "rank3.zts"), "shard name %s", name);
    char **paths = NULL;
    ZT_TEST_TRUE(zt_ckpt_dir_shard_paths(dir, 1, &paths) == ZT_OK && strstr(paths[0], "/rank0.zts"),
                 "the one shard of step2: %s", zt_error_last());
    zt_ckpt_dir_free_paths(paths, 1);
    ZT_TEST_TRUE(zt_ckpt_dir_shard_paths(dir, 2, &paths) == ZT_ERR_CKPT_CORRUPT &&
                     strstr(zt_error_last(), "rank1.zts: rank 1's shard is missing"),
                 "a missing shard: %s", zt_error_last());
    zt_ckpt_dir_free_paths(paths, 2);
}

static void check_publish_keeps_latest(void) {
    char dir[600], p[700];
    snprintf(dir, sizeof dir, "%s/beside", root);
    ZT_TEST_TRUE(save_tag(dir, "step3", "{}") == ZT_OK, "step3 saved");
    ZT_TEST_TRUE(zt_ckpt_dir_prepare(dir, "hf") == ZT_OK && zt_ckpt_dir_publish_tag(dir, "hf", 0) ==
                     ZT_OK, "tag hf published without latest (%s)", zt_error_last());
    snprintf(p, sizeof p, "%s/latest", dir);
    char *text = NULL;
    ZT_TEST_TRUE(zt_ckpt_dir_read_text(p, "latest", &text) == ZT_OK && !strcmp(text, "step3\n"),
                 "latest still names step3 (%s)", text ? text : "?");
    free(text);
    snprintf(p, sizeof p, "%s/hf", dir);
    ZT_TEST_TRUE(exists(p), "hf is there");
}

static void check_lock(void) {
    char dir[600], want[64];
    snprintf(dir, sizeof dir, "%s/locked/sub", root);
    struct zt_ckpt_lock a, b;
    ZT_TEST_TRUE(zt_ckpt_lock_take(&a, dir, "--save-dir") == ZT_OK && exists(a.path),
                 "lock taken, DIR created (%s)", zt_error_last());
    snprintf(want, sizeof want, "is in use by pid %ld on host ", (long)getpid());
    ZT_TEST_TRUE(zt_ckpt_lock_take(&b, dir, "--save-dir") == ZT_ERR_IO &&
                     strstr(zt_error_last(), "--save-dir") && strstr(zt_error_last(), dir) &&
                     strstr(zt_error_last(), want) && strstr(zt_error_last(), " since "),
                 "a second writer is refused: %s", zt_error_last());
    zt_ckpt_lock_release(&a);
    ZT_TEST_TRUE(!exists(a.path), "released: the lock file is gone");
    ZT_TEST_TRUE(zt_ckpt_lock_take(&b, dir, "--save-dir") == ZT_OK, "taken again after release");
    zt_ckpt_lock_release(&b);
    pid_t child = fork(); /* a holder that dies holding it */
    if (child == 0) {
        struct zt_ckpt_lock c;
        _exit(zt_ckpt_lock_take(&c, dir, "--save-dir") == ZT_OK ? 0 : 1);
    }
    int status = -1;
    waitpid(child, &status, 0);
    ZT_TEST_TRUE(status == 0 && exists(a.path), "a dead holder left its lock file");
    ZT_TEST_TRUE(zt_ckpt_lock_take(&b, dir, "--save-dir") == ZT_OK,
                 "a dead holder's lock does not block (%s)", zt_error_last());
    zt_ckpt_lock_release(&b);
}

int main(void) {
    const char *tmp = getenv("ZT_IO_TEST_TMP");
    snprintf(root, sizeof root, "%s", tmp ? tmp : "/tmp/zt-test-ckpt-dir");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root); /* a fresh directory each run */
    if (system(cmd) != 0) ZT_TEST_FAIL("cannot clear %s", root);
    check_save_and_resolve();
    check_sweep_and_remove();
    check_shard_paths();
    check_publish_keeps_latest();
    check_lock();
    return zt_test_finish("test_ckpt_dir");
}
