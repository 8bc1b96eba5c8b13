/* conv_graph.cu - convolution passes through cuDNN's graph API (conv_graph.h).
 *
 * Every backend descriptor a plan was made from stays alive with it (tensors, convolution,
 * operation, graph, engine configuration), as the plan refers to them. A variant pack (the
 * pointers of one run) is made per run: host work of a few microseconds, paid at capture time
 * only where steps replay as CUDA graphs.
 *
 * The choice among the engine configurations goes through the chooser (gpu/chooser.h): its mode
 * (the heuristics' first allowed one in a deterministic context, else timed or from the kernel
 * cache), its timing, its tie rule (the fastest alone, the candidates' order deciding equal times)
 * and its cache lookup and store. Timed, the candidates are the heuristics' (mode A's, then the
 * fallback's) and every engine of the graph with its default knobs; a candidate first runs once,
 * and only one within twice the fastest fully timed before it gets the full timing. A timed pick
 * is checked before it is taken: run on random inputs against the reference convolution
 * (conv_reference.h), one that disagrees is dropped and the next fastest checked alike
 * (bn_chooser_pick_checked), since an engine's notes do not always say what it changes in the
 * results. BLOBNET_CG_VERBOSE=1 prints each candidate of every choice
 * to stderr: its name, the notes that refused it or the time it took. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "conv_cudnn.cuh"
#include "conv_graph.h"
#include "conv_reference.h"
#include "gpu/chooser.h"
#include "gpu/cuda_check.h"
#include "gpu/kernel_cache.h"

/* cuDNN 9 marks the handle attributes deprecated in favour of device properties, which 9.x
 * releases before 9.10 lack; the handle is still honoured, so it is set by value. */
#define ATTR_GRAPH_HANDLE ((cudnnBackendAttributeName_t)800)
#define ATTR_PLAN_HANDLE ((cudnnBackendAttributeName_t)400)

/* Descriptors one plan keeps: 3 tensors, convolution, operation, graph, configuration, plan,
 * engine and up to CUDNN_KNOB_TYPE_COUNTS knob choices when rebuilt from the cache. */
#define MAX_KEPT (10 + CUDNN_KNOB_TYPE_COUNTS)
#define NAME_MAX_LEN 120

enum { UID_X = 1, UID_W = 2, UID_Y = 3 };

struct bn_cg_plan {
    cudnnBackendDescriptor_t kept[MAX_KEPT];
    int num_kept;
    cudnnBackendDescriptor_t exec; /* the execution plan (also in kept) */
    size_t workspace;
    float ms;
    char name[NAME_MAX_LEN];
};

static const char *const pass_names[BN_CG_PASSES] = {"forward", "backward-data", "backward-filter"};

/* The environment variable of the verbose print (bn_chooser_say). */
#define VERBOSE "BLOBNET_CG_VERBOSE"

extern "C" bn_cg_tensor bn_cg_nchw(int n, int c, int h, int w, cudnnDataType_t type)
{
    bn_cg_tensor t = {{n, c, h, w}, {(int64_t)c * h * w, (int64_t)h * w, w, 1}, type, 16};
    return t;
}

extern "C" bn_cg_tensor bn_cg_nhwc(int n, int c, int h, int w, cudnnDataType_t type)
{
    bn_cg_tensor t = {{n, c, h, w}, {(int64_t)c * h * w, 1, (int64_t)w * c, c}, type, 16};
    return t;
}

extern "C" void bn_cg_align(bn_cg_tensor *t, uintptr_t address)
{
    int align = 16;
    while (align > 1 && address % (uintptr_t)align) align /= 2;
    t->align = align;
}

