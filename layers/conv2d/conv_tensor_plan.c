/* conv_tensor_plan.c - the tensor-core kernels' plans (conv_tensor.h): the launch shape of each
 * pass for one batch size, or which passes the kernels cannot run. Host code with no device work,
 * so that a build without CUDA can say where the family applies. */
#include <string.h>

#include "conv_family.h"
#include "conv_tensor.h"
#include "conv_tensor_limits.h"
#include "core/layer.h"

/* The fewest images a block of the data pass takes for the two backward passes to be planned
 * side by side (bn_tensor_plan.beside_ok): LeNet's conv2 at batch 64, whose blocks would take 1.45
 * (44 blocks a channel tile), read 2.6% slower that way, where at 256 (5.8) it is 2-2.5% faster. */
#define TENSOR_BESIDE_IMAGES 2

static int round4i(int v)
{
    return (v + 3) & ~3;
}

/* Fills a shape for `ipi` images a block at once; 0 when the kernel cannot run it. */
static int tensor_shape_ipi(bn_tensor_conv *d, int ci, int hi, int wi, int pad, int stride, int co, int ho, int wo,
                            int k, int n, int sms, int ipi)
{
    memset(d, 0, sizeof *d);
    if (co < 1 || co > 64 || ci < 1 || ho < 1 || wo < 1 || k < 1 || stride < 1 || pad < 0 || n < 1) return 0;
    d->ci = ci, d->hi = hi, d->wi = wi, d->pad = pad, d->stride = stride;
    d->co = co, d->ho = ho, d->wo = wo, d->k = k;
    d->ntiles = (co + 7) / 8;
    const int npos = ho * wo, mtiles = (npos + 15) / 16;
    d->mgroups = (mtiles + MW - 1) / MW;
    if (d->mgroups > MAX_WARPS) return 0;
    /* An image's positions shared by several blocks while there are fewer images than
     * multiprocessors. */
    int mparts = (sms + n - 1) / n;
    if (mparts > d->mgroups) mparts = d->mgroups;
    if (mparts < 1) mparts = 1;
    d->mper = (d->mgroups + mparts - 1) / mparts;
    d->mparts = (d->mgroups + d->mper - 1) / d->mper;
    if (ipi > 1 && (d->mparts > 1 || ipi * d->mper > MAX_WARPS)) return 0;
    d->ipi = ipi;
    const long long K = (long long)ci * k * k;
    if (K > (1 << 20)) return 0;
    d->ksteps = (int)((K + 7) / 8);
    /* Warps along the reduction: as many as fit, each with at least 4 steps. */
    int splits = MAX_WARPS / (ipi * d->mper);
    if (splits > d->ksteps / 4) splits = d->ksteps / 4;
    if (splits < 1) splits = 1;
    d->splits = splits;
    d->threads = 32 * ipi * d->mper * splits;
    d->hp = (ho - 1) * stride + k;
    d->wp = round4i((wo - 1) * stride + k);
    /* Shared memory: the weights, the planes, the two tables, the warps' sums (in floats). */
    const size_t wcount = (size_t)co * ci * k * k, plane = (size_t)d->hp * d->wp;
    if (wcount * sizeof(float) > TENSOR_SMEM || plane * (ci + 1) * ipi * sizeof(float) > TENSOR_SMEM) return 0;
    d->a_off = (wcount + 3) / 4 * 4;
    d->tab_off = d->a_off + (size_t)ipi * (ci + 1) * plane;
    d->red_off = d->tab_off + (size_t)round4i(2 * d->ksteps * 8);
    /* The warps' sums are added in rounds, each adding up to `slabs` of them into as many
     * others (half the splits: log2 rounds), as many as the memory left holds. */
    const size_t slab = (size_t)d->mper * 32 * d->ntiles * 8, room = TENSOR_SMEM / sizeof(float);
    if (d->red_off + ipi * slab > room) return 0;
    d->slabs = splits / 2 > 1 ? splits / 2 : 1;
    while (d->slabs > 1 && d->red_off + (size_t)ipi * d->slabs * slab > room) d->slabs--;
    d->smem = (d->red_off + (size_t)ipi * d->slabs * slab) * sizeof(float);
    const long long items = (long long)(n + ipi - 1) / ipi * d->mparts;
    if (items > (1LL << 30)) return 0;
    d->blocks = (int)(items < sms ? items : sms);
    /* A pooled epilogue needs each share to start on an even output row. */
    d->pools = ho >= 2 && wo >= 2 && (d->mparts == 1 || (d->mper * 32) % (2 * wo) == 0);
    return 1;
}

