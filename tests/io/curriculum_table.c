/*
 * tests/io/curriculum_table.c: prints zerotask's curriculum schedule for test_curriculum.py to
 * compare with DeepSpeed's formulas.
 *
 *   curriculum_table N CONFIG_JSON...
 *
 * For each CONFIG_JSON (the text of a whole config with a "curriculum_learning" section) one
 * line: zt_curriculum_seqlen at steps 1..N, separated by spaces; or, when the config is refused,
 * "error: " and the message. Exit status 0 unless the arguments are wrong.
 */
#include <stdio.h>  /* printf */
#include <stdlib.h> /* strtoll */

#include "zt_config.h" /* zt_config_parse, zt_curriculum_seqlen */
#include "zt_status.h" /* zt_error_last */

int main(int argc, char **argv) {
    char *end = NULL;
    long long n = argc >= 2 ? strtoll(argv[1], &end, 10) : 0;
    if (argc < 3 || *end || n < 1) {
        fprintf(stderr, "usage: curriculum_table N CONFIG_JSON...\n");
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        struct zt_config cfg;
        if (zt_config_parse(&cfg, argv[i], "argv", 1) != ZT_OK) {
            printf("error: %s\n", zt_error_last());
            continue;
        }
        for (long long s = 1; s <= n; s++)
            printf("%s%d", s > 1 ? " " : "", zt_curriculum_seqlen(&cfg.curriculum, s));
        printf("\n");
    }
    return 0;
}
