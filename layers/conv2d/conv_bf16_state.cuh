/* conv_bf16_state.cuh - what conv_bf16.cu (the plans: which layout and which cuDNN engines or
 * algorithms run the passes, chosen per batch size) and conv_bf16_passes.cu (running the passes
 * in a layout, with the NHWC copies' transposes) share: the layer's BF16 state, its plans, and the
 * two calls that run a plan's passes. For .cu files only. */
#ifndef BN_CONV_BF16_STATE_CUH
#define BN_CONV_BF16_STATE_CUH

#include <stdbool.h>

#include <cudnn.h>

#include "conv2d.h"
#include "conv_bf16.h"
#include "conv_graph.h"
#include "gpu/bf16.cuh"
#include "gpu/overlap.h"

/* How the passes run: cuDNN on the blobs' NCHW tensors, cuDNN on NHWC copies, or blobnet's own
 * FP32 kernels on FP32 copies (conv2d.cu: bn_conv2d_own_*). The first CUDNN_LAYOUTS are cuDNN's. */
enum { NCHW, NHWC, F32, LAYOUTS };
#define CUDNN_LAYOUTS 2

typedef struct bf16_algos {
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t data;
    cudnnConvolutionBwdFilterAlgo_t filter;
} bf16_algos;

enum { PASS_FWD = BN_CG_FORWARD, PASS_DATA = BN_CG_DATA, PASS_FILTER = BN_CG_FILTER };

typedef struct bf16_plan {
    int n;         /* batch size the algorithms were chosen for */
    int with_data; /* the layer has an input gradient, so `data` was chosen too */
    int layout;    /* the one the passes run in */
    int usable[LAYOUTS];                  /* cuDNN offered an algorithm for every pass */
    bf16_algos algos[LAYOUTS];            /* where usable */
    float ms[LAYOUTS];                    /* one timed forward and backward pass; 0 where not timed */
    cudnnTensorDescriptor_t x[LAYOUTS];   /* the input (and its gradient) at batch n */
    cudnnTensorDescriptor_t y[LAYOUTS];   /* the output (and its gradient) at batch n */
    bn_cg_plan *g[LAYOUTS][BN_CG_PASSES]; /* the pass through cuDNN's graph API where it has an engine
                                             (conv_graph.h); else the legacy algorithm in algos */
    size_t legacy_filter_workspace[LAYOUTS]; /* what the legacy filter algorithm needs (where it runs) */
} bf16_plan;

/* The workspace the filter pass in layout L needs: its graph-API plan's, else its legacy
 * algorithm's. */
static inline size_t filter_workspace(const bf16_plan *plan, int L)
{
    const bn_cg_plan *g = plan->g[L][PASS_FILTER];
    return g ? bn_cg_workspace(g) : plan->legacy_filter_workspace[L];
}

struct conv_bf16 {
    int channels, filters; /* the layer's */
    int cp, kp;            /* the NHWC copies' channel and filter counts: the layer's, rounded up to
                              multiples of 8 (cuDNN's BF16 tensor-core engines want 16-byte rows);
                              the padding is zeros in inputs and filters, dropped from results */
    bn_layer *layer;       /* the layer this state belongs to */
    cudnnFilterDescriptor_t w_desc[CUDNN_LAYOUTS]; /* BF16, KCRS and KRSC (kp x cp) */
    float *x32, *dx32, *y32; /* the F32 layout's copies of x, dx and y (or dy); NULL until it is tried */
    cudnnConvolutionDescriptor_t conv_desc;  /* FP32 compute, tensor-op math */
    __nv_bfloat16 *dw;     /* cuDNN's filter gradient in the layout's filter order, then added into the FP32 slab */
    __nv_bfloat16 *wt;     /* the filter as KRSC */
    __nv_bfloat16 *xt;     /* the input as NHWC (the batch the blob holds at most); then its gradient,
                              where the filter pass runs before the data pass */
    __nv_bfloat16 *dxt;    /* the input gradient as NHWC where the filter pass, still reading xt,
                              runs beside the data pass; made only while a plan may run NHWC beside
                              (make_plan), NULL otherwise */
    bn_overlap side;       /* the filter pass on the side stream beside the data pass */
    __nv_bfloat16 *yt;     /* the output, or its gradient, as NHWC */
    float *bias_parts;     /* the bias gradient's partial sums (conv_bias.h) */
    bf16_plan *plans;
    int num_plans;
};

/* Whether a rows x cols matrix is its own transpose in memory (one row or one column): then an
 * array's two layouts coincide and cuDNN reads or writes the blob itself. */
static inline bool same_layouts(int rows, int cols)
{
    return rows == 1 || cols == 1;
}

/* Whether the input gradient in NHWC is written to scratch (xt, or dxt beside the filter pass)
 * rather than to the blob itself. */
static inline bool nhwc_dx_apart(const conv_priv *c, const conv_bf16 *s)
{
    return !(s->cp == c->g.c && same_layouts(c->g.c, c->g.h * c->g.w));
}

/* Whether the NHWC copies carry padding channels or filters. */
static inline bool padded(const conv_priv *c, const conv_bf16 *s)
{
    return s->cp != c->g.c || s->kp != c->filters;
}

#ifdef __cplusplus
extern "C" {
#endif

/* y = the convolution of x by w (no bias) in layout L of plan; x, w and y in the blobs' order. */
bn_status bn_conv_bf16_run_forward(const conv_priv *c, conv_bf16 *s, const bf16_plan *plan, int L, bn_ctx *ctx,
                                   const __nv_bfloat16 *x, const __nv_bfloat16 *w, __nv_bfloat16 *y);

/* dw (FP32, KCRS) += the filter gradient from x and dy, and, where dx is not NULL, dx = the input
 * gradient, in layout L of plan; x, w, dy and dx in the blobs' order. The F32 layout's kernels
 * also add the bias gradient into db (the others leave it to the caller). In cuDNN's layouts,
 * with an input gradient and a side stream, the filter pass runs on the side stream beside the
 * data pass (bn_ctx_on_side: a workspace of its own), joined back before returning, or left
 * pending for the net to join with `defer` (bn_overlap_run). */
bn_status bn_conv_bf16_run_backward(const conv_priv *c, conv_bf16 *s, const bf16_plan *plan, int L, bn_ctx *ctx,
                                    const __nv_bfloat16 *x, const __nv_bfloat16 *w, const __nv_bfloat16 *dy,
                                    float *dw, float *db, __nv_bfloat16 *dx, int defer);

#ifdef __cplusplus
}
#endif
#endif
