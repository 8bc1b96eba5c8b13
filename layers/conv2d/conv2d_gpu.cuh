/* conv2d_gpu.cuh - what conv2d's GPU files share: conv2d.cu (the layer's passes, cuDNN's
 * descriptors and legacy algorithms), conv_plan.cu (a plan per batch size: who may run each pass)
 * and conv_choice.cu (the timed and cached choice among them). */
#ifndef BN_CONV2D_GPU_CUH
#define BN_CONV2D_GPU_CUH

#include <cuda_runtime.h>
#include <cudnn.h>
#include <stdbool.h>

#include "conv2d.h"
#include "conv_family.h"
#include "conv_graph.h"
#include "conv_pooled.h"
#include "gpu/overlap.h"

enum { WEIGHT, BIAS };

/* The environment variable that, set and not "0", prints every timed choice of a plan and every
 * graph-API engine weighed against a legacy algorithm to stderr (gpu/chooser.h's verbose print). */
#define BN_CONV_VERBOSE "BLOBNET_CONV_VERBOSE"

/* Who runs a pass: cuDNN (BY_CUDNN), or a family of the table by its number (BN_CONV_FAMILY_*);
 * BN_CONV_RUNNERS in all. */
enum { BY_CUDNN = 0, BN_CONV_RUNNERS = BN_CONV_FAMILY_COUNT + 1 };

typedef struct conv_plan {
    int n;                                     /* batch size the algorithms were chosen for */
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    size_t bwd_filter_workspace;               /* the workspace cuDNN's filter pass needs (legacy
                                                  algorithm or graph plan, whichever the plan runs) */
    int with_data;                             /* the layer has an input gradient: */
    cudnnConvolutionBwdDataAlgo_t bwd_data;    /* then this is chosen too, */
    size_t bwd_data_workspace;                 /* needing this much workspace */
    int by[3];                                 /* who runs forward, data, filter: BY_CUDNN or a family */
    bn_conv_shape shape;                       /* what the families were planned for */
    bn_conv_family_plan fam[BN_CONV_FAMILY_COUNT]; /* each family's launch shapes, by number - 1 */
    bn_cg_plan *cg[3];                         /* where cuDNN runs a pass through its graph API
                                                  (conv_graph.h) instead of the legacy algorithm */
    int own_only;                              /* made for FP32 copies under bf16 (bn_conv2d_own_*):
                                                  blobnet's kernels alone, */
    int own_ok;                                /* and they serve every pass the layer needs */
    size_t scratch_bytes;                      /* the most scratch a family's forward or data pass
                                                  needs (bn_conv_family.scratch) */
} conv_plan;

struct conv_gpu {
    cudnnFilterDescriptor_t w_desc;
    cudnnConvolutionDescriptor_t conv_desc;
    bn_overlap side;                           /* the filter pass on the side stream */
    float *bias_parts;                         /* the bias gradient's partial sums after cuDNN's filter pass */
    float *parts;                              /* partial sums of blobnet's filter passes: the */
    size_t parts_bytes;                        /* layer's own, as the pass may outlive the layer's
                                                  backward on the side stream (bn_pass.defer_joins) */
    void *scratch;                             /* the forward and data passes' scratch, for every
                                                  plan (zeroed when made; each pass leaves what it */
    size_t scratch_bytes;                      /* needs zeroed so, whichever plan ran before) */
    conv_plan *plans;
    int num_plans;
};

/* The family that runs as runner `by` (not BY_CUDNN). */
static inline const bn_conv_family *runner_family(int by)
{
    return bn_conv_families[by - 1];
}

