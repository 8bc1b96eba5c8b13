/* conv_halo.h - blobnet's halo implicit-GEMM convolution kernels (conv_halo.cu), the conv2d
 * layer's family for 3x3 windows of many channels: the forward and filter passes at any stride
 * and the data pass at stride 1, each one matrix product on the tensor cores (split TF32, FP32 accuracy; TF32
 * alone in a tf32 context) whose input rows a block stages once per chunk of channels, with the
 * rows and columns of their halo, and reads at every tap from there. The implicit GEMM
 * (conv_igemm.h) copies an input value once per tap that reads it; here each value is copied once
 * per block (per chunk of output positions, in the filter pass). Deterministic and
 * graph-capturable; a plan needs no device work to make. */
#ifndef BN_CONV_HALO_H
#define BN_CONV_HALO_H

#include "conv_relu.h"
#include "core/status.h"
#include "im2col.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tile configurations (block tile sizes) the forward and data kernels come in, and the filter
 * kernel. */
enum { BN_HL_CONFIGS = 8, BN_HL_FILTER_CONFIGS = 4 };

typedef struct bn_halo_pass {
    int ok;           /* the kernels can run this pass */
    const char *why;  /* else why not, in a few words */
    int cfg;          /* tile configuration */
    int rows;         /* the most input rows (halo included) a block stages */
    int pitch;        /* floats a staged channel takes in shared memory */
    int span, splits; /* filter pass: output positions per block, and blocks along them;
                         forward and data: 1, or the blocks a tile's chunks of channels are
                         shared among where the tiles alone are fewer than the multiprocessors */
    int per;          /* forward and data: chunks of channels a block takes */
} bn_halo_pass;

typedef struct bn_halo_plan {
    bn_halo_pass pass[3]; /* forward, data, filter */
    int products;         /* TF32 products per multiply: 3 (FP32 accuracy), 1 with tf32 */
    size_t workspace;     /* bytes of partial sums the filter pass needs */
    size_t scratch;       /* bytes the forward or data pass needs where its tiles are split: a
                             counter per tile (zero between launches), then the partial sums */
} bn_halo_plan;

/* Fills a plan for a batch of n; sms is the device's multiprocessor count; tf32 nonzero: one
 * TF32 product per multiply instead of three. Never fails: a pass these kernels cannot run has
 * its ok flag cleared and its reason set. */
void bn_halo_plan_make(bn_halo_plan *p, const bn_conv_geom *g, int filters, int n, int sms, int tf32);

/* The output positions a block of the forward and data kernels' tile configuration cfg takes. */
int bn_halo_tile_width(int cfg);

/* forward writes y (bias added, where b is not NULL); data writes dx; both also write a fused
 * ReLU's output or input gradient where relu is not NULL and relu->out is set (conv_relu.h);
 * filter_parts writes the
 * partial sums that bn_direct_finish_filter adds into dw and db (plan->pass[2].splits spans).
 * scratch: plan->scratch bytes (NULL where that is 0), zeroed before the first call of any plan
 * of the layer; each call leaves zeroed what the next needs so. */
bn_status bn_halo_forward(const bn_halo_plan *p, const bn_conv_geom *g, int filters, int n, void *stream,
                          const float *x, const float *w, const float *b, float *y, void *scratch,
                          const bn_conv_relu *relu);
bn_status bn_halo_backward_data(const bn_halo_plan *p, const bn_conv_geom *g, int filters, int n, void *stream,
                                const float *dy, const float *w, float *dx, void *scratch, const bn_conv_relu *relu);
bn_status bn_halo_backward_filter_parts(const bn_halo_plan *p, const bn_conv_geom *g, int filters, int n,
                                        void *stream, const float *x, const float *dy, float *parts);

#ifdef __cplusplus
}
#endif
#endif