static void release_all(bn_cg_plan *p)
{
    for (int i = p->num_kept - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(p->kept[i]);
    p->num_kept = 0;
    p->exec = NULL;
}

extern "C" void bn_cg_free(bn_cg_plan **plan)
{
    if (!*plan) return;
    release_all(*plan);
    free(*plan);
    *plan = NULL;
}

/* A new descriptor of the type, kept by p (freed with it). */
static bn_status create(bn_cg_plan *p, cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t *d)
{
    if (p->num_kept == MAX_KEPT) return bn_error(BN_ERR_INTERNAL, "conv_graph: too many descriptors for one plan");
    BN_CUDNN(cudnnBackendCreateDescriptor(type, d));
    p->kept[p->num_kept++] = *d;
    return BN_OK;
}

static bn_status make_tensor(bn_cg_plan *p, const bn_cg_tensor *t, int64_t uid, cudnnBackendDescriptor_t *d)
{
    const int64_t align = t->align;
    BN_TRY(create(p, CUDNN_BACKEND_TENSOR_DESCRIPTOR, d));
    BN_CUDNN(cudnnBackendSetAttribute(*d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t->type));
    BN_CUDNN(cudnnBackendSetAttribute(*d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, t->dims));
    BN_CUDNN(cudnnBackendSetAttribute(*d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, t->strides));
    BN_CUDNN(cudnnBackendSetAttribute(*d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    BN_CUDNN(cudnnBackendSetAttribute(*d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    BN_CUDNN(cudnnBackendFinalize(*d));
    return BN_OK;
}

/* The operation graph of the spec's one convolution, kept by p. */
static bn_status make_graph(bn_ctx *ctx, bn_cg_plan *p, const bn_cg_spec *s, cudnnBackendDescriptor_t *graph)
{
    cudnnHandle_t h = (cudnnHandle_t)ctx->cudnn;
    cudnnBackendDescriptor_t x, w, y, conv, op;
    BN_TRY(make_tensor(p, &s->x, UID_X, &x));
    BN_TRY(make_tensor(p, &s->w, UID_W, &w));
    BN_TRY(make_tensor(p, &s->y, UID_Y, &y));

    const int64_t dims = 2, pads[2] = {s->pad, s->pad}, strides[2] = {s->stride, s->stride}, dil[2] = {1, 1};
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    BN_TRY(create(p, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &conv));
    BN_CUDNN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims));
    BN_CUDNN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
    BN_CUDNN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
    BN_CUDNN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pads));
    BN_CUDNN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pads));
    BN_CUDNN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil));
    BN_CUDNN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, strides));
    BN_CUDNN(cudnnBackendFinalize(conv));

    static const cudnnBackendDescriptorType_t op_types[BN_CG_PASSES] = {
        CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
    /* Per pass: alpha, beta, convolution, then the x, w and y attributes. */
    static const cudnnBackendAttributeName_t attrs[BN_CG_PASSES][6] = {
        {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY}};
    const cudnnBackendAttributeName_t *a = attrs[s->pass];
    const float alpha = 1.0f, beta = s->beta;
    BN_TRY(create(p, op_types[s->pass], &op));
    BN_CUDNN(cudnnBackendSetAttribute(op, a[0], CUDNN_TYPE_FLOAT, 1, &alpha));
    BN_CUDNN(cudnnBackendSetAttribute(op, a[1], CUDNN_TYPE_FLOAT, 1, &beta));
    BN_CUDNN(cudnnBackendSetAttribute(op, a[2], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv));
    BN_CUDNN(cudnnBackendSetAttribute(op, a[3], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    BN_CUDNN(cudnnBackendSetAttribute(op, a[4], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w));
    BN_CUDNN(cudnnBackendSetAttribute(op, a[5], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    BN_CUDNN(cudnnBackendFinalize(op));

    BN_TRY(create(p, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, graph));
    BN_CUDNN(cudnnBackendSetAttribute(*graph, ATTR_GRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    BN_CUDNN(cudnnBackendSetAttribute(*graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op));
    BN_CUDNN(cudnnBackendFinalize(*graph));
    return BN_OK;
}

/* Why the engine may not run the spec (a static string), or NULL when it may. */
static const char *refusal(cudnnBackendDescriptor_t engine, const bn_cg_spec *s, const bn_ctx *ctx)
{
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t count = 0;
    if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &count, notes) != CUDNN_STATUS_SUCCESS)
        return "its numerical notes cannot be read";
    for (int64_t i = 0; i < count; i++) switch (notes[i]) {
        case CUDNN_NUMERICAL_NOTE_FFT: return "FFT";
        case CUDNN_NUMERICAL_NOTE_WINOGRAD:
        case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4:
        case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6:
        case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13: return "Winograd";
        case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION: return "reduced-precision sums";
        case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
            if (!s->allow_down_convert) return "down-converted inputs";
            break;
        case CUDNN_NUMERICAL_NOTE_TENSOR_CORE:
            /* On FP32 data a tensor core multiplies TF32 (or BF16) at best: not FP32-exact. */
            if (s->x.type == CUDNN_DATA_FLOAT && !s->allow_down_convert) return "tensor cores on FP32 data";
            break;
        case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC:
            if (ctx->deterministic) return "non-deterministic";
            break;
        default: break;
        }
    cudnnBackendBehaviorNote_t behaviour[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    count = 0;
    if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                 CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &count, behaviour) != CUDNN_STATUS_SUCCESS)
        return "its behaviour notes cannot be read";
    for (int64_t i = 0; i < count; i++)
        if (behaviour[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) return "compiled at run time";
    return NULL;
}

/* The configuration's name, "eng<index>" then " k<type>=<value>" per knob: what the kernel cache
 * keeps, and what config_from_name rebuilds. */
static bn_status name_config(cudnnBackendDescriptor_t cfg, cudnnBackendDescriptor_t engine, char *buf, size_t cap)
{
    int64_t index = -1, count = 0;
    BN_CUDNN(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &count, &index));
    size_t len = (size_t)snprintf(buf, cap, "eng%lld", (long long)index);
    cudnnBackendDescriptor_t knobs[CUDNN_KNOB_TYPE_COUNTS];
    int made = 0;
    bn_status st = BN_OK;
    for (; made < CUDNN_KNOB_TYPE_COUNTS; made++)
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &knobs[made]) != CUDNN_STATUS_SUCCESS) {
            st = bn_error(BN_ERR_DEVICE, "conv_graph: cannot create knob choice descriptors");
            break;
        }
    count = 0;
    if (st == BN_OK && cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                                CUDNN_KNOB_TYPE_COUNTS, &count, knobs) != CUDNN_STATUS_SUCCESS)
        st = bn_error(BN_ERR_DEVICE, "conv_graph: cannot read an engine configuration's knobs");
    for (int64_t i = 0; st == BN_OK && i < count && len < cap; i++) {
        cudnnBackendKnobType_t type;
        int64_t value = 0, got = 0;
        if (cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &got,
                                     &type) != CUDNN_STATUS_SUCCESS ||
            cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &got,
                                     &value) != CUDNN_STATUS_SUCCESS) {
            st = bn_error(BN_ERR_DEVICE, "conv_graph: cannot read a knob choice");
            break;
        }
        len += (size_t)snprintf(buf + len, cap - len, " k%d=%lld", (int)type, (long long)value);
    }
    for (int i = 0; i < made; i++) cudnnBackendDestroyDescriptor(knobs[i]);
    if (st == BN_OK && len >= cap) st = bn_error(BN_ERR_INTERNAL, "conv_graph: configuration name too long");
    return st;
}

