/* join.c - what a rank process does before it trains: meet the others, then open NCCL. */
#include <string.h>

#include "dist.h"

bn_status bn_dist_join(bn_dist *d, const char *host, int port, uint64_t fingerprint, bn_ctx *ctx)
{
    /* A build without NCCL says so at once, instead of after the others time out. */
    if (!bn_dist_compiled()) return bn_error(BN_ERR_DEVICE, "%s", bn_dist_missing());
    unsigned char id[BN_DIST_ID_BYTES];
    memset(id, 0, sizeof id);
    if (d->rank == 0) BN_TRY(bn_dist_unique_id(id, sizeof id));
    BN_TRY(bn_rendezvous(host, port, d->rank, d->world, fingerprint, id, sizeof id, d->timeout_s));
    d->device = ctx ? ctx->device : -1;
    return bn_dist_open(d, id, ctx);
}
