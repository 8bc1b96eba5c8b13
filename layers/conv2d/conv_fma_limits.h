/* conv_fma_limits.h - the launch limits that the FP32 tile kernel (conv_fma.cu) and its plan
 * making (conv_fma_plan.c) share. */
#ifndef BN_CONV_FMA_LIMITS_H
#define BN_CONV_FMA_LIMITS_H

/* Warps a block: WR along the tile's rows by FMA_WARPS / WR along its positions. */
#define FMA_WARPS 8
#define FMA_THREADS (32 * FMA_WARPS)
/* A warp's share of the tile: 32 rows by 64 positions, 8 x 8 outputs a thread. */
#define FMA_WARP_ROWS 32
#define FMA_WARP_POSITIONS 64
/* Positions of dy an image may have: the widest tile's (one warp along the rows), 512. */
#define FMA_MOST_POSITIONS (FMA_WARPS * FMA_WARP_POSITIONS)
/* Floats of shared memory a block takes: its tile (every warp's share), which holds as much as
 * the filters it stages at once (their rows and positions); and those in bytes. */
#define FMA_FLOATS (FMA_WARPS * FMA_WARP_ROWS * FMA_WARP_POSITIONS)
#define FMA_SMEM_BYTES (FMA_FLOATS * sizeof(float))
/* The widest window the plan offers the kernel to: the windows its tap sums were measured on
 * (1, 3 and 5 unrolled, 7 through the general loop; docs/performance.md, version 81). */
#define FMA_WIDEST_WINDOW 7
/* Blocks a multiprocessor holds (the kernel's launch bounds). */
#define FMA_RESIDENT 2

#endif
