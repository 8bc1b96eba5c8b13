/* conv_relu.h - a ReLU layer whose GPU pass a convolution's kernel does in its epilogue (the
 * network's fusion rules, core/fusion.c; bn_conv2d_fuse_relu).
 *
 * Forward: the ReLU after the layer. Besides y the kernel writes the ReLU's output, max(y, 0),
 * so that the ReLU's own pass (a read of y and a write, and a launch) is gone.
 *
 * Data pass: the ReLU before the layer, whose output is the layer's input x. Besides dx (the
 * ReLU's output gradient) the kernel writes the ReLU's input gradient, dx where x > 0 and 0
 * elsewhere: the ReLU's backward pass is gone.
 *
 * Both follow the CPU's rules (activation.c: relu'(0) = 0), so they are the same bits as the
 * ReLU's own kernels. */
#ifndef BN_CONV_RELU_H
#define BN_CONV_RELU_H

#include <stddef.h>

typedef struct bn_conv_relu {
    float *out;        /* forward: the ReLU's output; data: its input gradient; NULL: no ReLU */
    const float *mask; /* data: the layer's input (the ReLU's output); NULL in the forward pass */
    size_t image;      /* floats from one image of `out` to the next: more than an image's where
                          out is a slice of a channel join's output */
} bn_conv_relu;

#endif