/* The execution plan of cfg, kept by p, and its workspace. */
static bn_status make_exec(bn_ctx *ctx, bn_cg_plan *p, cudnnBackendDescriptor_t cfg)
{
    cudnnHandle_t h = (cudnnHandle_t)ctx->cudnn;
    cudnnBackendDescriptor_t exec;
    BN_TRY(create(p, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &exec));
    BN_CUDNN(cudnnBackendSetAttribute(exec, ATTR_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    BN_CUDNN(cudnnBackendSetAttribute(exec, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                &cfg));
    BN_CUDNN(cudnnBackendFinalize(exec));
    int64_t ws = 0, count = 0;
    BN_CUDNN(
        cudnnBackendGetAttribute(exec, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &count, &ws));
    p->exec = exec;
    p->workspace = (size_t)ws;
    return BN_OK;
}

/* Rebuilds the configuration a name gives (name_config) on graph, kept by p, and its plan. */
static bn_status config_from_name(bn_ctx *ctx, bn_cg_plan *p, cudnnBackendDescriptor_t graph, const char *name)
{
    long long index = 0;
    int used = 0;
    if (sscanf(name, "eng%lld%n", &index, &used) != 1)
        return bn_error(BN_ERR_DATA, "conv_graph: '%s' is not an engine configuration", name);
    cudnnBackendDescriptor_t engine, cfg, knobs[CUDNN_KNOB_TYPE_COUNTS];
    int num_knobs = 0;
    const int64_t idx = index;
    BN_TRY(create(p, CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine));
    BN_CUDNN(cudnnBackendSetAttribute(engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                      &graph));
    BN_CUDNN(cudnnBackendSetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &idx));
    BN_CUDNN(cudnnBackendFinalize(engine));
    const char *at = name + used;
    while (*at) {
        int type = 0, n = 0;
        long long value = 0;
        if (sscanf(at, " k%d=%lld%n", &type, &value, &n) != 2 || num_knobs == CUDNN_KNOB_TYPE_COUNTS)
            return bn_error(BN_ERR_DATA, "conv_graph: '%s' is not an engine configuration", name);
        at += n;
        const cudnnBackendKnobType_t kt = (cudnnBackendKnobType_t)type;
        const int64_t kv = value;
        cudnnBackendDescriptor_t k;
        BN_TRY(create(p, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &k));
        BN_CUDNN(cudnnBackendSetAttribute(k, CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &kt));
        BN_CUDNN(cudnnBackendSetAttribute(k, CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &kv));
        BN_CUDNN(cudnnBackendFinalize(k));
        knobs[num_knobs++] = k;
    }
    BN_TRY(create(p, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg));
    BN_CUDNN(cudnnBackendSetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &engine));
    if (num_knobs)
        BN_CUDNN(cudnnBackendSetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                          num_knobs,
                                    knobs));
    BN_CUDNN(cudnnBackendFinalize(cfg));
    BN_TRY(make_exec(ctx, p, cfg));
    snprintf(p->name, sizeof p->name, "%s", name);
    return BN_OK;
}

