/*
 * apps/zt_ckpt.c: zt-ckpt, the checkpoint tool: list, inspect, verify, export to safetensors,
 * import from safetensors. Needs no runtime (no StarPU, no MPI): it reads the files.
 *
 * Layer: apps/. Includes <zerotask.h> and the shared command-line pieces (apps/cli.h). Errors:
 * exactly one line "zt-ckpt: error: <message>" on stderr; exit 2 for a bad command line, 1 for
 * anything else (a damaged checkpoint included).
 */
#include <dirent.h>     /* opendir */
#include <stdio.h>      /* printf */
#include <stdlib.h>     /* free */
#include <string.h>     /* strcmp */
#include <sys/stat.h>   /* stat */
#include <cjson/cJSON.h> /* meta.json's data member */
#include "cli.h"        /* option values, one-line usage errors */
#include "zerotask.h"   /* everything public */

static const char *usage_text =
    "usage: zt-ckpt COMMAND ...\n"
    "\n"
    "Checkpoints written by zt-train --save-dir (docs/checkpoints.md). PATH is a checkpoint\n"
    "directory (its latest tag is used) or a tag directory DIR/<tag>.\n"
    "\n"
    "  ls DIR                          tags with step, world size, ZeRO stage, bytes (* latest;\n"
    "                                  ! a tag whose meta.json is damaged, with the reason)\n"
    "  inspect PATH                    meta.json summary and every shard's tensor records\n"
    "  verify PATH                     meta.json's checksum, every shard's header (its run id,\n"
    "                                  step, rank and world size those of meta.json) and every\n"
    "                                  tensor's CRC32C, and that the shards hold each tensor's\n"
    "                                  rows exactly once\n"
    "  export PATH --safetensors OUT [--dtype f32|bf16] [--moments OUT2]\n"
    "                                  consolidated weights (HF GPT-2 names) from the fp32 master\n"
    "                                  weights, one tensor in memory at a time; --dtype bf16\n"
    "                                  rounds them to BF16 (nearest even; default f32);\n"
    "                                  --moments: <name>.exp_avg and <name>.exp_avg_sq into OUT2\n"
    "                                  (always F32)\n"
    "  import --safetensors IN --out DIR [--tag NAME [--set-latest]]\n"
    "                                  a step-0 checkpoint from weights (F32/BF16/F16, no NaN or\n"
    "                                  Inf; zero Adam moments), written as DIR/step0, or as\n"
    "                                  DIR/NAME with --tag (1-63 characters, no '/', not\n"
    "                                  starting with '.', not 'latest'). DIR's `latest` names it\n"
    "                                  when DIR had none (zt-train --resume DIR starts from it).\n"
    "                                  A DIR that holds checkpoints is refused without --tag;\n"
    "                                  with it, the tag goes beside them and `latest` stays\n"
    "                                  (zt-train --resume DIR/NAME) unless --set-latest\n"
    "\n"
    "Exit status: 0 ok, 2 bad command line, 1 any other error.\n";

static const struct cli_program cli = {"zt-ckpt", "zt-ckpt", 1};

static int fail(void) { return cli_fail(&cli, CLI_EXIT_FAILURE); }

// ----------------------------------------------------------------------------
// ls

/* the bytes of the regular files in dir (a tag's meta.json and shards) */
static long long dir_bytes(const char *dir) {
    DIR *d = opendir(dir);
    long long n = 0;
    struct dirent *de;
    char p[2400];
    struct stat sb;
    while (d && (de = readdir(d)))
        if (de->d_name[0] != '.') {
            snprintf(p, sizeof p, "%.1024s/%.255s", dir, de->d_name);
            if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) n += sb.st_size;
        }
    if (d) closedir(d);
    return n;
}

/* the tags of dir that zt_checkpoint_list left out because their meta.json does not read or
 * check (t[0..n): those listed), one row each with the reason; returns how many */
