/* conv_igemm_plan.c - the implicit-GEMM kernels' plans (conv_igemm.h): the tile configuration and
 * split of each pass for one batch size, or which passes the kernels cannot run. Host code with no
 * device work, so that a build without CUDA can say where the family applies. */
#include <limits.h>
#include <stdbool.h>
#include <string.h>

#include "conv_family.h"
#include "conv_igemm.h"
#include "conv_igemm_limits.h"
#include "core/layer.h"

/* The configuration for a product of M rows and N columns: rows tiles of 32 when M fits them;
 * column tiles of 64 when that still gives at least `blocks` blocks, else 32. */
static int ig_pick(int M, long long N, long long blocks)
{
    const int bm = M <= 32 ? 32 : 64;
    const long long row_tiles = (M + bm - 1) / bm;
    const bool wide = row_tiles * ((N + 63) / 64) >= blocks;
    if (bm == 64) return wide ? 0 : 1;
    return wide ? 2 : 3;
}

void bn_igemm_plan_make(bn_igemm_plan *p, const bn_conv_geom *g, int filters, int n, int sms)
{
    memset(p, 0, sizeof *p);
    const long long kk = (long long)g->k * g->k, np = (long long)g->oh * g->ow, hw = (long long)g->h * g->w;
    const long long want = 2LL * (sms > 0 ? sms : 100);
    /* Every flat index the kernels form stays in an int, and windows fit the packed shifts. */
    if ((long long)n * g->c * hw >= INT_MAX || (long long)n * filters * np >= INT_MAX) return;
    if (g->h > 8192 || g->w > 8192 || g->k > 8192) return;

    /* Forward: filters x (n * np), K = c * kk in one table. */
    bn_igemm_pass *f = &p->pass[0];
    f->M = filters, f->N = (int)(n * np), f->K = (int)(g->c * kk), f->span = f->K, f->splits = 1;
    f->cfg = ig_pick(f->M, f->N, want);
    f->ok = f->K <= TABLE_MAX;

    /* Data: c x (n * hw), K = filters * kk; stride 1 only (a window position then maps to one
     * dy position per tap). */
    bn_igemm_pass *d = &p->pass[1];
    d->M = g->c, d->N = (int)(n * hw), d->K = (int)(filters * kk), d->span = d->K, d->splits = 1;
    d->cfg = ig_pick(d->M, d->N, want);
    d->ok = g->stride == 1 && d->K <= TABLE_MAX;

    /* Filter: filters x (c * kk), K = n * np cut into spans for about `want` blocks. */
    bn_igemm_pass *w = &p->pass[2];
    w->M = filters, w->N = (int)(g->c * kk), w->K = (int)(n * np);
    w->cfg = filters <= 32 ? (w->N <= 32 ? 3 : 2) : (w->N <= 32 ? 1 : 0);
    const long long tiles = (long long)((w->M + ig_tiles[w->cfg][0] - 1) / ig_tiles[w->cfg][0]) *
                            ((w->N + ig_tiles[w->cfg][1] - 1) / ig_tiles[w->cfg][1]);
    long long splits = (want + tiles - 1) / tiles;
    long long span = (w->K + splits - 1) / splits;
    if (span < 4 * BK) span = 4 * BK;
    span = (span + BK - 1) / BK * BK;
    if (span > TABLE_MAX) span = TABLE_MAX;
    splits = (w->K + span - 1) / span;
    w->span = (int)span;
    w->splits = (int)splits;
    w->ok = splits <= 65535 && (long long)splits * filters * (w->N + 1) < INT_MAX;
    p->workspace = w->ok ? (size_t)splits * filters * (w->N + 1) * sizeof(float) : 0;
}

static void plan(bn_conv_family_plan *p, const bn_conv_shape *s)
{
    bn_igemm_plan_make(&p->igemm, &s->g, s->filters, s->n, s->sms);
}

static const char *refuses(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass)
{
    if (p->igemm.pass[pass].ok) return NULL;
    if (pass == BN_CONV_DATA && s->g.stride != 1) return "stride 1 only";
    return "shape outside its kernels' limits";
}

static size_t workspace(const bn_conv_family_plan *p)
{
    return p->igemm.workspace;
}

/* The implicit-GEMM forward and data kernels measured 1.7-3.5x slower than the direct ones at
 * LeNet's sizes (docs/performance.md, version 11): they run when forced (tests) and are not
 * offered otherwise, which keeps their first-launch and timing cost out of the start-up. */
const bn_conv_family bn_conv_family_igemm = {
    .name = "igemm",
    .serves = 1u << BN_CONV_FORWARD | 1u << BN_CONV_DATA | 1u << BN_CONV_FILTER,
    .offered = 1u << BN_CONV_FILTER,
    .rank = {3, 3, 1},
    .plan = plan,
    .refuses = refuses,
    .workspace = workspace,
    .run = BN_GPU(bn_conv_run_igemm),
};