static bn_status run_exec(bn_ctx *ctx, cudnnBackendDescriptor_t exec, const void *x, const void *w, void *y,
                          void *workspace)
{
    cudnnBackendDescriptor_t pack;
    BN_CUDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack));
    /* The pass writes one of the three; the pack takes them all as writable. */
    void *ptrs[3] = {(void *)x, (void *)w, y};
    const int64_t uids[3] = {UID_X, UID_W, UID_Y};
    cudnnStatus_t e = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3,
                                               ptrs);
    if (e == CUDNN_STATUS_SUCCESS)
        e = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
    if (e == CUDNN_STATUS_SUCCESS)
        e = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
    if (e == CUDNN_STATUS_SUCCESS) e = cudnnBackendFinalize(pack);
    if (e == CUDNN_STATUS_SUCCESS) e = cudnnBackendExecute((cudnnHandle_t)ctx->cudnn, exec, pack);
    cudnnBackendDestroyDescriptor(pack);
    if (e != CUDNN_STATUS_SUCCESS)
        return bn_error(BN_ERR_DEVICE, "cuDNN graph convolution: cudnnBackendExecute: %s", cudnnGetErrorString(e));
    return BN_OK;
}

extern "C" bn_status bn_cg_run(bn_ctx *ctx, const bn_cg_plan *plan, const void *x, const void *w, const void *y)
{
    return run_exec(ctx, plan->exec, x, w, (void *)y, ctx->workspace);
}

extern "C" size_t bn_cg_workspace(const bn_cg_plan *plan)
{
    return plan->workspace;
}

extern "C" const char *bn_cg_name(const bn_cg_plan *plan)
{
    return plan->name;
}

extern "C" float bn_cg_ms(const bn_cg_plan *plan)
{
    return plan->ms;
}

static const char *type_name(cudnnDataType_t t)
{
    return t == CUDNN_DATA_FLOAT ? "f32" : t == CUDNN_DATA_BFLOAT16 ? "bf16" : t == CUDNN_DATA_HALF ? "f16" : "other";
}

/* The kernel cache's key: the device's scope, then everything the spec holds. */
static bn_status cache_key(const bn_ctx *ctx, const bn_cg_spec *s, char *key, size_t cap)
{
    char spec[BN_KERNEL_KEY_MAX];
    size_t len = (size_t)snprintf(spec, sizeof spec, "cg %s p%d s%d b%g d%d", pass_names[s->pass], s->pad, s->stride,
                                  s->beta, s->allow_down_convert);
    const bn_cg_tensor *t[3] = {&s->x, &s->w, &s->y};
    for (int i = 0; i < 3 && len < sizeof spec; i++) {
        const int64_t *d = t[i]->dims;
        const bn_cg_tensor nchw = bn_cg_nchw((int)d[0], (int)d[1], (int)d[2], (int)d[3], t[i]->type);
        const bn_cg_tensor nhwc = bn_cg_nhwc((int)d[0], (int)d[1], (int)d[2], (int)d[3], t[i]->type);
        char layout[64];
        if (memcmp(t[i]->strides, nchw.strides, sizeof nchw.strides) == 0) snprintf(layout, sizeof layout, "nchw");
        else if (memcmp(t[i]->strides, nhwc.strides, sizeof nhwc.strides) == 0) snprintf(layout, sizeof layout, "nhwc");
        else
            snprintf(layout, sizeof layout, "%lld,%lld,%lld,%lld", (long long)t[i]->strides[0],
                     (long long)t[i]->strides[1], (long long)t[i]->strides[2], (long long)t[i]->strides[3]);
        len += (size_t)snprintf(spec + len, sizeof spec - len, " %s:%lldx%lldx%lldx%lld:%s:a%d", type_name(t[i]->type),
                                (long long)d[0], (long long)d[1], (long long)d[2], (long long)d[3], layout,
                                t[i]->align);
    }
    if (len >= sizeof spec) return bn_error(BN_ERR_INTERNAL, "conv_graph: no room for the kernel cache key");
    return bn_chooser_key(ctx, key, cap, "%s", spec);
}

