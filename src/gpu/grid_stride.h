/* grid_stride.h - the grid of an elementwise kernel that walks its items with a grid-stride loop
 * in blocks of 256 threads: a block per 256 items, at least one, at most 4096 (past that each
 * thread takes several items, and the launch stays small whatever the blob). For launches from
 * .cu files. */
#ifndef BN_GRID_STRIDE_H
#define BN_GRID_STRIDE_H

#include <stddef.h>

static inline int bn_grid_stride_blocks(size_t items)
{
    size_t b = (items + 255) / 256;
    return (int)(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

#endif