/* Fills a shape; 0 when the kernel cannot run it. Where the batch gives every block more than one
 * image anyway, a block takes two at once: one staging and one adding of the warps' sums for
 * both, the reduction split half as many ways. */
static int tensor_shape(bn_tensor_conv *d, int ci, int hi, int wi, int pad, int stride, int co, int ho, int wo, int k,
                        int n, int sms)
{
    if (n > sms && tensor_shape_ipi(d, ci, hi, wi, pad, stride, co, ho, wo, k, n, sms, 2)) return 1;
    return tensor_shape_ipi(d, ci, hi, wi, pad, stride, co, ho, wo, k, n, sms, 1);
}

/* Blocks of `warps` warps and `smem` bytes of shared memory that fit one multiprocessor at once
 * (228 KiB of shared memory with 1 KiB reserved per block, 64 warps), at least 1. */
static int resident(size_t smem, int warps)
{
    int by_smem = (int)((228 * 1024) / (smem + 1024)), by_warps = 64 / (warps > 0 ? warps : 1);
    const int r = by_smem < by_warps ? by_smem : by_warps;
    return r > 0 ? r : 1;
}

/* The blocks a multiprocessor takes of a pass that holds `resident` of them at once, alone or
 * beside the layer's other backward pass (half of them, so that a block of each fits). */
static int room(int resident, int beside)
{
    return beside && resident > 1 ? resident / 2 : resident;
}

/* Fills the data shape, for running beside the filter pass where `beside`; 0 when the kernel
 * cannot run it. */
static int data_shape(bn_tensor_data *d, const bn_conv_geom *g, int filters, int n, int sms, int beside)
{
    memset(d, 0, sizeof *d);
    if (g->stride != 1 || g->k < 1 || g->k > 7 || g->pad < 0 || filters < 1 || g->c < 1 || n < 1) return 0;
    d->g = *g;
    d->filters = filters;
    if (g->oh < 1 || g->ow < 1) return 0;
    d->ctiles = (g->c + 7) / 8;
    d->kp = (filters + 7) / 8 * 8;
    /* A filter's row of the weight tile: 8 channels' taps, padded to 8 more than a multiple of
     * 32 floats, so that the 32 lanes' reads (4 filters x 8 channels) fall in different banks
     * when k * k is odd. */
    d->ws_row = (8 * g->k * g->k + 23) / 32 * 32 + 8;
    const long long npos = (long long)g->oh * g->ow;
    if (npos > 4096) return 0;
    d->mpasses = (int)((npos + 63) / 64);
    d->sa = d->mpasses * 64 + 8;
    d->th = g->oh + g->k - 1, d->tw = g->ow + g->k - 1;
    /* A warp's plane stride: 4 more than a multiple of 16 floats, so that the lanes' adds for
     * channels 2 apart (2 tps = 8 mod 32) fall in different banks, and at least k cells past the
     * plane, where the positions past the output add their zeros. */
    const int tp = d->th * d->tw;
    d->tps = (tp + g->k + 11) / 16 * 16 + 4;
    const size_t ws = (size_t)d->kp * d->ws_row;
    d->a_off = (ws + 3) / 4 * 4;
    d->p_off = d->a_off + (size_t)2 * d->kp * d->sa; /* two buffers */
    d->smem = (d->p_off + (size_t)g->k * 8 * d->tps) * sizeof(float);
    if (d->smem > TENSOR_SMEM) return 0;
    /* About one wave of blocks, the channel tiles together. */
    const int want = (sms * room(resident(d->smem, g->k), beside) + d->ctiles - 1) / d->ctiles;
    d->blocks = n < want ? n : want;
    if (d->blocks < 1) d->blocks = 1;
    if (d->blocks > 65535) d->blocks = 65535;
    return 1;
}

