/*
 * io/config_impl.h: what io/config.c shares with the files that parse its other sections.
 * Private to io/: not installed.
 */
#ifndef ZT_IO_CONFIG_IMPL_H
#define ZT_IO_CONFIG_IMPL_H

#include <cjson/cJSON.h> /* cJSON */
#include "json_fields.h" /* struct zt_json_ctx */
#include "zt_config.h"   /* struct zt_autotune_cfg */

/* DeepSpeed's autotuning defaults (io/autotune_config.c) */
void zt_autotune_defaults(struct zt_autotune_cfg *at);
/* The "autotuning" section v into at (DeepSpeed's keys; its keys that zt-tune does not
 * implement are errors, as everywhere in the config). */
enum zt_status zt_config_parse_autotuning(const struct zt_json_ctx *c, const cJSON *v,
                                          struct zt_autotune_cfg *at);

#endif /* ZT_IO_CONFIG_IMPL_H */
