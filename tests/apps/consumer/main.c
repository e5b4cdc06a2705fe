/* tests/apps/consumer/main.c: a minimal app on the installed zerotask: one parameter, one
 * AdamW step through the engine, proving headers, library and runtime work out of tree. */
#include <stdio.h>
#include <zerotask.h>

int main(void) {
    struct zt_config cfg;
    zt_config_defaults(&cfg);
    cfg.train_batch_size = cfg.micro_batch = cfg.grad_accum = cfg.world_size = 1;
    zt_engine_t e;
    if (zt_engine_init(&e, &cfg) != ZT_OK) goto fail;
    zt_param_t p = zt_engine_param(e, "w", 1, (int64_t[]){8}, ZT_INIT_ONE, 0);
    if (!p || zt_engine_finalize(e) != ZT_OK || zt_engine_step_begin(e, 1) != ZT_OK ||
        zt_engine_step_end(e) != ZT_OK || zt_engine_step_wait(e, NULL) != ZT_OK)
        goto fail;
    zt_engine_free(e);
    printf("consumer ok\n");
    return 0;
fail:
    fprintf(stderr, "zerotask: error: %s\n", zt_error_last());
    return 1;
}