/* The configurations cuDNN's heuristics give for graph in mode, up to cap (created here; the
 * caller destroys them). */
static bn_status heuristics(cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode, cudnnBackendDescriptor_t *cfgs,
                            int cap, int *count)
{
    *count = 0;
    cudnnBackendDescriptor_t heur;
    BN_CUDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
    bn_status st = BN_OK;
    int64_t got = 0;
    int made = 0;
    if (cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                 &graph) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode) !=
            CUDNN_STATUS_SUCCESS ||
        cudnnBackendFinalize(heur) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &got, NULL) !=
            CUDNN_STATUS_SUCCESS) {
        cudnnBackendDestroyDescriptor(heur);
        return BN_OK; /* no heuristics for this graph in this mode: no candidates from it */
    }
    if (got > cap) got = cap;
    for (; made < got; made++)
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[made]) != CUDNN_STATUS_SUCCESS) {
            st = bn_error(BN_ERR_DEVICE, "conv_graph: cannot create engine configuration descriptors");
            break;
        }
    int64_t filled = 0;
    if (st == BN_OK && cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                                got, &filled, cfgs) != CUDNN_STATUS_SUCCESS)
        st = bn_error(BN_ERR_DEVICE, "conv_graph: cannot read the heuristics' results");
    cudnnBackendDestroyDescriptor(heur);
    if (st != BN_OK) {
        for (int i = 0; i < made; i++) cudnnBackendDestroyDescriptor(cfgs[i]);
        return st;
    }
    for (int64_t i = filled; i < made; i++) cudnnBackendDestroyDescriptor(cfgs[i]);
    *count = (int)filled;
    return BN_OK;
}

/* Engine configurations for every engine of graph by its global index, with default knobs, up to
 * cap (created here; the caller destroys them); engines that do not take the graph are skipped. */
static bn_status every_engine(cudnnBackendDescriptor_t graph, cudnnBackendDescriptor_t *cfgs, int cap, int *count)
{
    *count = 0;
    int64_t total = 0, got = 0;
    if (cudnnBackendGetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, &got,
                                 &total) != CUDNN_STATUS_SUCCESS)
        return BN_OK;
    for (int64_t i = 0; i < total && *count < cap; i++) {
        cudnnBackendDescriptor_t eng, cfg;
        BN_CUDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng));
        if (cudnnBackendSetAttribute(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                     &graph) != CUDNN_STATUS_SUCCESS ||
            cudnnBackendSetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &i) !=
                CUDNN_STATUS_SUCCESS ||
            cudnnBackendFinalize(eng) != CUDNN_STATUS_SUCCESS) {
            cudnnBackendDestroyDescriptor(eng);
            continue;
        }
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg) != CUDNN_STATUS_SUCCESS) {
            cudnnBackendDestroyDescriptor(eng);
            return bn_error(BN_ERR_DEVICE, "conv_graph: cannot create engine configuration descriptors");
        }
        const bool ok = cudnnBackendSetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                                 &eng) == CUDNN_STATUS_SUCCESS &&
                        cudnnBackendFinalize(cfg) == CUDNN_STATUS_SUCCESS;
        cudnnBackendDestroyDescriptor(eng);
        if (!ok) {
            cudnnBackendDestroyDescriptor(cfg);
            continue;
        }
        cfgs[(*count)++] = cfg;
    }
    return BN_OK;
}

/* The chooser's view of one candidate while it is timed: its plan, the buffers and a workspace
 * of its own. */
typedef struct trial {
    bn_ctx *ctx;
    cudnnBackendDescriptor_t exec;
    void *x, *w, *y, *ws;
} trial;

/* One run of the candidate (bn_chooser_run): a run cuDNN refuses at the warm-up leaves the
 * candidate out; one that ran then and fails later is an error. */
static bn_status run_trial(void *env, int i, int warm, int *ok)
{
    const trial *t = (const trial *)env;
    bn_status st = run_exec(t->ctx, t->exec, t->x, t->w, t->y, t->ws);
    if (st != BN_OK && warm) {
        *ok = 0;
        return BN_OK;
    }
    return st;
}

