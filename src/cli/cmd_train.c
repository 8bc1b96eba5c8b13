/* cmd_train.c - `blobnet train MODEL [options]`. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "data_source.h"
#include "core/lr_policies/lr_policies.h"
#include "core/optimizers/optimizers.h"
#include "core/plugin.h"
#include "dist/dist.h"
#include "dist/supervise.h"
#include "io/safetensors.h"
#include "core/hash.h"
#include "core/timeline.h"
#include "train/dist_schedule.h"
#include "train/precision.h"
#include "train/progress.h"
#include "train/settings.h"
#include "train/trainer.h"

typedef struct train_args {
    const char *model, *device, *save, *resume, *log;
    bn_data_flags data;     /* --dataset, --data, --data-option, --holdout */
    long epochs, batch, seed, train_limit, test_limit, log_every, profile_first, profile_last, checkpoint_every, debug_numerics;
    long warmup;
    double lr, momentum, weight_decay;
    const char *optimizer, *lr_policy;
    int quiet, tf32, deterministic, autotune, no_graph, bf16;
    double until_accuracy;
    const char *shift;      /* --shift's text, checked once the model's input size is known */
    int flip;               /* 1 --flip, -1 --no-flip, 0 neither: the model file's [augment] */
    const char *pad;        /* --pad's text */
    const char *cutout;     /* --cutout's text, checked once the model's input size is known */
    long gpus;              /* --gpus, 0 when not given */
    long rank, world;       /* --rank (-1 when not given) and --world (0 when not given) */
    const char *rendezvous; /* --rendezvous HOST:PORT */
    char host[256];         /* --rendezvous's host and port, once checked */
    int port;
} train_args;

enum { OPT_DATA = 256, OPT_DATASET, OPT_DEVICE, OPT_THREADS, OPT_EPOCHS, OPT_BATCH, OPT_LR, OPT_MOMENTUM, OPT_WD,
       OPT_POLICY, OPT_SEED, OPT_LIMIT, OPT_TEST_LIMIT, OPT_SAVE, OPT_RESUME, OPT_QUIET, OPT_LOG, OPT_LOG_EVERY,
       OPT_TF32, OPT_DETERMINISTIC, OPT_AUTOTUNE, OPT_PROFILE, OPT_PLUGIN, OPT_NO_GRAPH,
       OPT_SHIFT, OPT_FLIP, OPT_NO_FLIP, OPT_PAD, OPT_CUTOUT,
       OPT_UNTIL, OPT_CHECKPOINT_EVERY, OPT_DEBUG_NUMERICS, OPT_OPTIMIZER, OPT_WARMUP, OPT_PRECISION,
       OPT_GPUS, OPT_RANK, OPT_WORLD, OPT_RENDEZVOUS, OPT_DATA_OPTION, OPT_HOLDOUT, OPT_HELP };

static const struct option train_options[] = {
    {"data", required_argument, 0, OPT_DATA},       {"dataset", required_argument, 0, OPT_DATASET},
    {"device", required_argument, 0, OPT_DEVICE}, {"threads", required_argument, 0, OPT_THREADS},   {"epochs", required_argument, 0, OPT_EPOCHS},
    {"batch", required_argument, 0, OPT_BATCH},     {"lr", required_argument, 0, OPT_LR},
    {"momentum", required_argument, 0, OPT_MOMENTUM}, {"weight-decay", required_argument, 0, OPT_WD},
    {"optimizer", required_argument, 0, OPT_OPTIMIZER}, {"warmup", required_argument, 0, OPT_WARMUP},
    {"lr-policy", required_argument, 0, OPT_POLICY}, {"seed", required_argument, 0, OPT_SEED},
    {"train-limit", required_argument, 0, OPT_LIMIT}, {"test-limit", required_argument, 0, OPT_TEST_LIMIT},
    {"save", required_argument, 0, OPT_SAVE},
    {"resume", required_argument, 0, OPT_RESUME},   {"quiet", no_argument, 0, OPT_QUIET},
    {"log", required_argument, 0, OPT_LOG},         {"log-every", required_argument, 0, OPT_LOG_EVERY},
    {"tf32", no_argument, 0, OPT_TF32},             {"deterministic", no_argument, 0, OPT_DETERMINISTIC},
    {"autotune", no_argument, 0, OPT_AUTOTUNE},
    {"profile-steps", required_argument, 0, OPT_PROFILE}, {"no-graph", no_argument, 0, OPT_NO_GRAPH},
    {"until-accuracy", required_argument, 0, OPT_UNTIL}, {"plugin", required_argument, 0, OPT_PLUGIN},
    {"checkpoint-every", required_argument, 0, OPT_CHECKPOINT_EVERY},
    {"debug-numerics", required_argument, 0, OPT_DEBUG_NUMERICS},
    {"shift", required_argument, 0, OPT_SHIFT},     {"flip", no_argument, 0, OPT_FLIP},
    {"no-flip", no_argument, 0, OPT_NO_FLIP},       {"pad", required_argument, 0, OPT_PAD},
    {"cutout", required_argument, 0, OPT_CUTOUT},   {"precision", required_argument, 0, OPT_PRECISION},
    {"gpus", required_argument, 0, OPT_GPUS},       {"rank", required_argument, 0, OPT_RANK},
    {"world", required_argument, 0, OPT_WORLD},     {"rendezvous", required_argument, 0, OPT_RENDEZVOUS},
    {"data-option", required_argument, 0, OPT_DATA_OPTION}, {"holdout", required_argument, 0, OPT_HOLDOUT},
    {"help", no_argument, 0, OPT_HELP},             {0, 0, 0, 0},
};

