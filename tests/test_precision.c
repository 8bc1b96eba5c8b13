/* test_precision.c - --precision bf16's choice between BF16 and FP32 (train/precision.h): the
 * rule, the kernel cache's verdicts, a timed choice on the device, and the CLI's one note. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/net.h"
#include "gpu/kernel_cache.h"
#include "testing.h"
#include "train/precision.h"

static char out[16384];

BN_TEST(precision_fp32_replaces_bf16_only_past_the_tie)
{
    CHECK(!bn_precision_fp32_wins(1.0, 1.0));
    CHECK(!bn_precision_fp32_wins(1.0, 0.99));  /* 1% faster: within the tie, BF16 stays */
    CHECK(bn_precision_fp32_wins(1.0, 0.97));   /* 3% faster: FP32 */
    CHECK(!bn_precision_fp32_wins(0.5, 1.0));
    return BN_PASS;
}

BN_TEST(precision_verdicts_read_back_or_are_refused)
{
    bn_precision_verdict v;
    CHECK(bn_precision_parse("fp32 0.1080 0.0706", &v));
    CHECK(!v.bf16 && !v.timed && v.bf16_ms == 0.1080 && v.fp32_ms == 0.0706);
    CHECK(bn_precision_parse("bf16 2.5 3", &v));
    CHECK(v.bf16 && v.bf16_ms == 2.5 && v.fp32_ms == 3.0);
    const char *bad[] = {"fp16 1 2", "bf16 1", "bf16 1 2 3", "bf16 0 2", "bf16 -1 2", "fp32 nan 1", "", "bf16"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) CHECK_MSG(!bn_precision_parse(bad[i], &v), "'%s'", bad[i]);
    return BN_PASS;
}

#define SKIP_WITHOUT_GPU() \
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device")

/* The run's model file, as the CLI's maker reads it. */
static bn_status make_mlp(void *env, bn_net **net)
{
    (void)env;
    return bn_net_from_file("models/mlp.cfg", net);
}

/* Points the kernel cache at a fresh file of this test's, holding `choice` (NULL: nothing) for
 * models/mlp.cfg at batch 64 on ctx's device. */
static int cache_with(bn_ctx *ctx, const char *choice, char *path, size_t cap)
{
    snprintf(path, cap, "%s/precision-cache.txt", bn_test_tmpdir());
    remove(path);
    setenv("BLOBNET_KERNEL_CACHE", path, 1);
    bn_kernel_cache_reset();
    if (!choice) return BN_PASS;
    bn_net *net;
    CHECK_OK(bn_net_from_file("models/mlp.cfg", &net));
    char key[BN_KERNEL_KEY_MAX];
    bn_status s = bn_precision_key(ctx, net, 64, key, sizeof key);
    bn_net_free(net);
    CHECK_OK(s);
    CHECK_OK(bn_kernel_cache_put(key, choice));
    bn_kernel_cache_reset();
    return BN_PASS;
}

