/*
 * tests/fuzz/fuzz_ckpt_meta.c: a checkpoint's meta.json reader (graph/checkpoint_meta.c) on any
 * text: the input is the meta.json of a scratch tag directory, read as zt-ckpt and resume read
 * it (the summary, then the tensor list).
 */
#include <sys/stat.h> /* mkdir */

#include "fuzz_util.h"
#include "zt_checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int made;
    const char *tagdir = fuzz_scratch_path(".ckpt");
    if (!made && mkdir(tagdir, 0700) != 0)
        FUZZ_FAIL("cannot make the scratch directory %s", tagdir);
    made = 1;
    char meta[600];
    if (snprintf(meta, sizeof meta, "%s/meta.json", tagdir) >= (int)sizeof meta)
        FUZZ_FAIL("scratch path too long");
    fuzz_write(meta, data, size);
    struct zt_ckpt_info info;
    enum zt_status rc = zt_checkpoint_info(tagdir, &info);
    fuzz_check_error(rc, "zt_checkpoint_info");
    if (rc != ZT_OK) return 0;
    struct zt_ckpt_tensor *t = NULL;
    int n = 0;
    rc = zt_checkpoint_tensors(tagdir, &t, &n);
    fuzz_check_error(rc, "zt_checkpoint_tensors");
    free(t);
    return 0;
}
