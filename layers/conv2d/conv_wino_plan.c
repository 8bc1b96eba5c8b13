/* conv_wino_plan.c - the Winograd kernels' plans (conv_wino.h): each pass's form, its chunks of
 * images and the filter pass's splits, or why the kernels cannot run it. Host code with no device
 * work, so that a build without CUDA can say where the family applies. */
#include <limits.h>
#include <string.h>

#include "conv_bias.h"
#include "conv_family.h"
#include "conv_wino.h"
#include "conv_wino_limits.h"
#include "core/layer.h"

static long long room_floats = WG_ROOM_FLOATS; /* bn_wino_room */

void bn_wino_room(long long floats)
{
    room_floats = floats > 0 ? floats : WG_ROOM_FLOATS;
}

static int round4(long long v)
{
    return (int)((v + 3) / 4 * 4);
}

static void form_of(bn_wino_form *f, int ci, int ih, int iw, int pad, int co, int oh, int ow)
{
    *f = (bn_wino_form){ci, ih, iw, pad, co, oh, ow, (oh + BN_WINO_TILE - 1) / BN_WINO_TILE,
                        (ow + BN_WINO_TILE - 1) / BN_WINO_TILE};
}

/* Images a chunk takes, where each image needs per_image floats and the chunk may take `room`:
 * at most n, and at least one (so that a chunk has columns even for an empty batch). */
static int chunk_images(long long room, long long per_image, int n)
{
    long long images = per_image > 0 ? room / per_image : n;
    if (images > n) images = n;
    return images < 1 ? 1 : (int)images;
}

/* The forward or data pass over form f: the carried-in weights (co x cip a point, TF32 values
 * and remainders), then a chunk's carried-in input (cip x cols) and products (co x cols), in the
 * scratch past the split counters. */
static void wg_pass(bn_wino_pass *p, size_t *scratch, const bn_wino_form *f, int n)
{
    const long long tiles = (long long)f->th * f->tw, cip = round4(f->ci);
    const long long per_image = (long long)BN_WINO_POINTS * tiles * (cip + f->co);
    const int images = chunk_images(room_floats, per_image, n);
    *p = (bn_wino_pass){.ok = 1, .f = *f, .images = images, .cols = round4((long long)images * tiles),
                        .cip = (int)cip, .splits = 1, .cfg = f->co > 64 ? WG_WIDE : WG_LONG};
    p->lo = (long long)BN_WINO_POINTS * f->co * cip;
    p->in = 2 * p->lo;
    p->out = p->in + (long long)BN_WINO_POINTS * cip * p->cols;
    p->floats = p->out + (long long)BN_WINO_POINTS * f->co * p->cols;
    const size_t bytes = BN_CONV_SPLIT_COUNTERS * sizeof(unsigned) + (size_t)p->floats * sizeof(float);
    if (bytes > *scratch) *scratch = bytes;
}

/* Cells a configuration's blocks cover of a product of rows x cols. */
static long long covered(int cfg, long long rows, long long cols)
{
    const long long bm = wg_tiles[cfg][0], bn = wg_tiles[cfg][1];
    return (rows + bm - 1) / bm * bm * ((cols + bn - 1) / bn * bn);
}

/* The filter pass: a chunk's carried-in input (cip x cols) and output gradient (co x cols), then
 * `splits` slots of the 36 points' weight gradients, the product of each point split along the
 * chunk's tiles where its blocks alone leave multiprocessors idle, then the bias gradient's
 * partial sums. The products' rows are the filters, or the channels (turned) where that wastes
 * fewer of the blocks' cells. */