/* Fills the filter shape, for running beside the data pass where `beside`; 0 when the kernel
 * cannot run it. */
static int filter_shape(bn_tensor_filter *d, const bn_conv_geom *g, int filters, int n, int sms, int beside)
{
    memset(d, 0, sizeof *d);
    if (filters < 1 || filters > 64 || g->c < 1 || g->k < 1 || g->stride < 1 || n < 1 || g->oh < 1 || g->ow < 1)
        return 0;
    d->g = *g;
    d->filters = filters;
    d->mt = (filters + 15) / 16;
    const long long ncols = (long long)g->c * g->k * g->k + 1, npos = (long long)g->oh * g->ow;
    if (ncols > (1 << 20) || npos > (1 << 16)) return 0;
    d->ntiles = (int)((ncols + 7) / 8);
    const int wtiles = (d->ntiles + NTW - 1) / NTW;
    d->nwarps = wtiles < 4 ? wtiles : 4;
    d->groups = (wtiles + d->nwarps - 1) / d->nwarps;
    d->kq = (int)((npos + 7) / 8 * 8);
    /* Warps along the positions: up to 8 warps a block, each with at least 2 steps of 8. */
    int ksplit = 8 / d->nwarps;
    if (ksplit > d->kq / 16) ksplit = d->kq / 16;
    if (ksplit < 1) ksplit = 1;
    d->ksplit = ksplit;
    d->threads = 32 * d->nwarps * ksplit;
    d->sa = (d->kq + 27) / 32 * 32 + 4;
    d->hp = (g->oh - 1) * g->stride + g->k;
    d->wp = round4i((g->ow - 1) * g->stride + g->k);
    /* Two buffers each of dy and of x (the next image's copies land beside the products). */
    const size_t rows = (size_t)d->mt * 16, plane = (size_t)d->hp * d->wp;
    d->x_off = 2 * rows * d->sa;
    d->q_off = d->x_off + 2 * (g->c + 1) * plane;
    d->smem = (d->q_off + (size_t)d->kq) * sizeof(float);
    /* The warps' sums are added where the buffers were. */
    if (ksplit > 1 && (size_t)d->nwarps * rows * RED_ROW > d->q_off) return 0;
    /* Offsets into the buffers stay ints, and the staging's indices within div_small's range. */
    if (d->q_off > (1u << 24)) return 0;
    if (d->smem > TENSOR_SMEM) return 0;
    const int per_sm = room(resident(d->smem, d->threads / 32), beside);
    /* Spans of images: about one wave of blocks, and at most 8 MiB of partial sums (LeNet's
     * conv2 at batch 256: 66 spans, a full wave of 264 blocks, where a cap of 4 MiB left 148,
     * half the multiprocessors' room, and the step 1 ms per epoch longer). */
    const size_t count = (size_t)filters * (size_t)ncols;
    long long spans = ((long long)sms * per_sm + d->groups - 1) / d->groups;
    const long long cap = (long long)((8u << 20) / (count * sizeof(float)));
    if (spans > cap) spans = cap;
    if (spans > n) spans = n;
    if (spans < 1) spans = 1;
    d->span = (int)((n + spans - 1) / spans);
    d->spans = (n + d->span - 1) / d->span;
    if (d->spans > 65535) return 0;
    d->workspace = (size_t)d->spans * count * sizeof(float);
    return 1;
}

