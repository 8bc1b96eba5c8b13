/* conv_halo_plan.c - the halo implicit-GEMM kernels' plans (conv_halo.h): each pass's tile
 * configuration, the rows its blocks stage and their pitch in shared memory, or why the kernels
 * cannot run it. Host code with no device work, so that a build without CUDA can say where the
 * family applies. */
#include <limits.h>
#include <stdbool.h>
#include <string.h>

#include "conv_family.h"
#include "conv_halo.h"
#include "conv_halo_limits.h"
#include "core/layer.h"

/* Configurations to try for m output channels, in order: the widest tile of channels the count
 * fills, the tiles of more positions first. */
static const int *hl_order(int m, int *count)
{
    static const int narrow[] = {3, 4}, middle[] = {1, 2}, wide[] = {0, 1, 2};
    if (m <= 32) return *count = 2, narrow;
    if (m <= 64) return *count = 2, middle;
    return *count = 3, wide;
}

/* The most rows any block of bn positions stages: the blocks' first positions modulo an image's
 * repeat after at most np blocks, and a shorter last block stages no more. */
static int hl_most_rows(const hl_form *f, int bn)
{
    const long long np = (long long)f->oh * f->ow, total = np * f->n;
    const long long blocks = (total + bn - 1) / bn, seen = blocks < np ? blocks : np;
    int most = 0;
    for (long long b = 0; b < seen; b++) {
        const long long j0 = b * bn, j1 = j0 + bn - 1 < total ? j0 + bn - 1 : total - 1;
        int first;
        const int rows = hl_rows(f, HL_KS, (int)j0, (int)j1, &first);
        if (rows > most) most = rows;
    }
    return most;
}

/* Floats a staged channel of rows x rw takes: rounded up to 8 (mod 32), so that the lanes'
 * channels (pitch apart) fall in other banks. */
static int hl_pitch(int rows, long long rw)
{
    const int pitch = (int)(rows * rw);
    return pitch + ((8 - pitch % 32) + 32) % 32;
}

/* The tiles of configuration cfg over the form's output: its channels by its positions. */
static long long hl_tile_count(const hl_form *f, int cfg)
{
    const int bm = hl_tiles[cfg][0], bn = hl_tiles[cfg][1];
    return (long long)((f->m + bm - 1) / bm) * (((long long)f->oh * f->ow * f->n + bn - 1) / bn);
}

/* What hl_share_blocks counts the blocks of: a pass's tiles, and the chunks of channels each sums. */
typedef struct hl_split_of {
    long long tiles, chunks;
} hl_split_of;

/* The blocks of the pass at `per` chunks a block (bn_conv_split_blocks). */
static long long hl_share_blocks(const void *pass, long long per)
{
    const hl_split_of *o = (const hl_split_of *)pass;
    return o->tiles * ((o->chunks + per - 1) / per);
}

/* Blocks that share each of `tiles` tiles' `chunks` chunks of channels (conv_family.h,
 * bn_conv_split_share; beside: the data pass, beside the filter pass), HL_SPLIT_MIN chunks or more
 * each; *per: the chunks a block takes. 1 where the tiles fill a wave, nothing gains or the tiles
 * outnumber the counters. */
static int hl_split(long long tiles, int chunks, long long wave, bool beside, int *per)
{
    *per = chunks;
    if (tiles > BN_CONV_SPLIT_COUNTERS) return 1;
    const hl_split_of of = {tiles, chunks};
    *per = (int)bn_conv_split_share(chunks, HL_SPLIT_MIN, wave, beside, hl_share_blocks, &of);
    return (chunks + *per - 1) / *per;
}

/* Configuration cfg's pass over the form, where its staged rows fit: its rows, pitch and splits
 * in *out; false where they do not fit. */
static bool hl_try(bn_halo_pass *out, const hl_form *f, int cfg, int chunks, long long wave, bool beside)
{
    const long long rw = (long long)f->iw + 2 * f->pad;
    const int rows = hl_most_rows(f, hl_tiles[cfg][1]);
    if ((long long)rows * rw > (long long)HL_HMAX * HL_WARPS * 32) return false;
    const int pitch = hl_pitch(rows, rw);
    if (hl_smem_floats(cfg, HL_KS, pitch) * (long long)sizeof(float) > HL_SMEM_MAX) return false;
    *out = (bn_halo_pass){1, NULL, cfg, rows, pitch, 0, 1, chunks};
    out->splits = hl_split(hl_tile_count(f, cfg), chunks, wave, beside, &out->per);
    return true;
}