/* One run to warm up, then the least mean of 3 rounds of 3; QUICK, one run after the warm-up,
 * says whether a candidate is worth that (try_candidate's cut). */
static const bn_chooser_timing TIMING = {1, 3, 3};
static const bn_chooser_timing QUICK = {1, 1, 1};

/* One candidate: its engine allowed, its plan made within the workspace limit, then timed
 * (when timed) on a workspace of its own. *took: 1 when it ran, with *ms its time. With cut_ms
 * finite it runs once first, and one run slower than cut_ms ends its timing there (*cut = 1,
 * *ms that run's time): a candidate that cannot win is not given the full timing. */
static bn_status try_candidate(bn_ctx *ctx, const bn_cg_spec *s, cudnnBackendDescriptor_t cfg, bool timed,
                               float cut_ms, void *x, void *w, void *y, char *name, size_t name_cap, float *ms,
                               size_t *ws_out, int *took, int *cut)
{
    *took = 0;
    *cut = 0;
    cudnnBackendDescriptor_t engine;
    BN_CUDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine));
    int64_t got = 0;
    const char *why = NULL;
    bn_status st = BN_OK;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &engine) !=
        CUDNN_STATUS_SUCCESS)
        why = "its engine cannot be read";
    if (!why) st = name_config(cfg, engine, name, name_cap);
    if (!why && st == BN_OK) why = refusal(engine, s, ctx);
    cudnnBackendDestroyDescriptor(engine);
    if (st != BN_OK) return st;
    if (why) {
        bn_chooser_say(VERBOSE, "conv_graph: %s %s: refused: %s\n", pass_names[s->pass], name, why);
        return BN_OK;
    }
    /* The plan, made on a scratch plan object to learn its workspace; failures mean "not for this spec". */
    cudnnHandle_t h = (cudnnHandle_t)ctx->cudnn;
    cudnnBackendDescriptor_t exec;
    int64_t ws = 0;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &exec) != CUDNN_STATUS_SUCCESS)
        return bn_error(BN_ERR_DEVICE, "conv_graph: cannot create an execution plan descriptor");
    if (cudnnBackendSetAttribute(exec, ATTR_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendSetAttribute(exec, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                 &cfg) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendFinalize(exec) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(exec, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, &ws) !=
            CUDNN_STATUS_SUCCESS) {
        cudnnBackendDestroyDescriptor(exec);
        bn_chooser_say(VERBOSE, "conv_graph: %s %s: no plan for this shape\n", pass_names[s->pass], name);
        return BN_OK;
    }
    if ((size_t)ws > BN_CONV_WORKSPACE_LIMIT) {
        cudnnBackendDestroyDescriptor(exec);
        bn_chooser_say(VERBOSE, "conv_graph: %s %s: workspace %lld too large\n", pass_names[s->pass], name,
                       (long long)ws);
        return BN_OK;
    }
    *ws_out = (size_t)ws;
    *ms = 0.0f;
    if (!timed) {
        cudnnBackendDestroyDescriptor(exec);
        *took = 1;
        return BN_OK;
    }
    void *scratch = NULL;
    if (ws > 0 && cudaMalloc(&scratch, (size_t)ws) != cudaSuccess) {
        cudaGetLastError();
        cudnnBackendDestroyDescriptor(exec);
        return BN_OK; /* no room to try it: not a candidate */
    }
    trial t = {ctx, exec, x, w, y, scratch};
    const bn_candidates one = {1, NULL, NULL, NULL, 0, run_trial, &t, -1, NULL, NULL};
    float timed_ms = INFINITY;
    if (!isinf(cut_ms)) {
        st = bn_chooser_time_one(&QUICK, &one, 0, &timed_ms);
        *cut = st == BN_OK && timed_ms > cut_ms;
    }
    if (st == BN_OK && !*cut) st = bn_chooser_time_one(&TIMING, &one, 0, &timed_ms);
    if (st == BN_OK && !isinf(timed_ms)) {
        *ms = timed_ms;
        *took = 1;
    }
    if (st == BN_OK && cudaStreamSynchronize((cudaStream_t)ctx->stream) != cudaSuccess)
        st = bn_error(BN_ERR_DEVICE, "conv_graph: candidate %s failed: %s", name,
                      cudaGetErrorString(cudaGetLastError()));
    cudaFree(scratch);
    cudnnBackendDestroyDescriptor(exec);
    if (st == BN_OK)
        bn_chooser_say(VERBOSE, "conv_graph: %s %s: %s %.4f ms%s (workspace %lld)\n", pass_names[s->pass], name,
                       *took ? "ran" : "failed to run", *ms, *cut ? " once, cut" : "", (long long)ws);
    return st;
}

