/* conv_rows_plan.c - the row-tiled kernels' plans (conv_rows.h): the launch shape of each pass for
 * one batch size, or which passes the kernels cannot run. Host code with no device work, so that
 * a build without CUDA can say where the family applies. */
#include <stdbool.h>
#include <string.h>

#include "conv_family.h"
#include "conv_rows.h"
#include "conv_rows_limits.h"
#include "core/layer.h"

/* Partial sums of the filter pass are kept below this many bytes (LeNet's conv2 at batch 64: 2
 * MiB held it to 16 spans, 80 blocks on 132 multiprocessors, the step's longest kernel). */
#define PARTS_LIMIT ((size_t)4 << 20)

/* The registers a thread of the filter kernel takes, by tile width (10, 8, 4) and window (1, 3,
 * 5, 7): ptxas for sm_90, rounded up to its allocation unit of 8. They decide whether two blocks
 * fit on a multiprocessor; a few registers more or less only move the number of spans, but a
 * kernel that outgrows its entry runs the spans planned for two blocks a multiprocessor in two
 * waves (conv_rows_filter_kernels_fit_their_planned_registers holds each kernel to its entry). */
int bn_rows_filter_planned_registers(int ct, int k)
{
    static const int regs[3][4] = {{64, 96, 112, 120}, {64, 64, 104, 120}, {48, 64, 64, 64}};
    return regs[ct == 10 ? 0 : ct == 8 ? 1 : 2][k / 2];
}

static int round4i(int v)
{
    return (v + 3) & ~3;
}

/* The tile width (4, 8 or 10) that pads co the least, the wider on a tie. */
static int pick_ct(int co)
{
    static const int widths[] = {8, 10, 4};
    int best = 0, best_pad = 0;
    for (int i = 0; i < 3; i++) {
        const int padded = (co + widths[i] - 1) / widths[i] * widths[i];
        if (!best || padded < best_pad) best = widths[i], best_pad = padded;
    }
    return best;
}

static bool window_ok(int k)
{
    return k == 1 || k == 3 || k == 5 || k == 7;
}

/* Fills a convolution shape for a batch of n; 0 when the kernel cannot run it. */
static int conv_shape(bn_rows_conv *d, int ci, int hi, int wi, int pad, int co, int ho, int wo, int k, int flip,
                      int n, int sms)
{
    memset(d, 0, sizeof *d);
    if (!window_ok(k) || ho < 1 || wo < 1 || ci < 1 || co < 1 || pad < 0) return 0;
    d->ci = ci, d->hi = hi, d->wi = wi, d->pad = pad, d->co = co, d->ho = ho, d->wo = wo, d->k = k, d->flip = flip;
    d->ct = pick_ct(co);
    /* A batch too small for two blocks per multiprocessor takes the narrowest tiles (at most 3
     * channels padded): more blocks, and shorter chains of multiply-adds in each thread, which is
     * what a block's time is at these sizes (LeNet's conv1 at batch 64: 128 blocks of 10
     * channels, 4 warps per multiprocessor). */
    if ((long long)((co + d->ct - 1) / d->ct) * n < 2LL * sms) d->ct = 4;
    d->groups = (co + d->ct - 1) / d->ct;
    d->segs = (wo + PX - 1) / PX;
    d->cells = d->segs * ho;
    if (d->cells > 512) return 0;
    d->hp = ho + k - 1;
    d->wp = round4i(d->segs * PX + k - 1);
    /* Several images per block while that still leaves two blocks per multiprocessor. */
    d->images = 1;
    while (d->images * 2 <= n && d->images * 2 * d->cells <= 128 &&
           (long long)d->groups * ((n + d->images * 2 - 1) / (d->images * 2)) >= 2LL * sms)
        d->images *= 2;
    const int per = d->cells * d->images;
    /* Thread groups over the input channels, each taking at least 2 of them: at these sizes a
     * block's time is its threads' chain of instructions, so shorter chains in more threads pay
     * (up to 512 threads, and as many groups' sums as shared memory holds). */
    int split = 512 / per;
    if (split > (ci + 1) / 2) split = (ci + 1) / 2;
    const int room = (SMEM_LIMIT / 4) / (d->ct * per * PX);
    if (split > room) split = room;
    if (split < 1) split = 1;
    d->split = split;
    d->threads = per * split;
    const long long plane = (long long)d->hp * d->wp;
    const long long per_channel = d->images * plane + (long long)k * k * d->ct;
    long long chunk = (SMEM_LIMIT / 4 - 4) / per_channel;
    if (chunk < 1) return 0;
    if (chunk > ci) chunk = ci;
    /* Equal chunks: the last one is not left with a few channels for many groups. */
    const long long chunks = (ci + chunk - 1) / chunk;
    d->chunk = (int)((ci + chunks - 1) / chunks);
    size_t main_floats = (size_t)round4i((int)(d->images * d->chunk * plane)) + (size_t)d->chunk * k * k * d->ct;
    size_t red_floats = split > 1 ? (size_t)split * d->ct * per * PX : 0;
    d->smem = (main_floats > red_floats ? main_floats : red_floats) * sizeof(float);
    /* The pooled epilogue holds every output of the block, split or not. */
    red_floats = (size_t)split * d->ct * per * PX;
    d->pool_smem = (main_floats > red_floats ? main_floats : red_floats) * sizeof(float);
    if (d->pool_smem > SMEM_LIMIT) d->pool_smem = 0;
    const long long blocks_y = ((long long)n + d->images - 1) / d->images;
    return blocks_y <= 65535 && d->smem <= SMEM_LIMIT;
}