/* A pass's time as the plan reckons it: the blocks the fullest multiprocessor takes, the blocks
 * spread evenly over `sms`, times a block's work (its positions times its chunks of channels). */
static long long hl_cost(const hl_form *f, const bn_halo_pass *p, long long sms)
{
    const long long blocks = hl_tile_count(f, p->cfg) * p->splits;
    return (blocks + sms - 1) / sms * hl_tiles[p->cfg][1] * p->per;
}

/* The chosen tile's siblings (the same channels and warps along them, other widths along the
 * positions) in its place where their blocks share the multiprocessors more evenly: at 64 images
 * of 28 x 28, tiles of 256 positions make 196 blocks, two on 64 multiprocessors of 132 and one on
 * the rest, where tiles of 192 make 262, two on nearly every one, each block a quarter smaller.
 * Of equal reckonings the widest stays (fewer staged rows an output). */
static void hl_widest_even(bn_halo_pass *p, const hl_form *f, int chunks, long long sms, bool beside)
{
    const int bm = hl_tiles[p->cfg][0], wm = hl_tiles[p->cfg][2];
    long long best = hl_cost(f, p, sms);
    for (int cfg = 0; cfg < BN_HL_CONFIGS; cfg++) {
        bn_halo_pass here;
        if (cfg == p->cfg || hl_tiles[cfg][0] != bm || hl_tiles[cfg][2] != wm) continue;
        if (!hl_try(&here, f, cfg, chunks, sms, beside)) continue;
        const long long cost = hl_cost(f, &here, sms);
        if (cost < best || (cost == best && hl_tiles[cfg][1] > hl_tiles[p->cfg][1])) *p = here, best = cost;
    }
}

/* The forward or data pass over the form: its configuration, rows and split in *p, and the
 * scratch a split needs raised into *scratch. beside: the pass runs beside another (the data pass,
 * beside the filter pass), which sends its split's ties to more blocks (bn_conv_split_share). */
static void hl_pass(bn_halo_pass *p, size_t *scratch, const hl_form *f, int sms, bool beside)
{
    memset(p, 0, sizeof *p);
    const long long rw = (long long)f->iw + 2 * f->pad;
    /* A block stages at least a window's rows of the padded input. */
    if (rw * HL_KS > (long long)HL_HMAX * HL_WARPS * 32) {
        p->why = "input rows too wide to stage";
        return;
    }
    int count;
    const int *order = hl_order(f->m, &count);
    const long long wave = sms > 0 ? sms : 100;
    const int chunks = (f->ci + HL_BC - 1) / HL_BC;
    /* The first configuration that fits and gives a wave of blocks, its tiles split where they
     * alone do not; else the last of the order, where it fits; else the first that fits. Then the
     * width of its tiles that spreads the blocks most evenly (hl_widest_even). */
    bn_halo_pass fits = {0};
    for (int i = 0; i < count; i++) {
        bn_halo_pass here;
        if (!hl_try(&here, f, order[i], chunks, wave, beside)) continue;
        if (!fits.ok) fits = here;
        if (hl_tile_count(f, order[i]) * here.splits >= wave || i + 1 == count) {
            *p = here;
            break;
        }
    }
    if (!p->ok) *p = fits;
    if (!p->ok) {
        p->why = "input rows too many to stage";
        return;
    }
    hl_widest_even(p, f, chunks, wave, beside);
    if (p->splits > 1) {
        const size_t bytes = BN_CONV_SPLIT_COUNTERS * sizeof(unsigned) +
                             (size_t)hl_split_floats(p->cfg, hl_tile_count(f, p->cfg), p->splits) * sizeof(float);
        if (bytes > *scratch) *scratch = bytes;
    }
}

/* Blocks of filter configuration cfg, and their span, for spans of at least four whole chunks
 * and about two blocks a multiprocessor. */
static long long hl_filter_blocks(const hl_form *f, int cfg, long long wave, long long *span_out)
{
    const int bm = 32 * hl_filter_tiles[cfg][0], bc = 8 * hl_filter_tiles[cfg][1];
    const long long total = (long long)f->oh * f->ow * f->n;
    const long long tiles = (long long)((f->m + bm - 1) / bm) * ((f->ci + bc - 1) / bc);
    long long splits = (2 * wave + tiles - 1) / tiles;
    long long span = (total + splits - 1) / splits;
    if (span < 4 * HL_KP) span = 4 * HL_KP;
    span = (span + HL_KP - 1) / HL_KP * HL_KP;
    *span_out = span;
    return tiles * ((total + span - 1) / span);
}

/* The filter pass: the tile by the filters (32 a warp; 8 warps, or 4 where 8 would leave
 * multiprocessors without a block). */