/* "A:B" with 1 <= A <= B, or a single step "A". */
static bn_status parse_step_range(const char *text, long *first, long *last)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%s", text);
    char *colon = strchr(buf, ':');
    if (colon) *colon = '\0';
    BN_TRY(bn_cli_int("--profile-steps", buf, 1, 2147483647L, first));
    *last = *first;
    if (colon) BN_TRY(bn_cli_int("--profile-steps", colon + 1, 1, 2147483647L, last));
    if (*last < *first) return bn_error(BN_ERR_USAGE, "--profile-steps: %s ends before it starts", text);
    return BN_OK;
}

/* Where --save writes must take a checkpoint before training starts, not when the first one is
 * due. */
static bn_status check_save_path(const char *path)
{
    bn_status s = bn_safetensors_check_target(path);
    if (s == BN_OK) return BN_OK;
    char why[512];
    snprintf(why, sizeof why, "%s", bn_last_error());
    return bn_error(s, "--save: %s", why);
}

/* --rank, --world and --rendezvous come together (a rank of a run on several GPUs) or not at
 * all. */
static bn_status check_rank_flags(train_args *a)
{
    int given = (a->rank >= 0) + (a->world > 0) + (a->rendezvous != NULL);
    if (given == 0) return BN_OK;
    if (given < 3) {
        char missing[64] = "";
        const char *names[] = {a->rank < 0 ? "--rank" : NULL, a->world == 0 ? "--world" : NULL,
                               a->rendezvous ? NULL : "--rendezvous"};
        for (int i = 0; i < 3; i++) {
            size_t len = strlen(missing);
            if (names[i]) snprintf(missing + len, sizeof missing - len, "%s%s", len ? " and " : "", names[i]);
        }
        return bn_error(BN_ERR_USAGE, "%s missing: --rank, --world and --rendezvous go together", missing);
    }
    if (a->rank >= a->world)
        return bn_error(BN_ERR_USAGE, "--rank: %ld is outside 0..%ld (--world %ld)", a->rank, a->world - 1, a->world);
    if (a->gpus && a->gpus != a->world)
        return bn_error(BN_ERR_USAGE, "--gpus %ld disagrees with --world %ld", a->gpus, a->world);
    bn_status s = bn_rendezvous_parse(a->rendezvous, a->host, sizeof a->host, &a->port);
    if (s == BN_OK) return BN_OK;
    char why[512];
    snprintf(why, sizeof why, "%s", bn_last_error());
    return bn_error(s, "--rendezvous: %s", why);
}

