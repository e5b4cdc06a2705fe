/*
 * apps/train_digest.c: fingerprints of zt-train's inputs (apps/train_digest.h).
 *
 * Layer: apps/ (zt-train only).
 */
#include "train_digest.h"

#include <errno.h>      /* errno */
#include <fcntl.h>      /* open */
#include <stdio.h>      /* fopen, fread */
#include <sys/stat.h>   /* fstat */
#include <unistd.h>     /* pread, close */
#include "zt_comm.h"    /* zt_hash_bytes */

uint64_t train_file_hash(uint64_t h, const char *path) {
    FILE *f = fopen(path, "rb");
    char buf[4096];
    size_t n;
    while (f && (n = fread(buf, 1, sizeof buf, f)) > 0) h = zt_hash_bytes(h, buf, n);
    if (f) fclose(f);
    return h;
}

/* A fingerprint of a big input's contents, never of its path (ranks may see one file under
 * different paths): its size, its first and last 64 KiB and 256 blocks of 4 KiB spread evenly
 * between them, about 1 MiB read whatever the file's size. A full hash would read the whole
 * file on every rank before step 1; these blocks catch another file, another version of it or
 * a truncated copy. A file that cannot be read gives a digest of its own (its error). */
uint64_t train_sampled_digest(const char *path) {
    enum { EDGE = 65536, BLOCK = 4096, NBLOCKS = 256 };
    static unsigned char buf[EDGE];
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int err = errno;
        if (fd >= 0) close(fd);
        return zt_hash_bytes(0, &err, sizeof err);
    }
    int64_t size = (int64_t)st.st_size;
    uint64_t h = zt_hash_bytes(0, &size, sizeof size);
    for (int i = 0; i < NBLOCKS + 2; i++) {
        int64_t len = i == 0 || i == NBLOCKS + 1 ? EDGE : BLOCK;
        int64_t at = i == 0 ? 0 : i == NBLOCKS + 1 ? size - EDGE : size / (NBLOCKS + 1) * i;
        if (at < 0) at = 0;
        if (at + len > size) len = size - at;
        ssize_t n = len > 0 ? pread(fd, buf, (size_t)len, (off_t)at) : 0;
        if (n > 0) h = zt_hash_bytes(h, buf, (size_t)n);
    }
    close(fd);
    return h;
}

/* the digests of every data file, in the order --data and --eval-data name them, and how the
 * sources draw from them (rule, weights, sequences) */
uint64_t train_data_digest(const struct zt_dataset *d) {
    uint64_t h = zt_hash_bytes(0, &d->legacy, sizeof d->legacy);
    for (int i = 0; i < d->nfiles; i++) {
        uint64_t f = train_sampled_digest(d->files[i].path);
        h = zt_hash_bytes(h, &f, sizeof f);
    }
    const struct zt_data_set *sets[2] = {&d->train, &d->valid};
    for (int k = 0; k < 2; k++)
        for (int s = 0; s < sets[k]->nsources; s++) {
            const struct zt_data_source *src = &sets[k]->src[s];
            const int64_t shape[3] = {src->file, src->first, src->nseq};
            h = zt_hash_bytes(h, shape, sizeof shape);
            h = zt_hash_bytes(h, &src->weight, sizeof src->weight);
        }
    return h;
}