/* Fills the filter shape; 0 when the kernel cannot run it. */
static int filter_shape(bn_rows_filter *f, const bn_conv_geom *g, int filters, int n, int sms, size_t *workspace)
{
    memset(f, 0, sizeof *f);
    const int k = g->k;
    if (!window_ok(k) || g->stride != 1 || g->oh < 1 || g->ow < 1) return 0;
    f->ct = pick_ct(filters);
    f->groups = (filters + f->ct - 1) / f->ct;
    f->cb = g->c < 128 / k ? g->c : 128 / k;
    if (f->cb < 1) f->cb = 1;
    f->cgroups = (g->c + f->cb - 1) / f->cb;
    f->lanes = 1;
    while (f->lanes < 32 && f->lanes * 2 * f->cb * k <= 512) f->lanes *= 2;
    f->threads = (f->lanes * f->cb * k + 31) / 32 * 32;
    f->segs = (g->ow + PX - 1) / PX;
    f->hp = g->oh + k - 1;
    f->wp = round4i(f->segs * PX + k - 1);
    f->dwp = f->segs * PX;
    /* Spans: one wave of blocks, two per multiprocessor where their registers allow, else one
     * (asking for two there made 1.2 waves: LeNet's conv2 at batch 64, 160 blocks of 2 images,
     * took as long as 80 of 4); partial sums kept small. */
    const size_t count = (size_t)filters * ((size_t)g->c * k * k + 1);
    const long long resident = (long long)f->threads * bn_rows_filter_planned_registers(f->ct, k) > 32768 ? 1 : 2;
    long long spans = (resident * sms + f->groups * f->cgroups - 1) / (f->groups * f->cgroups);
    long long most = (long long)(PARTS_LIMIT / (count * sizeof(float)));
    if (spans > most) spans = most;
    if (spans > n) spans = n;
    if (spans < 1) spans = 1;
    f->span = (int)((n + spans - 1) / spans);
    f->spans = (n + f->span - 1) / f->span;
    const long long per_image = (long long)f->cb * f->hp * f->wp + (long long)f->ct * g->oh * f->dwp;
    long long chunk = (SMEM_LIMIT / 4) / per_image;
    if (chunk < 1) return 0;
    if (chunk > f->span) chunk = f->span;
    f->chunk = (int)chunk;
    f->smem = (size_t)(chunk * per_image) * sizeof(float);
    *workspace = (size_t)f->spans * count * sizeof(float);
    return f->spans <= 65535 && f->cgroups <= 65535;
}

void bn_rows_plan_make(bn_rows_plan *p, const bn_conv_geom *g, int filters, int n, int sms)
{
    memset(p, 0, sizeof *p);
    p->n = n, p->filters = filters, p->g = *g;
    if (g->stride != 1 || n < 1) return;
    p->fwd_ok = conv_shape(&p->fwd, g->c, g->h, g->w, g->pad, filters, g->oh, g->ow, g->k, 0, n, sms);
    /* dx is the convolution of dy, padded by k - 1 - pad, with the rotated, transposed weights. */
    const int dpad = g->k - 1 - g->pad;
    p->data_ok = dpad >= 0 && conv_shape(&p->data, filters, g->oh, g->ow, dpad, g->c, g->h, g->w, g->k, 1, n, sms);
    p->filter_ok = filter_shape(&p->filter, g, filters, n, sms, &p->workspace);
    if (!p->filter_ok) p->workspace = 0;
}

int bn_rows_pools(const bn_rows_plan *p)
{
    return p->fwd_ok && p->fwd.pool_smem > 0 && p->g.oh >= 2 && p->g.ow >= 2;
}

static void plan(bn_conv_family_plan *p, const bn_conv_shape *s)
{
    bn_rows_plan_make(&p->rows, &s->g, s->filters, s->n, s->sms);
}

static const char *refuses(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass)
{
    const int ok[BN_CONV_PASSES] = {p->rows.fwd_ok, p->rows.data_ok, p->rows.filter_ok};
    if (ok[pass]) return NULL;
    if (s->g.stride != 1) return "stride 1 only";
    if (!window_ok(s->g.k)) return "windows of 1, 3, 5 or 7 only";
    return "shape outside its kernels' limits";
}

static size_t workspace(const bn_conv_family_plan *p)
{
    return p->rows.workspace;
}

static int writes_pooled(const bn_conv_family_plan *p)
{
    return bn_rows_pools(&p->rows) != 0;
}

static int reads_pooled(const bn_conv_family_plan *p, int pass)
{
    return pass == BN_CONV_FILTER && p->rows.filter_ok;
}

const bn_conv_family bn_conv_family_rows = {
    .name = "rows",
    .serves = BN_CONV_EVERY_PASS,
    .offered = BN_CONV_EVERY_PASS,
    .rank = {1, 1, 0},
    .plan = plan,
    .refuses = refuses,
    .workspace = workspace,
    .writes_pooled = writes_pooled,
    .reads_pooled = reads_pooled,
    .run = BN_GPU(bn_conv_run_rows),
};
