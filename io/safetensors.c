/*
 * io/safetensors.c: safetensors reader (F32/BF16/F16 -> fp32) and atomic F32 writer.
 *
 * Layer: io/ (platform; no StarPU). Format: 8-byte little-endian header length n, n bytes of JSON
 * (padded with spaces), then the data section. The reader validates what the reference
 * implementation (huggingface/safetensors, Metadata::validate) validates: a sane header length,
 * a JSON object, known dtypes, shapes that match the byte ranges, and byte ranges that tile the
 * data section exactly (no holes, no overlaps, nothing after the last tensor). A bad file is one
 * ZT_ERR_CKPT_CORRUPT line naming the file and, where there is one, the tensor.
 * The writer pads the header to a multiple of 8 bytes (so the data is 8-byte aligned), writes
 * tensors in the order given, and replaces the target atomically; on any error, ENOSPC and
 * EFBIG included, the temporary is removed and an existing file at the path is untouched.
 */
#include "zt_safetensors.h"

#include <cjson/cJSON.h> /* cJSON_ParseWithLengthOpts, cJSON_PrintUnformatted */
#include <ctype.h>       /* isspace */
#include <errno.h>       /* errno, EINTR */
#include <math.h>        /* floor, isfinite */
#include <stdio.h>       /* snprintf, rename */
#include <stdlib.h>      /* malloc, calloc, realloc, free, mkstemp, qsort */
#include <string.h>      /* memcpy, memset, strcmp, strlen, strerror, strrchr, strdup */
#include <sys/mman.h>    /* mmap, munmap */
#include <unistd.h>      /* close, write, fsync, unlink, getpid */

#include "zt_file.h"   /* zt_afile_*, zt_file_open_input */
#include "zt_finite.h" /* zt_first_nonfinite, zt_nonfinite_name */
#include "zt_status.h" /* zt_error_set, ZT_CHECK */

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors is little-endian; this code assumes a little-endian host"
#endif

/* the reference implementation's MAX_HEADER_SIZE */
#define ST_MAX_HEADER ((uint64_t)100000000)

static const char *const dtype_names[] = {"F32", "BF16", "F16"};
static const size_t dtype_size[] = {4, 2, 2};
/* dtypes of the format that zerotask does not read */
static const char *const dtype_unsupported[] = {"F64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3",
                                                "F6_E3M2", "F4", "I64", "I32", "I16", "I8",
                                                "U64", "U32", "U16", "U8", "BOOL", "C64", NULL};

// ----------------------------------------------------------------------------
// reader

#define CORRUPT(st, ...) zt_error_set(ZT_ERR_CKPT_CORRUPT, __VA_ARGS__)

/* Non-negative integer JSON number below 2^53 (exact in a double). */
static int json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return 0;
    double d = v->valuedouble;
    if (d < 0 || d > 9007199254740992.0 || floor(d) != d) return 0;
    *out = (uint64_t)d;
    return 1;
}

