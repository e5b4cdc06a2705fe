/*
 * io/config_impl.h: what io/config.c shares with the files that parse its other sections.
 * Private to io/: not installed.
 */
#ifndef ZT_IO_CONFIG_IMPL_H
#define ZT_IO_CONFIG_IMPL_H

#include <cjson/cJSON.h> /* cJSON */
#include "json_fields.h" /* struct zt_json_ctx */
#include "zt_config.h"   /* struct zt_autotune_cfg, zt_curriculum_cfg, zt_actckpt_cfg */

/* DeepSpeed's autotuning defaults (io/autotune_config.c) */
void zt_autotune_defaults(struct zt_autotune_cfg *at);
/* The "autotuning" section v into at (DeepSpeed's keys; its keys that zt-tune does not
 * implement are errors, as everywhere in the config). */
enum zt_status zt_config_parse_autotuning(const struct zt_json_ctx *c, const cJSON *v,
                                          struct zt_autotune_cfg *at);
/* The legacy "curriculum_learning" section v into cl (io/curriculum_config.c: DeepSpeed's keys
 * and rules; read further than "enabled" only when enabled). */
enum zt_status zt_config_parse_curriculum(const struct zt_json_ctx *c, const cJSON *v,
                                          struct zt_curriculum_cfg *cl);
/* The "data_efficiency" section v: accepted when nothing in it is enabled, else the error naming
 * the enabled part; legacy_enabled: the top-level curriculum is on (two curricula). */
enum zt_status zt_config_check_data_efficiency(const struct zt_json_ctx *c, const cJSON *v,
                                               int legacy_enabled);
/* No "pipeline" section: 1 stage, DeepSpeed's defaults (io/pipeline_config.c) */
void zt_pipeline_defaults(struct zt_pipeline_cfg *p);
/* The "pipeline" section v into p (DeepSpeed's keys; the types checked, seed_layers true and
 * partition "profile" refused) */
enum zt_status zt_config_parse_pipeline(const struct zt_json_ctx *c, const cJSON *v,
                                        struct zt_pipeline_cfg *p);
/* Whether p's stages divide world_size and allow zero_stage (0-1 with a pipeline, as in
 * DeepSpeed): ZT_ERR_CONFIG naming the keys otherwise; *dp the data-parallel replicas. */
enum zt_status zt_config_check_pipeline(const struct zt_json_ctx *c,
                                        const struct zt_pipeline_cfg *p, int world_size,
                                        int zero_stage, int *dp);
/* pipeline.activation_checkpoint_interval: DeepSpeed recomputes chunks of k layers from each
 * chunk's input; zerotask checkpoints layer by layer, so 1 turns activation checkpointing on for
 * every layer (the activation_checkpointing section's other keys kept) and k > 1 is refused. */
enum zt_status zt_config_pipeline_actckpt(const struct zt_json_ctx *c,
                                          const struct zt_pipeline_cfg *p,
                                          struct zt_actckpt_cfg *ac);
/* An offload section's "device" and "nvme_path" (path: the section's JSON path) into *device
 * and nvme_path, each left as it is when absent */
enum zt_status zt_config_parse_target(const struct zt_json_ctx *c, const cJSON *v,
                                      const char *path, enum zt_offload_device *device,
                                      char nvme_path[ZT_NVME_PATH_MAX]);
/* No "activation_checkpointing" section: off, number_checkpoints -1 (io/actckpt_config.c) */
void zt_actckpt_defaults(struct zt_actckpt_cfg *ac);
/* The "activation_checkpointing" section v into ac (io/actckpt_config.c: DeepSpeed's keys; the
 * section present turns checkpointing on, number_checkpoints 0 off). */
enum zt_status zt_config_parse_actckpt(const struct zt_json_ctx *c, const cJSON *v,
                                       struct zt_actckpt_cfg *ac);

#endif /* ZT_IO_CONFIG_IMPL_H */
