/* test_gpu_kernel_choice.c - how conv2d and dense layers choose their GPU kernels by default: the
 * fixed rule for the shapes it was measured on (LeNet's), timed once and kept in the kernel cache
 * elsewhere (gpu/kernel_cache.h), the cache's choice taken without timing by later layers and
 * runs, the rule always in a deterministic context, and a cache that cannot be read refused with
 * its file named. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/net.h"
#include "gpu/kernel_cache.h"
#include "layer_testing.h"
#include "testing.h"

/* A convolution no rule was measured on (no pooling after it) and two dense layers that are not
 * LeNet's. */
#define UNMEASURED                                                                                         \
    "[input]\nchannels=8\nheight=12\nwidth=12\n[conv2d]\nname=conv\nfilters=16\nsize=3\npad=1\n[relu]\n" \
    "[dense]\nname=fc1\noutputs=24\n[relu]\n[dense]\nname=fc2\noutputs=5\n[softmax_ce]\n"
#define LENET                                                                                                   \
    "[input]\nchannels=1\nheight=28\nwidth=28\n[conv2d]\nname=conv1\nfilters=20\nsize=5\n[maxpool]\nsize=2\n" \
    "[conv2d]\nname=conv2\nfilters=50\nsize=5\n[maxpool]\nsize=2\n[dense]\nname=ip1\noutputs=500\n[relu]\n"   \
    "[dense]\nname=ip2\noutputs=10\n[softmax_ce]\n"
#define BATCH 8

/* Points the process's kernel cache at a fresh file of the tests' folder. */
static const char *fresh_cache(const char *name)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/kernel-choice-%s.txt", bn_test_tmpdir(), name);
    remove(path);
    setenv("BLOBNET_KERNEL_CACHE", path, 1);
    bn_kernel_cache_reset();
    return path;
}

/* Runs body on the device context, then points the kernel cache back where it was and leaves
 * the context as the other tests expect it, pass or fail. */
static int on_device(int (*body)(bn_ctx *))
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    const char *old = getenv("BLOBNET_KERNEL_CACHE");
    char *saved_cache = old ? strdup(old) : NULL;
    int r = body(ctx);
    if (saved_cache) setenv("BLOBNET_KERNEL_CACHE", saved_cache, 1);
    else unsetenv("BLOBNET_KERNEL_CACHE");
    free(saved_cache);
    bn_kernel_cache_reset();
    ctx->deterministic = 0;
    return r;
}

/* One training pass of a fresh net of text on ctx at BATCH (with the input's gradient, so that
 * every layer has a data pass); the named layer's kernels into kernels (describe_gpu). */
static bn_status one_pass(const char *text, bn_ctx *ctx, const char *layer, char *kernels, size_t cap)
{
    bn_net *net = NULL;
    bn_status s = bn_net_from_text(text, "kernel-choice", &net);
    if (s == BN_OK) s = bn_net_setup(net, BATCH, ctx, 1, 7);
    if (s == BN_OK) s = bn_net_set_batch(net, BATCH);
    if (s == BN_OK) s = lt_fill_normal(net, 7, 1.0, 0.0);
    if (s == BN_OK) s = lt_fill_labels(net, 7, 5);
    if (s == BN_OK) s = bn_net_forward(net, 1);
    if (s == BN_OK) s = bn_net_backward(net);
    if (s == BN_OK) s = bn_device_sync();
    if (s == BN_OK && kernels) {
        const bn_layer *l = bn_net_find_layer(net, layer);
        kernels[0] = '\0';
        if (l && l->ops->describe_gpu) l->ops->describe_gpu(l, kernels, cap);
    }
    bn_net_free(net);
    return s;
}

/* The cache file's choice of the first key holding `needle`, into choice; 0 when none. */
static int cached(const char *path, const char *needle, char *choice, size_t cap)
{
    char line[1024];
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        char *tab = strchr(line, '\t');
        if (line[0] == '#' || !tab) continue;
        *tab = '\0';
        if (!strstr(line, needle)) continue;
        tab[1 + strcspn(tab + 1, "\n")] = '\0';
        snprintf(choice, cap, "%s", tab + 1);
        found = 1;
    }
    fclose(f);
    return found;
}

/* Rewrites the choice of every key holding `needle` in the cache file as `choice`. */
static int rewrite(const char *path, const char *needle, const char *choice)
{
    char lines[64][1024];
    int count = 0, changed = 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    while (count < 64 && fgets(lines[count], sizeof lines[count], f)) count++;
    fclose(f);
    if (!(f = fopen(path, "w"))) return 0;
    for (int i = 0; i < count; i++) {
        char *tab = strchr(lines[i], '\t');
        if (lines[i][0] != '#' && tab) {
            *tab = '\0';
            if (strstr(lines[i], needle)) {
                fprintf(f, "%s\t%s\n", lines[i], choice);
                changed++;
                continue;
            }
            *tab = '\t';
        }
        fputs(lines[i], f);
    }
    return fclose(f) == 0 && changed > 0;
}

