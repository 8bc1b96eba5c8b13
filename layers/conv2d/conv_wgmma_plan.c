/* conv_wgmma_plan.c - the warpgroup-product family's plan (conv_wgmma.h) and its entry in the
 * family table: the forward pass's launch shape for one batch size, or why the kernel cannot run
 * it. Host code with no device work. */
#include <limits.h>
#include <string.h>

#include "conv_family.h"
#include "conv_wgmma.h"
#include "core/layer.h"

/* The most filters (one product's width). */
#define WGMMA_MAX_FILTERS 64

#ifndef BN_WITH_CUDA
int bn_wgmma_built(void)
{
    return 0;
}
#endif

void bn_wgmma_plan_make(bn_wgmma_plan *p, const bn_conv_geom *g, int filters, int n, int cc, int tf32)
{
    memset(p, 0, sizeof *p);
    p->products = tf32 ? 1 : 3;
    p->ci = g->c, p->hi = g->h, p->wi = g->w, p->pad = g->pad, p->stride = g->stride;
    p->co = filters, p->ho = g->oh, p->wo = g->ow, p->k = g->k, p->n = n;
    const long long K = (long long)g->c * g->k * g->k, npos = (long long)g->oh * g->ow;
    const long long rows = (long long)n * npos, tiles = (rows + BN_WGMMA_ROWS - 1) / BN_WGMMA_ROWS;
    if (!bn_wgmma_built())
        p->why = "a build without Hopper's warpgroup products";
    else if (cc != 90)
        p->why = "a device of compute capability 9.0 only";
    else if (filters < 1 || filters > WGMMA_MAX_FILTERS)
        p->why = "at most 64 filters";
    else if (K < 1 || K > BN_WGMMA_MAX_K || npos < 1 || n < 1)
        p->why = "shape outside its kernels' limits";
    else if ((long long)n * g->c * g->h * g->w >= INT_MAX || rows * filters >= INT_MAX || tiles >= INT_MAX)
        p->why = "shape outside its kernels' limits";
    else if (npos > BN_WGMMA_ROWS || BN_WGMMA_ROWS % npos != 0)
        p->why = "images of up to 128 output positions, a power of two";
    if (p->why) return;
    p->ntiles = (filters + 7) / 8;
    p->K = (int)K;
    p->slices = (int)((K + BN_WGMMA_DEPTH - 1) / BN_WGMMA_DEPTH);
    p->tiles = (int)tiles;
    /* The tile's images' planes, the weights' raw slices, the split slices, the tables (per k two,
     * per row three). */
    const size_t planes = ((size_t)(BN_WGMMA_ROWS / npos) * g->c * g->h * g->w * 4 + 15) / 16 * 16;
    p->raw_b_at = planes;
    p->split_at = p->raw_b_at + (size_t)BN_WGMMA_RAW_STAGES * p->ntiles * 8 * BN_WGMMA_RAW_B_ROW * 4;
    p->table_at = p->split_at + BN_WGMMA_SPLIT_STAGES * bn_wgmma_split_bytes(p->ntiles);
    p->smem = p->table_at + ((size_t)2 * p->slices * BN_WGMMA_DEPTH + 3 * BN_WGMMA_ROWS) * 4;
    if (p->smem > BN_WGMMA_SMEM_MAX) {
        p->why = "shape outside its kernels' limits";
        return;
    }
    /* A tile's rows are whole images: 2x2 windows lie within it. */
    p->pools = g->oh >= 2 && g->ow >= 2;
}

static void plan(bn_conv_family_plan *p, const bn_conv_shape *s)
{
    bn_wgmma_plan_make(&p->wgmma, &s->g, s->filters, s->n, s->cc, s->tf32);
}

static const char *refuses(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass)
{
    (void)s, (void)pass;
    return p->wgmma.why;
}

static size_t workspace(const bn_conv_family_plan *p)
{
    (void)p;
    return 0;
}

static int writes_pooled(const bn_conv_family_plan *p)
{
    return p->wgmma.why == NULL && p->wgmma.pools;
}

/* The forward pass only, last in the rule's order: the timed choice takes it where it wins. */
const bn_conv_family bn_conv_family_wgmma = {
    .name = "wgmma",
    .serves = 1u << BN_CONV_FORWARD,
    .offered = 1u << BN_CONV_FORWARD,
    .rank = {7, 7, 7},
    .plan = plan,
    .refuses = refuses,
    .workspace = workspace,
    .writes_pooled = writes_pooled,
    .run = BN_GPU(bn_conv_run_wgmma),
};
