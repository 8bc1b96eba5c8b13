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

/* Blocks of configuration cfg over an M x N product. */
static long long ig_blocks(int cfg, int M, long long N)
{
    return (long long)((M + ig_tiles[cfg][0] - 1) / ig_tiles[cfg][0]) * ((N + ig_tiles[cfg][1] - 1) / ig_tiles[cfg][1]);
}

/* The configuration for a product of M rows and N columns: tiles of 32 rows when M fits them, of
 * 64 up to 64 rows, else of 128; the largest such tile that still gives at least `blocks`
 * blocks, else the smallest. */
static int ig_pick(int M, long long N, long long blocks)
{
    static const int by_rows[3][3] = {{3, 4, 4}, {1, 2, 2}, {0, 1, 2}};
    const int *list = by_rows[M <= 32 ? 0 : M <= 64 ? 1 : 2];
    for (int i = 0; i < 3; i++)
        if (ig_blocks(list[i], M, N) >= blocks) return list[i];
    return list[2];
}

/* Blocks of a forward or data pass (data: the data pass, its phases' own columns and summed
 * index) whose tiles share their summed index in spans of `span`, IG_SPLIT_MIN or more each; the
 * tiles in *tiles. A phase of fewer taps has fewer spans (conv_igemm.cu). */
static long long ig_pass_blocks(const bn_igemm_pass *ip, const bn_conv_geom *g, int n, int filters, bool data,
                                long long span, long long *tiles)
{
    long long blocks = 0;
    *tiles = 0;
    for (int z = 0; z < ip->phases; z++) {
        long long cols = ip->N, k = ip->K;
        if (data) {
            const ig_phase ph = ig_phase_of(z, g->stride, g->pad, g->h, g->w, g->k);
            cols = (long long)n * ph.cy * ph.cx, k = (long long)filters * ph.ty * ph.tx;
        }
        const long long t = ig_blocks(ip->cfg, ip->M, cols), parts = (k + span - 1) / span;
        *tiles += t;
        blocks += t * (parts > 1 ? parts : 1);
    }
    return blocks;
}

/* The tiles a forward or data pass's grid counts: every phase as many as the largest phase has
 * (conv_igemm.cu numbers a tile by its phase, row and column), whether the phase has them or not.
 * A split pass keeps a counter and its slots of partial sums for each. */
static long long ig_grid_tiles(const bn_igemm_pass *ip)
{
    return ip->phases * ig_blocks(ip->cfg, ip->M, ip->N);
}

/* What ig_share_blocks counts the blocks of. */
typedef struct ig_split_of {
    const bn_igemm_pass *ip;
    const bn_conv_geom *g;
    int n, filters;
    bool data;
} ig_split_of;

/* The blocks of the pass at `per` stages a block (bn_conv_split_blocks). */
static long long ig_share_blocks(const void *pass, long long per)
{
    const ig_split_of *o = (const ig_split_of *)pass;
    long long tiles;
    return ig_pass_blocks(o->ip, o->g, o->n, o->filters, o->data, per * BK, &tiles);
}

/* A forward or data pass's split (conv_family.h, bn_conv_split_share), in spans of whole BK-deep
 * stages, IG_SPLIT_MIN indices or more each: the span (K a block) and splits go to *ip, one split
 * where the tiles fill a wave, nothing gains or the grid's tiles outnumber the counters. A data
 * pass runs beside its layer's filter pass, so its ties go to more blocks. */
static void ig_split(bn_igemm_pass *ip, const bn_conv_geom *g, int n, int filters, bool data, long long wave)
{
    ip->span = ip->K, ip->splits = 1;
    if (ig_grid_tiles(ip) > BN_CONV_SPLIT_COUNTERS) return;
    const ig_split_of of = {ip, g, n, filters, data};
    const long long stages = (ip->K + BK - 1) / BK;
    const long long per = bn_conv_split_share(stages, IG_SPLIT_MIN / BK, wave, data, ig_share_blocks, &of);
    if (per == stages) return;
    ip->span = (int)(per * BK);
    ip->splits = (int)((ip->K + ip->span - 1) / ip->span);
}

/* Bytes of scratch a split forward or data pass takes: the counters, then BM x BN partial sums
 * for each split of each of its grid's tiles. */
