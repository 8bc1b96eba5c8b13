/* conv_igemm_limits.h - the tile configurations and launch limits that the implicit-GEMM kernels
 * (conv_igemm.cu) and their plan making (conv_igemm_plan.c) share. */
#ifndef BN_CONV_IGEMM_LIMITS_H
#define BN_CONV_IGEMM_LIMITS_H

#include "conv_igemm.h"

#define BK 16
/* The most summed-index entries a block's table holds (16 bytes each). */
#define TABLE_MAX 1280

/* Warps per block. */
#define IG_WARPS 8

/* Tile configurations: {BM, BN} of a block, largest first; the warps are two along M and four
 * along N, or for 32 rows one along M and eight along N (conv_igemm.cu's launch_cfg). */
static const int ig_tiles[BN_IG_CONFIGS][2] = {{128, 64}, {64, 128}, {64, 64}, {32, 128}, {32, 64}};

#endif