/* Returns BN_OK, a usage error, or -1 after printing help. */
static int parse_args(int argc, char **argv, train_args *a)
{
    *a = (train_args){.device = "auto", .epochs = -1, .batch = -1, .seed = -1, .warmup = -1, .lr = -1,
                      .momentum = -1, .weight_decay = -1, .rank = -1, .data = {.holdout = -1}};
    opterr = 0;
    optind = 1;
    int opt;
    while ((opt = getopt_long(argc, argv, ":", train_options, NULL)) != -1) {
        switch (opt) {
        case OPT_DATA: a->data.path = optarg; break;
        case OPT_DATASET: a->data.dataset = optarg; break;
        case OPT_DATA_OPTION: BN_TRY(bn_data_flags_add_option(&a->data, optarg)); break;
        case OPT_HOLDOUT: BN_TRY(bn_cli_int("--holdout", optarg, 0, 2147483647L, &a->data.holdout)); break;
        case OPT_DEVICE: a->device = optarg; break;
        case OPT_THREADS: BN_TRY(bn_cli_threads(optarg)); break;
        case OPT_EPOCHS: BN_TRY(bn_cli_int("--epochs", optarg, 0, 1000000, &a->epochs)); break;
        case OPT_BATCH: BN_TRY(bn_cli_int("--batch", optarg, 1, 65536, &a->batch)); break;
        case OPT_LR: BN_TRY(bn_cli_float("--lr", optarg, 0, 1000, &a->lr)); break;
        case OPT_MOMENTUM: BN_TRY(bn_cli_float("--momentum", optarg, 0, 1, &a->momentum)); break;
        case OPT_WD: BN_TRY(bn_cli_float("--weight-decay", optarg, 0, 1, &a->weight_decay)); break;
        case OPT_OPTIMIZER: a->optimizer = optarg; break;
        case OPT_WARMUP: BN_TRY(bn_cli_int("--warmup", optarg, 0, 2147483647L, &a->warmup)); break;
        case OPT_POLICY: a->lr_policy = optarg; break;
        case OPT_SEED: BN_TRY(bn_cli_int("--seed", optarg, 0, 2147483647L, &a->seed)); break;
        case OPT_LIMIT: BN_TRY(bn_cli_int("--train-limit", optarg, 1, 2147483647L, &a->train_limit)); break;
        case OPT_TEST_LIMIT: BN_TRY(bn_cli_int("--test-limit", optarg, 1, 2147483647L, &a->test_limit)); break;
        case OPT_SAVE: a->save = optarg; break;
        case OPT_RESUME: a->resume = optarg; break;
        case OPT_QUIET: a->quiet = 1; break;
        case OPT_LOG: a->log = optarg; break;
        case OPT_TF32: a->tf32 = 1; break;
        case OPT_NO_GRAPH: a->no_graph = 1; break;
        case OPT_UNTIL: BN_TRY(bn_cli_float("--until-accuracy", optarg, 0.01, 100, &a->until_accuracy)); break;
        case OPT_PROFILE: BN_TRY(parse_step_range(optarg, &a->profile_first, &a->profile_last)); break;
        case OPT_DETERMINISTIC: a->deterministic = 1; break;
        case OPT_AUTOTUNE: a->autotune = 1; break;
        case OPT_LOG_EVERY: BN_TRY(bn_cli_int("--log-every", optarg, 1, 2147483647L, &a->log_every)); break;
        case OPT_PLUGIN: BN_TRY(bn_plugin_load(optarg)); break;
        case OPT_CHECKPOINT_EVERY:
            BN_TRY(bn_cli_int("--checkpoint-every", optarg, 1, 2147483647L, &a->checkpoint_every));
            break;
        case OPT_DEBUG_NUMERICS:
            BN_TRY(bn_cli_int("--debug-numerics", optarg, 1, 2147483647L, &a->debug_numerics));
            break;
        case OPT_SHIFT: a->shift = optarg; break;
        case OPT_FLIP: a->flip = 1; break;
        case OPT_NO_FLIP: a->flip = -1; break;
        case OPT_PAD: a->pad = optarg; break;
        case OPT_CUTOUT: a->cutout = optarg; break;
        case OPT_PRECISION: BN_TRY(bn_cli_precision(optarg, &a->bf16)); break;
        case OPT_GPUS: BN_TRY(bn_cli_int("--gpus", optarg, 1, BN_DIST_MAX_RANKS, &a->gpus)); break;
        case OPT_RANK: BN_TRY(bn_cli_int("--rank", optarg, 0, BN_DIST_MAX_RANKS - 1, &a->rank)); break;
        case OPT_WORLD: BN_TRY(bn_cli_int("--world", optarg, 1, BN_DIST_MAX_RANKS, &a->world)); break;
        case OPT_RENDEZVOUS: a->rendezvous = optarg; break;
        case OPT_HELP: return -1;
        default: return bn_cli_option_error(opt, optopt, argv[optind - 1]);
        }
    }
    if (a->log_every && !a->log) return bn_error(BN_ERR_USAGE, "--log-every needs --log FILE");
    if (a->checkpoint_every && !a->save) return bn_error(BN_ERR_USAGE, "--checkpoint-every needs --save FILE");
    if (a->save) BN_TRY(check_save_path(a->save));
    if (a->log) BN_TRY(bn_cli_check_output_file("--log", a->log));
    BN_TRY(check_rank_flags(a));
    if (optind >= argc) return bn_error(BN_ERR_USAGE, "train: missing MODEL (see 'blobnet train --help')");
    if (optind + 1 < argc) return bn_error(BN_ERR_USAGE, "train: unexpected argument '%s'", argv[optind + 1]);
    a->model = argv[optind];
    return BN_OK;
}

/* The index of text among names (NULL-terminated); an error naming flag and the choices. */
static bn_status choice(const char *flag, const char *text, const char *const *names, int *out)
{
    if ((*out = bn_name_index(names, text)) >= 0) return BN_OK;
    char list[128];
    bn_names_join(names, list, sizeof list);
    return bn_error(BN_ERR_USAGE, "%s: '%s' is not one of %s", flag, text, list);
}

