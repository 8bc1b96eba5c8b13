/* conv_direct_plan.c - the direct kernels' plans (conv_direct.h): the launch shape of each pass for
 * one batch size, or which passes the kernels cannot run. Host code with no device work, so that
 * a build without CUDA can say where the family applies. */
#include <limits.h>
#include <string.h>

#include "conv_direct.h"
#include "conv_direct_limits.h"
#include "conv_family.h"
#include "core/layer.h"

/* Shared memory a block may take without opting in: 48 KiB. */
#define SMEM_FLOATS (48 * 1024 / 4)

static size_t round4(size_t v)
{
    return (v + 3) & ~(size_t)3;
}

/* Fills a direct shape for a batch of n; 0 when the kernel cannot run it. */
static int direct_shape(bn_direct_shape *d, int ci, int hi, int wi, int co, int ho, int wo, int k, int stride, int pad,
                        int flip, int n)
{
    memset(d, 0, sizeof *d);
    d->ci = ci, d->hi = hi, d->wi = wi, d->co = co, d->ho = ho, d->wo = wo;
    d->k = k, d->stride = stride, d->pad = pad, d->flip = flip;
    const int kk = d->k * d->k, npos = d->ho * d->wo;
    d->kt = d->co <= 4 ? 4 : 8;
    /* Threads along the positions: a whole image when its positions fit 512 threads (the last
     * warp may be partial), else tiles of 256 threads. */
    int bt = (npos + PT - 1) / PT;
    if (bt > 512) bt = 256;
    if (npos > bt * PT) {
        d->tiles = (npos + bt * PT - 1) / (bt * PT);
        d->images = 1;
    } else {
        d->tiles = 1;
        d->images = bt * PT / npos;
        if (d->images > n) d->images = n;
        if (d->images < 1) d->images = 1;
    }
    d->hp = (d->ho - 1) * d->stride + d->k;
    d->wp = (d->wo - 1) * d->stride + d->k;
    const long long plane = (long long)d->hp * d->wp;
    const long long per_channel = d->images * plane + (long long)kk * d->kt;
    long long chunk = (SMEM_FLOATS - 4) / per_channel;
    if (chunk < 1) return 0;
    if (chunk > d->ci) chunk = d->ci;
    d->chunk = (int)chunk;
    int split = (d->ci * kk + 127) / 128;
    if (split > d->chunk) split = d->chunk;
    if (split > 512 / bt) split = 512 / bt;
    int red_room = 1 + SMEM_FLOATS / (PT * d->kt * bt);
    if (split > red_room) split = red_room;
    if (split < 1) split = 1;
    d->threads = bt;
    d->split = split;
    size_t main_floats = round4((size_t)d->images * d->chunk * plane) + (size_t)d->chunk * kk * d->kt;
    size_t red_floats = (size_t)(split - 1) * PT * d->kt * bt;
    d->smem = (main_floats > red_floats ? main_floats : red_floats) * sizeof(float);
    long long blocks_y = ((long long)n + d->images - 1) / d->images;
    return blocks_y <= 65535 && d->tiles <= 65535 && d->smem <= SMEM_FLOATS * sizeof(float);
}

void bn_direct_plan_make(bn_direct_plan *p, const bn_conv_geom *g, int filters, int n, int sms)
{
    memset(p, 0, sizeof *p);
    p->n = n;
    p->filters = filters;
    p->g = *g;
    /* Every flat index below stays in an int. */
    long long in_size = (long long)n * g->c * g->h * g->w, out_size = (long long)n * filters * g->oh * g->ow;
    if (in_size >= INT_MAX || out_size >= INT_MAX || (long long)filters * g->c * g->k * g->k >= INT_MAX) return;

    p->fwd_ok = direct_shape(&p->fwd, g->c, g->h, g->w, filters, g->oh, g->ow, g->k, g->stride, g->pad, 0, n);
    /* Backward data: through column matrices where an image's dy and a channel's columns fit in
     * shared memory, else as a convolution of dy, which needs stride 1. */
    {
        const long long kk = (long long)g->k * g->k, npos = (long long)g->oh * g->ow;
        const long long dy_floats = round4((size_t)(filters * npos));
        long long ct = 0;
        for (long long t = g->c < 64 ? g->c : 64; t >= 1; t--) {
            long long rows = (t * kk + 7) / 8 * 8;
            if (dy_floats + rows * (filters + npos) <= SMEM_FLOATS) {
                ct = t;
                break;
            }
        }
        /* Keep at least ~2 blocks per multiprocessor when channels allow. */
        while (ct > 1 && (long long)n * ((g->c + ct - 1) / ct) < 2LL * (sms > 0 ? sms : 100)) ct = (ct + 1) / 2;
        if (ct >= 1 && n <= 65535) {
            bn_col_shape *cs = &p->cols;
            cs->ct = (int)ct;
            cs->rows = (int)((ct * kk + 7) / 8 * 8);
            long long items = cs->rows / 8 * npos;
            cs->threads = items >= 512 ? 512 : (int)((items + 31) / 32 * 32);
            cs->smem = (size_t)(dy_floats + (long long)cs->rows * (filters + npos)) * sizeof(float);
            p->data_cols = 1;
            p->data_ok = 1;
        }
    }
    if (!p->data_ok && g->stride == 1)
        p->data_ok = direct_shape(&p->data, filters, g->oh, g->ow, g->c, g->h, g->w, g->k, 1, g->k - 1 - g->pad, 1, n);

    const int taps = g->c * g->k * g->k, m_total = (int)(n * g->oh * g->ow);
    bn_wgrad_shape *f = &p->filter;
    f->tile = filters > 32 && taps > 32 ? 64 : 32;
    long long tiles = (long long)((taps + f->tile - 1) / f->tile) * ((filters + f->tile - 1) / f->tile);
    long long want = (4LL * (sms > 0 ? sms : 100) + tiles - 1) / tiles;
    long long span = (m_total + want - 1) / want;
    if (span < 128) span = 128;
    span = (span + MT - 1) / MT * MT;
    long long splits = (m_total + span - 1) / span;
    if (splits > 65535 || (filters + f->tile - 1) / f->tile > 65535) return;
    f->span = span;
    f->splits = (int)splits;
    p->workspace = (size_t)splits * filters * (taps + 1) * sizeof(float);
    p->filter_ok = 1;
}

static void plan(bn_conv_family_plan *p, const bn_conv_shape *s)
{
    bn_direct_plan_make(&p->direct, &s->g, s->filters, s->n, s->sms);
}

static const char *refuses(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass)
{
    const int ok[BN_CONV_PASSES] = {p->direct.fwd_ok, p->direct.data_ok, p->direct.filter_ok};
    if (ok[pass]) return NULL;
    if (pass == BN_CONV_DATA && s->g.stride != 1) return "its columns do not fit shared memory, and stride > 1";
    return "shape outside its kernels' limits";
}

static size_t workspace(const bn_conv_family_plan *p)
{
    return p->direct.workspace;
}

const bn_conv_family bn_conv_family_direct = {
    .name = "direct",
    .serves = BN_CONV_EVERY_PASS,
    .offered = BN_CONV_EVERY_PASS,
    .takes_relu = 1u << BN_CONV_FORWARD,
    .rank = {2, 2, 3},
    .plan = plan,
    .refuses = refuses,
    .workspace = workspace,
    .run = BN_GPU(bn_conv_run_direct),
};