static enum zt_status parse_entry(const char *path, const char *name, const cJSON *v,
                                  size_t datalen, struct zt_st_tensor *t) {
    if (!cJSON_IsObject(v))
        return CORRUPT(st, "safetensors %s: tensor '%s': expected an object with dtype, shape "
                           "and data_offsets", path, name);
    const cJSON *dt = NULL, *sh = NULL, *off = NULL;
    for (const cJSON *f = v->child; f; f = f->next) {
        const cJSON **slot = strcmp(f->string, "dtype") == 0          ? &dt
                             : strcmp(f->string, "shape") == 0        ? &sh
                             : strcmp(f->string, "data_offsets") == 0 ? &off
                                                                      : NULL;
        if (!slot)
            return CORRUPT(st, "safetensors %s: tensor '%s': unknown field '%s' (expected dtype, "
                               "shape, data_offsets)", path, name, f->string);
        if (*slot)
            return CORRUPT(st, "safetensors %s: tensor '%s': field '%s' appears twice", path,
                           name, f->string);
        *slot = f;
    }
    if (!dt || !sh || !off)
        return CORRUPT(st, "safetensors %s: tensor '%s': missing %s", path, name,
                       !dt ? "dtype" : !sh ? "shape" : "data_offsets");
    if (!cJSON_IsString(dt))
        return CORRUPT(st, "safetensors %s: tensor '%s': dtype is not a string", path, name);
    int d = -1;
    for (int i = 0; i < 3; i++)
        if (strcmp(dt->valuestring, dtype_names[i]) == 0) d = i;
    if (d < 0) {
        int known = 0;
        for (const char *const *p = dtype_unsupported; *p; p++)
            known |= !strcmp(*p, dt->valuestring);
        return CORRUPT(st, "safetensors %s: tensor '%s': %s dtype '%.16s' (zerotask reads only "
                           "F32, BF16 and F16)", path, name, known ? "unsupported" : "unknown",
                       dt->valuestring);
    }
    t->dtype = (enum zt_st_dtype)d;
    if (!cJSON_IsArray(sh))
        return CORRUPT(st, "safetensors %s: tensor '%s': shape is not an array", path, name);
    int nd = cJSON_GetArraySize(sh);
    if (nd > ZT_ST_MAX_DIMS)
        return CORRUPT(st, "safetensors %s: tensor '%s': %d dimensions; at most %d are supported",
                       path, name, nd, ZT_ST_MAX_DIMS);
    t->ndim = nd;
    uint64_t numel = 1;
    int overflow = 0;
    int i = 0;
    for (const cJSON *x = sh->child; x; x = x->next, i++) {
        uint64_t dim;
        if (!json_uint(x, &dim))
            return CORRUPT(st, "safetensors %s: tensor '%s': shape[%d] is not a non-negative "
                               "integer", path, name, i);
        t->shape[i] = (int64_t)dim;
        if (dim && numel > UINT64_MAX / dim) overflow = 1;
        numel *= dim;
    }
    uint64_t b, e;
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !json_uint(off->child, &b) ||
        !json_uint(off->child->next, &e))
        return CORRUPT(st, "safetensors %s: tensor '%s': data_offsets must be [begin, end] with "
                           "non-negative integers", path, name);
    if (b > e || e > datalen)
        return CORRUPT(st, "safetensors %s: tensor '%s': data_offsets [%llu, %llu] outside the "
                           "%zu-byte data section", path, name, (unsigned long long)b,
                       (unsigned long long)e, datalen);
    if (overflow || numel > UINT64_MAX / dtype_size[d] || numel * dtype_size[d] != e - b)
        return CORRUPT(st, "safetensors %s: tensor '%s': shape needs %llu bytes of %s but "
                           "data_offsets [%llu, %llu] hold %llu", path, name,
                       (unsigned long long)(numel * dtype_size[d]), dtype_names[d],
                       (unsigned long long)b, (unsigned long long)e, (unsigned long long)(e - b));
    t->begin = (size_t)b;
    t->end = (size_t)e;
    return ZT_OK;
}

