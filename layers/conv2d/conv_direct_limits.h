/* conv_direct_limits.h - the launch limits that the direct kernels (conv_direct.cu) and their
 * plan making (conv_direct_plan.c) share. */
#ifndef BN_CONV_DIRECT_LIMITS_H
#define BN_CONV_DIRECT_LIMITS_H

/* Output positions per thread in the direct kernel. */
#define PT 2
/* Values of m staged per step of the filter kernel. */
#define MT 16

#endif
