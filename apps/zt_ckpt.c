/*
 * apps/zt_ckpt.c: zt-ckpt, the checkpoint tool: list, inspect, verify, export to safetensors,
 * import from safetensors. Needs no runtime (no StarPU, no MPI): it reads the files.
 *
 * Layer: apps/. Includes only <zerotask.h>. Errors: exactly one line "zt-ckpt: error: <message>"
 * on stderr; exit 2 for a bad command line, 1 for anything else (a damaged checkpoint included).
 */
#include <dirent.h>     /* opendir */
#include <stdio.h>      /* printf */
#include <stdlib.h>     /* free */
#include <string.h>     /* strcmp */
#include <sys/stat.h>   /* stat */
#include "zerotask.h"   /* everything public */

static const char *usage_text =
    "usage: zt-ckpt COMMAND ...\n"
    "\n"
    "Checkpoints written by zt-train --save-dir (docs/checkpoints.md). PATH is a checkpoint\n"
    "directory (its latest tag is used) or a tag directory DIR/<tag>.\n"
    "\n"
    "  ls DIR                          tags with step, world size, ZeRO stage, bytes (* latest)\n"
    "  inspect PATH                    meta.json summary and every shard's tensor records\n"
    "  verify PATH                     every shard's header and every tensor's CRC32C, and\n"
    "                                  that the shards hold each tensor's rows exactly once\n"
    "  export PATH --safetensors OUT [--dtype f32|bf16] [--moments OUT2]\n"
    "                                  consolidated weights (HF GPT-2 names) from the fp32 master\n"
    "                                  weights, one tensor in memory at a time; --dtype bf16\n"
    "                                  rounds them to BF16 (nearest even; default f32);\n"
    "                                  --moments: <name>.exp_avg and <name>.exp_avg_sq into OUT2\n"
    "                                  (always F32)\n"
    "  import --safetensors IN --out DIR\n"
    "                                  DIR/step0 from weights (F32/BF16/F16; zero Adam moments):\n"
    "                                  zt-train --resume DIR starts training from them\n"
    "\n"
    "Exit status: 0 ok, 2 bad command line, 1 any other error.\n";

static int fail(void) {
    fprintf(stderr, "zt-ckpt: error: %s\n", zt_error_last());
    return 1;
}

static int usage(const char *msg, const char *arg) {
    fprintf(stderr, "zt-ckpt: error: ");
    fprintf(stderr, msg, arg);
    fprintf(stderr, " (see zt-ckpt --help)\n");
    return 2;
}

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
    if (n == 0) printf("(no tags in %s)\n", dir);
    free(t);
    return 0;
}

/* the tag PATH names, its meta.json, its tensor table and (open) shards */
struct ck {
    char tag[1024];
    struct zt_ckpt_info info;
    struct zt_ckpt_tensor *t;
    int nt;
    struct zt_shard_set set;
};

static enum zt_status ck_open(struct ck *c, const char *path) {
    memset(c, 0, sizeof *c);
    ZT_CHECK(zt_checkpoint_resolve(path, c->tag, sizeof c->tag));
    ZT_CHECK(zt_checkpoint_info(c->tag, &c->info));
    ZT_CHECK(zt_checkpoint_tensors(c->tag, &c->t, &c->nt));
    return zt_checkpoint_open_shards(c->tag, &c->info, &c->set);
}

static void ck_close(struct ck *c) {
    zt_shard_set_close(&c->set);
    free(c->t);
}