static void wg_filter(bn_wino_pass *p, size_t *workspace, const bn_wino_form *f, int n, int sms)
{
    const long long tiles = (long long)f->th * f->tw, cip = round4(f->ci);
    const long long per_image = (long long)BN_WINO_POINTS * tiles * (cip + f->co);
    const int images = chunk_images(room_floats, per_image, n);
    const int cols = round4((long long)images * tiles);
    const int cfg = f->co > 64 ? WG_WIDE : WG_NARROW, cfg_turned = f->ci > 64 ? WG_WIDE : WG_NARROW;
    const int turned = covered(cfg_turned, f->ci, f->co) < covered(cfg, f->co, f->ci);
    const int rows = turned ? f->ci : f->co, across = turned ? f->co : f->ci, use = turned ? cfg_turned : cfg;
    const long long blocks = (long long)BN_WINO_POINTS * ((rows + wg_tiles[use][0] - 1) / wg_tiles[use][0]) *
                             ((across + wg_tiles[use][1] - 1) / wg_tiles[use][1]);
    const long long wave = 2LL * (sms > 0 ? sms : 100);
    long long splits = (wave + blocks - 1) / blocks;
    const long long most = (cols + WG_SPLIT_MIN - 1) / WG_SPLIT_MIN;
    if (splits > most) splits = most;
    if (splits > WG_SPLIT_MAX) splits = WG_SPLIT_MAX;
    if (splits < 1) splits = 1;
    /* Each split's share of the tiles in whole stages of the products (so the splits may come out
     * fewer than asked). */
    const long long share = (cols + splits - 1) / splits, per = (share + WG_BK - 1) / WG_BK * WG_BK;
    *p = (bn_wino_pass){.ok = 1, .f = *f, .images = images, .cols = cols, .cip = (int)cip,
                        .splits = (int)((cols + per - 1) / per), .per = (int)per, .cfg = use, .turned = turned,
                        .ldc = turned ? round4(f->co) : (int)cip};
    p->in = 0;
    p->dy = (long long)BN_WINO_POINTS * cip * cols;
    p->out = p->dy + (long long)BN_WINO_POINTS * f->co * cols;
    p->slot = (long long)BN_WINO_POINTS * rows * p->ldc;
    p->bias = p->out + p->splits * p->slot;
    p->floats = p->bias + (long long)f->co * BN_CONV_BIAS_PARTS;
    const size_t bytes = (size_t)p->floats * sizeof(float);
    if (bytes > *workspace) *workspace = bytes;
}

void bn_wino_plan_make(bn_wino_plan *p, const bn_conv_geom *g, int filters, int n, int sms, int tf32)
{
    memset(p, 0, sizeof *p);
    p->products = tf32 ? 1 : 3;
    const char *why = NULL;
    if (g->k != 3)
        why = "windows of 3 only";
    else if (g->stride != 1)
        why = "stride 1 only";
    else if (g->pad > 2)
        why = "padding wider than the window";
    else if (g->c < WG_MIN_CHANNELS || filters < WG_MIN_CHANNELS)
        why = "too few channels to gain";
    else if ((long long)n * g->c * g->h * g->w >= INT_MAX || (long long)n * filters * g->oh * g->ow >= INT_MAX ||
             (long long)BN_WINO_POINTS * (g->c + 4) * (filters + 4) * WG_SPLIT_MAX >= INT_MAX)
        why = "shape outside its kernels' limits";
    if (why) {
        p->pass[0].why = p->pass[1].why = p->pass[2].why = why;
        return;
    }
    bn_wino_form fwd, data;
    form_of(&fwd, g->c, g->h, g->w, g->pad, filters, g->oh, g->ow);
    form_of(&data, filters, g->oh, g->ow, 2 - g->pad, g->c, g->h, g->w);
    wg_pass(&p->pass[0], &p->scratch, &fwd, n);
    wg_pass(&p->pass[1], &p->scratch, &data, n);
    wg_filter(&p->pass[2], &p->workspace, &fwd, n, sms);
}

static void plan(bn_conv_family_plan *p, const bn_conv_shape *s)
{
    bn_wino_plan_make(&p->wino, &s->g, s->filters, s->n, s->sms, s->tf32);
}

static const char *refuses(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass)
{
    (void)s;
    const bn_wino_pass *w = &p->wino.pass[pass];
    return w->ok ? NULL : w->why;
}

static size_t workspace(const bn_conv_family_plan *p)
{
    return p->wino.workspace;
}

static size_t scratch(const bn_conv_family_plan *p)
{
    return p->wino.scratch;
}

/* Offered for every pass, last in the rule's order: the timed choice takes it where it beats the
 * direct sums (3x3 layers of many channels, docs/performance.md). */
const bn_conv_family bn_conv_family_wino = {
    .name = "winograd",
    .serves = BN_CONV_EVERY_PASS,
    .offered = BN_CONV_EVERY_PASS,
    .rank = {6, 6, 6},
    .plan = plan,
    .refuses = refuses,
    .workspace = workspace,
    .scratch = scratch,
    .takes_relu = 1u << BN_CONV_FORWARD | 1u << BN_CONV_DATA,
    .run = BN_GPU(bn_conv_run_wino),
};