static int list_damaged(const char *dir, const struct zt_ckpt_tag *t, int n) {
    DIR *d = opendir(dir);
    struct dirent *de;
    char p[1300], meta[1400], tagdir[1300];
    struct stat sb;
    int count = 0;
    while (d && (de = readdir(d))) {
        int listed = de->d_name[0] == '.';
        for (int i = 0; i < n && !listed; i++) listed = strcmp(t[i].name, de->d_name) == 0;
        snprintf(p, sizeof p, "%.1024s/%.255s", dir, de->d_name);
        snprintf(meta, sizeof meta, "%s/meta.json", p);
        if (listed || stat(meta, &sb) != 0) continue;
        struct zt_ckpt_info info;
        snprintf(tagdir, sizeof tagdir, "%s", p);
        if (zt_checkpoint_info(tagdir, &info) == ZT_OK) continue;
        printf("%-2s %-16s damaged: %s\n", "!", de->d_name, zt_error_last());
        count++;
    }
    if (d) closedir(d);
    return count;
}

static int cmd_ls(const char *dir) {
    struct zt_ckpt_tag *t;
    int n;
    if (zt_checkpoint_list(dir, &t, &n) != ZT_OK) return fail();
    char latest[1024] = "", p[1300];
    zt_checkpoint_resolve(dir, latest, sizeof latest); /* none yet: no mark */
    printf("%-2s %-16s %10s %6s %6s %14s\n", "", "tag", "step", "ranks", "stage", "bytes");
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%.1024s/%.255s", dir, t[i].name);
        printf("%-2s %-16s %10lld %6d %6d %14lld\n", strcmp(p, latest) == 0 ? "*" : "",
               t[i].name, (long long)t[i].info.step, t[i].info.world_size,
               t[i].info.zero_stage, dir_bytes(p));
    }
    int damaged = list_damaged(dir, t, n);
    if (n == 0 && damaged == 0) printf("(no tags in %s)\n", dir);
    free(t);
    return 0;
}

// ----------------------------------------------------------------------------
// an opened tag: inspect, verify, export

/* the tag PATH names, its meta.json, its tensor table and its (open) shards */
struct opened_tag {
    char dir[1024];
    struct zt_ckpt_info info;
    struct zt_ckpt_tensor *tensors; /* [ntensors], meta.json's table */
    int ntensors;
    struct zt_shard_set shards;
};

static enum zt_status tag_open(struct opened_tag *c, const char *path) {
    memset(c, 0, sizeof *c);
    ZT_CHECK(zt_checkpoint_resolve(path, c->dir, sizeof c->dir));
    ZT_CHECK(zt_checkpoint_info(c->dir, &c->info));
    ZT_CHECK(zt_checkpoint_tensors(c->dir, &c->tensors, &c->ntensors));
    return zt_checkpoint_open_shards(c->dir, &c->info, &c->shards);
}

static void tag_close(struct opened_tag *c) {
    zt_shard_set_close(&c->shards);
    free(c->tensors);
}

