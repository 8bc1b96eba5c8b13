/* conv_igemm.h - blobnet's implicit-GEMM convolution kernels (conv_igemm.cu), the conv2d
 * layer's second family of own kernels beside the direct ones (conv_direct.h): each pass one
 * matrix product on the tensor cores (split TF32, FP32 accuracy; TF32 alone in a tf32 context)
 * whose operands are read from the tensors through a table of offsets. Any window, stride,
 * padding and channel count for every pass (the data pass at stride s as s x s phases).
 * Deterministic and graph-capturable; the filter pass leaves partial sums that
 * bn_direct_finish_filter adds up. A plan needs no device work to make. */
#ifndef BN_CONV_IGEMM_H
#define BN_CONV_IGEMM_H

#include <stddef.h>

#include "conv_relu.h"
#include "core/status.h"
#include "im2col.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tile configurations (block tile sizes) the kernels come in. */
enum { BN_IG_CONFIGS = 5 };

typedef struct bn_igemm_pass {
    int ok;              /* the kernel can run this pass */
    int cfg;             /* tile configuration */
    int M, N, K;         /* the product (the data pass: its largest phase's N and K) */
    int phases;          /* the data pass at stride s: s x s products (conv_igemm.cu); else 1 */
    int span, splits;    /* K per block and blocks along K: the filter pass's spans of partial
                            sums; in the forward and data passes, where the tiles alone leave
                            multiprocessors idle, the blocks that share a tile (the last to
                            finish adds their sums); else K and 1 */
} bn_igemm_pass;

typedef struct bn_igemm_plan {
    bn_igemm_pass pass[3]; /* forward, data, filter */
    int products;          /* TF32 products per multiply: 3 (FP32 accuracy), 1 with tf32 */
    size_t workspace;      /* bytes of partial sums the filter pass needs */
    size_t scratch;        /* bytes the forward or data pass needs where its tiles are split
                              (BN_CONV_SPLIT_COUNTERS counters, then the partial sums) */
} bn_igemm_plan;

/* Fills a plan for a batch of n; sms is the device's multiprocessor count; tf32 nonzero: one
 * TF32 product per multiply instead of three. Never fails: a pass these kernels cannot run has
 * its ok flag cleared. */
void bn_igemm_plan_make(bn_igemm_plan *p, const bn_conv_geom *g, int filters, int n, int sms, int tf32);
/* forward writes y (bias added); data writes dx; both also write a fused ReLU's output or input
 * gradient where relu is not NULL and relu->out is set (conv_relu.h); filter_parts writes the
 * partial sums that bn_direct_finish_filter adds into dw and db (plan->pass[2].splits spans).
 * scratch: plan->scratch bytes (NULL where that is 0), zeroed before the first call of any plan
 * and left so by each. */
bn_status bn_igemm_forward(const bn_igemm_plan *p, const bn_conv_geom *g, int filters, int n, void *stream,
                           const float *x, const float *w, const float *b, float *y, void *scratch,
                           const bn_conv_relu *relu);
bn_status bn_igemm_backward_data(const bn_igemm_plan *p, const bn_conv_geom *g, int filters, int n, void *stream,
                                 const float *dy, const float *w, float *dx, void *scratch, const bn_conv_relu *relu);
bn_status bn_igemm_backward_filter_parts(const bn_igemm_plan *p, const bn_conv_geom *g, int filters, int n,
                                         void *stream, const float *x, const float *dy, float *parts);

#ifdef __cplusplus
}
#endif
#endif