static bn_status apply_overrides(const train_args *a, bn_train_config *c)
{
    if (a->epochs >= 0) c->epochs = (int)a->epochs;
    if (a->batch > 0) c->batch = (int)a->batch;
    if (a->lr >= 0) c->lr = a->lr;
    if (a->momentum >= 0) BN_TRY(bn_train_config_set(c, "momentum", a->momentum));
    if (a->weight_decay >= 0) c->weight_decay = a->weight_decay;
    if (a->seed >= 0) c->seed = (unsigned long long)a->seed;
    if (a->warmup >= 0) c->warmup = (int)a->warmup;
    if (a->optimizer) BN_TRY(choice("--optimizer", a->optimizer, bn_optimizer_names, &c->optimizer));
    if (a->lr_policy) BN_TRY(choice("--lr-policy", a->lr_policy, bn_lr_policy_names, &c->lr_policy));
    return BN_OK;
}

/* --shift, --flip / --no-flip, --pad and --cutout over the model file's [augment]; the shift's
 * and the cutout's limits are the model's (half its input's smaller side, and that side). */
static bn_status apply_augment(const train_args *a, bn_net *net)
{
    long n;
    if (a->shift) {
        BN_TRY(bn_cli_int("--shift", a->shift, 0, bn_augment_max_shift(net->input_shape), &n));
        net->augment.shift = (int)n;
    }
    if (a->flip) net->augment.flip = a->flip > 0;
    if (a->pad) BN_TRY(choice("--pad", a->pad, bn_augment_pad_names, &net->augment.pad));
    if (a->cutout) {
        BN_TRY(bn_cli_int("--cutout", a->cutout, 0, bn_augment_max_cutout(net->input_shape), &n));
        net->augment.cutout = (int)n;
    }
    return BN_OK;
}

/* A fresh copy of the model to be trained, with the run's overrides (bn_net_maker). */
static bn_status make_net(void *env, bn_net **net)
{
    const train_args *a = env;
    BN_TRY(bn_net_from_file(a->model, net));
    return apply_overrides(a, &(*net)->train);
}

/* --precision bf16: BF16 where it trains faster than FP32 (train/precision.h); says once when
 * FP32 is taken instead, and why. Ranks of a run on several GPUs keep BF16 (each would time on
 * its own and could choose otherwise). */
static bn_status choose_precision(const train_args *a, bn_ctx *ctx, int batch, int quiet)
{
    bn_precision_verdict v;
    BN_TRY(bn_precision_choose(ctx, make_net, (void *)a, batch, &v));
    bn_timeline_mark("precision chosen");
    if (v.bf16 || quiet) return BN_OK;
    fprintf(stderr, "blobnet: note: --precision bf16: %s trains faster in FP32 on this GPU (a step %.3f ms%s "
            "against %.3f ms in BF16, %s); training in FP32. --precision bf16-strict keeps BF16\n",
            a->model, v.fp32_ms, ctx->tf32 ? " with TF32 products" : "", v.bf16_ms,
            v.timed ? "timed now" : "timed before, kernel cache");
    return BN_OK;
}

/* A rank of a run on several GPUs other than rank 0: it trains and loads --resume like the
 * others, but prints nothing but errors and writes no file. */
static int follower(const train_args *a)
{
    return a->rank > 0;
}

typedef struct train_run {
    bn_net *net;
    bn_optimizer *opt;
    bn_dataset train, test, holdout;  /* holdout: count 0 without one */
    bn_data_source data;
    bn_ctx *ctx;
    bn_metrics_log log;     /* fd -1 while not open */
    bn_dist dist;           /* this rank's place in a run on several GPUs, with --rank */
    char code_model[160];   /* what the kernel cache keeps the run's GPU code modules under
                               (code_signature) */
} train_run;

/* [input]'s `auto` mean or std from the training set (the holdout left out), printed once; a
 * resumed run takes them from its checkpoint instead. */
static bn_status auto_input_norm(train_run *r, int print)
{
    const int c = r->train.channels;
    double *mean = malloc(2 * (size_t)c * sizeof *mean);
    if (!mean) return bn_error(BN_ERR_NOMEM, "out of host memory for the input statistics");
    bn_dataset_stats(&r->train, mean, mean + c);
    int mean_auto = r->net->input_norm_auto & BN_NORM_AUTO_MEAN, std_auto = r->net->input_norm_auto & BN_NORM_AUTO_STD;
    bn_status s = bn_net_set_input_norm(r->net, mean_auto ? mean : NULL, std_auto ? mean + c : NULL);
    if (s == BN_OK && print) {
        printf("blobnet: input statistics of the %d training examples:", r->train.count);
        for (int k = 0; k < c && k < 8; k++)
            printf("%s mean %.4f std %.4f", k ? "," : "", r->net->input_mean[k], r->net->input_std[k]);
        printf("%s\n", c > 8 ? ", ..." : "");
    }
    free(mean);
    return s;
}

/* A fresh run starts its log; a resumed one appends to the log of the run it resumes, without the
 * rows of the steps it trains again. */