static int64_t rows_of(const struct zt_ckpt_tensor *t) { return t->ndim == 1 ? 1 : t->shape[0]; }
static int64_t numel_of(const struct zt_ckpt_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

/* every record names a tensor of the table; every tensor and role is covered exactly once */
static enum zt_status ck_check(const struct ck *c) {
    struct zt_shard_tensor *t = calloc((size_t)c->nt + 1, sizeof *t);
    if (!t) return zt_error_set(ZT_ERR_NOMEM, "out of memory");
    for (int j = 0; j < c->nt; j++)
        t[j] = (struct zt_shard_tensor){c->t[j].name, rows_of(&c->t[j]),
                                        numel_of(&c->t[j]) / rows_of(&c->t[j])};
    enum zt_status rc = zt_shard_set_check(&c->set, t, c->nt);
    free(t);
    return rc;
}

static int cmd_inspect(const char *path) {
    struct ck c;
    if (ck_open(&c, path) != ZT_OK) {
        ck_close(&c);
        return fail();
    }
    printf("%s: format %d, step %lld, written by %d rank(s) at ZeRO stage %d, %d tensors\n",
           c.tag, c.info.format, (long long)c.info.step, c.info.world_size, c.info.zero_stage,
           c.nt);
    for (int k = 0; k < c.set.n; k++) {
        const struct zt_shard *s = &c.set.sh[k];
        printf("%s: rank %d of %d, %d records\n", s->path, s->rank, s->world, s->n);
        for (int i = 0; i < s->n; i++) {
            const struct zt_shard_rec *r = &s->rec[i];
            printf("  %-40s %-10s rows %lld-%lld of %lld x %lld  %12lld bytes at %12lld  crc32c "
                   "%08x\n", r->name, zt_shard_role_name(r->role), (long long)r->row0,
                   (long long)r->row1, (long long)r->rows, (long long)r->cols,
                   (long long)r->bytes, (long long)r->offset, r->crc);
        }
    }
    ck_close(&c);
    return 0;
}

static int cmd_verify(const char *path) {
    struct ck c;
    enum zt_status rc = ck_open(&c, path);
    if (rc == ZT_OK) rc = ck_check(&c);
    long long bytes = 0;
    int recs = 0;
    for (int k = 0; rc == ZT_OK && k < c.set.n; k++) {
        rc = zt_shard_verify(&c.set.sh[k]);
        for (int i = 0; i < c.set.sh[k].n; i++) bytes += c.set.sh[k].rec[i].bytes;
        recs += c.set.sh[k].n;
    }
    if (rc != ZT_OK) {
        ck_close(&c);
        return fail();
    }
    printf("ok: %s: step %lld, %d shard(s), %d records, %.1f MiB checked\n", c.tag,
           (long long)c.info.step, c.set.n, recs, bytes / 1048576.0);
    ck_close(&c);
    return 0;
}

struct fill_ctx {
    struct ck *c;
    int role;
};
static enum zt_status fill(void *arg, int i, float *dst) {
    struct fill_ctx *f = arg;
    int j = f->role == ZT_ROLE_PARAM ? i : i / 2;
    int role = f->role == ZT_ROLE_PARAM ? ZT_ROLE_PARAM
                                        : (i % 2 ? ZT_ROLE_EXP_AVG_SQ : ZT_ROLE_EXP_AVG);
    const struct zt_ckpt_tensor *t = &f->c->t[j];
    return zt_shard_set_read(&f->c->set, t->name, role, numel_of(t) / rows_of(t), 0,
                             numel_of(t), dst);
}

/* fp32 -> bf16, nearest even (the engine's own conversion) */
static void to_bf16(uint16_t *dst, const float *src, size_t n) {
    zt_dtype_from_f32(ZT_DTYPE_BF16, dst, src, n);
}

static int cmd_export(const char *path, const char *out, const char *moments, int bf16) {
    struct ck c;
    enum zt_status rc = ck_open(&c, path);
    if (rc == ZT_OK) rc = ck_check(&c);
    struct zt_st_entry *e = calloc((size_t)c.nt * 2 + 1, sizeof *e);
    char (*names)[200] = calloc((size_t)c.nt * 2 + 1, sizeof *names);
    if (rc == ZT_OK && (!e || !names)) rc = zt_error_set(ZT_ERR_NOMEM, "out of memory");
    for (int i = 0; rc == ZT_OK && i < c.nt; i++) {
        e[i].name = c.t[i].name;
        e[i].ndim = c.t[i].ndim;
        memcpy(e[i].shape, c.t[i].shape, sizeof(int64_t) * (size_t)c.t[i].ndim);
    }
    struct fill_ctx f = {&c, ZT_ROLE_PARAM};
    if (rc == ZT_OK) rc = zt_st_write_stream(out, e, c.nt, NULL, fill, &f, bf16 ? to_bf16 : NULL);
    if (rc == ZT_OK && moments) {
        for (int i = 0; i < 2 * c.nt; i++) {
            const struct zt_ckpt_tensor *t = &c.t[i / 2];
            snprintf(names[i], sizeof names[i], "%s.%s", t->name, i % 2 ? "exp_avg_sq" : "exp_avg");
            e[i].name = names[i];
            e[i].ndim = t->ndim;
            memcpy(e[i].shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
        }
        f.role = ZT_ROLE_EXP_AVG;
        rc = zt_st_write_f32_stream(moments, e, 2 * c.nt, NULL, fill, &f);
    }
    free(e);
    free(names);
    if (rc != ZT_OK) {
        ck_close(&c);
        return fail();
    }
    printf("exported %s (step %lld): %d tensors (%s) to %s%s%s\n", c.tag,
           (long long)c.info.step, c.nt, bf16 ? "BF16" : "F32", out,
           moments ? ", moments (F32) to " : "", moments ? moments : "");
    ck_close(&c);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage("missing %s", "COMMAND");
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        fputs(usage_text, stdout);
        return 0;
    }
    const char *pos = NULL, *st = NULL, *out = NULL, *mom = NULL, *dt = NULL;
    for (int i = 2; i < argc; i++) {
        const char **dst = !strcmp(argv[i], "--safetensors") ? &st
                           : !strcmp(argv[i], "--out")       ? &out
                           : !strcmp(argv[i], "--moments")   ? &mom
                           : !strcmp(argv[i], "--dtype")     ? &dt
                                                             : NULL;
        if (dst) {
            if (i + 1 >= argc || !argv[i + 1][0]) return usage("option %s needs a value", argv[i]);
            *dst = argv[++i];
        } else if (argv[i][0] == '-' || pos) {
            return usage("unexpected argument '%s'", argv[i]);
        } else {
            pos = argv[i];
        }
    }
    int needs_pos = strcmp(cmd, "import") != 0;
    if (needs_pos && !pos) return usage("%s: missing the checkpoint path", cmd);
    if (!strcmp(cmd, "ls") || !strcmp(cmd, "inspect") || !strcmp(cmd, "verify")) {
        if (st || out || mom || dt) return usage("%s takes only a path", cmd);
        return !strcmp(cmd, "ls") ? cmd_ls(pos) : !strcmp(cmd, "inspect") ? cmd_inspect(pos)
                                                                          : cmd_verify(pos);
    }
    if (!strcmp(cmd, "export")) {
        if (!st || out)
            return usage("%s: expected export PATH --safetensors OUT [--dtype f32|bf16] "
                         "[--moments OUT2]", cmd);
        if (dt && strcmp(dt, "f32") && strcmp(dt, "bf16"))
            return usage("--dtype %s: expected f32 or bf16", dt);
        return cmd_export(pos, st, mom, dt && !strcmp(dt, "bf16"));
    }
    if (!strcmp(cmd, "import")) {
        if (!st || !out || pos || mom || dt)
            return usage("%s: expected import --safetensors IN --out DIR", cmd);
        if (zt_checkpoint_import(st, out) != ZT_OK) return fail();
        printf("imported %s as %s/step0 (zt-train --resume %s)\n", st, out, out);
        return 0;
    }
    return usage("unknown command '%s'", cmd);
}
