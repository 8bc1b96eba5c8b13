/* conv_argmax_limits.h - the launch limits that the argmax filter kernel (conv_argmax.cu) and its
 * plan making (conv_argmax_plan.c) share. */
#ifndef BN_CONV_ARGMAX_LIMITS_H
#define BN_CONV_ARGMAX_LIMITS_H

/* Threads a block takes at most. */
#define MAX_THREADS 1024
/* Shared memory a block may take (opted into once per kernel). */
#define ARGMAX_SMEM (100 * 1024)

#endif
