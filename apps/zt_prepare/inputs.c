/*
 * apps/zt_prepare/inputs.c: zt-prepare's input: the list of files (the paths given, or every
 * plain fortune file), each checked before any work, and the reader that cuts them into
 * batches in order.
 *
 * Layer: apps/ (private to zt-prepare, prepare.h). A JSONL file read with a tokenizer comes in
 * chunks of about READ_CHUNK bytes cut after a newline, so a file of any size streams and its
 * lines spread over the threads; any other file is one document and is read whole. The cut
 * depends only on the input, never on the thread count.
 */
#include <dirent.h>    /* opendir, readdir */
#include <errno.h>     /* errno */
#include <stdlib.h>    /* malloc, realloc, qsort, getenv */
#include <string.h>    /* memcpy, memchr, strcmp, strerror */
#include <sys/stat.h>  /* stat, S_ISREG, S_ISDIR */
#include "prepare.h"
#include "zt_file.h"   /* zt_path_has_suffix */

#define READ_CHUNK ((size_t)1 << 20)

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* a plain fortune file: not hidden, not a strfile index (.dat) or UTF-8 copy (.u8), a regular
 * file (not a directory or a broken link) */
static int is_fortune_file(const char *dir, const char *name, char *path, size_t n) {
    if (name[0] == '.' || zt_path_has_suffix(name, ".dat") || zt_path_has_suffix(name, ".u8"))
        return 0;
    if (snprintf(path, n, "%s/%s", dir, name) >= (int)n) return 0;
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* append a copy of path to in */
static enum zt_status inputs_add(struct inputs *in, const char *path, int *cap) {
    if (in->n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        char **grown = realloc(in->path, (size_t)*cap * sizeof *grown);
        if (!grown) return zt_error_set(ZT_ERR_NOMEM, "input %s: out of memory", path);
        in->path = grown;
    }
    size_t n = strlen(path) + 1;
    if (!(in->path[in->n] = malloc(n)))
        return zt_error_set(ZT_ERR_NOMEM, "input %s: out of memory", path);
    memcpy(in->path[in->n++], path, n);
    return ZT_OK;
}

/* every fortune file of dir, sorted by name */
static enum zt_status list_fortunes(const char *dir, struct inputs *in) {
    DIR *d = opendir(dir);
    if (!d)
        return zt_error_set(ZT_ERR_IO, "fortunes directory %s: cannot open (%s); install the "
                                       "Debian packages fortunes and fortunes-min", dir,
                            strerror(errno));
    int cap = 0;
    enum zt_status rc = ZT_OK;
    struct dirent *e;
    char path[4096];
    while (rc == ZT_OK && (e = readdir(d)))
        if (is_fortune_file(dir, e->d_name, path, sizeof path)) rc = inputs_add(in, path, &cap);
    closedir(d);
    if (rc == ZT_OK && in->n == 0)
        rc = zt_error_set(ZT_ERR_IO, "fortunes directory %s: no fortune files in it; install "
                                     "the Debian packages fortunes and fortunes-min", dir);
    if (rc == ZT_OK) qsort(in->path, (size_t)in->n, sizeof *in->path, cmp_str);
    return rc;
}

enum zt_status inputs_list(const struct prepare_args *a, struct inputs *in) {
    *in = (struct inputs){0};
    enum zt_status rc = ZT_OK;
    if (a->fortunes) {
        const char *dir = getenv("ZT_FORTUNES_DIR");
        rc = list_fortunes(dir && dir[0] ? dir : FORTUNES_DIR, in);
    } else {
        int cap = 0;
        for (int i = 0; i < a->nfiles && rc == ZT_OK; i++) rc = inputs_add(in, a->files[i], &cap);
    }
    /* each one readable now: a missing file fails in a second, not after hours of the others */
    for (int i = 0; i < in->n && rc == ZT_OK; i++) {
        struct stat sb;
        FILE *f = fopen(in->path[i], "rb");
        int err = !f ? errno : fstat(fileno(f), &sb) != 0 ? errno
                           : S_ISDIR(sb.st_mode) ? EISDIR : 0;
        if (err)
            rc = zt_error_set(ZT_ERR_IO, "input %s: cannot read (%s)", in->path[i],
                              strerror(err));
        else if (S_ISREG(sb.st_mode))
            in->total_bytes += (uint64_t)sb.st_size;
        if (f) fclose(f);
    }
    if (rc != ZT_OK) inputs_free(in);
    return rc;
}

void inputs_free(struct inputs *in) {
    for (int i = 0; i < in->n; i++) free(in->path[i]);
    free(in->path);
    *in = (struct inputs){0};
}

// ---------------------------------------------------------------------------------------------
// the reader

/* the rest of f, at most max bytes, into a NUL-terminated *buf of *len bytes */
static enum zt_status read_whole(FILE *f, const char *path, uint64_t max, char **buf,
                                 size_t *len) {
    size_t cap = 0, n = 0;
    char *b = NULL;
    for (;;) {
        if (n + READ_CHUNK + 1 > cap) {
            cap = cap ? 2 * cap : READ_CHUNK + 1;
            char *grown = realloc(b, cap);
            if (!grown) {
                free(b);
                return zt_error_set(ZT_ERR_NOMEM, "input %s: out of memory at %zu bytes", path,
                                    n);
            }
            b = grown;
        }
        size_t want = max - n < READ_CHUNK ? (size_t)(max - n) : READ_CHUNK;
        size_t got = want ? fread(b + n, 1, want, f) : 0;
        n += got;
        if (got < want || !want) break;
    }
    if (ferror(f)) {
        free(b);
        return zt_error_set(ZT_ERR_IO, "input %s: read error", path);
    }
    b[n] = '\0';
    *buf = b;
    *len = n;
    return ZT_OK;
}

/* the next chunk of whole lines of the open JSONL file into b: 1, 0 at its end, -1 */
static int next_lines(struct reader *r, struct batch *b, const char *path) {
    for (;;) {
        char *buf = malloc(r->ncarry + READ_CHUNK + 1);
        if (!buf) {
            zt_error_set(ZT_ERR_NOMEM, "input %s: out of memory", path);
            return -1;
        }
        if (r->ncarry) memcpy(buf, r->carry, r->ncarry);
        size_t got = fread(buf + r->ncarry, 1, READ_CHUNK, r->f), n = r->ncarry + got;
        if (ferror(r->f)) {
            free(buf);
            zt_error_set(ZT_ERR_IO, "input %s: read error", path);
            return -1;
        }
        free(r->carry);
        r->carry = NULL;
        r->ncarry = 0;
        size_t cut = n; /* at the end of the file, the last line needs no newline */
        if (got == READ_CHUNK) {
            while (cut > 0 && buf[cut - 1] != '\n') cut--;
            if (cut == 0) { /* one line longer than the chunk so far: read on */
                r->carry = buf;
                r->ncarry = n;
                continue;
            }
            if (cut < n) {
                if (!(r->carry = malloc(n - cut))) {
                    free(buf);
                    zt_error_set(ZT_ERR_NOMEM, "input %s: out of memory", path);
                    return -1;
                }
                memcpy(r->carry, buf + cut, n - cut);
                r->ncarry = n - cut;
            }
        }
        if (cut == 0) {
            free(buf);
            return 0;
        }
        buf[cut] = '\0';
        *b = (struct batch){.path = path, .jsonl = 1, .line0 = r->line, .buf = buf, .len = cut};
        for (const char *s = buf; (s = memchr(s, '\n', (size_t)(buf + cut - s))); s++) r->line++;
        r->read += cut;
        return 1;
    }
}

int reader_next(struct reader *r, struct batch *b) {
    for (;;) {
        if (r->f) {
            const char *path = r->in->path[r->file];
            int k = next_lines(r, b, path);
            if (k != 0) return k;
            fclose(r->f);
            r->f = NULL;
            r->file++;
            continue;
        }
        if (r->file >= r->in->n || r->read >= r->max_bytes) return 0;
        const char *path = r->in->path[r->file];
        FILE *f = fopen(path, "rb");
        if (!f) {
            zt_error_set(ZT_ERR_IO, "input %s: cannot read (%s)", path, strerror(errno));
            return -1;
        }
        r->files_read++;
        if (!r->byte_level && zt_path_has_suffix(path, ".jsonl")) {
            r->f = f;
            r->line = 1;
            continue;
        }
        *b = (struct batch){.path = path};
        enum zt_status rc = read_whole(f, path, r->max_bytes - r->read, &b->buf, &b->len);
        fclose(f);
        if (rc != ZT_OK) return -1;
        r->read += b->len;
        r->file++;
        return 1;
    }
}

void reader_close(struct reader *r) {
    if (r->f) fclose(r->f);
    free(r->carry);
    r->f = NULL;
    r->carry = NULL;
    r->ncarry = 0;
}
