/*
 * tests/fuzz/fuzz_replay_main.c: runs a fuzz target on saved inputs, without libFuzzer.
 *
 * Every build compiles each target with this main (fuzz_<reader>_replay) and CTest runs it on
 * the target's seed corpus and on its past findings (tests/fuzz/corpus/<reader>/,
 * tests/fuzz/findings/<reader>/), so an input that once crashed a reader stays a test in the
 * normal and the sanitizer builds. Usage: PROGRAM FILE_OR_DIR...
 */
#include <dirent.h>   /* opendir, readdir */
#include <sys/stat.h> /* stat */

#include "fuzz_util.h"

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz replay: cannot open %s\n", path);
        return 1;
    }
    size_t cap = 1 << 16, n = 0, got;
    uint8_t *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "fuzz replay: out of memory reading %s\n", path);
        return 1;
    }
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

static int run_path(const char *path, int *count) {
    struct stat st;
    if (stat(path, &st) != 0) return 0; /* no findings folder yet: nothing to replay */
    if (!S_ISDIR(st.st_mode)) return (*count)++, run_file(path);
    DIR *d = opendir(path);
    if (!d) return 1;
    int bad = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        bad |= run_path(sub, count);
    }
    closedir(d);
    return bad;
}

int main(int argc, char **argv) {
    int bad = 0, count = 0;
    for (int i = 1; i < argc; i++) bad |= run_path(argv[i], &count);
    printf("fuzz replay: %d input(s) run\n", count);
    return bad || count == 0;
}
