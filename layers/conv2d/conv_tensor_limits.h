/* conv_tensor_limits.h - the launch limits that the tensor-core kernels (conv_tensor.cu) and their
 * plan making (conv_tensor_plan.c) share. */
#ifndef BN_CONV_TENSOR_LIMITS_H
#define BN_CONV_TENSOR_LIMITS_H

#include <stdbool.h>
#include <stddef.h>

#include "conv_pooled.h"
#include "im2col.h"

/* 16-position tiles per warp. */
#define MW 2
/* Shared memory a block may take (opted into once per kernel). */
#define TENSOR_SMEM (200 * 1024)
/* Warps per block at most. */
#define MAX_WARPS 16

/* Column tiles per warp, and the row of a warp's sums while warps add them (8 floats more than
 * its 32, so that rows 8 apart do not share banks). */
#define NTW 4
#define RED_ROW (NTW * 8 + 8)

/* The shared memory a pass launches with, in bytes: its plan's, and to read dy through a
 * pooling two images' pooled gradients and masks after it (from a 16-byte boundary). */
static inline size_t launch_smem(size_t plan_smem, const bn_conv_geom *g, int filters, bool pooled)
{
    if (!pooled) return plan_smem;
    return plan_smem + 16 + 2 * pooled_stage_bytes(filters * (g->oh / 2) * (g->ow / 2));
}

#endif