static bn_status open_log(const train_args *a, bn_metrics_log *log, long step)
{
    if (!a->resume) return bn_metrics_log_create(log, a->log);
    long dropped;
    BN_TRY(bn_metrics_log_resume(log, a->log, step, &dropped));
    if (dropped)
        fprintf(stderr, "blobnet: note: %s: removed %ld line%s after step %ld, where the checkpoint was saved; this "
                "run writes them again\n", a->log, dropped, dropped == 1 ? "" : "s", step);
    return BN_OK;
}

/* h with text fed in, then a byte no text holds, which ends each part. */
static uint64_t fnv1a(uint64_t h, const char *text)
{
    static const unsigned char end = 0xff;
    return bn_fnv1a(bn_fnv1a_text(h, text), &end, 1);
}

/* What every rank must share to train as one: the model's description, the training settings
 * (batch included), the seed, the size of the training set, where a resume starts, the
 * arithmetic (precision, TF32, determinism), the gradient buckets (ranks that cut them
 * differently would wait on each other's collectives) and when their all-reduces run (a timed
 * choice's agreement is a collective of its own). */
static uint64_t training_fingerprint(const train_run *r, const bn_train_state *st)
{
    char settings[BN_SETTINGS_MAX], rest[160];
    bn_settings_format(&r->net->train, &r->net->augment, settings);
    snprintf(rest, sizeof rest,
             "seed=%llu train=%d step=%ld seen=%ld bf16=%d tf32=%d deterministic=%d bucket=%zu schedule=%d",
             (unsigned long long)st->seed, r->train.count, st->step, st->epoch_seen, r->ctx->bf16, r->ctx->tf32,
             r->ctx->deterministic, r->dist.bucket_bytes, r->dist.schedule);
    return fnv1a(fnv1a(fnv1a(BN_FNV1A_START, r->net->description), settings), rest);
}

/* Every wait of a run on several GPUs: $BLOBNET_DIST_TIMEOUT seconds, or 120. */
static bn_status dist_timeout(double *seconds)
{
    const char *env = getenv("BLOBNET_DIST_TIMEOUT");
    *seconds = 120;
    return env && *env ? bn_cli_float("BLOBNET_DIST_TIMEOUT", env, 0.001, 1e6, seconds) : BN_OK;
}

/* A size in bytes from the environment variable `name` (0 to 1 GiB), or `fallback`: the trainer's
 * gradient all-reduces ($BLOBNET_DIST_BUCKET, 0: one per layer) and the buckets pushed to the
 * peers ($BLOBNET_DIST_PUSH, 0: none). */
static bn_status dist_bytes(const char *name, long fallback, size_t *bytes)
{
    const char *env = getenv(name);
    long v = fallback;
    if (env && *env) BN_TRY(bn_cli_int(name, env, 0, 1L << 30, &v));
    *bytes = (size_t)v;
    return BN_OK;
}

/* Meets the other ranks named by --rendezvous and opens the communicator on this rank's GPU. */
static bn_status join_ranks(const train_args *a, train_run *r, const bn_train_state *st)
{
    if (!r->ctx) return bn_error(BN_ERR_USAGE, "--device %s: a rank trains on one GPU (gpu:K)", a->device);
    r->dist = (bn_dist){.rank = (int)a->rank, .world = (int)a->world, .device = r->ctx->device};
    BN_TRY(dist_timeout(&r->dist.timeout_s));
    BN_TRY(dist_bytes("BLOBNET_DIST_BUCKET", BN_DIST_BUCKET_BYTES, &r->dist.bucket_bytes));
    BN_TRY(dist_bytes("BLOBNET_DIST_PUSH", BN_DIST_PUSH_BYTES, &r->dist.push_bytes));
    const char *apart = getenv("BLOBNET_DIST_PUSH_UPDATE");
    long fold = 1;
    if (apart && *apart) BN_TRY(bn_cli_int("BLOBNET_DIST_PUSH_UPDATE", apart, 0, 1, &fold));
    r->dist.update_apart = !fold;
    BN_TRY(bn_schedule_parse(getenv("BLOBNET_DIST_SCHEDULE"), &r->dist.schedule));
    BN_TRY(bn_dist_sum_parse(getenv("BLOBNET_DIST_SUM"), &r->dist.sum_way));
    return bn_dist_join(&r->dist, a->host, a->port, training_fingerprint(r, st), r->ctx);
}

/* What decides which of the library's GPU modules a run launches kernels from: the model, the batch
 * and the arithmetic asked for (the kernel cache keeps them under it: code_load.cu). */
static void code_signature(const train_args *a, const train_run *r, char *buf, size_t cap)
{
    snprintf(buf, cap, "%016llx batch=%d precision=%d tf32=%d deterministic=%d autotune=%d",
             (unsigned long long)fnv1a(BN_FNV1A_START, r->net->description), r->net->train.batch, (int)a->bf16,
             a->tf32, a->deterministic, a->autotune);
}

