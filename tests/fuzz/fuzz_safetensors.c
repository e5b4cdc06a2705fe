/*
 * tests/fuzz/fuzz_safetensors.c: the safetensors reader (io/safetensors.c) on any bytes: open,
 * find every tensor by name, read each one as fp32 with its own shape (with the non-finite check
 * of --init-from on for half of the inputs).
 */
#include "fuzz_util.h"
#include "zt_safetensors.h"

static void read_all(const struct zt_safetensors *st) {
    for (int i = 0; i < st->n; i++) {
        const struct zt_st_tensor *t = &st->t[i];
        if (zt_st_find(st, t->name) == NULL) FUZZ_FAIL("tensor %s not found by name", t->name);
        int64_t count = 1;
        for (int d = 0; d < t->ndim; d++) count *= t->shape[d];
        if (count > (1 << 20)) continue; /* the reader checked the bytes; keep the run fast */
        float *dst = malloc((size_t)(count ? count : 1) * sizeof *dst);
        if (!dst) FUZZ_FAIL("out of memory");
        fuzz_check_error(zt_st_read_f32(st, t->name, t->ndim, t->shape, dst), "zt_st_read_f32");
        free(dst);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct zt_safetensors st;
    enum zt_status rc = zt_st_open(&st, fuzz_input_file(data, size, ".safetensors"));
    fuzz_check_error(rc, "zt_st_open");
    if (rc != ZT_OK) return 0;
    st.finite_only = (int)(size & 1);
    read_all(&st);
    zt_st_close(&st);
    return 0;
}
