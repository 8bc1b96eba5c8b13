/* conv_pooled.h - a convolution's output gradient given through the 2x2 max pooling that reads
 * its output (conv2d.cu fuses the pair on a device): the pooled gradient and, per pooled cell,
 * which cell of its window held the maximum. blobnet's filter and data kernels that take one
 * (conv_rows.h, conv_tensor.h) expand it while they stage dy, so the full-size gradient (three
 * zeros in every window) is never written to memory; the argmax filter pass (conv_argmax.h)
 * takes the products at the maxima alone. */
#ifndef BN_CONV_POOLED_H
#define BN_CONV_POOLED_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bn_pooled_dy {
    const float *dy;            /* [n][filters][ph][pw]: the pooling layer's output gradient */
    const unsigned char *mask;  /* same layout: the window cell (2 * row + column) of the maximum */
    int ph, pw;                 /* pooled plane: floor(oh / 2) x floor(ow / 2); the cells of a
                                   last odd row or column belong to no window (gradient 0) */
} bn_pooled_dy;

#ifdef __cplusplus
}
#endif
#endif