static int choices(bn_ctx *ctx)
{
    char path[512];
    bn_precision_verdict v;
    /* A cached FP32 verdict: FP32 as the run asked for it (here without TF32), untimed. */
    CHECK(cache_with(ctx, "fp32 0.2000 0.1000", path, sizeof path) == BN_PASS);
    ctx->bf16 = 1, ctx->tf32 = 0;
    CHECK_OK(bn_precision_choose(ctx, make_mlp, NULL, 64, &v));
    CHECK(!v.bf16 && !v.timed && v.bf16_ms == 0.2 && v.fp32_ms == 0.1);
    CHECK(ctx->bf16 == 0 && ctx->tf32 == 0);
    /* A cached BF16 verdict leaves the context as asked. */
    CHECK(cache_with(ctx, "bf16 0.1000 0.2000", path, sizeof path) == BN_PASS);
    ctx->bf16 = 1, ctx->tf32 = 0;
    CHECK_OK(bn_precision_choose(ctx, make_mlp, NULL, 64, &v));
    CHECK(v.bf16 && !v.timed && ctx->bf16 == 1 && ctx->tf32 == 0);
    /* One that is no verdict stops the run, naming the file. */
    CHECK(cache_with(ctx, "fastest", path, sizeof path) == BN_PASS);
    CHECK_ERR(bn_precision_choose(ctx, make_mlp, NULL, 64, &v), BN_ERR_DATA,
              "cannot read the choice 'fastest' of the network's precision");
    /* Nothing cached: both builds are timed, the context follows the verdict, which is kept. */
    CHECK(cache_with(ctx, NULL, path, sizeof path) == BN_PASS);
    ctx->bf16 = 1, ctx->tf32 = 0;
    CHECK_OK(bn_precision_choose(ctx, make_mlp, NULL, 64, &v));
    printf("    mlp at batch 64: a step %.4f ms in BF16, %.4f ms in FP32: %s\n", v.bf16_ms, v.fp32_ms,
           v.bf16 ? "bf16" : "fp32");
    CHECK(v.timed && v.bf16_ms > 0 && v.fp32_ms > 0);
    CHECK(v.bf16 == !bn_precision_fp32_wins(v.bf16_ms, v.fp32_ms));
    CHECK(ctx->bf16 == v.bf16 && ctx->tf32 == 0);
    bn_kernel_cache_reset();
    ctx->bf16 = 1, ctx->tf32 = 0;
    bn_precision_verdict again;
    CHECK_OK(bn_precision_choose(ctx, make_mlp, NULL, 64, &again));
    CHECK(!again.timed && again.bf16 == v.bf16);
    /* The verdict without TF32 is not --tf32's: that one is timed afresh, and TF32 stays asked. */
    ctx->bf16 = 1, ctx->tf32 = 1;
    CHECK_OK(bn_precision_choose(ctx, make_mlp, NULL, 64, &again));
    CHECK(again.timed && ctx->tf32 == 1 && ctx->bf16 == again.bf16);
    /* A deterministic context keeps BF16 untimed. */
    CHECK(cache_with(ctx, "fp32 0.2000 0.1000", path, sizeof path) == BN_PASS);
    ctx->bf16 = 1, ctx->tf32 = 0, ctx->deterministic = 1;
    CHECK_OK(bn_precision_choose(ctx, make_mlp, NULL, 64, &v));
    ctx->deterministic = 0;
    CHECK(v.bf16 && ctx->bf16 == 1 && ctx->tf32 == 0);
    return BN_PASS;
}

BN_TEST(gpu_precision_choice_follows_the_cache_or_the_timing)
{
    SKIP_WITHOUT_GPU();
    const char *old = getenv("BLOBNET_KERNEL_CACHE");
    char *saved = old ? strdup(old) : NULL;
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    int r = choices(ctx);
    ctx->bf16 = 0, ctx->tf32 = 0, ctx->deterministic = 0;
    if (saved) setenv("BLOBNET_KERNEL_CACHE", saved, 1);
    else unsetenv("BLOBNET_KERNEL_CACHE");
    free(saved);
    bn_kernel_cache_reset();
    return r;
}

/* How often needle occurs in text. */
static int occurrences(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

BN_TEST(gpu_precision_bf16_says_once_when_it_trains_in_fp32)
{
    SKIP_WITHOUT_GPU();
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    const char *old = getenv("BLOBNET_KERNEL_CACHE");
    char *saved = old ? strdup(old) : NULL;
    char path[512];
    int r = cache_with(ctx, "fp32 0.2000 0.1000", path, sizeof path);
    const char *data = bn_test_synthetic_mnist("precision-mnist", 256, 64);
    char args[1024];
    if (r == BN_PASS && data) {
        snprintf(args, sizeof args, "train models/mlp.cfg --device gpu --epochs 2 --data %s --precision bf16", data);
        int rc = bn_test_cli_run(args, out, sizeof out);
        if (rc != 0 || occurrences(out, "trains faster in FP32") != 1 ||
            !strstr(out, "a step 0.100 ms against 0.200 ms in BF16, timed before, kernel cache"))
            printf("    '%s' exited %d:\n%s\n", args, rc, out), r = BN_FAIL;
        /* bf16-strict trains in BF16 whatever the cache says, without the note. */
        snprintf(args, sizeof args, "train models/mlp.cfg --device gpu --epochs 1 --data %s --precision bf16-strict",
                 data);
        rc = bn_test_cli_run(args, out, sizeof out);
        if (r == BN_PASS && (rc != 0 || strstr(out, "trains faster in FP32")))
            printf("    '%s' exited %d:\n%s\n", args, rc, out), r = BN_FAIL;
    } else if (!data) {
        r = BN_FAIL;
    }
    if (saved) setenv("BLOBNET_KERNEL_CACHE", saved, 1);
    else unsetenv("BLOBNET_KERNEL_CACHE");
    free(saved);
    bn_kernel_cache_reset();
    return r;
}