/* a tensor's rows as the shards split it (a vector is one row), and its element count */
static int64_t rows_of(const struct zt_ckpt_tensor *t) { return t->ndim == 1 ? 1 : t->shape[0]; }
static int64_t numel_of(const struct zt_ckpt_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

/* every record names a tensor of the table; every tensor and role is covered exactly once */
static enum zt_status tag_check_coverage(const struct opened_tag *c) {
    struct zt_shard_tensor *t = calloc((size_t)c->ntensors + 1, sizeof *t);
    if (!t) return zt_error_set(ZT_ERR_NOMEM, "out of memory");
    for (int j = 0; j < c->ntensors; j++) {
        const struct zt_ckpt_tensor *x = &c->tensors[j];
        t[j] = (struct zt_shard_tensor){x->name, rows_of(x), numel_of(x) / rows_of(x)};
    }
    enum zt_status rc = zt_shard_set_check(&c->shards, t, c->ntensors);
    free(t);
    return rc;
}

static double num_of(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* meta.json's "data": where training continues, the sampler's position per source and the
 * curriculum's step (the trainer's member; a tag without it says so) */
static void print_data_position(const char *dir) {
    char *text = NULL;
    if (zt_checkpoint_meta_member(dir, "data", &text) != ZT_OK) {
        printf("data: cannot read the data position (%s)\n", zt_error_last());
        return;
    }
    cJSON *d = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!d) {
        printf("data: no data position (not written by zt-train)\n");
        return;
    }
    const cJSON *sm = cJSON_GetObjectItemCaseSensitive(d, "sampler");
    const cJSON *order = cJSON_GetObjectItemCaseSensitive(sm, "order");
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(sm, "seed");
    printf("data: next step %.0f", num_of(d, "next_step"));
    if (!sm) printf(" (no sampler state: written before they were kept; the step rule)");
    else printf(", %.0f sequences consumed", num_of(sm, "consumed"));
    if (cJSON_IsString(order) && cJSON_IsString(seed))
        printf(", %s order (seed %s)", order->valuestring, seed->valuestring);
    printf("\n");
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(sm, "sources")) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(e, "path");
        printf("  source %s: weight %.6g, %.0f of its %.0f sequences drawn, in epoch %.0f\n",
               cJSON_IsString(p) ? p->valuestring : "?", num_of(e, "weight"), num_of(e, "drawn"),
               num_of(e, "sequences"), num_of(e, "epoch"));
    }
    const cJSON *cur = cJSON_GetObjectItemCaseSensitive(d, "curriculum");
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cur, "enabled")))
        printf("  curriculum: step %.0f ran at sequence length %.0f\n", num_of(cur, "step"),
               num_of(cur, "seqlen"));
    cJSON_Delete(d);
}

static int cmd_inspect(const char *path) {
    struct opened_tag c;
    if (tag_open(&c, path) != ZT_OK) {
        tag_close(&c);
        return fail();
    }
    printf("%s: format %d, step %lld, written by %d rank(s) at ZeRO stage %d, %d tensors\n",
           c.dir, c.info.format, (long long)c.info.step, c.info.world_size, c.info.zero_stage,
           c.ntensors);
    print_data_position(c.dir);
    for (int k = 0; k < c.shards.n; k++) {
        const struct zt_shard *s = &c.shards.sh[k];
        printf("%s: rank %d of %d, %d records\n", s->path, s->rank, s->world, s->n);
        for (int i = 0; i < s->n; i++) {
            const struct zt_shard_rec *r = &s->rec[i];
            printf("  %-40s %-10s rows %lld-%lld of %lld x %lld  %12lld bytes at %12lld  crc32c "
                   "%08x\n", r->name, zt_shard_role_name(r->role), (long long)r->row0,
                   (long long)r->row1, (long long)r->rows, (long long)r->cols,
                   (long long)r->bytes, (long long)r->offset, r->crc);
        }
    }
    tag_close(&c);
    return 0;
}

static int cmd_verify(const char *path) {
    struct opened_tag c;
    enum zt_status rc = tag_open(&c, path);
    if (rc == ZT_OK) rc = tag_check_coverage(&c);
    long long bytes = 0;
    int records = 0;
    for (int k = 0; rc == ZT_OK && k < c.shards.n; k++) {
        const struct zt_shard *s = &c.shards.sh[k];
        rc = zt_shard_verify(s);
        for (int i = 0; i < s->n; i++) bytes += s->rec[i].bytes;
        records += s->n;
    }
    if (rc != ZT_OK) {
        tag_close(&c);
        return fail();
    }
    printf("ok: %s: step %lld, %d shard(s), %d records, %.1f MiB checked%s\n", c.dir,
           (long long)c.info.step, c.shards.n, records, bytes / 1048576.0,
           c.info.checksummed ? ""
                              : "; written before checksums and run ids: meta.json and the "
                                "shards' identities could not be checked");
    tag_close(&c);
    return 0;
}

/* what the safetensors writer asks for, tensor by tensor: the parameters (entry i is tensor
 * i), or the moments (entry 2j is tensor j's exp_avg, 2j + 1 its exp_avg_sq) */
