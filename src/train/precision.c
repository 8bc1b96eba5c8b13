/* precision.c - BF16 or FP32 for a network asked to train in BF16 (precision.h). */
#include "precision.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "core/rng.h"
#include "gpu/chooser.h"
#include "trainer.h"

/* Steps of each timed epoch: the first epoch makes the plans and captures the step's graph, the
 * second replays it and is the one timed. */
#define TIMED_STEPS 24

int bn_precision_fp32_wins(double bf16_ms, double fp32_ms)
{
    return fp32_ms * (1.0 + BN_PRECISION_TIE) < bf16_ms;
}

int bn_precision_parse(const char *choice, bn_precision_verdict *out)
{
    char which[8];
    double b, f;
    char extra;
    if (sscanf(choice, "%7s %lf %lf %c", which, &b, &f, &extra) != 3 || !(b > 0) || !(f > 0)) return 0;
    if (strcmp(which, "bf16") != 0 && strcmp(which, "fp32") != 0) return 0;
    *out = (bn_precision_verdict){.bf16 = which[0] == 'b', .timed = 0, .bf16_ms = b, .fp32_ms = f};
    return 1;
}

/* count examples of net's input shape with random pixels and labels below classes, in *d. */
static bn_status random_set(const bn_net *net, int classes, int count, bn_dataset *d)
{
    const bn_blob *in = net->input;
    *d = (bn_dataset){.count = count, .channels = in->c, .height = in->h, .width = in->w, .num_classes = classes};
    const size_t bytes = (size_t)count * in->c * in->h * in->w;
    d->pixels = malloc(bytes);
    d->labels = malloc((size_t)count * sizeof *d->labels);
    if (!d->pixels || !d->labels) {
        bn_dataset_free(d);
        return bn_error(BN_ERR_NOMEM, "out of host memory for the precision's timing (%zu bytes)", bytes);
    }
    bn_rng r;
    bn_rng_seed(&r, 7, 0);
    for (size_t i = 0; i < bytes; i++) d->pixels[i] = (unsigned char)bn_rng_below(&r, 256);
    for (int i = 0; i < count; i++) d->labels[i] = (uint16_t)bn_rng_below(&r, (uint64_t)classes);
    return BN_OK;
}

/* The milliseconds of one training step of make()'s network in ctx's current precision: two
 * epochs of TIMED_STEPS steps on random data with a learning rate of 0 (the same kernels, and no
 * weights that could run off), the second timed. */
static bn_status time_step(bn_ctx *ctx, bn_net_maker make, void *env, int batch, double *ms)
{
    bn_net *net = NULL;
    bn_optimizer *opt = NULL;
    bn_dataset train = {0}, test = {0};
    bn_status s = make(env, &net);
    if (s == BN_OK) {
        net->train.lr = 0.0;
        s = bn_net_setup(net, batch, ctx, 0, net->train.seed);
    }
    if (s == BN_OK) s = bn_optimizer_create(net, &net->train, &opt);
    bn_layer *loss = s == BN_OK ? bn_net_loss_layer(net) : NULL;
    if (s == BN_OK && !loss)
        s = bn_error(BN_ERR_USAGE, "--precision bf16: %s has no loss layer to train", net->source);
    if (s == BN_OK) s = random_set(net, loss->in->c * loss->in->h * loss->in->w, TIMED_STEPS * batch, &train);
    if (s == BN_OK) s = random_set(net, loss->in->c * loss->in->h * loss->in->w, batch, &test);
    bn_trainer_opts opts = {.epochs = 2};
    bn_train_state st = {.seed = 1, .examples = train.count};
    bn_epoch_report last = {0};
    if (s == BN_OK) s = bn_train(net, opt, &train, &test, &opts, &st, &last);
    if (s == BN_OK) *ms = last.seconds * 1e3 / TIMED_STEPS;
    bn_dataset_free(&train);
    bn_dataset_free(&test);
    bn_optimizer_free(opt);
    bn_net_free(net);
    return s;
}

/* A cached verdict (bn_choice_reader). */
static bn_status read_verdict(void *env, const char *choice, int *verdict)
{
    *verdict = bn_precision_parse(choice, (bn_precision_verdict *)env) ? BN_CHOICE_TAKEN : BN_CHOICE_UNREADABLE;
    return BN_OK;
}

bn_status bn_precision_key(const bn_ctx *ctx, const bn_net *net, int batch, char *key, size_t cap)
{
    return bn_chooser_key(ctx, key, cap, "precision %016llx n=%d tf32=%d", (unsigned long long)bn_fnv1a_text(BN_FNV1A_START, net->description), batch,
                          ctx->tf32);
}

/* The kernel cache's key of the network make() builds, at batch examples a step. */
static bn_status verdict_key(bn_ctx *ctx, bn_net_maker make, void *env, int batch, char *key, size_t cap)
{
    bn_net *net = NULL;
    bn_status s = make(env, &net);
    if (s == BN_OK) s = bn_precision_key(ctx, net, batch, key, cap);
    bn_net_free(net);
    return s;
}

bn_status bn_precision_choose(bn_ctx *ctx, bn_net_maker make, void *env, int batch, bn_precision_verdict *out)
{
    *out = (bn_precision_verdict){.bf16 = ctx && ctx->bf16};
    if (!ctx || !ctx->bf16 || ctx->deterministic) return BN_OK;
    char key[BN_KERNEL_KEY_MAX] = "";
    if (!ctx->autotune) {
        BN_TRY(verdict_key(ctx, make, env, batch, key, sizeof key));
        int hit = 0;
        BN_TRY(bn_chooser_lookup(key, "the network's precision", read_verdict, out, &hit));
        if (!hit) *out = (bn_precision_verdict){.bf16 = 1};
    }
    if (!out->bf16_ms) {
        BN_TRY(time_step(ctx, make, env, batch, &out->bf16_ms));
        ctx->bf16 = 0;
        bn_status s = time_step(ctx, make, env, batch, &out->fp32_ms);
        ctx->bf16 = 1;
        BN_TRY(s);
        out->timed = 1;
        out->bf16 = !bn_precision_fp32_wins(out->bf16_ms, out->fp32_ms);
        char choice[BN_KERNEL_CHOICE_MAX];
        snprintf(choice, sizeof choice, "%s %.4f %.4f", out->bf16 ? "bf16" : "fp32", out->bf16_ms, out->fp32_ms);
        BN_TRY(bn_chooser_keep(key, choice));
    }
    if (!out->bf16) ctx->bf16 = 0;
    return BN_OK;
}