void bn_tensor_plan_make(bn_tensor_plan *p, const bn_conv_geom *g, int filters, int n, int sms, int tf32)
{
    memset(p, 0, sizeof *p);
    p->n = n, p->filters = filters, p->g = *g;
    p->products = tf32 ? 1 : 3;
    p->fwd_ok = tensor_shape(&p->fwd, g->c, g->h, g->w, g->pad, g->stride, filters, g->oh, g->ow, g->k, n, sms);
    p->data_ok = data_shape(&p->data, g, filters, n, sms, 0);
    p->filter_ok = filter_shape(&p->filter, g, filters, n, sms, 0);
    p->workspace = p->filter_ok ? p->filter.workspace : 0;
    /* The two backward passes side by side: each sized for half the blocks a multiprocessor
     * holds of it, where the batch gives every block of that data pass at least
     * TENSOR_BESIDE_IMAGES images (with fewer, an image more for some blocks is a larger share of
     * the pass than the room it leaves is worth), and at three products a multiply: with one
     * (tf32) the passes are shorter and their staging a larger share, and LeNet at 256 read 6.7%
     * slower that way (32.35 -> 34.51 ms an epoch) where three gained 2%. */
    p->beside_ok = p->products == 3 && p->data_ok && p->filter_ok &&
                   data_shape(&p->data_beside, g, filters, n, sms, 1) &&
                   filter_shape(&p->filter_beside, g, filters, n, sms, 1) &&
                   p->data_beside.blocks < p->data.blocks && p->filter_beside.spans < p->filter.spans &&
                   n >= TENSOR_BESIDE_IMAGES * p->data_beside.blocks;
    if (!p->beside_ok) p->data_beside = p->data, p->filter_beside = p->filter;
}

int bn_tensor_pooled_fits(const bn_tensor_plan *p, int pass)
{
    if (pass == 1) return p->data_ok && launch_smem(p->data.smem, &p->g, p->filters, true) <= TENSOR_SMEM;
    return p->filter_ok && launch_smem(p->filter.smem, &p->g, p->filters, true) <= TENSOR_SMEM;
}

static void plan(bn_conv_family_plan *p, const bn_conv_shape *s)
{
    bn_tensor_plan_make(&p->tensor, &s->g, s->filters, s->n, s->sms, s->tf32);
}

static const char *refuses(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass)
{
    const int ok[BN_CONV_PASSES] = {p->tensor.fwd_ok, p->tensor.data_ok, p->tensor.filter_ok};
    if (ok[pass]) return NULL;
    if (pass == BN_CONV_DATA && s->g.stride != 1) return "stride 1 only";
    if (pass != BN_CONV_DATA && s->filters > 64) return "at most 64 filters";
    return "shape outside its kernels' limits";
}

static size_t workspace(const bn_conv_family_plan *p)
{
    return p->tensor.workspace;
}

static int writes_pooled(const bn_conv_family_plan *p)
{
    return p->tensor.fwd_ok && p->tensor.fwd.pools;
}

static int reads_pooled(const bn_conv_family_plan *p, int pass)
{
    return bn_tensor_pooled_fits(&p->tensor, pass);
}

/* The fewest filters for which the rule gives a large batch's filter pass to the tensor cores. */
#define TENSOR_FILTER_MIN 32

/* A layer of at least TENSOR_FILTER_MIN filters takes the tensor cores for its filter pass when
 * the batch holds at least one image per multiprocessor (LeNet's conv2 at batch 256: its row
 * tiles, beside the data pass and conv1's filter pass, made the step 18 us longer; at batch 64
 * they are the faster). */
static int rule_claim(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass)
{
    return pass == BN_CONV_FILTER && s->n >= s->sms && s->filters >= TENSOR_FILTER_MIN;
}

const bn_conv_family bn_conv_family_tensor = {
    .name = "tensor",
    .serves = BN_CONV_EVERY_PASS,
    .offered = BN_CONV_EVERY_PASS,
    .rank = {0, 0, 2},
    .plan = plan,
    .refuses = refuses,
    .workspace = workspace,
    .writes_pooled = writes_pooled,
    .reads_pooled = reads_pooled,
    .rule_claim = rule_claim,
    .run = BN_GPU(bn_conv_run_tensor),
};