struct export_source {
    struct opened_tag *c;
    int role; /* ZT_ROLE_PARAM, or ZT_ROLE_EXP_AVG for both moments */
};

/* the writer's callback: entry i's values, all rows, from the shards */
static enum zt_status read_entry(void *arg, int i, float *dst) {
    struct export_source *src = arg;
    int moments = src->role != ZT_ROLE_PARAM;
    int role = !moments ? ZT_ROLE_PARAM : (i % 2 ? ZT_ROLE_EXP_AVG_SQ : ZT_ROLE_EXP_AVG);
    const struct zt_ckpt_tensor *t = &src->c->tensors[moments ? i / 2 : i];
    return zt_shard_set_read(&src->c->shards, t->name, role, numel_of(t) / rows_of(t), 0,
                             numel_of(t), dst);
}

/* fp32 -> bf16, nearest even (the engine's own conversion) */
static void to_bf16(uint16_t *dst, const float *src, size_t n) {
    zt_dtype_from_f32(ZT_DTYPE_BF16, dst, src, n);
}

static void set_entry(struct zt_st_entry *e, const char *name, const struct zt_ckpt_tensor *t) {
    e->name = name;
    e->ndim = t->ndim;
    memcpy(e->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
}

/* the consolidated weights to out, and (moments != NULL) <name>.exp_avg and <name>.exp_avg_sq
 * of every tensor to moments; entries: room for 2 per tensor */
static enum zt_status export_files(struct opened_tag *c, struct zt_st_entry *entries,
                                   char (*names)[200], const char *out, const char *moments,
                                   int bf16) {
    for (int i = 0; i < c->ntensors; i++)
        set_entry(&entries[i], c->tensors[i].name, &c->tensors[i]);
    struct export_source src = {c, ZT_ROLE_PARAM};
    ZT_CHECK(zt_st_write_stream(out, entries, c->ntensors, NULL, read_entry, &src,
                                bf16 ? to_bf16 : NULL));
    if (!moments) return ZT_OK;
    for (int i = 0; i < 2 * c->ntensors; i++) {
        const struct zt_ckpt_tensor *t = &c->tensors[i / 2];
        snprintf(names[i], sizeof names[i], "%s.%s", t->name, i % 2 ? "exp_avg_sq" : "exp_avg");
        set_entry(&entries[i], names[i], t);
    }
    src.role = ZT_ROLE_EXP_AVG;
    return zt_st_write_f32_stream(moments, entries, 2 * c->ntensors, NULL, read_entry, &src);
}

static int cmd_export(const char *path, const char *out, const char *moments, int bf16) {
    struct opened_tag c;
    enum zt_status rc = tag_open(&c, path);
    if (rc == ZT_OK) rc = tag_check_coverage(&c);
    struct zt_st_entry *entries = calloc((size_t)c.ntensors * 2 + 1, sizeof *entries);
    char (*names)[200] = calloc((size_t)c.ntensors * 2 + 1, sizeof *names);
    if (rc == ZT_OK && (!entries || !names)) rc = zt_error_set(ZT_ERR_NOMEM, "out of memory");
    if (rc == ZT_OK) rc = export_files(&c, entries, names, out, moments, bf16);
    free(entries);
    free(names);
    if (rc != ZT_OK) {
        tag_close(&c);
        return fail();
    }
    printf("exported %s (step %lld): %d tensors (%s) to %s%s%s\n", c.dir,
           (long long)c.info.step, c.ntensors, bf16 ? "BF16" : "F32", out,
           moments ? ", moments (F32) to " : "", moments ? moments : "");
    tag_close(&c);
    return 0;
}

static int cmd_import(const char *safetensors, const char *out, const char *tag,
                      int set_latest) {
    if (zt_checkpoint_import(safetensors, out, tag, set_latest) != ZT_OK) return fail();
    char tagdir[1100];
    snprintf(tagdir, sizeof tagdir, "%s/%s", out, tag ? tag : "step0");
    char latest[1100] = "";
    zt_checkpoint_resolve(out, latest, sizeof latest);
    int is_latest = strcmp(latest, tagdir) == 0;
    printf("imported %s as %s (zt-train --resume %s)%s\n", safetensors, tagdir,
           is_latest ? out : tagdir, tag && is_latest ? "; latest names it" : "");
    return 0;
}

// ----------------------------------------------------------------------------
// the command line

/* COMMAND's arguments */
struct ckpt_args {
    const char *command;
    const char *path; /* the one positional argument */
    const char *safetensors, *out, *moments, *dtype, *tag;
    int set_latest;
};

/* argv[2..] into a. Returns 0 or exit code 2. */
static int parse_args(int argc, char **argv, struct ckpt_args *a) {
    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i];
        const char **value = !strcmp(arg, "--safetensors") ? &a->safetensors
                             : !strcmp(arg, "--out")       ? &a->out
                             : !strcmp(arg, "--moments")   ? &a->moments
                             : !strcmp(arg, "--dtype")     ? &a->dtype
                             : !strcmp(arg, "--tag")       ? &a->tag
                                                           : NULL;
        if (!strcmp(arg, "--set-latest")) {
            a->set_latest = 1;
        } else if (value) {
            if (cli_string_option(&cli, argc, argv, &i, value)) return CLI_EXIT_USAGE;
        } else if (arg[0] == '-' || a->path) {
            return cli_usage_error(&cli, "unexpected argument '%s'", arg);
        } else {
            a->path = arg;
        }
    }
    return 0;
}

