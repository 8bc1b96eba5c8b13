/* conv_wino.h - blobnet's Winograd convolution kernels for the GPU (conv_wino.cu), the conv2d
 * layer's family "winograd": 3x3 windows at stride 1, all three passes, by F(4x4, 3x3), the CPU's
 * transform (conv_winograd.h) with the same six points.
 *
 * A pass carries its input into the 6x6 domain (36 values a 4x4 output tile), multiplies each of
 * the 36 points' matrices by the carried-in weights (36 products of channels x tiles, on the tensor
 * cores with split TF32 operands: FP32 accuracy; the value product alone in a tf32 context), and
 * carries the products back out: four times fewer multiplications than the direct sums, for three
 * passes over memory that the direct kernels do not make. So it pays where channels are many (the
 * products long) and loses at a few tens: the timed choice takes it where it wins. Its sums are
 * those of the transforms, rounded where the direct sums are not (the CPU's default does the same):
 * a few 1e-6 of an output's scale.
 *
 * A pass takes the batch in chunks of images whose carried-in values fit the layer's scratch (or
 * partial sums, for the filter pass): bn_wino_plan says how many. Deterministic and
 * graph-capturable; a plan needs no device work to make. */
#ifndef BN_CONV_WINO_H
#define BN_CONV_WINO_H

#include <stddef.h>

#include "conv_relu.h"
#include "core/status.h"
#include "im2col.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The domain's points, and the output cells of a tile a side. */
#define BN_WINO_POINTS 36
#define BN_WINO_TILE 4

/* One pass in its forward form: ci channels of ih x iw padded by pad -> co channels of oh x ow. */
typedef struct bn_wino_form {
    int ci, ih, iw, pad, co, oh, ow;
    int th, tw;       /* output tiles a column and a row */
} bn_wino_form;

typedef struct bn_wino_pass {
    int ok;           /* the kernels can run this pass */
    const char *why;  /* else why not, in a few words */
    bn_wino_form f;
    int images;       /* images a chunk takes */
    int cols;         /* a chunk's tiles (images x th x tw), rounded up to a multiple of 4 */
    int cip;          /* the summed channels rounded up to a multiple of 4 (forward, data) */
    int splits;       /* filter: the blocks each point's product is split among along the tiles */
    int per;          /* filter: the tiles a split takes (whole stages of the products) */
    int cfg;          /* the products' tile configuration (conv_wino_limits.h) */
    int turned;       /* filter: the products' rows are the channels and their columns the filters
                         (fewer waste where the channels are 64 or fewer and the filters more) */
    int ldc;          /* filter: floats a row of a point's weight gradient takes */
    /* Where the pass's buffers lie, in floats from the start of its scratch past the split
     * counters (forward, data) or of its partial sums (filter), all 16-byte aligned:
     * - forward and data: the carried-in weights' TF32 values at 0 and remainders at `lo`, the
     *   chunk's carried-in input at `in` and the points' products at `out`;
     * - filter: the chunk's carried-in input at `in` (0) and output gradient at `dy`, the splits'
     *   weight gradients at `out` (`slot` floats a split), and the bias gradient's partial sums
     *   (conv_bias.h) at `bias`.
     * `floats` in all. */
    long long lo, in, dy, out, slot, bias, floats;
} bn_wino_pass;

typedef struct bn_wino_plan {
    bn_wino_pass pass[3]; /* forward, data, filter */
    int products;         /* TF32 products per multiply: 3 (FP32 accuracy), 1 with tf32 */
    size_t workspace;     /* bytes the filter pass needs (its pass's `floats`) */
    size_t scratch;       /* bytes the forward or data pass needs: the families' split counters
                             (conv_family.h), then the larger pass's `floats` */
} bn_wino_plan;

/* Fills a plan for a batch of n (sms: the device's multiprocessors; tf32 nonzero: one TF32
 * product per multiply). Never fails: a pass the kernels cannot run has ok 0 and its reason. */
void bn_wino_plan_make(bn_wino_plan *p, const bn_conv_geom *g, int filters, int n, int sms, int tf32);

/* Test hook: plans made from now on give a pass's chunk `floats` of room instead of the usual
 * (conv_wino_limits.h), so that small shapes take several chunks; 0 restores the usual. */
void bn_wino_room(long long floats);

/* forward writes y (bias added where b is not NULL) and a fused ReLU's output where relu->out is
 * set; data writes dx and a fused ReLU's input gradient likewise; filter adds into dw and, where
 * db is not NULL, db. scratch: plan->scratch bytes; parts: plan->workspace bytes. */
bn_status bn_wino_forward(const bn_wino_plan *p, int n, void *stream, const float *x, const float *w,
                          const float *b, float *y, void *scratch, const bn_conv_relu *relu);
bn_status bn_wino_backward_data(const bn_wino_plan *p, int n, void *stream, const float *dy, const float *w,
                                float *dx, void *scratch, const bn_conv_relu *relu);
bn_status bn_wino_backward_filter(const bn_wino_plan *p, int n, void *stream, const float *x, const float *dy,
                                  float *dw, float *db, void *parts);

#ifdef __cplusplus
}
#endif
#endif
