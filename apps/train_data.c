/*
 * apps/train_data.c: zt-train's data side (apps/train_data.h): the sampler planning each global
 * batch, the curriculum's sequence length, the read-ahead of the next step's rows, evaluation,
 * and the sampler's state in and out of checkpoints.
 *
 * Layer: apps/. The rows of step s are planned on the host right before its tasks are submitted
 * (a few microseconds); the load_batch tasks read them (tasks/data.c). Right after, the next
 * step's rows are planned on a copy of the state and handed to the kernel's read-ahead
 * (posix_fadvise), so that their pages are in memory when that step's load tasks run, even for
 * a shuffled file larger than memory.
 */
#include "train_data.h"

#include <errno.h>          /* errno */
#include <stdio.h>          /* printf, snprintf */
#include <stdlib.h>         /* calloc, free */
#include <string.h>         /* strcmp */
#include <cjson/cJSON.h>    /* the checkpoint's data member */
#include "zt_checkpoint.h"  /* zt_checkpoint_meta_member */
#include "zt_status.h"      /* zt_error_set */

static enum zt_status check_options(const struct train_data_options *o, enum zt_data_order *ord) {
    *ord = ZT_DATA_LINEAR;
    if (o->order && !strcmp(o->order, "shuffle")) *ord = ZT_DATA_SHUFFLE;
    else if (o->order && strcmp(o->order, "linear"))
        return zt_error_set(ZT_ERR_USAGE, "--data-order %s: expected linear or shuffle",
                            o->order);
    if (o->eval_steps == 0)
        return zt_error_set(ZT_ERR_USAGE, "--eval-steps 0: expected at least 1 batch");
    return ZT_OK;
}

enum zt_status train_data_open(struct train_data *td, const struct train_data_options *o,
                               const struct zt_config *cfg, const struct zt_model_shape *shape) {
    memset(td, 0, sizeof *td);
    enum zt_data_order order;
    ZT_CHECK(check_options(o, &order));
    ZT_CHECK(zt_curriculum_check_seqlen(&cfg->curriculum, shape->seq_len));
    ZT_CHECK(zt_dataset_open(&td->ds, o->data, o->eval_data, shape->vocab_size, shape->seq_len,
                             order, cfg->seed));
    td->open = 1;
    if (!td->ds.valid.nsources && (o->eval_interval >= 0 || o->eval_steps > 0))
        return zt_error_set(ZT_ERR_USAGE, "--eval-%s: no validation data (--eval-data, or a "
                            "data spec's validation or valid_split)",
                            o->eval_interval >= 0 ? "interval" : "steps");
    td->B = cfg->train_batch_size;
    td->T = shape->seq_len;
    td->curriculum = &cfg->curriculum;
    td->eval_interval = o->eval_interval > 0 ? o->eval_interval : 0;
    td->eval_steps = o->eval_steps > 0 ? o->eval_steps : 10;
    td->rows = calloc((size_t)td->B, sizeof *td->rows);
    td->next = calloc((size_t)td->B, sizeof *td->next);
    if (!td->rows || !td->next) return zt_error_set(ZT_ERR_NOMEM, "data: out of memory");
    for (int s = 0; s < td->ds.train.nsources; s++) td->epoch[s] = 1;
    if (o->dump) snprintf(td->dump_path, sizeof td->dump_path, "%s.rank%d", o->dump, o->rank);
    return ZT_OK;
}

enum zt_status train_data_open_dump(struct train_data *td) {
    if (!td->dump_path[0] || td->dump) return ZT_OK;
    if (!(td->dump = fopen(td->dump_path, "w")))
        return zt_error_set(ZT_ERR_IO, "--dump-data %s: cannot create (%s)", td->dump_path,
                            strerror(errno));
    return ZT_OK;
}