/* check that the command got the arguments it takes, then run it */
static int run_command(const struct ckpt_args *a) {
    const char *cmd = a->command;
    if (strcmp(cmd, "import") != 0 && !a->path)
        return cli_usage_error(&cli, "%s: missing the checkpoint path", cmd);
    if (!strcmp(cmd, "ls") || !strcmp(cmd, "inspect") || !strcmp(cmd, "verify")) {
        if (a->safetensors || a->out || a->moments || a->dtype || a->tag || a->set_latest)
            return cli_usage_error(&cli, "%s takes only a path", cmd);
        return !strcmp(cmd, "ls") ? cmd_ls(a->path) : !strcmp(cmd, "inspect") ? cmd_inspect(a->path)
                                                                            : cmd_verify(a->path);
    }
    if (!strcmp(cmd, "export")) {
        if (!a->safetensors || a->out || a->tag || a->set_latest)
            return cli_usage_error(&cli, "%s: expected export PATH --safetensors OUT [--dtype "
                                         "f32|bf16] [--moments OUT2]", cmd);
        if (a->dtype && strcmp(a->dtype, "f32") && strcmp(a->dtype, "bf16"))
            return cli_usage_error(&cli, "--dtype %s: expected f32 or bf16", a->dtype);
        return cmd_export(a->path, a->safetensors, a->moments,
                          a->dtype && !strcmp(a->dtype, "bf16"));
    }
    if (!strcmp(cmd, "import")) {
        if (!a->safetensors || !a->out || a->path || a->moments || a->dtype ||
            (a->set_latest && !a->tag))
            return cli_usage_error(&cli, "%s: expected import --safetensors IN --out DIR [--tag "
                                         "NAME [--set-latest]]", cmd);
        if (a->tag && zt_checkpoint_check_tag_name(a->tag) != ZT_OK)
            return cli_usage_error(&cli, "%s", zt_error_last());
        return cmd_import(a->safetensors, a->out, a->tag, a->set_latest);
    }
    return cli_usage_error(&cli, "unknown command '%s'", cmd);
}

int main(int argc, char **argv) {
    if (argc < 2) return cli_usage_error(&cli, "missing %s", "COMMAND");
    struct ckpt_args a = {.command = argv[1]};
    if (cli_is_help(a.command) || !strcmp(a.command, "help")) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (zt_knobs_check() != ZT_OK) return cli_fail(&cli, CLI_EXIT_USAGE); /* ZT_LOG_LEVEL etc. */
    int code = parse_args(argc, argv, &a);
    return code ? code : run_command(&a);
}
