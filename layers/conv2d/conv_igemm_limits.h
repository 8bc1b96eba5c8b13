/* conv_igemm_limits.h - the tile configurations and launch limits that the implicit-GEMM kernels
 * (conv_igemm.cu) and their plan making (conv_igemm_plan.c) share. */
#ifndef BN_CONV_IGEMM_LIMITS_H
#define BN_CONV_IGEMM_LIMITS_H

#include "conv_igemm.h"

#define BK 16
/* The most summed-index entries a block's table holds (16 bytes each). */
#define TABLE_MAX 1280

/* Tile configurations: {BM, BN}; every one has 4x4 sums per thread. */
static const int ig_tiles[BN_IG_CONFIGS][2] = {{64, 64}, {64, 32}, {32, 64}, {32, 32}};

#endif