static bn_status prepare(const train_args *a, train_run *r, bn_train_state *st)
{
    bn_timeline_mark("the command begins (program and libraries loaded)");
    BN_TRY(bn_net_from_file(a->model, &r->net));
    bn_train_config *cfg = &r->net->train;
    BN_TRY(apply_overrides(a, cfg));
    BN_TRY(apply_augment(a, r->net));
    BN_TRY(bn_data_source_resolve(&a->data, r->net, &r->data));
    int quiet = a->quiet || a->rank >= 0;
    /* The device opens (CUDA's context, cuDNN's and cuBLAS's handles) while the data is read: each
     * takes a fifth of a second or more before LeNet's first step. The reading waits for the
     * driver's start, which it would slow (bn_cli_open_device_wait_driver). The device's errors,
     * and a precision the device cannot serve, come before the data's. A rank without a GPU is an
     * error (join_ranks), not a warning and a run on the CPU. */
    bn_cli_opening opening;
    BN_TRY(bn_cli_open_device_begin(a->device, quiet, &opening));
    bn_timeline_mark("model read");
    bn_cli_open_device_wait_driver(&opening);
    bn_status data = bn_data_source_load_all(&r->data, r->net, (int)a->train_limit, (int)a->test_limit, quiet,
                                             &r->train, &r->test, &r->holdout);
    bn_timeline_mark("data read");
    BN_TRY(bn_cli_open_device_end(&opening, &r->ctx));
    bn_timeline_mark("device open");
    if (r->ctx) {
        r->ctx->tf32 = a->tf32;
        r->ctx->deterministic = a->deterministic;
        r->ctx->autotune = a->autotune;
    }
    BN_TRY(bn_cli_apply_precision(a->bf16, r->ctx));
    BN_TRY(data);
    code_signature(a, r, r->code_model, sizeof r->code_model);
    /* The modules this model's last run launched kernels from load beside its setup and the data's
     * upload, rather than one by one at the first step's first launches (code_load.cu). */
    bn_device_code_load_for(r->code_model);
    if (a->bf16 == BN_PRECISION_BF16 && a->rank < 0) BN_TRY(choose_precision(a, r->ctx, cfg->batch, quiet));
    if (r->net->input_norm_auto && !a->resume) BN_TRY(auto_input_norm(r, !quiet && !follower(a)));
    r->net->relu_in_place = 1; /* on the CPU, ReLUs over their input where they may */
    BN_TRY(bn_net_setup(r->net, cfg->batch, r->ctx, 0, cfg->seed));
    bn_timeline_mark("network set up");
    BN_TRY(bn_data_check_model(r->net, &r->train, &r->data, "training"));
    BN_TRY(bn_optimizer_create(r->net, cfg, &r->opt));
    *st = (bn_train_state){.seed = cfg->seed, .examples = r->train.count};
    if (a->resume) {
        bn_resume resume = {.examples = r->train.count};
        BN_TRY(bn_checkpoint_resume(a->resume, r->net, r->opt, st, &resume));
        if (resume.changes[0] && !follower(a))
            fprintf(stderr, "blobnet: note: resuming %s with changed training settings: %s\n", a->resume,
                    resume.changes);
    }
    if (a->rank >= 0) BN_TRY(join_ranks(a, r, st));
    if (a->log && !follower(a)) BN_TRY(open_log(a, &r->log, st->step));
    if (!a->quiet && !follower(a))
        printf("blobnet: training %s on %s%s%s: %d train / %d test images, batch %d, %zu parameters\n",
               a->model, r->ctx ? "gpu " : "cpu", r->ctx ? r->ctx->name : "", a->resume ? " (resumed)" : "",
               r->train.count, r->test.count, cfg->batch, r->net->num_params);
    /* Seen at once through a pipe or a log file too, not when the first epoch ends. */
    fflush(stdout);
    return BN_OK;
}

/* What the run holds on the device; the datasets (uint8 images, labels and the order) are
 * shown apart, since they scale with the data rather than the model. */
static void print_device_memory(const train_run *r)
{
    size_t now, peak;
    bn_device_memory(&now, &peak);
    const bn_dataset *sets[] = {&r->train, &r->test};
    double data = 0;
    for (int i = 0; i < 2; i++)
        data += (double)sets[i]->count * ((double)bn_dataset_example_size(sets[i]) * (sets[i]->values ? 4 : 1) +
                                          sizeof *sets[i]->labels + sizeof(int));
    printf("peak device memory: %.1f MiB without the datasets (%.1f MiB with them)\n", (peak - data) / 1048576.0,
           peak / 1048576.0);
}

/* The signal that asked training to stop (SIGINT, SIGTERM or SIGHUP), 0 while none has. The
 * handler only sets it; the trainer looks at it between steps, saves and returns. A rank of a
 * run on several GPUs that stops because another rank was signalled finds that signal here
 * (the trainer writes the agreed one back), so every rank exits with the same code. */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
    stop_signal = sig;
}