enum zt_status train_data_close(struct train_data *td) {
    enum zt_status rc = ZT_OK;
    if (td->dump && (ferror(td->dump) | fclose(td->dump)))
        rc = zt_error_set(ZT_ERR_IO, "--dump-data %s: write failed", td->dump_path);
    if (td->open) zt_dataset_close(&td->ds);
    free(td->rows);
    free(td->next);
    memset(td, 0, sizeof *td);
    return rc;
}

// ----------------------------------------------------------------------------
// resuming

enum zt_status train_data_resume(struct train_data *td, const char *tagdir, int64_t done) {
    char *data = NULL, what[1100];
    snprintf(what, sizeof what, "checkpoint %s", tagdir);
    ZT_CHECK(zt_checkpoint_meta_member(tagdir, "data", &data));
    cJSON *o = data ? cJSON_Parse(data) : NULL;
    free(data);
    const cJSON *sampler = cJSON_GetObjectItemCaseSensitive(o, "sampler");
    char *text = sampler ? cJSON_PrintUnformatted(sampler) : NULL;
    cJSON_Delete(o);
    enum zt_status rc = ZT_OK;
    if (text) rc = zt_sampler_state_parse(&td->ds, text, what, &td->st);
    else if (!td->ds.legacy)
        rc = zt_error_set(ZT_ERR_USAGE, "%s: holds no data position (written before they were "
                          "kept): it continues the step rule of one --data file in linear "
                          "order only", what);
    else /* the step rule: step s's rows start at sequence (s - 1) * B */
        td->st = (struct zt_sampler_state){.consumed = done * td->B, .drawn = {done * td->B}};
    free(text);
    for (int s = 0; rc == ZT_OK && s < td->ds.train.nsources; s++)
        td->epoch[s] = zt_dataset_epoch(&td->ds, &td->ds.train, &td->st, s);
    return rc;
}

// ----------------------------------------------------------------------------
// what the run reads

void train_data_describe(const struct train_data *td) {
    const struct zt_dataset *d = &td->ds;
    printf("data: %s order", d->order == ZT_DATA_SHUFFLE ? "shuffled" : "linear");
    if (d->order == ZT_DATA_SHUFFLE) printf(" (seed %llu)", (unsigned long long)d->seed);
    if (d->legacy) printf(", %s: %zu tokens, step rule (row k of step i reads from token "
                          "((i-1)*B + k)*T)", d->train.src[0].path,
                          d->files[d->train.src[0].file].count);
    for (int s = 0; !d->legacy && s < d->train.nsources; s++)
        printf("%s %s %.1f%% (%lld sequences)", s ? "," : ";", d->train.src[s].path,
               100 * d->train.src[s].weight, (long long)d->train.src[s].nseq);
    for (int s = 0; s < d->valid.nsources; s++)
        printf("%s %s %.1f%% (%lld sequences)", s ? "," : "; validation:", d->valid.src[s].path,
               100 * d->valid.src[s].weight, (long long)d->valid.src[s].nseq);
    if (td->curriculum->enabled)
        printf("; curriculum: sequence length %d to %d", td->curriculum->min_difficulty,
               td->curriculum->max_difficulty);
    printf("\n");
}

// ----------------------------------------------------------------------------
// the training batches

/* the curriculum's sequence length for step s (the model's when there is none) */
static int active_length(const struct train_data *td, int64_t s) {
    int len = zt_curriculum_seqlen(td->curriculum, s);
    return len > 0 && len < td->T ? len : td->T;
}

/* a line for every train source whose epoch changed with the batch just planned */
static void report_epochs(struct train_data *td, int64_t s, int talk) {
    for (int k = 0; k < td->ds.train.nsources; k++) {
        int64_t e = zt_dataset_epoch(&td->ds, &td->ds.train, &td->st, k);
        if (e == td->epoch[k]) continue;
        td->epoch[k] = e;
        if (talk)
            printf("data: %s begins epoch %lld during step %lld\n", td->ds.train.src[k].path,
                   (long long)e, (long long)s);
    }
}

