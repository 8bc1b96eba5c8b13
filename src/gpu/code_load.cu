/* code_load.cu - the library's GPU code loaded on a thread of its own (core/device.h). Under the
 * driver's lazy loading a module is loaded when the first of its kernels is launched, so that a
 * run's first step, which launches every kernel of the network's plans for the first time, waited
 * on each module in turn: LeNet's first step took 17 ms where it took 6 with every module loaded
 * at the start (CUDA_MODULE_LOADING=EAGER, which also loads all of cuBLAS, and made its handle
 * 2.4 s late). Loading the network's modules beside its setup and the data's upload takes that
 * wait off the first step. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "code_modules.h"
#include "core/device.h"
#include "core/timeline.h"

#define DECLARE(module) extern "C" const void *bn_code_anchor_##module(void);
BN_GPU_CODE_MODULES(DECLARE)
#undef DECLARE

typedef struct code_module {
    const char *name;
    const void *(*anchor)(void);
} code_module;

#define ROW(module) {#module, bn_code_anchor_##module},
static const code_module modules[] = {BN_GPU_CODE_MODULES(ROW)};
#undef ROW

/* The one load in flight; only the thread that opened the context starts and ends it. */
static struct {
    pthread_t thread;
    int running;
    int device;
    int loaded;
    char *names;
} load;

static const code_module *find_module(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof modules / sizeof *modules; i++)
        if (strlen(modules[i].name) == len && strncmp(modules[i].name, name, len) == 0) return &modules[i];
    return NULL;
}

/* Asks for each anchor's attributes, which loads its module; a module that cannot load (no code
 * for this device) is left to its first launch, which reports why. */
static void *load_on_thread(void *arg)
{
    (void)arg;
    if (cudaSetDevice(load.device) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    for (const char *p = load.names; *p;) {
        size_t len = strcspn(p, " ");
        const code_module *m = find_module(p, len);
        cudaFuncAttributes at;
        if (m && cudaFuncGetAttributes(&at, m->anchor()) == cudaSuccess) load.loaded++;
        cudaGetLastError();
        p += len;
        p += strspn(p, " ");
    }
    bn_timeline_mark("the network's GPU code loaded");
    return NULL;
}

extern "C" void bn_device_code_load_begin(const char *names)
{
    bn_device_code_load_end();
    const bn_ctx *c = bn_ctx_current();
    if (!c || !names || !(load.names = strdup(names))) return;
    load.device = c->device;
    load.loaded = 0;
    load.running = pthread_create(&load.thread, NULL, load_on_thread, NULL) == 0;
    if (!load.running) free(load.names), load.names = NULL; /* no thread: each module loads at its first launch */
}

extern "C" int bn_device_code_load_end(void)
{
    if (load.running) pthread_join(load.thread, NULL);
    load.running = 0;
    free(load.names);
    load.names = NULL;
    return load.loaded;
}
