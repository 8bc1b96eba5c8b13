/* conv_rows_limits.h - the launch limits that the row-tiled kernels (conv_rows.cu) and their plan
 * making (conv_rows_plan.c) share. */
#ifndef BN_CONV_ROWS_LIMITS_H
#define BN_CONV_ROWS_LIMITS_H

/* Outputs per thread along a row. */
#define PX 4
/* Dynamic shared memory a block may take (opted into once per kernel): two blocks still fit on
 * one Hopper multiprocessor. */
#define SMEM_LIMIT (112 * 1024)

#endif
