/* gpu_testing.h - the GPU cases of the layer tests (test_<layer>.c, and test_graph.c and test_net.c
 * for whole networks): a model's GPU pass against its CPU pass. Defined in test_util_gpu.c.
 *
 * Each case builds the same model twice (same seed, so the same weights), one on the CPU and
 * one on the device, feeds both the same fresh random inputs, labels, output gradient and
 * starting parameter gradients, runs forward and backward, and compares every output, every
 * intermediate and input gradient and every parameter gradient. Before the pass the device
 * copies of all outputs and gradients are poisoned with NaN, and the input rows past the
 * current batch are NaN on both sides, so an element the GPU forgets to write, or a row it
 * reads past the batch, fails the comparison. Parameter gradients start from the same random
 * values rather than zero: both paths must add to them.
 *
 * A difference is measured as max |gpu - cpu| over the blob divided by the blob's scale:
 * max |cpu|, or for a parameter gradient max |cpu - start|, what backward added (1 when that
 * is all zeros). A failure prints the seed and the command that replays it (lt_replay). */
#ifndef BN_GPU_TESTING_H
#define BN_GPU_TESTING_H

#include <stdint.h>

#include "core/net.h"

/* GEMM-based layers (dense, conv2d) in FP32: the two sides add up to a few hundred products per
 * element in different orders, and cuDNN may use Winograd or FFT transforms; that moves results
 * by a few 1e-6 of the blob's scale. TF32 tensor cores (10-bit mantissa) would be off by
 * about 1e-3, so this bound also catches a silent switch to TF32. */
#define TOL_GEMM 1e-4
/* TF32 products (a 10-bit fraction) put a blob about 1e-3 of its scale from the CPU's FP32 sums. */
#define TOL_TF32 1e-2
/* Elementwise layers, pooling and softmax: the same formula per element; CUDA's and libm's
 * exp/tanh differ by a few ulps (pooling itself matches bit for bit: test_pool.c). */
#define TOL_ELEMENTWISE 1e-5
/* Weight gradients summed over a batch of 257 behind average pooling: every one of the 16,448
 * products of a sum is non-zero and they cancel, so two FP32 summation orders (the CPU's GEMM
 * and blobnet's split sums) end further apart relative to the result (1.03e-4 seen once); still
 * well below the ~1e-3 of TF32 products. */
#define TOL_LONG_SUMS 4e-4
/* The loss sum is accumulated in double on both sides and rounded to float once. */
#define TOL_LOSS_SUM 1e-5

typedef struct layer_case {
    const char *what;
    const char *text;   /* the model; without a loss layer the test sets the last output gradient */
    double tol;
    int classes;        /* with a loss layer: labels in [0, classes) */
    int zeros;          /* put exact zeros among the inputs (the kinks of relu-like layers) */
    int own_convs;      /* every conv2d pass that blobnet's kernels can run must have run on them */
    int autotuned_too;  /* run the comparisons a second time with an autotuning context (the
                           kernels chosen by timing, cuDNN's and cuBLASLt's among them) */
    int grad_in_forward; /* the loss layer writes its input gradient in the forward pass, as
                            in the trainer's step (bn_net_fuse_loss) */
    int exact_convs;    /* inputs and conv2d weights and biases on a coarse grid (grid_params), so
                           that every convolution's sums are exact in FP32 in any order */
} layer_case;

/* (capacity, batch) pairs: batch sizes 1, 3, 64, 257, and a last batch smaller than the blobs. */
#define GT_NUM_SIZES 5
extern const int gt_capacities[GT_NUM_SIZES];
extern const int gt_batches[GT_NUM_SIZES];

/* The conv2d kernel family the blobnet-engine cases force (BN_CONV_FAMILY_*): with
 * layer_case.own_convs, the family every conv2d plan must show. */
extern int gt_forced_family;

/* Writes the whole capacity of b's host copy (rows past the current batch included). */
bn_status gt_put(bn_blob *b, const float *v);

/* gt_put of v (the whole capacity's values, malloc'd; NULL: out of memory) into both blobs,
 * then v freed, or handed to the caller in *kept when kept is not NULL and both were written. */
bn_status gt_put_both(bn_blob *cpu, bn_blob *gpu, float *v, float **kept);

/* Fills b's device copy with NaN (the whole capacity); nothing for a NULL blob or a slice (its
 * root, a channel join's output, is filled whole). */
bn_status gt_poison(bn_blob *b, bn_ctx *ctx);

/* gt_poison on the input gradient, the metrics and every layer's output and output gradient. */
bn_status gt_poison_net(bn_net *net, bn_ctx *ctx);

/* Same inputs, labels, last output gradient and starting parameter gradients on both nets;
 * *start receives the latter (NULL without parameters), freed by the caller. */
bn_status gt_feed(bn_net *cpu, bn_net *gpu, const layer_case *lc, uint64_t seed, float **start);