static int cmp_by_offset(const void *a, const void *b) {
    const struct zt_st_tensor *x = *(const struct zt_st_tensor *const *)a;
    const struct zt_st_tensor *y = *(const struct zt_st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int cmp_by_name(const void *a, const void *b) {
    const struct zt_st_tensor *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

/* st->by_name: the tensors sorted by name, for zt_st_find's binary search; two tensors of one
 * name (cJSON keeps duplicated keys, the format forbids them) are an error. O(n log n), so a
 * file of very many tensors opens in time. */
static enum zt_status index_names(struct zt_safetensors *st) {
    st->by_name = malloc((size_t)(st->n ? st->n : 1) * sizeof *st->by_name);
    if (!st->by_name) return zt_error_set(ZT_ERR_NOMEM, "safetensors %s: out of memory", st->path);
    for (int i = 0; i < st->n; i++) st->by_name[i] = &st->t[i];
    qsort(st->by_name, (size_t)st->n, sizeof *st->by_name, cmp_by_name);
    for (int i = 1; i < st->n; i++)
        if (strcmp(st->by_name[i - 1]->name, st->by_name[i]->name) == 0)
            return CORRUPT(st, "safetensors %s: tensor '%s' appears twice in the header",
                           st->path, st->by_name[i]->name);
    return ZT_OK;
}

/* Byte ranges must tile [0, datalen) (the reference implementation's rule). */
static enum zt_status check_tiling(const char *path, struct zt_st_tensor *t, int n,
                                   size_t datalen) {
    if (n == 0) {
        if (datalen)
            return CORRUPT(st, "safetensors %s: %zu bytes of data but no tensors", path, datalen);
        return ZT_OK;
    }
    struct zt_st_tensor **s = malloc((size_t)n * sizeof *s);
    if (!s) return zt_error_set(ZT_ERR_NOMEM, "safetensors %s: out of memory", path);
    for (int i = 0; i < n; i++) s[i] = &t[i];
    qsort(s, (size_t)n, sizeof *s, cmp_by_offset);
    enum zt_status rc = ZT_OK;
    size_t pos = 0;
    for (int i = 0; i < n && rc == ZT_OK; i++) {
        if (s[i]->begin > pos)
            rc = CORRUPT(st, "safetensors %s: bytes [%zu, %zu) of the data section belong to no "
                             "tensor (before '%s')", path, pos, s[i]->begin, s[i]->name);
        else if (s[i]->begin < pos)
            rc = CORRUPT(st, "safetensors %s: tensor '%s' overlaps tensor '%s'", path, s[i]->name,
                         s[i - 1]->name);
        pos = s[i]->end;
    }
    if (rc == ZT_OK && pos != datalen)
        rc = CORRUPT(st, "safetensors %s: %zu trailing bytes after the last tensor '%s'", path,
                     datalen - pos, s[n - 1]->name);
    free(s);
    return rc;
}

static enum zt_status parse_header(struct zt_safetensors *st, const char *hdr, size_t n,
                                   size_t datalen) {
    const char *path = st->path;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, n, &end, 0);
    if (root && end) {
        /* only space padding may follow the JSON object */
        for (size_t k = (size_t)(end - hdr); k < n; k++) {
            if (!isspace((unsigned char)hdr[k])) {
                cJSON_Delete(root);
                root = NULL;
                end = hdr + k;
                break;
            }
        }
    }
    if (!root)
        return CORRUPT(st, "safetensors %s: header is not valid JSON (error at header byte %zu)",
                       path, end ? (size_t)(end - hdr) : (size_t)0);
    enum zt_status rc = ZT_OK;
    if (!cJSON_IsObject(root)) {
        rc = CORRUPT(st, "safetensors %s: header is not a JSON object", path);
        goto out;
    }
    int count = 0;
    for (const cJSON *it = root->child; it; it = it->next)
        if (strcmp(it->string, "__metadata__") != 0) count++;
    st->t = calloc(count ? (size_t)count : 1, sizeof *st->t);
    if (!st->t) {
        rc = zt_error_set(ZT_ERR_NOMEM, "safetensors %s: out of memory", path);
        goto out;
    }
    int nmeta = 0;
    for (const cJSON *it = root->child; it && rc == ZT_OK; it = it->next) {
        const char *name = it->string;
        if (strcmp(name, "__metadata__") == 0) {
            /* cJSON keeps duplicated keys; the format forbids them (tensors: index_names) */
            if (++nmeta > 1) {
                rc = CORRUPT(st, "safetensors %s: tensor '%s' appears twice in the header", path,
                             name);
                break;
            }
            int ok = cJSON_IsObject(it);
            for (const cJSON *m = ok ? it->child : NULL; m; m = m->next) ok &= cJSON_IsString(m);
            if (!ok)
                rc = CORRUPT(st, "safetensors %s: __metadata__ must be an object of strings", path);
            continue;
        }
        if (strlen(name) >= ZT_ST_MAX_NAME) {
            rc = CORRUPT(st, "safetensors %s: tensor name '%.40s...' is %zu bytes; at most %d are "
                             "supported", path, name, strlen(name), ZT_ST_MAX_NAME - 1);
            break;
        }
        struct zt_st_tensor *t = &st->t[st->n];
        snprintf(t->name, sizeof t->name, "%s", name);
        rc = parse_entry(path, name, it, datalen, t);
        if (rc == ZT_OK) st->n++;
    }
    if (rc == ZT_OK) rc = index_names(st);
    if (rc == ZT_OK) rc = check_tiling(path, st->t, st->n, datalen);
out:
    cJSON_Delete(root);
    return rc;
}

enum zt_status zt_st_open(struct zt_safetensors *st, const char *path) {
    ZT_ASSERT_MSG(st && path, "zt_st_open: NULL argument");
    memset(st, 0, sizeof *st);
    snprintf(st->path, sizeof st->path, "%s", path);
    int64_t file_size = 0;
    int fd = -1;
    ZT_CHECK(zt_file_open_input("safetensors", path, &fd, &file_size));
    size_t size = (size_t)file_size;
    if (size < 8) {
        close(fd);
        return CORRUPT(st, "safetensors %s: file too small (%zu bytes; it must start with an "
                           "8-byte header length)", path, size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int merr = errno;
    close(fd);
    if (map == MAP_FAILED)
        return zt_error_set(ZT_ERR_IO, "safetensors %s: mmap failed (%s)", path, strerror(merr));
    uint64_t n;
    memcpy(&n, map, 8);
    enum zt_status rc = ZT_OK;
    if (n > ST_MAX_HEADER)
        rc = CORRUPT(st, "safetensors %s: header length %llu is absurd (limit %llu bytes)", path,
                     (unsigned long long)n, (unsigned long long)ST_MAX_HEADER);
    else if (n > size - 8)
        rc = CORRUPT(st, "safetensors %s: header length %llu runs past the end of the %zu-byte "
                         "file", path, (unsigned long long)n, size);
    else if (n < 2)
        rc = CORRUPT(st, "safetensors %s: header length %llu is too short for a JSON object",
                     path, (unsigned long long)n);
    if (rc == ZT_OK) {
        st->map = map;
        st->maplen = size;
        st->data = (const unsigned char *)map + 8 + n;
        rc = parse_header(st, (const char *)map + 8, (size_t)n, size - 8 - (size_t)n);
    } else {
        munmap(map, size);
    }
    if (rc != ZT_OK) zt_st_close(st);
    /* keep the path for messages even after a failed open */
    if (rc != ZT_OK) snprintf(st->path, sizeof st->path, "%s", path);
    return rc;
}

void zt_st_close(struct zt_safetensors *st) {
    if (!st) return;
    if (st->map) munmap(st->map, st->maplen);
    free(st->t);
    free(st->by_name);
    memset(st, 0, sizeof *st);
}

const struct zt_st_tensor *zt_st_find(const struct zt_safetensors *st, const char *name) {
    if (!st || !name) return NULL;
    if (!st->by_name) return NULL;
    struct zt_st_tensor key, *const keyp = &key;
    if (strlen(name) >= sizeof key.name) return NULL; /* longer than any name a file may hold */
    snprintf(key.name, sizeof key.name, "%s", name);
    struct zt_st_tensor *const *hit =
        bsearch(&keyp, st->by_name, (size_t)st->n, sizeof *st->by_name, cmp_by_name);
    return hit ? *hit : NULL;
}

/* IEEE binary16 -> binary32, exact for every input: subnormals are renormalised, infinities
 * stay infinite, NaNs stay NaN (payload shifted into the wider mantissa). */
static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else {
            /* value = man * 2^-24: shift the leading 1 up to the implicit-bit position */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400u));
            bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

static enum zt_status check_finite(const struct zt_safetensors *st, const char *name,
                                   const float *x, size_t n) {
    size_t at = zt_first_nonfinite(x, n);
    if (at == n) return ZT_OK;
    return CORRUPT(st, "safetensors %s: tensor '%s' has %s at index %zu (expected finite "
                       "values)", st->path, name, zt_nonfinite_name(x[at]), at);
}

enum zt_status zt_st_read_f32(const struct zt_safetensors *st, const char *name, int ndim,
                              const int64_t *shape, float *dst) {
    ZT_ASSERT_MSG(st && name && (ndim == 0 || shape) && ndim >= 0, "zt_st_read_f32: bad argument");
    const struct zt_st_tensor *t = zt_st_find(st, name);
    if (!t) return CORRUPT(st, "safetensors %s: no tensor named '%s'", st->path, name);
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (!same) {
        char want[256], got[256];
        shape_str(want, sizeof want, ndim, shape);
        shape_str(got, sizeof got, t->ndim, t->shape);
        return CORRUPT(st, "safetensors %s: tensor '%s' has shape %s, expected %s", st->path, name,
                       got, want);
    }
    const unsigned char *src = st->data + t->begin;
    size_t numel = (t->end - t->begin) / dtype_size[t->dtype];
    if (numel == 0) return ZT_OK;
    if (!dst) return zt_error_set(ZT_ERR_INVALID, "zt_st_read_f32: NULL destination");
    switch (t->dtype) {
    case ZT_ST_F32: memcpy(dst, src, numel * 4); break;
    case ZT_ST_BF16:
        for (size_t i = 0; i < numel; i++) {
            /* bfloat16 is the top half of a binary32: widening is exact */
            uint32_t bits = (uint32_t)src[2 * i] << 16 | (uint32_t)src[2 * i + 1] << 24;
            memcpy(&dst[i], &bits, 4);
        }
        break;
    case ZT_ST_F16:
        for (size_t i = 0; i < numel; i++)
            dst[i] = f16_to_f32((uint16_t)(src[2 * i] | src[2 * i + 1] << 8));
        break;
    }
    return st->finite_only ? check_finite(st, name, dst, numel) : ZT_OK;
}

// ----------------------------------------------------------------------------
// writer

struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
};

static void sb_put(struct sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(struct sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* JSON string literal with the escapes RFC 8259 requires. */
static void sb_json_string(struct sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        char esc[8];
        if (*c == '"' || *c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*c;
            sb_put(b, esc, 2);
        } else if (*c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *c);
            sb_put(b, esc, 6);
        } else {
            sb_put(b, (const char *)c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

/* Validate the entries and build the padded header. */
static enum zt_status build_header(const char *path, const struct zt_st_entry *e, int n,
                                   const char *metadata_json, int bf16, struct sbuf *b) {
    const unsigned es = bf16 ? 2 : 4; /* bytes per element written */
    for (int i = 0; i < n; i++) {
        const char *nm = e[i].name;
        if (!nm || !*nm || strlen(nm) >= ZT_ST_MAX_NAME || strcmp(nm, "__metadata__") == 0)
            return zt_error_set(ZT_ERR_INVALID, "safetensors %s: entry %d: name must be 1..%d "
                                                "bytes and not __metadata__", path, i,
                                ZT_ST_MAX_NAME - 1);
        for (int j = 0; j < i; j++)
            if (strcmp(e[j].name, nm) == 0)
                return zt_error_set(ZT_ERR_INVALID, "safetensors %s: tensor '%s' given twice",
                                    path, nm);
        if (e[i].ndim < 0 || e[i].ndim > ZT_ST_MAX_DIMS)
            return zt_error_set(ZT_ERR_INVALID, "safetensors %s: tensor '%s': ndim %d not in "
                                                "0..%d", path, nm, e[i].ndim, ZT_ST_MAX_DIMS);
        for (int d = 0; d < e[i].ndim; d++)
            if (e[i].shape[d] < 0)
                return zt_error_set(ZT_ERR_INVALID, "safetensors %s: tensor '%s': negative "
                                                    "dimension", path, nm);
    }
    sb_str(b, "{");
    int first = 1;
    if (metadata_json) {
        cJSON *m = cJSON_Parse(metadata_json);
        int ok = cJSON_IsObject(m);
        for (const cJSON *x = ok ? m->child : NULL; x; x = x->next) ok &= cJSON_IsString(x);
        char *txt = ok ? cJSON_PrintUnformatted(m) : NULL;
        cJSON_Delete(m);
        if (!ok)
            return zt_error_set(ZT_ERR_INVALID, "safetensors %s: metadata must be a JSON object "
                                                "of string values", path);
        if (!txt) return zt_error_set(ZT_ERR_NOMEM, "safetensors %s: out of memory", path);
        sb_str(b, "\"__metadata__\":");
        sb_str(b, txt);
        free(txt);
        first = 0;
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        uint64_t numel = 1;
        for (int d = 0; d < e[i].ndim; d++) numel *= (uint64_t)e[i].shape[d];
        char num[64];
        if (!first) sb_str(b, ",");
        first = 0;
        sb_json_string(b, e[i].name);
        sb_str(b, bf16 ? ":{\"dtype\":\"BF16\",\"shape\":[" : ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < e[i].ndim; d++) {
            snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)e[i].shape[d]);
            sb_str(b, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                 (unsigned long long)(off + es * numel));
        sb_str(b, num);
        off += es * numel;
    }
    sb_str(b, "}");
    /* pad with spaces so that 8 + header length is a multiple of 8: the data section then starts
     * 8-byte aligned, which lets readers map tensors in place */
    while (!b->oom && b->len % 8) sb_str(b, " ");
    if (b->oom) return zt_error_set(ZT_ERR_NOMEM, "safetensors %s: out of memory", path);
    return ZT_OK;
}

/* *p holds at least n elements of es bytes (grown when *cap is smaller) */
static enum zt_status grow(void **p, uint64_t *cap, uint64_t n, size_t es, const char *path,
                           const char *name) {
    if (n <= *cap) return ZT_OK;
    void *q = realloc(*p, n * es);
    if (!q) return zt_error_set(ZT_ERR_NOMEM, "safetensors %s: out of memory for %s", path, name);
    *p = q;
    *cap = n;
    return ZT_OK;
}

enum zt_status zt_st_write_f32(const char *path, const struct zt_st_entry *e, int n,
                               const char *metadata_json) {
    return zt_st_write_f32_stream(path, e, n, metadata_json, NULL, NULL);
}

enum zt_status zt_st_write_f32_stream(const char *path, const struct zt_st_entry *e, int n,
                                      const char *metadata_json, zt_st_fill_fn fill, void *ctx) {
    return zt_st_write_stream(path, e, n, metadata_json, fill, ctx, NULL);
}

enum zt_status zt_st_write_stream(const char *path, const struct zt_st_entry *e, int n,
                                  const char *metadata_json, zt_st_fill_fn fill, void *ctx,
                                  zt_st_narrow_fn to_bf16) {
    if (!path || n < 0 || (n && !e))
        return zt_error_set(ZT_ERR_INVALID, "zt_st_write_f32: bad argument");
    struct sbuf hb = {0};
    enum zt_status rc = build_header(path, e, n, metadata_json, to_bf16 != NULL, &hb);
    if (rc != ZT_OK) {
        free(hb.p);
        return rc;
    }
    struct zt_afile f;
    rc = zt_afile_open(&f, "safetensors", path);
    if (rc != ZT_OK) {
        free(hb.p);
        return rc;
    }
    uint64_t hlen = hb.len;
    int bad = zt_afile_write(&f, &hlen, 8) != 0 || zt_afile_write(&f, hb.p, hb.len) != 0;
    free(hb.p);
    float *buf = NULL;
    uint16_t *half = NULL; /* bf16: a tensor's rounded copy */
    uint64_t cap = 0, hcap = 0;
    for (int i = 0; i < n && !bad && rc == ZT_OK; i++) {
        uint64_t numel = 1;
        for (int d = 0; d < e[i].ndim; d++) numel *= (uint64_t)e[i].shape[d];
        const float *src = e[i].data;
        if (!src && numel) { /* streamed: one tensor at a time */
            if ((rc = grow((void **)&buf, &cap, numel, sizeof *buf, path, e[i].name)) != ZT_OK)
                break;
            rc = fill ? fill(ctx, i, buf)
                      : zt_error_set(ZT_ERR_INVALID, "safetensors %s: %s has no data", path,
                                     e[i].name);
            src = buf;
        }
        if (rc == ZT_OK && to_bf16 && numel) {
            if ((rc = grow((void **)&half, &hcap, numel, sizeof *half, path, e[i].name)) != ZT_OK)
                break;
            to_bf16(half, src, (size_t)numel);
            if (zt_afile_write(&f, half, 2 * numel) != 0) bad = 1;
        } else if (rc == ZT_OK && numel && zt_afile_write(&f, src, 4 * numel) != 0) {
            bad = 1;
        }
    }
    free(buf);
    free(half);
    if (rc != ZT_OK) { /* a fill's or an allocation's error stands; the temporary goes */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", zt_error_last());
        zt_afile_fail(&f);
        return zt_error_set(rc, "%s", msg);
    }
    return bad ? zt_afile_fail(&f) : zt_afile_commit(&f);
}
