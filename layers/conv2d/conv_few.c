/* conv_few.c - conv2d's CPU forward pass for inputs of few channels (conv_few.h).
 *
 * A chunk's examples are copied into zero-padded planes with LANES cells of slack after each
 * row, so a block of 16 output cells reads the 16 + k - 1 cells it needs with plain vector
 * loads. Where 16 does not divide the output width, a row's last block ends at the row's end
 * and overlaps the block before it (its overlapping cells stored twice with the same values;
 * a row narrower than 16 cells is one block whose cells past the row are not stored). */
#include <string.h>

#include "conv_few.h"
#include "core/cpu_vector.h"
#include "core/parallel.h"

#define LANES BN_VLANES
#define MAX_CHANNELS 7
#define MAX_WINDOW 3
/* A chunk's padded planes aim at this many floats (256 KiB). */
#define CHUNK_FLOATS (64 * 1024)

typedef struct few_run {
    const bn_conv_geom *g;
    int filters, n, nb, chunks, relu, taps; /* taps: c * k * k */
    size_t hp, wp, img, in_size, out_size;  /* padded plane (wp with a row's slack), per example */
    const float *x, *w, *b;
    const float *const *addends; /* blobs of y's shape the forward adds before the ReLU */
    int num_addends;
    float *y;
} few_run;

int bn_conv_few_fits(const bn_conv_geom *g)
{
    return g->stride == 1 && g->c >= 1 && g->c <= MAX_CHANNELS && g->k <= MAX_WINDOW && g->ow >= 1 && g->oh >= 1;
}

static void plan(few_run *r, const bn_conv_geom *g, int filters, int n)
{
    r->g = g, r->filters = filters, r->n = n, r->taps = g->c * g->k * g->k;
    r->hp = (size_t)g->h + 2 * g->pad;
    r->wp = (size_t)g->w + 2 * g->pad + LANES;
    r->img = (size_t)g->c * r->hp * r->wp;
    r->in_size = (size_t)g->c * g->h * g->w, r->out_size = (size_t)filters * g->oh * g->ow;
    size_t nb = CHUNK_FLOATS / r->img;
    if (nb < 1) nb = 1;
    if (nb > (size_t)n) nb = n > 0 ? (size_t)n : 1;
    r->nb = (int)nb;
    r->chunks = n > 0 ? (int)((n + nb - 1) / nb) : 0;
}

/* Example i of the chunk into its padded planes (channels one after the other). */
static void pad_example(const few_run *r, int i, float *xp)
{
    const bn_conv_geom *g = r->g;
    memset(xp, 0, r->img * sizeof *xp);
    for (int c = 0; c < g->c; c++)
        for (int iy = 0; iy < g->h; iy++)
            memcpy(xp + ((size_t)c * r->hp + iy + g->pad) * r->wp + g->pad,
                   r->x + (size_t)i * r->in_size + ((size_t)c * g->h + iy) * g->w, (size_t)g->w * sizeof *xp);
}

/* Where the block of a row's cells from x starts: x, or the row's last 16 cells where fewer than
 * 16 are left (a row of at least 16). */
static int block_start(int x, int width)
{
    return x + LANES <= width || width < LANES ? x : width - LANES;
}

/* The C * k * k input rows a block of 16 cells at (oy, x0) reads (nc channels, a window of k:
 * constants where the caller's switch gives them, so that the loops unroll and the rows stay in
 * registers). */
BN_VINLINE void load_taps(const few_run *r, int nc, int k, const float *xp, int oy, int x0, bn_vf *in)
{
    int t = 0;
    for (int c = 0; c < nc; c++)
        for (int ky = 0; ky < k; ky++)
            for (int kx = 0; kx < k; kx++) in[t++] = bn_vload(xp + ((size_t)c * r->hp + oy + ky) * r->wp + x0 + kx);
}

/* Calls body(nc, k) with constants for the common first layers (gray or colour, windows of 3),
 * else with the geometry's values. */
#define WITH_SHAPE(g, body)                                                                                 \
    do {                                                                                                    \
        int shape_ = (g)->c * 16 + (g)->k;                                                                  \
        switch (shape_) {                                                                                   \
        case 16 + 3: body(1, 3); break;                                                                     \
        case 48 + 3: body(3, 3); break;                                                                     \
        default: body((g)->c, (g)->k); break;                                                               \
        }                                                                                                   \
    } while (0)

BN_VINLINE void forward_rows(const few_run *r, int nc, int k, const float *xp, size_t example)
{
    const bn_conv_geom *g = r->g;
    size_t plane = (size_t)g->oh * g->ow;
    int taps = nc * k * k;
    for (int oy = 0; oy < g->oh; oy++)
        for (int x = 0; x < g->ow; x += LANES) {
            int x0 = block_start(x, g->ow), cells = g->ow - x0 < LANES ? g->ow - x0 : LANES;
            bn_vf in[MAX_CHANNELS * MAX_WINDOW * MAX_WINDOW];
            load_taps(r, nc, k, xp, oy, x0, in);
            for (int f = 0; f < r->filters; f++) {
                const float *wf = r->w + (size_t)f * taps;
                bn_vf acc = bn_vsplat(r->b[f]);
#pragma GCC unroll 16
                for (int t = 0; t < taps; t++) acc += bn_vsplat(wf[t]) * in[t];
                size_t at = example + f * plane + (size_t)oy * g->ow + x0;
                float lane[LANES] = {0};
                for (int a = 0; a < r->num_addends; a++) {
                    if (cells == LANES) {
                        acc += bn_vload(r->addends[a] + at);
                        continue;
                    }
                    memcpy(lane, r->addends[a] + at, (size_t)cells * sizeof *lane);
                    acc += bn_vload(lane);
                }
                if (r->relu) acc = bn_vwhere_positive(acc, acc);
                if (cells == LANES) {
                    bn_vstore(r->y + at, acc);
                } else {
                    bn_vstore(lane, acc);
                    memcpy(r->y + at, lane, (size_t)cells * sizeof *lane);
                }
            }
        }
}

BN_CPU_CLONES static void forward_chunk(void *p, int chunk, int worker)
{
    const few_run *r = p;
    float *xp = bn_cpu_scratch(0, worker);
    int i0 = chunk * r->nb, cnt = r->n - i0 < r->nb ? r->n - i0 : r->nb;
    for (int j = 0; j < cnt; j++) {
        pad_example(r, i0 + j, xp);
        size_t example = (size_t)(i0 + j) * r->out_size;
#define FORWARD(nc, k) forward_rows(r, nc, k, xp, example)
        WITH_SHAPE(r->g, FORWARD);
#undef FORWARD
    }
}

bn_status bn_conv_few_forward(const bn_conv_geom *g, int filters, int n, const float *x, const float *w,
                              const float *b, float *y, int relu, const float *const *addends, int num_addends)
{
    few_run r = {0};
    plan(&r, g, filters, n);
    if (n == 0) return BN_OK;
    r.x = x, r.w = w, r.b = b, r.y = y, r.relu = relu, r.addends = addends, r.num_addends = num_addends;
    BN_TRY(bn_cpu_scratch_reserve(0, r.img));
    bn_parallel_run(r.chunks, forward_chunk, &r);
    return BN_OK;
}
