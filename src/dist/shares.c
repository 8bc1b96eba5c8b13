/* shares.c - how a global batch is split among the ranks. */
#include "dist.h"

void bn_dist_share(int n, int world, int rank, int *offset, int *count)
{
    /* 64-bit products: rank * n overflows int for large batches on many ranks. */
    long long lo = (long long)rank * n / world, hi = (long long)(rank + 1) * n / world;
    *offset = (int)lo;
    *count = (int)(hi - lo);
}
