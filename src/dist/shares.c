/* shares.c - how a global batch is split among the ranks, and the setting of how their
 * gradients are summed. */
#include <string.h>

#include "dist.h"

void bn_dist_share(int n, int world, int rank, int *offset, int *count)
{
    /* 64-bit products: rank * n overflows int for large batches on many ranks. */
    long long lo = (long long)rank * n / world, hi = (long long)(rank + 1) * n / world;
    *offset = (int)lo;
    *count = (int)(hi - lo);
}

bn_status bn_dist_sum_parse(const char *text, int *way)
{
    *way = BN_DIST_SUM_AUTO;
    if (!text || !*text || strcmp(text, "auto") == 0) return BN_OK;
    if (strcmp(text, "peers") == 0) *way = BN_DIST_SUM_PEERS;
    else if (strcmp(text, "nccl") == 0) *way = BN_DIST_SUM_NCCL;
    else return bn_error(BN_ERR_USAGE, "BLOBNET_DIST_SUM=%s: not one of auto, peers, nccl", text);
    return BN_OK;
}