#ifdef __cplusplus
extern "C" {
#endif

/* conv2d.cu: the passes on the given buffers by runner `by` (see there). */
bool bn_conv_writes_pooled(const conv_plan *plan, int by);
bool bn_conv_reads_pooled(const conv_plan *plan, int by, int pass);
bn_status bn_conv_forward_pass(int by, const conv_gpu *g, const conv_plan *plan, bn_ctx *ctx,
                               cudnnTensorDescriptor_t xd, cudnnTensorDescriptor_t yd, const float *x, const float *w,
                               const float *b, float *y, const bn_pooled_out *pooled, float *relu_y,
                               size_t relu_stride);
bool bn_conv_takes_relu(int by, int pass);
bn_status bn_conv_data_pass(int by, const conv_gpu *g, const conv_plan *plan, bn_ctx *ctx,
                            cudnnTensorDescriptor_t dxd, cudnnTensorDescriptor_t dyd, const float *dy,
                            const bn_pooled_dy *pooled, const float *w, float *dx, const bn_conv_relu *relu,
                            bool beside);
bn_status bn_conv_filter_pass(int by, const conv_gpu *g, const conv_plan *plan, bn_ctx *ctx, cudaStream_t stream,
                              cudnnTensorDescriptor_t xd, cudnnTensorDescriptor_t dyd, const float *x, const float *dy,
                              const bn_pooled_dy *pooled, float *dw, float *db, float *parts, bool beside);
/* Grows the context's side workspace (and every lane's with it) to what the plan's cuDNN filter
 * pass needs, where the backward pass can run it beside the data pass (a side stream and an input
 * gradient): before anything is timed or captured, as the shared workspace is. */
bn_status bn_conv_reserve_beside(const conv_plan *plan, bn_ctx *ctx);
bn_status bn_conv_both_passes(int filter, int data, const conv_gpu *g, const conv_plan *plan, bn_ctx *ctx,
                              cudnnTensorDescriptor_t xd, cudnnTensorDescriptor_t dxd, cudnnTensorDescriptor_t dyd,
                              const float *x, const float *dy, const bn_pooled_dy *pooled,
                              const bn_pooled_dy *filter_pooled, const float *w, float *dw, float *db, float *dx,
                              const bn_conv_relu *relu, float *parts, bool defer);

/* conv2d.cu: cuDNN's legacy algorithm for each pass in ask (measured, or by heuristics in a
 * deterministic context; with `graph`, its graph-API engine instead where that was timed
 * faster), set in plan; the workspace they need joins *need. */
bn_status bn_conv_cudnn_algorithms(const bn_layer *l, bn_ctx *ctx, bool graph, const conv_gpu *g,
                                   cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t y, const bool ask[3],
                                   conv_plan *plan, size_t *need);

/* conv2d.cu: cuDNN's graph-API plan for pass `pass` at the layer's batch (conv_graph.h), timed or
 * from the kernel cache (cached); *out NULL where cuDNN offers no allowed engine. */
bn_status bn_conv_graph_plan(const bn_layer *l, bn_ctx *ctx, int pass, int cached, bn_cg_plan **out);

/* conv_plan.cu: the plan for the layer's current batch size, made into *plan (zeroed by the
 * caller but for own_only and cuDNN's default algorithms). */
bn_status bn_conv_make_plan(bn_layer *l, conv_priv *c, bn_ctx *ctx, conv_plan *plan);

/* conv_choice.cu: the runners among can and ask chosen by timing (see there), set in plan. */
bn_status bn_conv_choose_runners(bn_layer *l, conv_priv *c, bn_ctx *ctx, conv_plan *plan,
                                 const bool can[3][BN_CONV_RUNNERS], const bool ask[3], bool graph);

/* conv_choice.cu: the kernel cache's key for the layer's plan (its batch size and whether it is
 * own-only). */
bn_status bn_conv_cache_key(const bn_layer *l, const conv_priv *c, const bn_ctx *ctx, const conv_plan *plan, char *key,
                            size_t cap);

/* conv_choice.cu: the plan's runners as a kernel-cache choice. */
void bn_conv_cache_choice(const conv_plan *plan, char *buf, size_t cap);

/* conv_choice.cu: the cache's choice for the plan where it has one that can run (*hit). */
bn_status bn_conv_from_cache(bn_layer *l, conv_priv *c, bn_ctx *ctx, conv_plan *plan, const char *key,
                             const bool can[3][BN_CONV_RUNNERS], bool *hit);

#ifdef __cplusplus
}
#endif
#endif
