/* conv_fma_plan.c - the FP32 tile kernel's plan (conv_fma.h): its launch shape for one batch
 * size, or that it cannot run. Host code with no device work, so that a build without CUDA can
 * say where the family applies. */
#include <string.h>

#include "conv_family.h"
#include "conv_fma.h"
#include "conv_fma_limits.h"
#include "core/layer.h"

void bn_fma_plan_make(bn_fma_plan *p, const bn_conv_geom *g, int filters, int n, int sms)
{
    memset(p, 0, sizeof *p);
    p->n = n, p->filters = filters, p->g = *g;
    if (g->stride != 1 || g->k < 1 || g->k > FMA_WIDEST_WINDOW || g->pad < 0 || g->c < 1 || filters < 1 || n < 1 ||
        sms < 1)
        return;
    const long long kk = (long long)g->k * g->k, q = (long long)g->oh * g->ow;
    if (q < 1 || q > FMA_MOST_POSITIONS) return;
    /* Of the three tile shapes, the one that takes the fewest waves of blocks; of equals, the
     * one whose tile holds the most useful cells. */
    long long best_waves = 0;
    double best_use = 0.0;
    for (int wr = 4; wr >= 1; wr /= 2) {
        const int rm = FMA_WARP_ROWS * wr, pn = FMA_WARP_POSITIONS * (FMA_WARPS / wr);
        if (kk > rm || q > pn) continue;
        long long cb = rm / kk, ib = pn / q;
        if (cb > g->c) cb = g->c;
        if (ib > n) ib = n;
        const long long groups = (g->c + cb - 1) / cb, blocks = (n + ib - 1) / ib;
        if (groups > 65535 || blocks > 65535) continue;
        const long long waves = (groups * blocks + (long long)FMA_RESIDENT * sms - 1) / ((long long)FMA_RESIDENT * sms);
        const double use = (double)(cb * kk) / rm * (double)(ib * q) / pn;
        if (best_waves && (waves > best_waves || (waves == best_waves && use <= best_use))) continue;
        best_waves = waves, best_use = use;
        bn_fma_data *d = &p->data;
        d->wr = wr, d->rm = rm, d->pn = pn;
        d->cb = (int)cb, d->groups = (int)groups;
        d->q = (int)q, d->ib = (int)ib, d->blocks = (int)blocks;
    }
    if (!best_waves) return;
    bn_fma_data *d = &p->data;
    const int fc = FMA_FLOATS / (d->rm + d->pn);
    d->fc = filters < fc ? filters : fc;
    d->smem = FMA_SMEM_BYTES;
    p->data_ok = 1;
}

static void plan(bn_conv_family_plan *p, const bn_conv_shape *s)
{
    bn_fma_plan_make(&p->fma, &s->g, s->filters, s->n, s->sms);
}

/* The reasons below name the limits' values. */
_Static_assert(FMA_WIDEST_WINDOW == 7 && FMA_MOST_POSITIONS == 512, "refuses() names the windows and positions");

static const char *refuses(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass)
{
    (void)pass;
    if (p->fma.data_ok) return NULL;
    if (s->g.stride != 1) return "stride 1 only";
    if (s->g.k > FMA_WIDEST_WINDOW) return "windows up to 7 only";
    if ((long long)s->g.oh * s->g.ow > FMA_MOST_POSITIONS) return "images of more than 512 positions";
    return "shape outside its kernel's limits";
}

static size_t workspace(const bn_conv_family_plan *p)
{
    (void)p;
    return 0;
}

static int reads_pooled(const bn_conv_family_plan *p, int pass)
{
    return pass == BN_CONV_DATA && p->fma.data_ok;
}

const bn_conv_family bn_conv_family_fma = {
    .name = "fma",
    .serves = 1u << BN_CONV_DATA,
    .offered = 1u << BN_CONV_DATA,
    .rank = {7, 7, 7},
    .takes_relu = 1u << BN_CONV_DATA,
    .plan = plan,
    .refuses = refuses,
    .workspace = workspace,
    .reads_pooled = reads_pooled,
    .run = BN_GPU(bn_conv_run_fma),
};