/* Builds the plan named `name` on a fresh graph of the spec into *out. */
static bn_status plan_named(bn_ctx *ctx, const bn_cg_spec *s, const char *name, float ms, bn_cg_plan **out)
{
    bn_cg_plan *p = (bn_cg_plan *)calloc(1, sizeof *p);
    if (!p) return bn_error(BN_ERR_NOMEM, "conv_graph: out of host memory");
    cudnnBackendDescriptor_t graph;
    bn_status st = make_graph(ctx, p, s, &graph);
    if (st == BN_OK) st = config_from_name(ctx, p, graph, name);
    if (st == BN_OK) st = bn_ctx_reserve_workspace(ctx, p->workspace);
    if (st != BN_OK) {
        bn_cg_free(&p);
        return st;
    }
    p->ms = ms;
    *out = p;
    return BN_OK;
}

/* What reading a cached configuration needs: the spec, where its plan goes. */
typedef struct cached_in {
    bn_ctx *ctx;
    const bn_cg_spec *spec;
    bn_cg_plan **out;
} cached_in;

/* A cached choice (bn_choice_reader): "none" (cuDNN offers nothing allowed: no plan), else a
 * configuration's name, stale where it no longer builds. */
static bn_status read_choice(void *env, const char *choice, int *verdict)
{
    const cached_in *in = (const cached_in *)env;
    *verdict = BN_CHOICE_TAKEN;
    if (strcmp(choice, "none") == 0) return BN_OK;
    if (plan_named(in->ctx, in->spec, choice, 0.0f, in->out) != BN_OK) *verdict = BN_CHOICE_STALE;
    return BN_OK;
}

/* The check of a timed pick (bn_chooser_agree): the configuration names[i] run on random inputs
 * against the reference convolution, which is made on the first check and kept for the next. */
typedef struct engine_check {
    bn_ctx *ctx;
    const bn_cg_spec *spec;
    const char *const *names;
    bn_cg_check *check;
} engine_check;

static bn_status agree_engine(void *env, int i, int reference, double *err, double *tol, int *agrees)
{
    engine_check *e = (engine_check *)env;
    if (!e->check) BN_TRY(bn_cg_check_open(e->ctx, e->spec, &e->check));
    bn_cg_plan *p = NULL;
    BN_TRY(plan_named(e->ctx, e->spec, e->names[i], 0.0f, &p));
    const bn_status st = bn_cg_check_plan(e->check, p, err, tol, agrees);
    bn_cg_free(&p);
    return st;
}

/* The label of a choice's notes: the pass and the tensors' dims and types. */
static void choice_label(const bn_cg_spec *s, char *buf, size_t cap)
{
    const int64_t *x = s->x.dims, *w = s->w.dims;
    snprintf(buf, cap, "conv_graph %s x %lldx%lldx%lldx%lld %s, w %lldx%lldx%lldx%lld, pad %d, stride %d",
             pass_names[s->pass], (long long)x[0], (long long)x[1], (long long)x[2], (long long)x[3],
             type_name(s->x.type), (long long)w[0], (long long)w[1], (long long)w[2], (long long)w[3], s->pad,
             s->stride);
}

