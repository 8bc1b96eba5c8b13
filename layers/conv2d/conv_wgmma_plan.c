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
    p->ci = g->c, p->hi = g->h, p->wi = g->w, p->pad = g->pad;
    p->co = filters, p->ho = g->oh, p->wo = g->ow, p->k = g->k, p->n = n;
    const long long per_img = (long long)((g->oh + 7) / 8) * ((g->ow + 7) / 8), tiles = per_img * n;
    if (!bn_wgmma_built())
        p->why = "a build without Hopper's warpgroup products";
    else if (cc != 90)
        p->why = "a device of compute capability 9.0 only";
    else if (filters < 1 || filters > WGMMA_MAX_FILTERS)
        p->why = "at most 64 filters";
    else if (g->stride != 1)
        p->why = "stride 1 only";
    else if (g->c > 32)
        p->why = "at most 32 channels";
    else if (g->k > 16 || g->c < 1 || n < 1 || g->oh < 1 || g->ow < 1 || tiles >= INT_MAX / 2 ||
             (long long)n * g->c * g->h * g->w >= INT_MAX)
        p->why = "shape outside its kernels' limits";
    if (p->why) return;
    p->ntiles = (filters + 7) / 8;
    p->groups = ((g->c + 3) / 4 + 1) / 2 * 2;
    p->win = 8 + g->k - 1;
    p->tiles = (int)tiles;
    p->blocks = (int)((tiles + 1) / 2);
    const size_t cells = (size_t)p->win * p->win;
    /* The split planes of two tiles (or the sums after them), the split weights' stages, every raw
     * weight, the two raw windows. */
    size_t planes = 2 * 2 * (size_t)p->groups * cells * 16;
    const size_t sums = (size_t)128 * (p->ntiles * 8 + 1) * 4;
    if (planes < sums) planes = sums;
    p->b_at = (planes + 15) / 16 * 16;
    p->w_at = p->b_at + (size_t)BN_WGMMA_B_STAGES * 2 * p->groups * p->ntiles * 8 * 16;
    p->x_at = p->w_at + ((size_t)filters * g->c * g->k * g->k * 4 + 15) / 16 * 16;
    p->smem = p->x_at + (size_t)2 * g->c * cells * 4;
    if (p->smem > BN_WGMMA_SMEM_MAX) {
        p->why = "weights or windows past its shared memory";
        return;
    }
    /* 8x8 tiles start on even rows and columns: their windows lie within them. */
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
