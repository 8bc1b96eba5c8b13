/* conv_wino_limits.h - the tile sizes and bounds that the Winograd kernels (conv_wino.cu) and
 * their plans (conv_wino_plan.c) share. */
#ifndef BN_CONV_WINO_LIMITS_H
#define BN_CONV_WINO_LIMITS_H

/* The points' products: blocks of rows x columns (wg_tiles), WG_BK of the summed index a stage.
 * WG_WIDE for more than 64 rows; for 64 or fewer, WG_LONG where the columns are many (the forward
 * and data passes' tiles), WG_NARROW where they are few (a filter pass's channels or filters). */
enum { WG_WIDE, WG_LONG, WG_NARROW, WG_CONFIGS };
static const int wg_tiles[WG_CONFIGS][2] = {{128, 128}, {64, 256}, {64, 128}};
#define WG_BK 16

/* Floats a pass's chunk of images may take in the layer's scratch or partial sums (64 MiB), the
 * forward and data passes' carried-in weights apart. */
#define WG_ROOM_FLOATS (16LL * 1024 * 1024)
/* The filter pass splits a point's product along the tiles into at most WG_SPLIT_MAX pieces of at
 * least WG_SPLIT_MIN tiles. */
#define WG_SPLIT_MIN 256
#define WG_SPLIT_MAX 16
/* Below this many channels or filters the transforms cost more than the products save. */
#define WG_MIN_CHANNELS 48

#endif
