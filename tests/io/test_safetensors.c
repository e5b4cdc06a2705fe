/*
 * tests/io/test_safetensors.c: proves the safetensors reader and writer keep their contract:
 * - a file written by Python (tests/io/st_python.py, json + struct only) with F32, BF16 and F16
 *   tensors (F16 subnormals, +-0, +-inf, NaN, max) reads back as exactly the float32 values
 *   Python's own codecs give, even with an unaligned header;
 * - our writer's file parses in Python (header padded with spaces to a multiple of 8, tensors in
 *   the given order, contiguous offsets, exact data, __metadata__) and round-trips through our
 *   reader, scalars and empty tensors included;
 * - every malformed file is ZT_ERR_CKPT_CORRUPT naming the file (and tensor): too small, absurd
 *   header length, header past the end, not JSON, not an object, unknown/unsupported dtype,
 *   shape/size mismatch, offsets out of range, overlapping, gaps, trailing bytes, names over
 *   ZT_ST_MAX_NAME, duplicated names, missing fields, bad __metadata__; a missing file is
 *   ZT_ERR_IO; zt_st_read_f32 reports a missing tensor and a wrong shape with both shapes;
 * - bad writer input is ZT_ERR_INVALID with no file created, and a write that fails part-way
 *   (EFBIG under a file-size limit) leaves the previous file intact and no temporary behind;
 * - a file of 200,000 tensors opens and finds every name (by name, not by position) within the
 *   test's timeout, and a duplicated name among them is found too (a lookup or duplicate check
 *   that compared every pair would take about 2e10 string compares).
 */
#include <math.h>         /* isnan, isinf, signbit */
#include <signal.h>       /* signal, SIGXFSZ */
#include <stdint.h>       /* uint64_t */
#include <stdio.h>        /* fopen, fwrite, snprintf */
#include <stdlib.h>       /* getenv, system, malloc */
#include <string.h>       /* memcmp, strstr */
#include <sys/resource.h> /* setrlimit */
#include <sys/stat.h>     /* mkdir, stat */
#include <sys/wait.h>     /* waitpid, WEXITSTATUS */
#include <unistd.h>       /* fork, access, unlink */

#include "zt_safetensors.h" /* zt_st_open, zt_st_read_f32, zt_st_write_f32 */
#include "zt_status.h"      /* zt_error_last */
#include "zt_test.h"        /* ZT_TEST_TRUE, zt_test_finish */

static const char *dir;

static void pathof(char *out, const char *name) { snprintf(out, 1024, "%s/%s", dir, name); }

/* A raw file: 8-byte length (hlen_override if nonzero), header text, `ndata` bytes of 0x11. */
static void write_raw(const char *p, const char *hdr, uint64_t hlen_override, size_t ndata) {
    FILE *f = fopen(p, "wb");
    uint64_t n = hlen_override ? hlen_override : strlen(hdr);
    fwrite(&n, 8, 1, f);
    fwrite(hdr, 1, strlen(hdr), f);
    for (size_t i = 0; i < ndata; i++) fputc(0x11, f);
    fclose(f);
}

static void expect_corrupt(int line, const char *name, const char *hdr, uint64_t hlen, size_t ndata,
                           const char *want) {
    char p[1024];
    pathof(p, name);
    write_raw(p, hdr, hlen, ndata);
    struct zt_safetensors st;
    enum zt_status rc = zt_st_open(&st, p);
    if (rc != ZT_ERR_CKPT_CORRUPT || !strstr(zt_error_last(), p) || !strstr(zt_error_last(), want)) {
        fprintf(stderr, "FAIL %s:%d: %s: got %s \"%s\", want ZT_ERR_CKPT_CORRUPT with \"%s\"\n",
                __FILE__, line, name, zt_status_str(rc), zt_error_last(), want);
        zt_test_failures++;
    }
    zt_st_close(&st);
}
#define CORRUPT(name, hdr, hlen, ndata, want) expect_corrupt(__LINE__, name, hdr, hlen, ndata, want)