extern "C" bn_status bn_cg_choose(bn_ctx *ctx, const bn_cg_spec *spec, int cached, void *x, void *w, void *y,
                                  bn_cg_plan **out)
{
    *out = NULL;
    const int mode = ctx->deterministic ? BN_CHOOSE_RULE : cached ? BN_CHOOSE_CACHED : BN_CHOOSE_TIMED;
    const bool timed = mode != BN_CHOOSE_RULE;
    char key[BN_KERNEL_KEY_MAX] = "";
    if (mode == BN_CHOOSE_CACHED) {
        BN_TRY(cache_key(ctx, spec, key, sizeof key));
        cached_in in = {ctx, spec, out};
        int hit = 0;
        BN_TRY(bn_chooser_lookup(key, "a graph convolution", read_choice, &in, &hit));
        if (hit) return BN_OK;
    }

    /* The graph the heuristics rank, kept in a holder freed at the end. */
    bn_cg_plan holder;
    memset(&holder, 0, sizeof holder);
    cudnnBackendDescriptor_t graph;
    bn_status st = make_graph(ctx, &holder, spec, &graph);
    if (st != BN_OK) {
        release_all(&holder);
        /* A graph cuDNN refuses for these tensors (a layout or type it has no engines for). */
        bn_chooser_say(VERBOSE, "conv_graph: %s: no graph: %s\n", pass_names[spec->pass], bn_last_error());
        return BN_OK;
    }
    /* The heuristics' configurations (mode A's, then the fallback's), then, when timed, every
     * engine of the graph with its default knobs: the heuristics leave out engines that run some
     * shapes several times faster (cifar10_resnet's 64 -> 128 layer at 32x32, TF32: its data pass
     * 0.47 ms by engine 43 against 2.7 ms by the best they offer). */
    cudnnBackendDescriptor_t *cfgs[3] = {NULL, NULL, NULL};
    int counts[3] = {0, 0, 0}, caps[3] = {BN_CG_CANDIDATES, BN_CG_CANDIDATES, BN_CG_ENGINES};
    const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    const int total = 2 * BN_CG_CANDIDATES + BN_CG_ENGINES;
    char(*seen)[NAME_MAX_LEN] = (char(*)[NAME_MAX_LEN])calloc(total, NAME_MAX_LEN);
    float *seen_ms = (float *)calloc(total, sizeof *seen_ms);
    const char **names = (const char **)calloc(total, sizeof *names);
    for (int m = 0; m < 3; m++) cfgs[m] = (cudnnBackendDescriptor_t *)calloc(caps[m], sizeof *cfgs[m]);
    if (!seen || !seen_ms || !names || !cfgs[0] || !cfgs[1] || !cfgs[2])
        st = bn_error(BN_ERR_NOMEM, "conv_graph: out of host memory");
    for (int m = 0; m < 2 && st == BN_OK; m++) st = heuristics(graph, modes[m], cfgs[m], caps[m], &counts[m]);
    if (st == BN_OK && timed) st = every_engine(graph, cfgs[2], caps[2], &counts[2]);

    /* The candidates that ran, in that order, each once. One that runs more than twice as long as
     * the fastest fully timed before it is cut after one timed run. */
    int num_seen = 0;
    float fastest = INFINITY;
    for (int m = 0; m < 3 && st == BN_OK; m++)
        for (int i = 0; i < counts[m] && st == BN_OK; i++) {
            char name[NAME_MAX_LEN] = "";
            float ms = 0.0f;
            size_t ws = 0;
            int took = 0, cut = 0;
            st = try_candidate(ctx, spec, cfgs[m][i], timed, 2.0f * fastest, x, w, y, name, sizeof name, &ms, &ws,
                               &took, &cut);
            if (st != BN_OK || !took) continue;
            int dup = 0;
            for (int j = 0; j < num_seen && !dup; j++) dup = strcmp(seen[j], name) == 0;
            if (dup) continue;
            snprintf(seen[num_seen], NAME_MAX_LEN, "%s", name);
            seen_ms[num_seen++] = ms;
            if (!cut && ms < fastest) fastest = ms;
            if (!timed) break; /* the heuristics' first allowed one */
        }
    for (int m = 0; m < 3; m++)
        for (int i = 0; i < counts[m]; i++) cudnnBackendDestroyDescriptor(cfgs[m][i]);
    for (int m = 0; m < 3; m++) free(cfgs[m]);
    release_all(&holder);
    /* The fastest that agrees with the reference (when timed); of equal times the earlier. None
     * agreeing is as none running: the caller's other way runs. */
    int best = -1;
    if (st == BN_OK) {
        for (int i = 0; i < num_seen; i++) names[i] = seen[i];
        engine_check check = {ctx, spec, names, NULL};
        const bn_candidates ran = {num_seen, names, NULL, NULL, 0, NULL, &check, -1, timed ? agree_engine : NULL, NULL};
        char label[160];
        choice_label(spec, label, sizeof label);
        const bn_chooser chooser = {TIMING, 0.0f, VERBOSE, label};
        st = bn_chooser_pick_checked(&chooser, &ran, seen_ms, &best);
        bn_cg_check_close(&check.check);
    }
    if (st == BN_OK && best >= 0) st = plan_named(ctx, spec, seen[best], seen_ms[best], out);
    if (st == BN_OK) st = bn_chooser_keep(key, best >= 0 ? seen[best] : "none");
    free(seen);
    free(seen_ms);
    free(names);
    return st;
}
