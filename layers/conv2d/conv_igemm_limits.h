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

/* A split forward or data pass (conv_family.h, bn_conv_split_share) gives each block IG_SPLIT_MIN
 * summed indices or more, in whole BK-deep stages; the tile's last block to finish adds their
 * partial sums in split order (conv_tile_store.cuh). */
#define IG_SPLIT_MIN (4 * BK)

/* Tile configurations: {BM, BN} of a block, largest first; the warps are two along M and four
 * along N, or for 32 rows one along M and eight along N (conv_igemm.cu's launch_cfg). */
static const int ig_tiles[BN_IG_CONFIGS][2] = {{128, 64}, {64, 128}, {64, 64}, {32, 128}, {32, 64}};

/* The data pass at stride s runs as s * s phases (blockIdx.z / splits in conv_igemm.cu): phase
 * (py, px) takes the dx positions (y, x) with (y + pad) % s == py and (x + pad) % s == px, whose
 * window taps ky = py + s a, kx = px + s b reach dy at ((y + pad - py) / s - a, (x + pad - px) / s
 * - b), a stride-1 product of its own. At stride 1 the one phase is the whole pass. */
typedef struct ig_phase {
    int py, px; /* the residues */
    int y0, x0; /* the first dx row and column of the phase */
    int cy, cx; /* its rows and columns */
    int ty, tx; /* its taps along y and x */
} ig_phase;

/* Phase z of the data pass over an h x w input of a k x k window at stride s, padded by pad. */
#ifdef __CUDACC__
__host__ __device__
#endif
static inline ig_phase ig_phase_of(int z, int s, int pad, int h, int w, int k)
{
    ig_phase p;
    p.py = z / s, p.px = z - p.py * s;
    p.y0 = ((p.py - pad) % s + s) % s, p.x0 = ((p.px - pad) % s + s) % s;
    p.cy = p.y0 < h ? (h - p.y0 + s - 1) / s : 0;
    p.cx = p.x0 < w ? (w - p.x0 + s - 1) / s : 0;
    p.ty = p.py < k ? (k - p.py + s - 1) / s : 0;
    p.tx = p.px < k ? (k - p.px + s - 1) / s : 0;
    return p;
}

#endif