/* From now on SIGINT, SIGTERM and SIGHUP (a closed terminal or ssh session) stop training
 * cleanly; a second one has its default effect, for a user who does not want to wait for the
 * save. */
static void catch_stop_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

static bn_status run(const train_args *a, train_run *r)
{
    bn_train_state st;
    BN_TRY(prepare(a, r, &st));
    int quiet = a->quiet || follower(a);
    bn_trainer_opts opts = {.epochs = r->net->train.epochs, .save_path = follower(a) ? NULL : a->save,
                            .out = quiet ? NULL : stdout, .log = a->log && !follower(a) ? &r->log : NULL,
                            .log_every = (int)a->log_every,
                            .profile_first = a->profile_first, .profile_last = a->profile_last,
                            .no_graph = a->no_graph, .until_accuracy = a->until_accuracy / 100.0,
                            .checkpoint_every = a->checkpoint_every, .debug_numerics = a->debug_numerics,
                            .stop = &stop_signal, .dist = a->rank >= 0 ? &r->dist : NULL,
                            .holdout = r->holdout.count ? &r->holdout : NULL};
    /* The live line only on a terminal: logs and pipes get the epoch lines alone. */
    bn_progress progress;
    if (!quiet && isatty(fileno(stdout))) {
        bn_progress_init(&progress, stdout);
        opts.progress = bn_progress_hook;
        opts.progress_user = &progress;
    }
    bn_epoch_report last;
    catch_stop_signals();
    bn_status s = bn_train(r->net, r->opt, &r->train, &r->test, &opts, &st, &last);
    if (opts.progress) bn_progress_clear(&progress);
    BN_TRY(s);
    bn_device_code_keep_for(r->code_model);
    if (last.epoch == 0) {
        /* Nothing left to train: still evaluate, and save (with --epochs 0, the initial weights). */
        BN_TRY(bn_evaluate(r->net, &r->test, &last.test_loss, &last.test_acc));
        if (opts.save_path) BN_TRY(bn_checkpoint_save(a->save, r->net, r->opt, &st));
    }
    if (follower(a)) return BN_OK;
    if (r->ctx && !a->quiet) print_device_memory(r);
    printf("final test accuracy: %.2f%%\n", 100.0 * last.test_acc);
    if (fflush(stdout) != 0 || ferror(stdout))
        return bn_error(BN_ERR_IO, "standard output: cannot write the run's lines: %s", strerror(errno));
    return BN_OK;
}

/* The GPUs a --device list names ("gpu:0,1"); *n is 0 when spec is not a list. */
static bn_status device_list(const char *spec, int *devices, int *n)
{
    *n = 0;
    if (strncmp(spec, "gpu:", 4) != 0 || !strchr(spec, ',')) return BN_OK;
    for (const char *p = spec + 4;; p++) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[16];
        if (len >= sizeof item)
            return bn_error(BN_ERR_USAGE, "--device %s: '%.*s' is not a GPU number", spec, (int)len, p);
        memcpy(item, p, len);
        item[len] = '\0';
        if (*n == BN_DIST_MAX_RANKS)
            return bn_error(BN_ERR_USAGE, "--device %s: more than %d GPUs", spec, BN_DIST_MAX_RANKS);
        long ordinal;
        BN_TRY(bn_cli_int("--device", item, 0, 1024, &ordinal));
        for (int i = 0; i < *n; i++)
            if (devices[i] == ordinal)
                return bn_error(BN_ERR_USAGE, "--device %s: gpu %ld is named twice", spec, ordinal);
        devices[(*n)++] = (int)ordinal;
        if (!comma) return BN_OK;
        p = comma;
    }
}

/* Whether this process launches ranks, and on which GPUs: *n stays 0 when it trains itself (on
 * one device, or as the rank --rank names). flag receives how errors name the request. */
static bn_status plan_ranks(const train_args *a, int *devices, int *n, char *flag, size_t cap)
{
    int listed;
    BN_TRY(device_list(a->device, devices, &listed));
    *n = 0;
    if (a->rank >= 0) {
        if (listed || strcmp(a->device, "cpu") == 0)
            return bn_error(BN_ERR_USAGE, "--device %s: a rank trains on one GPU (gpu:K)", a->device);
        return BN_OK;
    }
    if (listed) {
        if (a->gpus && a->gpus != listed)
            return bn_error(BN_ERR_USAGE, "--gpus %ld: --device %s names %d GPUs", a->gpus, a->device, listed);
        snprintf(flag, cap, "--device %s", a->device);
        *n = listed;
        return BN_OK;
    }
    if (a->gpus <= 1) return BN_OK;
    if (strcmp(a->device, "auto") != 0 && strcmp(a->device, "gpu") != 0)
        return bn_error(BN_ERR_USAGE, "--gpus %ld: --device %s names one device; name %ld GPUs (--device gpu:0,1,...) "
                        "or leave --device out", a->gpus, a->device, a->gpus);
    for (int i = 0; i < a->gpus; i++) devices[i] = i;
    snprintf(flag, cap, "--gpus %ld", a->gpus);
    *n = (int)a->gpus;
    return BN_OK;
}

