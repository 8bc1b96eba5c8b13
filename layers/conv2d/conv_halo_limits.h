/* conv_halo_limits.h - the tile configurations, window sizes and staging limits that the halo
 * implicit-GEMM kernels (conv_halo.cu) and their plan making (conv_halo_plan.c) share, and the
 * one rule both use for the input rows a block stages. */
#ifndef BN_CONV_HALO_LIMITS_H
#define BN_CONV_HALO_LIMITS_H

#include "conv_halo.h"

/* Channels per chunk: a chunk's summed index is its channels x the window's taps, and each
 * 8-deep step of the products is one tap of the chunk's 8 channels. */
#define HL_BC 8
/* Warps per block. */
#define HL_WARPS 8
/* A block's staged rows take at most HL_HMAX x HL_WARPS x 32 positions of each channel. */
#define HL_HMAX 8
/* Window sizes the kernels are built for. */
#define HL_KS 3
/* Shared memory a block may take, so that two blocks share a multiprocessor. */
#define HL_SMEM_MAX (113 * 1024)

/* Tile configurations: {BM, BN, WM}: BM output channels x BN output positions a block, WM of
 * its warps along the channels (and HL_WARPS / WM along the positions). The last three are
 * narrower tiles of the first, second and fourth one's rows (three n8 products a warp where those
 * have four), which a plan takes where its blocks then fill the multiprocessors more evenly
 * (conv_halo_plan.c, hl_widest_even). */
static const int hl_tiles[BN_HL_CONFIGS][3] = {{128, 64, 4}, {64, 128, 2}, {64, 64, 2}, {32, 256, 1},
                                               {32, 128, 1}, {128, 48, 4}, {64, 96, 2}, {32, 192, 1}};

/* A split forward or data pass (conv_family.h, bn_conv_split_share) gives each block HL_SPLIT_MIN
 * chunks of channels or more; the tile's last block to finish adds their partial sums in split
 * order. Three blocks a multiprocessor, and no splits at stride 2, were faster alone and slower in
 * resnet_fashion's steps at 128 images, where the filter pass runs beside the data pass on the
 * multiprocessors an unsplit pass leaves (docs/performance.md, version 45). Until version 55 the
 * halo kernels took as many splits as kept two blocks a multiprocessor, which is the shared rule's
 * choice for a data pass; for a forward pass its ties to fewer blocks were faster in resnet_fashion's
 * steps at 32-128 images. */
#define HL_SPLIT_MIN 2

/* Floats of a split pass's partial sums (a slot of BM x BN a block, tile by tile, split by
 * split). */
static inline long long hl_split_floats(int cfg, long long tiles, int splits)
{
    return tiles * splits * hl_tiles[cfg][0] * hl_tiles[cfg][1];
}

/* The filter pass: {WM, WN} warps along the filters and the channels (8 warps, or 4), each warp
 * 32 filters x 8 channels x the taps; HL_KP output positions a chunk. */
static const int hl_filter_tiles[BN_HL_FILTER_CONFIGS][2] = {{4, 2}, {2, 4}, {1, 4}, {2, 2}};
#define HL_KP 64

/* A pass in the forward form the kernels run: an input of ci channels, ih x iw, padded by pad,
 * read at stride `stride` by a KS x KS window into m channels of oh x ow. The data pass at
 * stride 1 is this form over dy, with pad KS - 1 - pad and the window turned half a circle. */
typedef struct hl_form {
    int n, ci, ih, iw, m, oh, ow, stride, pad;
} hl_form;

/* The input rows that output positions j0 .. j1 (j = (image, y, x), flat) read: the padded
 * images stacked, row P = image * (ih + 2 pad) + row; the first row is *first, the count
 * returned. */
#ifdef __CUDACC__
__host__ __device__
#endif
static inline int hl_rows(const hl_form *f, int ks, int j0, int j1, int *first)
{
    const int np = f->oh * f->ow, ph = f->ih + 2 * f->pad;
    const int img0 = j0 / np, oy0 = (j0 - img0 * np) / f->ow;
    const int img1 = j1 / np, oy1 = (j1 - img1 * np) / f->ow;
    *first = img0 * ph + oy0 * f->stride;
    return img1 * ph + oy1 * f->stride + ks - *first;
}

/* Floats of shared memory a block of configuration cfg takes: two stages, each the chunk's
 * weights (BM rows of HL_BC x taps, 4 more for the banks) and its staged input, then the table of
 * a staged channel's sources (pitch ints). */
static inline long long hl_smem_floats(int cfg, int ks, int pitch)
{
    return 2LL * (hl_tiles[cfg][0] * (HL_BC * ks * ks + 4) + (long long)HL_BC * pitch) + pitch;
}

/* Floats of shared memory a filter block of configuration cfg takes: two stages, each a chunk's
 * dy (32 WM rows of HL_KP positions, 4 more for the banks), its staged input (8 WN channels) and
 * its positions' two tables. */
static inline long long hl_filter_smem_floats(int cfg, int pitch)
{
    return 2LL * (32 * hl_filter_tiles[cfg][0] * (HL_KP + 4) + 8LL * hl_filter_tiles[cfg][1] * pitch + 2 * HL_KP);
}

#endif