/* gt_feed's inputs on both nets (the starting gradients not kept), then one training forward and
 * backward pass of a, then of b. */
bn_status gt_step_alike(bn_net *a, bn_net *b, const layer_case *lc, uint64_t seed);

/* Keeps the CPU's ReLU inputs at least margin times their scale (max |x|) from the kink at zero:
 * for each ReLU in layer order whose input a layer with one bias per channel writes (dense,
 * conv2d), each channel's bias shifted by a few margins where that clears all of the channel's
 * values, after a forward pass on cpu; the same parameters then put on gpu. Nearer than the
 * tolerance of the two sides' outputs, an input can lie on the other side of zero on the GPU,
 * whose sums round differently, and the ReLU then passes a whole gradient the CPU stops, or
 * stops one it passes. */
bn_status gt_keep_off_kinks(bn_net *cpu, bn_net *gpu, double margin);

/* 1 when every current element of b is NaN (the poison: nothing wrote it), else 0. */
int gt_all_nan(bn_blob *b);

/* Fails unless gpu is within tol of cpu (over its scale, or over what was added to base);
 * *worst receives the largest difference seen. */
int gt_compare_blob(const char *what, int n, bn_blob *gpu, bn_blob *cpu, const float *base, double tol,
                    uint64_t seed, double *worst);

/* One training forward and backward of lc at batch n of capacity on the CPU and on ctx, every
 * blob compared. */
int gt_compare_once(const layer_case *lc, int capacity, int n, uint64_t seed, bn_ctx *ctx, double *worst);
/* The same on one pair of networks of that capacity, at each batch of ns in turn (batch j's data
 * from seed + j): the layers' per-batch plans, and anything they keep between passes, alternate. */
int gt_compare_batches(const layer_case *lc, int capacity, const int *ns, int count, uint64_t seed, bn_ctx *ctx,
                       double *worst);

/* gt_compare_once at every size of gt_capacities and gt_batches in ctx as it is, the worst
 * difference printed, or how to rerun a failure. */
int gt_compare_sizes(const layer_case *lc, bn_ctx *ctx, uint64_t seed);

/* gt_compare_once at every size on device 0, and again autotuned with lc->autotuned_too;
 * skipped without a device. */
int gt_run_case(const layer_case *lc);

/* One comparison of two nets at a precision and a batch, on the batchnorms' one-kernel path or
 * their two-kernel one (split), where the comparison tells the two apart: BN_PASS or not. */
typedef int (*gt_same_bits_case)(bn_ctx *ctx, int bf16, int n, int split);

/* same_bits in FP32 and bf16, at batches 8 and 3, on `paths` ways (1: as the nets run; 2: the
 * one-kernel and the two-kernel path), in a deterministic context of device 0: both nets then
 * take the same kernels (under bf16 cuDNN's, whose algorithms are otherwise chosen by timing each
 * net's passes). The case that failed is printed. */
int gt_same_bits_cases(gt_same_bits_case same_bits, int paths);

/* Fails unless the two blobs' current elements are bit for bit the same. */
int gt_same_bits(bn_blob *a, bn_blob *b, uint64_t seed);

/* Two nets of `text`, set up alike on ctx for batches up to 8 from seed, in bf16 where bf16 is set
 * (the context's precision as it was afterwards). b_switch, where not NULL, names an environment
 * variable set to 1 while b alone is set up (a switch that makes b the plain form to compare with). */
bn_status gt_twin_nets(bn_ctx *ctx, const char *text, const char *name, int bf16, uint64_t seed, const char *b_switch,
                       bn_net **a, bn_net **b);

/* What gt_nets_same_bits compares besides every parameter gradient, where both nets write it
 * (bn_net_blob_unwritten): each layer's output, its input gradient, its output gradient. */
enum { GT_BITS_OUTPUTS = 1, GT_BITS_IN_GRADS = 2, GT_BITS_OUT_GRADS = 4 };

/* Fails unless a and b, set up alike and stepped alike, hold the same bits in every parameter
 * gradient and in the blobs `which` names. */
int gt_nets_same_bits(bn_net *a, bn_net *b, uint64_t seed, int which);

/* Whether conv2d layer l's plan for batch n runs `pass` ("fwd", "bwd_data" or "bwd_filter") by
 * `runner`, as bn_conv2d_gpu_describe names it ("blobnet igemm", ...); 0 where there is no plan
 * for n, and in a build without CUDA. */
int gt_conv_runs(const bn_layer *l, int n, const char *pass, const char *runner);

/* Gives the backward pass of the ReLU after each batchnorm of net that took it (on a device)
 * back to the ReLU, so that the batchnorm stores its own output again, as a test that reads
 * that output needs; returns how many it gave back. */
int gt_bn_relus_apart(bn_net *net);

#endif
