/* conv_graph.h - one convolution pass through cuDNN's graph (backend) API: the operation graph of
 * a forward, backward-data or backward-filter convolution on tensors of any layout and data type
 * (the strides say the layout), the engine configurations cuDNN's heuristics offer for it, and
 * the one chosen by timing them (or cuDNN's first, where runs must repeat).
 *
 * The legacy API (cudnnConvolutionForward and its algorithms) reaches only a few of these
 * engines for BF16 tensors; the graph API lists every engine, with its tile and split choices,
 * so NHWC tensor-core kernels for every pass are among the candidates. Engines are refused for
 * what they would change in the results: FFT and Winograd transforms always; inputs
 * down-converted (TF32 products of FP32 data) unless the spec allows it; sums kept in reduced
 * precision (a BF16 filter gradient accumulated in BF16); non-determinism in a deterministic
 * context; and engines compiled at run time (their start-up cost). A chosen configuration is
 * kept in the kernel cache (gpu/kernel_cache.h) by engine and knob values, so later runs time
 * nothing. */
#ifndef BN_CONV_GRAPH_H
#define BN_CONV_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include <cudnn.h>

#include "core/device.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The pass: y from x and w; dx (in x) from w and dy (in y); dw (in w) from x and dy. */
enum { BN_CG_FORWARD, BN_CG_DATA, BN_CG_FILTER, BN_CG_PASSES };

/* A 4-d tensor: dims in N, C, H, W order (K, C, R, S for a filter); strides in elements give
 * the layout; align: the bytes its address is a multiple of (16 at most; bn_cg_align). */
typedef struct bn_cg_tensor {
    int64_t dims[4], strides[4];
    cudnnDataType_t type;
    int align;
} bn_cg_tensor;

typedef struct bn_cg_spec {
    int pass;               /* BN_CG_* */
    bn_cg_tensor x, w, y;   /* the input, filter and output (or their gradients, as the pass says) */
    int pad, stride;        /* the same both ways */
    float beta;             /* 0: the pass overwrites what it writes; 1: adds to it */
    int allow_down_convert; /* FP32 inputs may be multiplied as TF32 (--tf32) */
} bn_cg_spec;

/* The packed tensors of the common layouts: NCHW or NHWC activations, KCRS or KRSC filters;
 * aligned to 16 bytes until bn_cg_align says otherwise. */
bn_cg_tensor bn_cg_nchw(int n, int c, int h, int w, cudnnDataType_t type);
bn_cg_tensor bn_cg_nhwc(int n, int c, int h, int w, cudnnDataType_t type);

/* t's align for an address, or for a byte offset into a device allocation (those are 256-byte
 * aligned): the largest power of two up to 16 that divides it. Slab views (a layer's weight and
 * its gradient) are packed, so theirs need not be 16. */
void bn_cg_align(bn_cg_tensor *t, uintptr_t address);

/* A chosen engine configuration, finalized as an execution plan for one spec. */
typedef struct bn_cg_plan bn_cg_plan;

/* Chooses the plan for spec: from the kernel cache when it has one (cached != 0), else by timing
 * up to BN_CG_CANDIDATES of the heuristics' configurations of each of two modes, then up to
 * BN_CG_ENGINES of the graph's engines by index with their default knobs, on the buffers given
 * (device memory of the spec's sizes whose contents may be overwritten), keeping the fastest and
 * caching it; in a deterministic context, the heuristics' first that is allowed, untimed. *out is
 * NULL (and the status BN_OK) when cuDNN offers nothing allowed for the spec: the caller's other
 * way runs. Allocates and synchronises: never inside a captured step. */
#define BN_CG_CANDIDATES 24
#define BN_CG_ENGINES 160
bn_status bn_cg_choose(bn_ctx *ctx, const bn_cg_spec *spec, int cached, void *x, void *w, void *y,
                       bn_cg_plan **out);

/* Queues the pass on ctx's stream. It writes one of x, w and y (the pass says which; all three
 * are const here for that reason) and uses ctx's shared workspace, which bn_cg_choose grew to
 * the plan's need. */
bn_status bn_cg_run(bn_ctx *ctx, const bn_cg_plan *plan, const void *x, const void *w, const void *y);

/* The workspace the plan needs, and its name: "eng<index>[ k<type>=<value>...]" and the time
 * measured (ms, 0 when untimed). */
size_t bn_cg_workspace(const bn_cg_plan *plan);
const char *bn_cg_name(const bn_cg_plan *plan);
float bn_cg_ms(const bn_cg_plan *plan);

/* Frees *plan and sets it to NULL; NULL is fine. */
void bn_cg_free(bn_cg_plan **plan);

#ifdef __cplusplus
}
#endif
#endif
