/* code_load.cu - a run's GPU code loaded ahead of its first step (core/device.h).
 *
 * Under the driver's lazy loading (CUDA's default) a module, the code of one .cu file, is loaded
 * when the first of its kernels is launched or asked about, at a cost that grows with the kernels
 * it holds, used or not: LeNet's first step loads eight modules of about 260 kernels, some 11 ms of
 * its 15-22 (6 with CUDA_MODULE_LOADING=EAGER, which loads all of cuBLAS too and made its handle
 * 2.4 s late). A thread that loads modules beside the network's setup gains only where it loads
 * what the step will use, in the order the step will: the driver's loads wait on one another, and
 * loading every module a layer type might use made LeNet's first step wait for all 22 (version
 * 77's trial). So each of the library's modules notes itself at its first launch (bn_code_note,
 * from bn_launch_early: the Makefile gives each .cu file its name), the training command keeps
 * that order under the model in the kernel cache, and the model's next run loads those modules
 * on a thread from the moment its device is open. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "chooser.h"
#include "core/device.h"
#include "core/hash.h"
#include "core/timeline.h"
#include "kernel_cache.h"
#include "pdl.cuh"

/* The modules, each with a kernel of its own (BN_CODE_ANCHOR, code_anchor.cuh); a name here
 * without an anchor fails to link. The kernel cache holds a list as one character a module, its
 * place in this table, and its key holds a hash of the table. */
#define CODE_MODULES(X)                                                                               \
    X(loader_gpu) X(optimizer_gpu) X(kernels) X(compare) X(bf16) X(activation) X(add) X(batchnorm)    \
    X(dropout) X(pool) X(softmax_ce) X(dense) X(dense_plan) X(dense_gemm) X(dense_skinny) X(dense_bf16) \
    X(conv_direct) X(conv_rows) X(conv_tensor) X(conv_argmax) X(conv_bias) X(conv_halo) X(conv_igemm)  \
    X(conv_wino) X(conv_bf16_passes) X(conv_reference) X(conv_fma) X(concat)

#define DECLARE(module) extern "C" const void *bn_code_anchor_##module(void);
CODE_MODULES(DECLARE)
#undef DECLARE

typedef struct code_module {
    const char *name;
    const void *(*anchor)(void);
} code_module;

#define ROW(module) {#module, bn_code_anchor_##module},
static const code_module modules[] = {CODE_MODULES(ROW)};
#undef ROW
#define NUM_MODULES (int)(sizeof modules / sizeof *modules)

static const char letters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
static_assert(sizeof letters - 1 >= sizeof modules / sizeof *modules, "a letter for every module");

static int module_index(const char *name)
{
    for (int i = 0; i < NUM_MODULES; i++)
        if (strcmp(modules[i].name, name) == 0) return i;
    return -1;
}

/* The modules noted so far, in the order of their first launches. */
static struct {
    pthread_mutex_t lock;
    int order[NUM_MODULES];
    int count;
} noted = {PTHREAD_MUTEX_INITIALIZER, {0}, 0};

extern "C" void bn_code_note(const char *module)
{
    const int i = module_index(module);
    if (i < 0) return; /* a .cu file outside the table (src/dist's) */
    pthread_mutex_lock(&noted.lock);
    int seen = 0;
    for (int k = 0; k < noted.count; k++) seen |= noted.order[k] == i;
    if (!seen) noted.order[noted.count++] = i;
    pthread_mutex_unlock(&noted.lock);
}

extern "C" void bn_device_code_used(char *buf, size_t cap)
{
    if (cap == 0) return;
    pthread_mutex_lock(&noted.lock);
    size_t n = 0;
    for (int k = 0; k < noted.count && n + 1 < cap; k++) buf[n++] = letters[noted.order[k]];
    buf[n] = '\0';
    pthread_mutex_unlock(&noted.lock);
}

/* The one load in flight; only the thread that opened the context starts and ends it. */
static struct {
    pthread_t thread;
    int running;
    int device;
    int loaded;
    char list[NUM_MODULES + 1];
} load;

/* Asks for each anchor's attributes, which loads its module; a module that cannot load (no code
 * for this device) is left to its first launch, which reports why. */
static void *load_on_thread(void *arg)
{
    (void)arg;
    if (cudaSetDevice(load.device) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    for (const char *p = load.list; *p; p++) {
        const char *at = strchr(letters, *p);
        cudaFuncAttributes attr;
        const int i = at ? (int)(at - letters) : NUM_MODULES;
        if (i < NUM_MODULES && cudaFuncGetAttributes(&attr, modules[i].anchor()) == cudaSuccess) load.loaded++;
        cudaGetLastError();
    }
    bn_timeline_mark("the model's GPU code loaded");
    return NULL;
}

extern "C" void bn_device_code_load_begin(const char *list)
{
    bn_device_code_load_end();
    const bn_ctx *c = bn_ctx_current();
    if (!c || !list || strlen(list) >= sizeof load.list) return;
    strcpy(load.list, list);
    load.device = c->device;
    load.loaded = 0;
    /* Without a thread each module loads at its first launch, as it would without this. */
    load.running = pthread_create(&load.thread, NULL, load_on_thread, NULL) == 0;
}

extern "C" int bn_device_code_load_end(void)
{
    if (load.running) pthread_join(load.thread, NULL);
    load.running = 0;
    return load.loaded;
}

/* The kernel cache's key for the modules a run of `model` uses: the device's scope, the table and
 * the model. */
static bn_status code_key(const bn_ctx *ctx, const char *model, char *key, size_t cap)
{
    uint64_t table = BN_FNV1A_START;
    for (int i = 0; i < NUM_MODULES; i++) table = bn_fnv1a_text(table, modules[i].name);
    return bn_chooser_key(ctx, key, cap, "code %016llx %016llx", (unsigned long long)table,
                          (unsigned long long)bn_fnv1a_text(BN_FNV1A_START, model));
}

extern "C" void bn_device_code_load_for(const char *model)
{
    const bn_ctx *c = bn_ctx_current();
    char key[BN_KERNEL_KEY_MAX], list[BN_KERNEL_CHOICE_MAX];
    int found = 0;
    if (!c) return;
    /* A cache that cannot be read is reported by the first layer that looks a choice up. */
    if (code_key(c, model, key, sizeof key) != BN_OK || bn_kernel_cache_get(key, list, sizeof list, &found) != BN_OK) {
        bn_clear_error();
        return;
    }
    if (found) bn_device_code_load_begin(list);
}

extern "C" void bn_device_code_keep_for(const char *model)
{
    const bn_ctx *c = bn_ctx_current();
    char key[BN_KERNEL_KEY_MAX], used[NUM_MODULES + 1], kept[BN_KERNEL_CHOICE_MAX];
    int found = 0;
    bn_device_code_used(used, sizeof used);
    if (!c || !used[0]) return;
    /* A cache that cannot be read or written was reported by the layers' lookups and keeps. */
    if (code_key(c, model, key, sizeof key) != BN_OK || bn_kernel_cache_get(key, kept, sizeof kept, &found) != BN_OK ||
        (!(found && strcmp(kept, used) == 0) && bn_kernel_cache_put(key, used) != BN_OK))
        bn_clear_error();
}