static int unmeasured_shapes(bn_ctx *ctx)
{
    const char *path = fresh_cache("unmeasured");
    char kernels[1024], choice[BN_KERNEL_CHOICE_MAX];
    /* Timed once, and kept: the convolution's three passes, fc1's three products. */
    CHECK_OK(one_pass(UNMEASURED, ctx, "conv", kernels, sizeof kernels));
    CHECK_MSG(cached(path, " conv2d 8x12x12 k3 s1 p1 f16 n8 data", choice, sizeof choice), "no conv2d entry in %s",
              path);
    CHECK_MSG(strncmp(choice, "fwd=", 4) == 0 && strstr(choice, " data=") && strstr(choice, " filter="), "%s", choice);
    CHECK_MSG(cached(path, " dense dw n8 k2304 m24 ", choice, sizeof choice), "no entry for fc1's dW in %s", path);
    CHECK_MSG(cached(path, " dense fwd n8 k2304 m24 ", choice, sizeof choice), "no entry for fc1's forward in %s",
              path);
    /* A later run takes the cache's choices as they are, timing nothing: cuDNN's implicit GEMM
     * forward and blobnet's direct kernels for the convolution, own_gemm's 32x32 FMA tiles for
     * fc1's dW. */
    CHECK(rewrite(path, " conv2d 8x12x12 k3 s1 p1 f16 n8 data", "fwd=cudnn:0 data=direct filter=direct"));
    CHECK(rewrite(path, " dense dw n8 k2304 m24 ", "own 1"));
    bn_kernel_cache_reset();
    CHECK_OK(one_pass(UNMEASURED, ctx, "conv", kernels, sizeof kernels));
    CHECK_MSG(strcmp(kernels, "n=8: fwd implicit_gemm, bwd_data blobnet direct, bwd_filter blobnet direct") == 0,
              "conv kernels: %s", kernels);
    CHECK_OK(one_pass(UNMEASURED, ctx, "fc1", kernels, sizeof kernels));
    CHECK_MSG(strstr(kernels, "n=8 dW: blobnet fma32"), "fc1 kernels: %s", kernels);
    CHECK(cached(path, " conv2d 8x12x12 k3 s1 p1 f16 n8 data", choice, sizeof choice) &&
          strcmp(choice, "fwd=cudnn:0 data=direct filter=direct") == 0);
    /* A deterministic context keeps the rule: blobnet's kernels wherever they apply. */
    ctx->deterministic = 1;
    CHECK_OK(one_pass(UNMEASURED, ctx, "conv", kernels, sizeof kernels));
    ctx->deterministic = 0;
    CHECK_MSG(strstr(kernels, "fwd blobnet") && !strstr(kernels, "implicit_gemm"), "deterministic conv kernels: %s",
              kernels);
    /* A choice that no longer fits the layer (cuDNN's FFT, which FP32-exact runs refuse) is
     * timed again and replaced. */
    CHECK(rewrite(path, " conv2d 8x12x12 k3 s1 p1 f16 n8 data", "fwd=cudnn:4 data=direct filter=direct"));
    bn_kernel_cache_reset();
    CHECK_OK(one_pass(UNMEASURED, ctx, "conv", kernels, sizeof kernels));
    CHECK_MSG(!strstr(kernels, "fwd fft") &&
                  cached(path, " conv2d 8x12x12 k3 s1 p1 f16 n8 data", choice, sizeof choice) &&
                  strcmp(choice, "fwd=cudnn:4 data=direct filter=direct") != 0,
              "conv kernels %s, cached %s", kernels, choice);
    /* One that cannot be read stops the pass, naming the file. */
    CHECK(rewrite(path, " conv2d 8x12x12 k3 s1 p1 f16 n8 data", "fwd=fastest data=direct filter=direct"));
    bn_kernel_cache_reset();
    CHECK_ERR(one_pass(UNMEASURED, ctx, "conv", NULL, 0), BN_ERR_DATA, "cannot read the choice 'fwd=fastest");
    CHECK_MSG(strstr(bn_last_error(), path), "%s", bn_last_error());
    CHECK(rewrite(path, " conv2d 8x12x12 k3 s1 p1 f16 n8 data", "fwd=direct data=direct filter=direct"));
    CHECK(rewrite(path, " dense dw n8 k2304 m24 ", "own"));
    bn_kernel_cache_reset();
    CHECK_ERR(one_pass(UNMEASURED, ctx, "fc1", NULL, 0), BN_ERR_DATA, "cannot read the choice 'own'");
    return BN_PASS;
}

BN_TEST(gpu_kernel_choice_is_timed_once_and_cached_past_the_rule)
{
    return on_device(unmeasured_shapes);
}

static int lenet_shapes(bn_ctx *ctx)
{
    const char *path = fresh_cache("lenet");
    char kernels[1024];
    CHECK_OK(one_pass(LENET, ctx, "conv1", kernels, sizeof kernels));
    FILE *f = fopen(path, "r");
    if (f) fclose(f);
    CHECK_MSG(!f, "LeNet's shapes were timed and kept in %s", path);
    /* The rule's choice: blobnet's kernels for every pass. */
    CHECK_MSG(strstr(kernels, "fwd blobnet") && strstr(kernels, "bwd_data blobnet") &&
                  strstr(kernels, "bwd_filter blobnet"),
              "conv1: %s", kernels);
    CHECK_OK(one_pass(LENET, ctx, "ip1", kernels, sizeof kernels));
    CHECK_MSG(strstr(kernels, "n=8 dW: blobnet") && !strstr(kernels, "cublas"), "ip1: %s", kernels);
    return BN_PASS;
}

BN_TEST(gpu_kernel_choice_keeps_the_rule_on_lenet_shapes)
{
    return on_device(lenet_shapes);
}