static int run_python(const char *py, const char *script, const char *mode, const char *arg) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' '%s' %s '%s'", py, script, mode, arg);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int same_float(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return a == b && signbit(a) == signbit(b);
}

static void test_foreign(const char *py, const char *script) {
    ZT_TEST_TRUE(run_python(py, script, "write", dir) == 0, "python writer failed");
    char p[1024];
    pathof(p, "foreign.safetensors");
    struct zt_safetensors st;
    enum zt_status rc = zt_st_open(&st, p);
    ZT_TEST_TRUE(rc == ZT_OK, "open python file: %s", zt_error_last());
    if (rc != ZT_OK) return;
    ZT_TEST_TRUE(st.n == 3, "3 tensors, got %d", st.n);
    float want[6 + 5 + 13], got[6 + 5 + 13];
    pathof(p, "foreign.expected");
    FILE *f = fopen(p, "rb");
    size_t nr = f ? fread(want, sizeof(float), 24, f) : 0;
    if (f) fclose(f);
    ZT_TEST_TRUE(nr == 24, "expected values file");
    rc = zt_st_read_f32(&st, "a.weight", 2, (int64_t[]){2, 3}, got);
    ZT_TEST_TRUE(rc == ZT_OK && zt_st_find(&st, "a.weight")->dtype == ZT_ST_F32, "F32: %s", zt_error_last());
    rc = zt_st_read_f32(&st, "b.bf16", 1, (int64_t[]){5}, got + 6);
    ZT_TEST_TRUE(rc == ZT_OK && zt_st_find(&st, "b.bf16")->dtype == ZT_ST_BF16, "BF16: %s", zt_error_last());
    rc = zt_st_read_f32(&st, "h.f16", 1, (int64_t[]){13}, got + 11);
    ZT_TEST_TRUE(rc == ZT_OK && zt_st_find(&st, "h.f16")->dtype == ZT_ST_F16, "F16: %s", zt_error_last());
    for (int i = 0; i < 24; i++)
        ZT_TEST_TRUE(same_float(got[i], want[i]), "value %d: got %a want %a", i, got[i], want[i]);
    /* spot checks independent of Python: the F16 subnormal 2^-24, -0, inf, NaN */
    ZT_TEST_TRUE(got[11 + 6] == 0x1p-24f && got[11 + 7] == 0x3p-24f, "f16 subnormals %a %a",
                 got[17], got[18]);
    ZT_TEST_TRUE(got[11 + 1] == 0.0f && signbit(got[11 + 1]), "f16 -0");
    ZT_TEST_TRUE(isinf(got[11 + 10]) && got[11 + 10] > 0 && isinf(got[11 + 11]) && got[11 + 11] < 0,
                 "f16 inf");
    ZT_TEST_TRUE(isnan(got[11 + 12]) && got[11 + 5] == 65504.0f, "f16 nan / max");
    zt_st_close(&st);
}

static void fill(float *x, size_t n, int j) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(j * 100) + (float)i * 0.25f;
}