/* --dump-data: the rows of step s this rank's micro-batches load */
static void dump_rows(const struct train_data *td, zt_gpt2_t m, int64_t s, int active) {
    int accum, Bm;
    zt_gpt2_rank_rows(m, 0, &accum, &Bm);
    for (int mb = 0; mb < accum; mb++) {
        int first = zt_gpt2_rank_rows(m, mb, NULL, NULL);
        for (int k = first; k < first + Bm; k++)
            fprintf(td->dump, "%lld %d %d %d %lld %d\n", (long long)s, mb, k, td->rows[k].file,
                    (long long)td->rows[k].pos, active);
    }
}

enum zt_status train_data_submit(struct train_data *td, zt_gpt2_t m, int64_t s, int talk) {
    zt_dataset_next(&td->ds, &td->ds.train, &td->st, td->B, td->rows);
    report_epochs(td, s, talk);
    const struct zt_gpt2_batch b = {td->ds.files, td->rows, active_length(td, s)};
    if (td->dump) dump_rows(td, m, s, b.active);
    ZT_CHECK(zt_gpt2_batch_submit(m, &b, s, 1));
    struct zt_sampler_state ahead = td->st;
    zt_dataset_next(&td->ds, &td->ds.train, &ahead, td->B, td->next);
    for (int k = 0; k < td->B; k++) zt_tokens_prefetch(td->ds.files, &td->next[k], td->T);
    return ZT_OK;
}

enum zt_status train_data_first_loss(struct train_data *td, zt_gpt2_t m, double *loss) {
    struct zt_sampler_state first = {0};
    zt_dataset_next(&td->ds, &td->ds.train, &first, td->B, td->rows);
    const struct zt_gpt2_batch b = {td->ds.files, td->rows, td->T};
    ZT_CHECK(zt_gpt2_batch_submit(m, &b, 1, 0));
    return zt_gpt2_step_wait(m, loss, NULL);
}

// ----------------------------------------------------------------------------
// evaluation

int train_data_eval_due(const struct train_data *td, int64_t s, int64_t last) {
    if (!td->ds.valid.nsources) return 0;
    return s == 0 || s == last || (td->eval_interval > 0 && s % td->eval_interval == 0);
}

enum zt_status train_data_eval(struct train_data *td, zt_gpt2_t m, double *loss) {
    struct zt_sampler_state v = {0}; /* every evaluation reads the same batches */
    double sum = 0;
    for (int64_t i = 1; i <= td->eval_steps; i++) {
        zt_dataset_next(&td->ds, &td->ds.valid, &v, td->B, td->rows);
        const struct zt_gpt2_batch b = {td->ds.files, td->rows, td->T};
        double l;
        ZT_CHECK(zt_gpt2_batch_submit(m, &b, i, 0));
        ZT_CHECK(zt_gpt2_step_wait(m, &l, NULL));
        sum += l;
    }
    *loss = sum / (double)td->eval_steps;
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// the checkpoint's part

char *train_data_meta(const struct train_data *td, int64_t s) {
    char *sampler = zt_sampler_state_json(&td->ds, &td->st);
    if (!sampler) return NULL;
    size_t n = strlen(sampler) + 256;
    char *out = malloc(n);
    if (out)
        snprintf(out, n, "\"sampler\": %s, \"curriculum\": {\"enabled\": %s, \"step\": %lld, "
                 "\"seqlen\": %d}", sampler, td->curriculum->enabled ? "true" : "false",
                 (long long)s, active_length(td, s));
    free(sampler);
    return out;
}

void train_data_epochs(const struct train_data *td, char *buf, size_t n) {
    size_t at = (size_t)snprintf(buf, n, "[");
    for (int s = 0; s < td->ds.train.nsources && at < n; s++)
        at += (size_t)snprintf(buf + at, n - at, "%s%lld", s ? ", " : "",
                               (long long)zt_dataset_epoch(&td->ds, &td->ds.train, &td->st, s));
    if (at < n) snprintf(buf + at, n - at, "]");
}
