/* test_code_load.c - the GPU code a training run loads beside the network's setup: every module a
 * layer type names exists (gpu/code_modules.h), every module is named by a type or by the training
 * command, the network's list puts each layer's likeliest module first, and on a device each
 * named module loads. */
#include <string.h>

#include "core/device.h"
#include "core/net.h"
#include "core/registry.h"
#include "gpu/code_modules.h"
#include "testing.h"
#include "train/trainer.h"

#define NAME(module) #module,
static const char *const modules[] = {BN_GPU_CODE_MODULES(NAME)};
#undef NAME
#define NUM_MODULES ((int)(sizeof modules / sizeof *modules))

/* 1 when the space-separated list holds the name (len chars). */
static int listed(const char *list, const char *name, size_t len)
{
    for (const char *p = list + strspn(list, " "); *p; p += strspn(p, " ")) {
        size_t n = strcspn(p, " ");
        if (n == len && strncmp(p, name, len) == 0) return 1;
        p += n;
    }
    return 0;
}

static int is_module(const char *name, size_t len)
{
    for (int i = 0; i < NUM_MODULES; i++)
        if (strlen(modules[i]) == len && strncmp(modules[i], name, len) == 0) return 1;
    return 0;
}

BN_TEST(code_load_every_named_module_exists_and_every_module_is_named)
{
    int named[NUM_MODULES] = {0};
    const char *training = BN_TRAIN_GPU_CODE " " BN_TRAIN_GPU_CODE_BF16;
    for (int i = 0; i < NUM_MODULES; i++) named[i] = listed(training, modules[i], strlen(modules[i]));
    const bn_layer_ops *ops;
    int types = 0;
    for (int t = 0; (ops = bn_layer_type_at(t)); t++) {
        if (!ops->gpu_code) continue;
        types++;
        for (const char *p = ops->gpu_code + strspn(ops->gpu_code, " "); *p; p += strspn(p, " ")) {
            size_t n = strcspn(p, " ");
            CHECK_MSG(is_module(p, n), "layer type %s names GPU code module '%.*s', which code_modules.h lacks",
                      ops->type, (int)n, p);
            p += n;
        }
        for (int i = 0; i < NUM_MODULES; i++) named[i] |= listed(ops->gpu_code, modules[i], strlen(modules[i]));
    }
    CHECK(types >= 10); /* conv2d, dense, the two poolings, the five activations, softmax_ce, ... */
    for (int i = 0; i < NUM_MODULES; i++)
        CHECK_MSG(named[i], "module %s is named by no layer type nor the training command", modules[i]);
    return BN_PASS;
}

BN_TEST(code_load_lists_each_layers_likeliest_module_first)
{
    bn_net *net = NULL;
    CHECK_OK(bn_net_from_file("models/lenet.cfg", &net));
    char code[1024];
    bn_net_gpu_code(net, "loader_gpu pool", code, sizeof code);
    /* conv1, pool1, conv2, pool2, ip1, relu1, ip2, loss: each type's first name in that order
     * (pool given first already, conv2's and ip2's repeats dropped), then each one's second, ... */
    const char *want = "loader_gpu pool conv_direct dense_gemm activation softmax_ce conv_rows dense_skinny "
                       "conv_tensor dense_plan conv_halo dense conv_argmax dense_bf16 conv_igemm conv_wino conv_bias "
                       "conv_bf16_passes conv_reference";
    CHECK_MSG(strcmp(code, want) == 0, "'%s', not '%s'", code, want);
    /* A name that does not fit is left out whole, and the next one that fits still goes in. */
    char small[32];
    bn_net_gpu_code(net, "loader_gpu pool", small, sizeof small);
    CHECK_MSG(strcmp(small, "loader_gpu pool conv_direct") == 0, "'%s'", small);
    bn_net_gpu_code(net, NULL, small, 5);
    CHECK_MSG(strcmp(small, "pool") == 0, "'%s'", small);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(code_load_loads_each_named_module_on_a_device)
{
    CHECK(bn_device_code_load_end() == 0); /* none begun */
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx = NULL;
    CHECK_OK(bn_ctx_open(0, &ctx));
    bn_device_code_load_begin("pool no_such_module  softmax_ce conv_tensor ");
    CHECK(bn_device_code_load_end() == 3);
    bn_device_code_load_begin(BN_TRAIN_GPU_CODE);
    int expect = 0;
    for (int i = 0; i < NUM_MODULES; i++) expect += listed(BN_TRAIN_GPU_CODE, modules[i], strlen(modules[i]));
    CHECK(bn_device_code_load_end() == expect);
    /* A load still running when the context closes is waited for there. */
    bn_device_code_load_begin("conv_igemm conv_halo");
    bn_ctx_close();
    CHECK(bn_device_code_load_end() == 2);
    return BN_PASS;
}