static size_t ig_split_bytes(const bn_igemm_pass *ip)
{
    if (ip->splits < 2) return 0;
    const long long slot = (long long)ig_tiles[ip->cfg][0] * ig_tiles[ip->cfg][1];
    return BN_CONV_SPLIT_COUNTERS * sizeof(unsigned) + (size_t)(ig_grid_tiles(ip) * ip->splits * slot) * sizeof(float);
}

void bn_igemm_plan_make(bn_igemm_plan *p, const bn_conv_geom *g, int filters, int n, int sms, int tf32)
{
    memset(p, 0, sizeof *p);
    p->products = tf32 ? 1 : 3;
    const long long kk = (long long)g->k * g->k, np = (long long)g->oh * g->ow, hw = (long long)g->h * g->w;
    const long long wave = sms > 0 ? sms : 100;
    /* Every flat index the kernels form stays in an int, and windows fit the packed shifts. */
    if ((long long)n * g->c * hw >= INT_MAX || (long long)n * filters * np >= INT_MAX) return;
    if ((long long)filters * g->c * kk >= INT_MAX) return;
    if (g->h > 8192 || g->w > 8192 || g->k > 8192) return;

    /* Forward: filters x (n * np), K = c * kk, the table filled TABLE_MAX entries at a time. */
    bn_igemm_pass *f = &p->pass[0];
    f->M = filters, f->N = (int)(n * np), f->K = (int)(g->c * kk), f->phases = 1;
    f->cfg = ig_pick(f->M, f->N, wave);
    ig_split(f, g, n, filters, false, wave);
    f->ok = 1;

    /* Data: c x (n * hw), K = filters * kk, as stride x stride phases (conv_igemm.cu): N and K
     * here are the largest phase's; a split pass cuts every phase's summed index in spans of one
     * length. */
    bn_igemm_pass *d = &p->pass[1];
    const long long ps = (long long)g->stride, py = (g->h + ps - 1) / ps, px = (g->w + ps - 1) / ps;
    const long long ty = (g->k + ps - 1) / ps;
    d->M = g->c, d->N = (int)(n * py * px), d->K = (int)(filters * ty * ty);
    d->phases = (int)(ps * ps);
    d->cfg = ig_pick(d->M, (long long)n * hw, wave);
    d->ok = ps * ps <= 65535;
    if (d->ok) ig_split(d, g, n, filters, true, wave);
    d->ok = d->ok && (long long)d->phases * d->splits <= 65535; /* the phases and splits are the grid's z */
    p->scratch = ig_split_bytes(f);
    if (ig_split_bytes(d) > p->scratch) p->scratch = ig_split_bytes(d);

    /* Filter: filters x (c * kk), K = n * np cut into spans for about two blocks a
     * multiprocessor. */
    bn_igemm_pass *w = &p->pass[2];
    w->M = filters, w->N = (int)(g->c * kk), w->K = (int)(n * np), w->phases = 1;
    /* Its tile by the product's shape alone: the spans, not the tile, fill the GPU. */
    const int wide = w->N > 64;
    w->cfg = filters <= 32 ? (wide ? 3 : 4) : filters <= 64 ? (wide ? 1 : 2) : (wide ? 0 : 2);
    const long long tiles = ig_blocks(w->cfg, w->M, w->N), want = 2 * wave;
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
    bn_igemm_plan_make(&p->igemm, &s->g, s->filters, s->n, s->sms, s->tf32);
}

static const char *refuses(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass)
{
    if (p->igemm.pass[pass].ok) return NULL;
    return "shape outside its kernels' limits";
}

static size_t workspace(const bn_conv_family_plan *p)
{
    return p->igemm.workspace;
}

static size_t scratch(const bn_conv_family_plan *p)
{
    return p->igemm.scratch;
}

/* Offered for every pass: the timed choice takes them where they beat the others (layers of
 * many channels); the rule, after the families measured at LeNet's sizes. */
const bn_conv_family bn_conv_family_igemm = {
    .name = "igemm",
    .serves = BN_CONV_EVERY_PASS,
    .offered = BN_CONV_EVERY_PASS,
    .rank = {3, 3, 1},
    .plan = plan,
    .refuses = refuses,
    .workspace = workspace,
    .scratch = scratch,
    .takes_relu = 1u << BN_CONV_FORWARD | 1u << BN_CONV_DATA,
    .run = BN_GPU(bn_conv_run_igemm),
};