static void hl_filter_pass(bn_halo_pass *p, size_t *workspace, const hl_form *f, int sms)
{
    memset(p, 0, sizeof *p);
    const long long total = (long long)f->oh * f->ow * f->n, rw = (long long)f->iw + 2 * f->pad;
    const long long wave = sms > 0 ? sms : 100;
    const int rows = hl_most_rows(f, HL_KP);
    /* The forward kernels' bound on a block's staged positions, which also keeps the pitch an
     * int; shared memory is the tighter bound where the tiles hold many channels. */
    if ((long long)rows * rw > (long long)HL_HMAX * HL_WARPS * 32) {
        p->why = "input rows too many to stage";
        return;
    }
    int cfg = f->m <= 32 ? 2 : f->m <= 64 ? 1 : 0;
    long long span;
    if (cfg != 2 && hl_filter_blocks(f, cfg, wave, &span) < wave) cfg = 3;
    hl_filter_blocks(f, cfg, wave, &span); /* the span of the tile taken */
    const int pitch = hl_pitch(rows, rw);
    if (hl_filter_smem_floats(cfg, pitch) * (long long)sizeof(float) > HL_SMEM_MAX) {
        p->why = "input rows too many to stage";
        return;
    }
    const long long splits = (total + span - 1) / span;
    const long long taps = (long long)f->ci * HL_KS * HL_KS;
    if (splits > 65535 || splits * f->m * (taps + 1) >= INT_MAX) {
        p->why = "shape outside its kernels' limits";
        return;
    }
    p->ok = 1, p->cfg = cfg, p->rows = rows, p->pitch = pitch;
    p->span = (int)span, p->splits = (int)splits;
    *workspace = (size_t)splits * f->m * (taps + 1) * sizeof(float);
}

int bn_halo_tile_width(int cfg)
{
    return cfg >= 0 && cfg < BN_HL_CONFIGS ? hl_tiles[cfg][1] : 0;
}

void bn_halo_plan_make(bn_halo_plan *p, const bn_conv_geom *g, int filters, int n, int sms, int tf32)
{
    memset(p, 0, sizeof *p);
    p->products = tf32 ? 1 : 3;
    const char *shape_why = NULL;
    if (g->k != HL_KS)
        shape_why = "windows of 3 only";
    else if ((long long)n * g->c * g->h * g->w >= INT_MAX || (long long)n * filters * g->oh * g->ow >= INT_MAX ||
             (long long)filters * g->c * g->k * g->k >= INT_MAX)
        shape_why = "shape outside its kernels' limits";
    if (shape_why) {
        p->pass[0].why = p->pass[1].why = p->pass[2].why = shape_why;
        return;
    }
    const hl_form fwd = {n, g->c, g->h, g->w, filters, g->oh, g->ow, g->stride, g->pad};
    hl_pass(&p->pass[0], &p->scratch, &fwd, sms, false);
    hl_filter_pass(&p->pass[2], &p->workspace, &fwd, sms);
    if (g->stride != 1) {
        p->pass[1].why = "stride 1 only";
    } else if (g->pad > g->k - 1) {
        p->pass[1].why = "padding wider than the window";
    } else {
        const hl_form data = {n, filters, g->oh, g->ow, g->c, g->h, g->w, 1, g->k - 1 - g->pad};
        hl_pass(&p->pass[1], &p->scratch, &data, sms, true);
    }
}

static void plan(bn_conv_family_plan *p, const bn_conv_shape *s)
{
    bn_halo_plan_make(&p->halo, &s->g, s->filters, s->n, s->sms, s->tf32);
}

static const char *refuses(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass)
{
    (void)s;
    const bn_halo_pass *h = &p->halo.pass[pass];
    return h->ok ? NULL : h->why;
}

static size_t workspace(const bn_conv_family_plan *p)
{
    return p->halo.workspace;
}

static size_t scratch(const bn_conv_family_plan *p)
{
    return p->halo.scratch;
}

/* Offered for every pass: the timed choice takes it where it beats the others (3x3 layers of
 * many channels); last in the rule's order, which was measured at LeNet's sizes. */
const bn_conv_family bn_conv_family_halo = {
    .name = "halo",
    .serves = BN_CONV_EVERY_PASS,
    .offered = BN_CONV_EVERY_PASS,
    .rank = {5, 5, 5},
    .plan = plan,
    .refuses = refuses,
    .workspace = workspace,
    .scratch = scratch,
    .takes_relu = 1u << BN_CONV_FORWARD | 1u << BN_CONV_DATA,
    .run = BN_GPU(bn_conv_run_halo),
};