static void test_writer(const char *py, const char *script) {
    float z[7], s[1], m[12];
    fill(z, 7, 0);
    fill(s, 1, 1);
    fill(m, 12, 3);
    struct zt_st_entry e[4] = {
        {.name = "z.first", .ndim = 1, .shape = {7}, .data = z},
        {.name = "scalar", .ndim = 0, .data = s},
        {.name = "empty", .ndim = 2, .shape = {0, 3}, .data = NULL},
        {.name = "m.weight", .ndim = 2, .shape = {3, 4}, .data = m},
    };
    char p[1024];
    pathof(p, "ours.safetensors");
    enum zt_status rc = zt_st_write_f32(p, e, 4, "{\"run\": \"test\", \"step\": \"7\"}");
    ZT_TEST_TRUE(rc == ZT_OK, "write: %s", zt_error_last());
    ZT_TEST_TRUE(zt_test_count_tmp(dir) == 0, "no temporary after a good write");
    ZT_TEST_TRUE(run_python(py, script, "check", p) == 0, "python could not read our file");
    struct zt_safetensors st;
    rc = zt_st_open(&st, p);
    ZT_TEST_TRUE(rc == ZT_OK && st.n == 4, "reopen: %s", zt_error_last());
    if (rc == ZT_OK) {
        float got[12];
        ZT_TEST_TRUE(zt_st_read_f32(&st, "m.weight", 2, (int64_t[]){3, 4}, got) == ZT_OK &&
                         !memcmp(got, m, sizeof m), "m.weight round trip");
        ZT_TEST_TRUE(zt_st_read_f32(&st, "scalar", 0, NULL, got) == ZT_OK && got[0] == s[0],
                     "scalar round trip");
        ZT_TEST_TRUE(zt_st_read_f32(&st, "empty", 2, (int64_t[]){0, 3}, NULL) == ZT_OK, "empty");
        ZT_TEST_TRUE(((uintptr_t)st.data - (uintptr_t)st.map) % 8 == 0, "data 8-byte aligned");
        /* wrong shape and missing tensor */
        rc = zt_st_read_f32(&st, "m.weight", 2, (int64_t[]){4, 3}, got);
        ZT_TEST_TRUE(rc == ZT_ERR_CKPT_CORRUPT && strstr(zt_error_last(), p) &&
                         strstr(zt_error_last(), "'m.weight' has shape [3, 4], expected [4, 3]"),
                     "wrong shape: %s", zt_error_last());
        rc = zt_st_read_f32(&st, "nope", 1, (int64_t[]){1}, got);
        ZT_TEST_TRUE(rc == ZT_ERR_CKPT_CORRUPT && strstr(zt_error_last(), "no tensor named 'nope'"),
                     "missing tensor: %s", zt_error_last());
        ZT_TEST_TRUE(zt_st_find(&st, "nope") == NULL, "find absent");
        zt_st_close(&st);
    }
    /* no metadata, no tensors */
    pathof(p, "none.safetensors");
    ZT_TEST_TRUE(zt_st_write_f32(p, NULL, 0, NULL) == ZT_OK && zt_st_open(&st, p) == ZT_OK && st.n == 0,
                 "empty file round trip: %s", zt_error_last());
    zt_st_close(&st);

    /* bad input: nothing created */
    pathof(p, "bad.safetensors");
    struct zt_st_entry dup[2] = {{.name = "x", .ndim = 1, .shape = {1}, .data = z},
                                 {.name = "x", .ndim = 1, .shape = {1}, .data = z}};
    rc = zt_st_write_f32(p, dup, 2, NULL);
    ZT_TEST_TRUE(rc == ZT_ERR_INVALID && strstr(zt_error_last(), "given twice"), "dup: %s", zt_error_last());
    rc = zt_st_write_f32(p, e, 1, "{\"n\": 1}");
    ZT_TEST_TRUE(rc == ZT_ERR_INVALID && strstr(zt_error_last(), "metadata"), "metadata: %s", zt_error_last());
    char longname[ZT_ST_MAX_NAME + 8];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    struct zt_st_entry ln = {.name = longname, .ndim = 1, .shape = {1}, .data = z};
    rc = zt_st_write_f32(p, &ln, 1, NULL);
    ZT_TEST_TRUE(rc == ZT_ERR_INVALID, "long name: %s", zt_error_last());
    ZT_TEST_TRUE(access(p, F_OK) != 0 && zt_test_count_tmp(dir) == 0, "no file after bad input");

    /* a write that fails part-way keeps the old file */
    pathof(p, "ours.safetensors");
    size_t big = 1 << 20;
    float *bigd = calloc(big, sizeof(float));
    struct zt_st_entry be = {.name = "big", .ndim = 1, .shape = {(int64_t)big}, .data = bigd};
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN); /* write() then fails with EFBIG instead of killing us */
        struct rlimit rl = {65536, 65536};
        setrlimit(RLIMIT_FSIZE, &rl);
        enum zt_status w = zt_st_write_f32(p, &be, 1, NULL);
        _exit(w == ZT_ERR_IO && strstr(zt_error_last(), "write failed") ? 0 : 1);
    }
    int wst = 0;
    waitpid(pid, &wst, 0);
    free(bigd);
    ZT_TEST_TRUE(WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "EFBIG write must be ZT_ERR_IO");
    ZT_TEST_TRUE(zt_test_count_tmp(dir) == 0, "no temporary after a failed write");
    rc = zt_st_open(&st, p);
    ZT_TEST_TRUE(rc == ZT_OK && st.n == 4 && zt_st_find(&st, "big") == NULL,
                 "old file intact after failed write: %s", zt_error_last());
    zt_st_close(&st);
}