/* Refuses a model file that does not parse before n processes each say so. */
static bn_status check_model(const train_args *a)
{
    bn_net *net;
    BN_TRY(bn_net_from_file(a->model, &net));
    bn_train_config cfg = net->train;
    bn_status s = apply_overrides(a, &cfg);
    if (s == BN_OK) s = apply_augment(a, net);
    bn_net_free(net);
    return s;
}

/* This process as the launcher of n ranks: checks that the build and the machine can run them,
 * runs them, and returns the exit code. */
static int launch(int argc, char **argv, const train_args *a, const int *devices, int n, const char *flag)
{
    if (!bn_dist_compiled()) return bn_fail(bn_error(BN_ERR_DEVICE, "%s: %s", flag, bn_dist_missing()));
    /* Before CUDA makes its threads (counting the GPUs does), so that they inherit the block and
     * the signals meant for the supervisor reach it. */
    bn_supervise_take_signals();
    int count = bn_device_count();
    const char *plural = count == 1 ? "" : "s";
    for (int i = 0; i < n; i++) {
        if (devices[i] < count) continue;
        if (strncmp(flag, "--gpus", 6) == 0)
            return bn_fail(bn_error(BN_ERR_DEVICE, "%s: this machine has %d CUDA device%s", flag, count, plural));
        return bn_fail(bn_error(BN_ERR_DEVICE, "%s: there is no gpu %d; this machine has %d CUDA device%s", flag,
                                devices[i], count, plural));
    }
    double timeout_s;
    bn_status s = dist_timeout(&timeout_s);
    if (s == BN_OK) s = check_model(a);
    if (s != BN_OK) return bn_fail(s);
    int code;
    s = bn_launch_ranks(argc, argv, n, devices, &code);
    if (s != BN_OK && s != BN_ERR_INTERRUPTED) bn_cli_report("error", "%s", bn_last_error());
    return code;
}

/* The one line of a failed rank, "rank R: message", so that the launcher's output says which
 * process it came from. */
static bn_status name_rank(const train_args *a, bn_status s)
{
    if (s == BN_OK || s == BN_ERR_INTERRUPTED || a->rank < 0) return s;
    char why[2048], prefix[32];
    snprintf(why, sizeof why, "%s", bn_last_error());
    snprintf(prefix, sizeof prefix, "rank %ld: ", a->rank);
    if (strncmp(why, prefix, strlen(prefix)) == 0) return s; /* the communicator's errors name it already */
    return bn_error(s, "%s%s", prefix, why);
}

int bn_cmd_train(int argc, char **argv)
{
    train_args a;
    int p = parse_args(argc, argv, &a);
    if (p < 0) {
        bn_print_command_help("train");
        return 0;
    }
    if (p != BN_OK) return bn_fail((bn_status)p);
    int devices[BN_DIST_MAX_RANKS], n;
    char flag[320];
    bn_status planned = plan_ranks(&a, devices, &n, flag, sizeof flag);
    if (planned != BN_OK) return bn_fail(planned);
    if (n > 0) return launch(argc, argv, &a, devices, n, flag);
    train_run r = {.log = {.fd = -1}};
    bn_status s = name_rank(&a, run(&a, &r));
    bn_timeline_mark("training done");
    bn_status closed = bn_metrics_log_close(&r.log);
    if (s == BN_OK) s = closed;
    if (a.rank >= 0 && bn_dist_failed(&r.dist)) {
        /* The device may hold collectives a lost peer never lets end, and freeing device memory
         * would wait for them: report, then end without waiting; the driver reclaims the GPU. */
        int code = bn_fail(s);
        fflush(NULL);
        _exit(code);
    }
    if (a.rank >= 0) bn_dist_close(&r.dist, s != BN_OK);
    bn_optimizer_free(r.opt);
    bn_net_free(r.net);
    bn_dataset_free(&r.train);
    bn_dataset_free(&r.test);
    bn_dataset_free(&r.holdout);
    bn_data_source_free(&r.data);
    bn_ctx_close();
    bn_timeline_mark("memory and device released");
    if (s == BN_ERR_INTERRUPTED) {
        /* "blobnet: interrupted at step S; checkpoint saved to FILE", and the shell's code for
         * death by that signal (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP). */
        if (!follower(&a)) fprintf(stderr, "blobnet: %s\n", bn_last_error());
        return 128 + stop_signal;
    }
    return s == BN_OK ? 0 : bn_fail(s);
}