static void test_corrupt(void) {
    char p[1024];
    pathof(p, "tiny.safetensors");
    FILE *f = fopen(p, "wb");
    fwrite("abc", 1, 3, f);
    fclose(f);
    struct zt_safetensors st;
    enum zt_status rc = zt_st_open(&st, p);
    ZT_TEST_TRUE(rc == ZT_ERR_CKPT_CORRUPT && strstr(zt_error_last(), p) &&
                     strstr(zt_error_last(), "file too small (3 bytes"), "tiny: %s", zt_error_last());
    pathof(p, "absent.safetensors");
    rc = zt_st_open(&st, p);
    ZT_TEST_TRUE(rc == ZT_ERR_IO && strstr(zt_error_last(), p), "missing: %s", zt_error_last());

    const char *ok1 = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    CORRUPT("absurd", ok1, (uint64_t)1 << 40, 8, "header length 1099511627776 is absurd");
    CORRUPT("past", ok1, 1000, 8, "header length 1000 runs past the end");
    CORRUPT("notjson", "{\"a\": nope}", 0, 0, "header is not valid JSON");
    CORRUPT("garbage", "{}  x", 0, 0, "header is not valid JSON");
    CORRUPT("array", "[1, 2]  ", 0, 0, "header is not a JSON object");
    CORRUPT("f64", "{\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 0, 8,
            "tensor 'a': unsupported dtype 'F64' (zerotask reads only F32, BF16 and F16)");
    CORRUPT("q7", "{\"a\":{\"dtype\":\"Q7\",\"shape\":[1],\"data_offsets\":[0,8]}}", 0, 8,
            "tensor 'a': unknown dtype 'Q7'");
    CORRUPT("mismatch", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 0, 8,
            "tensor 'a': shape needs 12 bytes of F32 but data_offsets [0, 8] hold 8");
    CORRUPT("bf16size", "{\"a\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,4]}}", 0, 4,
            "shape needs 8 bytes of BF16");
    CORRUPT("range", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 0, 8,
            "tensor 'a': data_offsets [0, 16] outside the 8-byte data section");
    CORRUPT("backwards", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", 0, 8,
            "data_offsets [8, 4] outside");
    CORRUPT("overlap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 0, 12,
            "tensor 'b' overlaps tensor 'a'");
    CORRUPT("gap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 0, 12,
            "bytes [4, 8) of the data section belong to no tensor");
    CORRUPT("trailing", ok1, 0, 12, "4 trailing bytes after the last tensor 'a'");
    CORRUPT("nodata", "{}", 0, 4, "4 bytes of data but no tensors");
    char hdr[512];
    snprintf(hdr, sizeof hdr, "{\"%0200d\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 7);
    CORRUPT("longname", hdr, 0, 4, "is 200 bytes; at most 159 are supported");
    CORRUPT("dupname", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                       "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 0, 8,
            "tensor 'a' appears twice");
    CORRUPT("nofield", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 0, 4, "tensor 'a': missing data_offsets");
    CORRUPT("extrafield", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 0, 4,
            "tensor 'a': unknown field 'x'");
    CORRUPT("negdim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 0, 4,
            "tensor 'a': shape[0] is not a non-negative integer");
    CORRUPT("dims", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
            0, 4, "9 dimensions; at most 8");
    CORRUPT("meta", "{\"__metadata__\":{\"k\":1}}", 0, 0, "__metadata__ must be an object of strings");
    CORRUPT("notobj", "{\"a\":[1]}", 0, 0, "tensor 'a': expected an object");
    /* a file with only metadata and no tensors is valid */
    pathof(p, "metaonly");
    write_raw(p, "{\"__metadata__\":{\"k\":\"v\"}}", 0, 0);
    rc = zt_st_open(&st, p);
    ZT_TEST_TRUE(rc == ZT_OK && st.n == 0, "metadata only: %s", zt_error_last());
    zt_st_close(&st);
}

/* n tensors "t<i>" of one F32 each, header order reversed (so the order by name is not the
 * file's); dup: the last one named like the first. Returns the header (caller frees). */
static char *many_header(int n, int dup) {
    size_t cap = (size_t)n * 80 + 16, len = 0;
    char *h = malloc(cap);
    len += (size_t)snprintf(h + len, cap - len, "{");
    for (int i = n - 1; i >= 0; i--)
        len += (size_t)snprintf(h + len, cap - len,
                                "%s\"t%d\":{\"dtype\":\"F32\",\"shape\":[1],"
                                "\"data_offsets\":[%d,%d]}",
                                i == n - 1 ? "" : ",", dup && i == 0 ? n - 1 : i, 4 * i, 4 * i + 4);
    snprintf(h + len, cap - len, "}");
    return h;
}

static void test_many_tensors(void) {
    const int n = 200000;
    char p[1024], name[32];
    pathof(p, "many.safetensors");
    char *h = many_header(n, 0);
    write_raw(p, h, 0, (size_t)n * 4);
    free(h);
    struct zt_safetensors st;
    enum zt_status rc = zt_st_open(&st, p);
    ZT_TEST_TRUE(rc == ZT_OK && st.n == n, "200000 tensors: %s", zt_error_last());
    int found = 0;
    for (int i = 0; rc == ZT_OK && i < n; i++) {
        snprintf(name, sizeof name, "t%d", i);
        const struct zt_st_tensor *t = zt_st_find(&st, name);
        found += t && !strcmp(t->name, name) && t->begin == (size_t)4 * i;
    }
    ZT_TEST_TRUE(found == n, "200000 tensors: %d found by name", found);
    ZT_TEST_TRUE(rc != ZT_OK || !zt_st_find(&st, "t200000"), "an absent name is not found");
    zt_st_close(&st);
    h = many_header(n, 1);
    write_raw(p, h, 0, (size_t)n * 4);
    free(h);
    rc = zt_st_open(&st, p);
    ZT_TEST_TRUE(rc == ZT_ERR_CKPT_CORRUPT && strstr(zt_error_last(), "appears twice"),
                 "a duplicated name among 200000: %s", zt_error_last());
}

int main(void) {
    dir = getenv("ZT_IO_TEST_TMP");
    if (!dir) dir = "/tmp/zt-test-safetensors";
    mkdir(dir, 0755);
    const char *py = getenv("ZT_IO_TEST_PYTHON");
    const char *src = getenv("ZT_IO_TEST_SRC");
    if (!py) py = "/usr/bin/python3";
    char script[1024];
    snprintf(script, sizeof script, "%s/st_python.py", src ? src : ".");
    /* Python is part of the test, not optional: without it the interchange claims are unproven */
    ZT_TEST_TRUE(access(py, X_OK) == 0 && access(script, R_OK) == 0, "need %s and %s", py, script);
    test_foreign(py, script);
    test_writer(py, script);
    test_corrupt();
    test_many_tensors();
    return zt_test_finish("test_safetensors");
}
