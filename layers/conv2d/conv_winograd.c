/* conv_winograd.c - F(4x4, 3x3) and F(2x2, 5x5) for conv2d's CPU passes (conv_winograd.h).
 *
 * Both work in a 6x6 domain at the same six points (0, 1, -1, 2, -2 and infinity), so they share
 * the input's transform B^T d B and its transpose; they differ in the output tile (T = 4 or 2 cells
 * a side), the output's transform A^T (6 -> T) and the filter's G (k -> 6).
 *
 * Layout. A chunk's examples are copied into zero-padded planes with the channels innermost
 * (height x width x channels, the channels padded to a multiple of 16), so that every transform
 * works on vectors of 16 channels at once, the same arithmetic in each lane. Tile p of a chunk
 * (example j, tile row ty, tile column tx) reads the 6x6 patch at (T ty, T tx) of its padded
 * example; the padded planes are T * tiles + k - 1 cells a side, so every patch lies inside them
 * and the cells past the input are zeros. The 36 transformed values of a tile go to 36
 * matrices, one per point xi of the 6x6 domain, each of tiles x channels (stored tile by tile:
 * a tile's 36 points side by side):
 *
 *     V[p][xi][c]   input, carried in (B^T d B)
 *     U[xi][c][k]   filter k's weights for channel c, carried in (G g G^T)
 *     M[p][xi][k] = sum over c of V[p][xi][c] U[xi][c][k]
 *     y tile      = A^T M A, per filter
 *
 * The products are small (a chunk holds a few hundred tiles; channels and filters are tens),
 * so they are done here with the accumulators of an 8 x 32 block of the result held in
 * registers, rather than through OpenBLAS, whose per-call cost would be as large as the work.
 * The hot functions are compiled for AVX-512, AVX2 and the baseline (core/cpu_vector.h). */
#include <string.h>

#include "conv2d.h"
#include "conv_winograd.h"
#include "core/cpu_vector.h"
#include "core/parallel.h"

#define LANES BN_VLANES
/* Points of the transformed tile, and the output cells of one tile a side at most. */
#define XI 36
#define TILE_MAX 4
/* A chunk's planes (input, input gradient, output) aim at this many floats (512 KiB: within a
 * core's second cache beside the groups' buffers and the transformed weights). */
#define CHUNK_FLOATS (128 * 1024)
/* The floats the chunks' weight-gradient products may take together (64 MiB). */
#define PARTS_FLOATS (16 * 1024 * 1024)
/* The backward pass's tasks: consecutive chunks share a task and its weight-gradient products, down to this many
 * tasks (summing one product per chunk was 15% of vgg_fashion's conv4 backward pass at 64 chunks) and until its
 * tiles outweigh its products (plan): by the shapes alone, so the sums are the same for any number of threads. */
#define BACKWARD_TASKS 32
/* Rows of a product's block held in registers, and the tiles carried in and out together. */
#define ROWS 8
#define GROUP 8
/* The backward pass carries this many tiles in (GROUP at a time) before their weight-gradient
 * products: each product's accumulators, loaded from and stored to the task's sums (36 x channels
 * x filters, more than a core's second cache at 64 of each), then pass over that many tiles, not
 * GROUP (vgg_fashion's conv2 and conv4 backward passes 10-15% shorter at 32 than at 8). */
#define WGROUP 32

BN_VINLINE void add_to(float *p, bn_vf v) { bn_vstore(p, bn_vload(p) + v); }

/* The start of each block of 16 cells of a plane of `cells` (>= 16) cells: 0, 16, 32, ... and, where
 * 16 does not divide it, a last block that ends at the plane's end, overlapping the one before. */
static size_t block_start(size_t q, size_t cells)
{
    return q + LANES <= cells ? q : cells - LANES;
}

/* Where the 16 cells from q0 of a plane `width` cells wide lie in planes `stride` cells wide,
 * worked out with one division. */
static void cell_offsets(size_t q0, size_t width, size_t stride, size_t *at)
{
    size_t y = q0 / width, x = q0 % width;
    for (int i = 0; i < LANES; i++) {
        at[i] = y * stride + x;
        if (++x == width) x = 0, y++;
    }
}

/* Zeros in the cells of cnt planes (height x width cells of `lanes` floats) outside the block of
 * rows [y0, y0 + rows) and columns [x0, x0 + cols), which are written in full afterwards. */
static void zero_margins(float *buf, size_t cnt, size_t height, size_t width, size_t y0, size_t rows, size_t x0,
                         size_t cols, size_t lanes)
{
    for (size_t j = 0; j < cnt; j++)
        for (size_t y = 0; y < height; y++) {
            float *row = buf + (j * height + y) * width * lanes;
            if (y < y0 || y >= y0 + rows) {
                memset(row, 0, width * lanes * sizeof *row);
                continue;
            }
            memset(row, 0, x0 * lanes * sizeof *row);
            memset(row + (x0 + cols) * lanes, 0, (width - x0 - cols) * lanes * sizeof *row);
        }
}

/* Sixteen vectors transposed in place: four rounds of interleaving row i with row i + 8. */
BN_VINLINE void transpose16(bn_vf *r)
{
    for (int round = 0; round < 4; round++) {
        bn_vf t[LANES];
        for (int i = 0; i < 8; i++) {
            t[2 * i] = __builtin_shufflevector(r[i], r[i + 8], 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
            t[2 * i + 1] =
                __builtin_shufflevector(r[i], r[i + 8], 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
        }
        for (int i = 0; i < LANES; i++) r[i] = t[i];
    }
}

static size_t round_up(size_t v, size_t m)
{
    return (v + m - 1) / m * m;
}

/* The transforms along one axis, on six (or four, or two) vectors.
 * bt6: B^T d, the input's; at6: A^T m, the output's (6 -> 4, F(4x4, 3x3)); at2: the same for
 * F(2x2, 5x5) (6 -> 2); a6 and a2: A g, the output gradient's (4 or 2 -> 6); b6: B v, the input
 * gradient's. */
BN_VINLINE void bt6(bn_vf d0, bn_vf d1, bn_vf d2, bn_vf d3, bn_vf d4, bn_vf d5, bn_vf *o)
{
    bn_vf f = bn_vsplat(4.0f), five = bn_vsplat(5.0f), two = bn_vsplat(2.0f);
    o[0] = f * d0 - five * d2 + d4;
    o[1] = (d3 + d4) - f * (d1 + d2);
    o[2] = (d4 - d3) + f * (d1 - d2);
    o[3] = (d4 - d2) + two * (d3 - d1);
    o[4] = (d4 - d2) - two * (d3 - d1);
    o[5] = f * d1 - five * d3 + d5;
}

BN_VINLINE void at6(bn_vf m0, bn_vf m1, bn_vf m2, bn_vf m3, bn_vf m4, bn_vf m5, bn_vf *o)
{
    bn_vf s12 = m1 + m2, d12 = m1 - m2, s34 = m3 + m4, d34 = m3 - m4;
    o[0] = m0 + s12 + s34;
    o[1] = d12 + bn_vsplat(2.0f) * d34;
    o[2] = s12 + bn_vsplat(4.0f) * s34;
    o[3] = d12 + bn_vsplat(8.0f) * d34 + m5;
}

BN_VINLINE void at2(bn_vf m0, bn_vf m1, bn_vf m2, bn_vf m3, bn_vf m4, bn_vf m5, bn_vf *o)
{
    o[0] = m0 + (m1 + m2) + (m3 + m4);
    o[1] = (m1 - m2) + bn_vsplat(2.0f) * (m3 - m4) + m5;
}

BN_VINLINE void a2(bn_vf y0, bn_vf y1, bn_vf *o)
{
    bn_vf two = bn_vsplat(2.0f) * y1;
    o[0] = y0;
    o[1] = y0 + y1;
    o[2] = y0 - y1;
    o[3] = y0 + two;
    o[4] = y0 - two;
    o[5] = y1;
}

BN_VINLINE void a6(bn_vf y0, bn_vf y1, bn_vf y2, bn_vf y3, bn_vf *o)
{
    bn_vf s02 = y0 + y2, s13 = y1 + y3, q02 = y0 + bn_vsplat(4.0f) * y2,
          q13 = bn_vsplat(2.0f) * y1 + bn_vsplat(8.0f) * y3;
    o[0] = y0;
    o[1] = s02 + s13;
    o[2] = s02 - s13;
    o[3] = q02 + q13;
    o[4] = q02 - q13;
    o[5] = y3;
}

BN_VINLINE void b6(bn_vf v0, bn_vf v1, bn_vf v2, bn_vf v3, bn_vf v4, bn_vf v5, bn_vf *o)
{
    bn_vf f = bn_vsplat(4.0f), five = bn_vsplat(5.0f), two = bn_vsplat(2.0f);
    o[0] = f * v0;
    o[1] = f * (v2 - v1) + two * (v4 - v3) + f * v5;
    o[2] = -(five * v0) - f * (v1 + v2) - (v3 + v4);
    o[3] = (v1 - v2) + two * (v3 - v4) - five * v5;
    o[4] = v0 + v1 + v2 + v3 + v4;
    o[5] = v5;
}

/* G^T s (6 -> k, k = 3 or 5), in double. */
static void gt6(int k, const double *s, size_t stride, double *o)
{
    double s0 = s[0], s1 = s[stride], s2 = s[2 * stride], s3 = s[3 * stride], s4 = s[4 * stride],
           s5 = s[5 * stride];
    o[0] = s0 / 4.0 - (s1 + s2) / 6.0 + (s3 + s4) / 24.0;
    o[1] = (s2 - s1) / 6.0 + (s3 - s4) / 12.0;
    if (k == 3) {
        o[2] = (s3 + s4 - s1 - s2) / 6.0 + s5;
        return;
    }
    o[2] = (s3 + s4 - s1 - s2) / 6.0;
    o[3] = (s2 - s1) / 6.0 + (s3 - s4) / 3.0;
    o[4] = (s3 + s4) * (2.0 / 3.0) - (s1 + s2) / 6.0 + s5;
}

typedef struct wg_run {
    const bn_conv_geom *g;
    int C, K, n, nb, chunks, relu;
    int group, tasks;       /* backward: consecutive chunks a task takes, and the tasks */
    int ks, tile;           /* the window (3 or 5) and the output tile's side (4 or 2) */
    size_t cp, kp;          /* channels and filters padded to a multiple of LANES */
    size_t th, tw, tiles;   /* tiles of an example: rows, columns, all */
    size_t hp, wp;          /* an example's padded planes: tile * tiles + ks - 1 a side */
    size_t in_f, v_f, m_f, o_f, slab; /* a worker's buffers, floats */
    const float *x, *b, *dy, *relu_y, *u, *ut;
    const float *const *addends; /* blobs of y's shape the forward adds before the ReLU */
    int num_addends;
    float *y, *dx, *parts; /* parts: backward, per task: its weight-gradient products */
    double *bias_parts; /* backward: per task and filter */
} wg_run;

/* The output tile's side for a window: F(4x4, 3x3) or F(2x2, 5x5); 0 for others. */
static int tile_of(int k)
{
    return k == 3 ? 4 : k == 5 ? 2 : 0;
}

int bn_winograd_fits(const bn_conv_geom *g, int filters)
{
    const size_t tile = (size_t)tile_of(g->k);
    if (!tile || g->stride != 1 || g->c < 8 || filters < 8 || g->c > 256 || filters > 256) return 0;
    if ((size_t)g->oh * g->ow < LANES || (size_t)g->h * g->w < LANES) return 0;
    size_t th = ((size_t)g->oh + tile - 1) / tile, tw = ((size_t)g->ow + tile - 1) / tile;
    return 2 * (size_t)g->oh * g->ow >= th * tw * tile * tile;
}

static void plan(wg_run *r, const bn_conv_geom *g, int filters, int n)
{
    r->g = g, r->C = g->c, r->K = filters, r->n = n;
    r->ks = g->k, r->tile = tile_of(g->k);
    const size_t tile = (size_t)r->tile;
    r->cp = round_up((size_t)g->c, LANES), r->kp = round_up((size_t)filters, LANES);
    r->th = ((size_t)g->oh + tile - 1) / tile, r->tw = ((size_t)g->ow + tile - 1) / tile;
    r->tiles = r->th * r->tw;
    r->hp = tile * r->th + (size_t)g->k - 1, r->wp = tile * r->tw + (size_t)g->k - 1;
    size_t per_example = 2 * r->hp * r->wp * r->cp + tile * tile * r->tiles * r->kp;
    size_t nb = CHUNK_FLOATS / per_example;
    if (nb < 1) nb = 1;
    if (nb > (size_t)n) nb = n > 0 ? (size_t)n : 1;
    size_t most_chunks = PARTS_FLOATS / (XI * r->cp * r->kp);
    if (most_chunks < 1) most_chunks = 1;
    if ((n + nb - 1) / nb > most_chunks) nb = (n + most_chunks - 1) / most_chunks;
    r->nb = (int)nb;
    r->chunks = n > 0 ? (int)((n + nb - 1) / nb) : 0;
    r->group = r->chunks > BACKWARD_TASKS ? r->chunks / BACKWARD_TASKS : 1;
    /* Tiles of 36 x (C + K) floats against products of 36 x C x K: clearing and summing the products took a third
     * of patch4's 3x3 backward passes (96 channels, 7x7 maps: 24 tasks of 20 tiles 13.1-14.0 ms, 8 of 60 10.2-12.4). */
    const size_t chunk_tiles = nb * r->tiles, least = (r->cp * r->kp / (r->cp + r->kp) + chunk_tiles - 1) / chunk_tiles;
    if ((size_t)r->group < least) r->group = least < (size_t)r->chunks ? (int)least : r->chunks;
    r->tasks = (r->chunks + r->group - 1) / r->group;
    r->in_f = round_up(nb * r->hp * r->wp * r->cp, LANES);
    r->v_f = XI * WGROUP * r->cp;
    r->m_f = XI * WGROUP * r->kp;
    r->o_f = round_up(nb * tile * r->th * tile * r->tw * r->kp, LANES);
    r->slab = 2 * r->in_f + r->v_f + r->m_f + r->o_f;
}

/* G g on vectors of 16 filters: g6v for 3 taps, g6v5 for 5. */
BN_VINLINE void g6v5(const bn_vf *g, bn_vf *o)
{
    bn_vf sixth = bn_vsplat(1.0f / 6.0f), s24 = bn_vsplat(1.0f / 24.0f), even = g[0] + g[2] + g[4],
          odd = g[1] + g[3], even2 = g[0] + bn_vsplat(4.0f) * g[2] + bn_vsplat(16.0f) * g[4],
          odd2 = bn_vsplat(2.0f) * g[1] + bn_vsplat(8.0f) * g[3];
    o[0] = g[0] * bn_vsplat(0.25f);
    o[1] = -(even + odd) * sixth;
    o[2] = (odd - even) * sixth;
    o[3] = (even2 + odd2) * s24;
    o[4] = (even2 - odd2) * s24;
    o[5] = g[4];
}

BN_VINLINE void g6v(bn_vf g0, bn_vf g1, bn_vf g2, bn_vf *o)
{
    bn_vf sixth = bn_vsplat(1.0f / 6.0f), s02 = g0 + g2;
    o[0] = g0 * bn_vsplat(0.25f);
    o[1] = -(s02 + g1) * sixth;
    o[2] = (g1 - s02) * sixth;
    o[3] = g0 * bn_vsplat(1.0f / 24.0f) + g1 * bn_vsplat(1.0f / 12.0f) + g2 * sixth;
    o[4] = g0 * bn_vsplat(1.0f / 24.0f) - g1 * bn_vsplat(1.0f / 12.0f) + g2 * sixth;
    o[5] = g2;
}

/* G along one axis: 3 or 5 taps -> 6. */
BN_VINLINE void g_of(int ks, const bn_vf *g, bn_vf *o)
{
    if (ks == 3) g6v(g[0], g[1], g[2], o);
    else g6v5(g, o);
}

/* The weights carried in, 16 filters at a time: u[xi][c][k] (forward), zero in the padding; and
 * its blocks of 16 x 16 transposed into ut[xi][k][c] (the input gradient's). */
BN_CPU_CLONES static void transform_weights(const wg_run *r, const float *w, float *u, float *ut)
{
    size_t cp = r->cp, kp = r->kp;
    const int ks = r->ks, taps = ks * ks;
    for (size_t c = 0; c < cp; c++)
        for (size_t k0 = 0; k0 < kp; k0 += LANES) {
            float lanes[25][LANES] = {{0}};
            for (size_t k = k0; k < k0 + LANES && k < (size_t)r->K && c < (size_t)r->C; k++)
                for (int t = 0; t < taps; t++) lanes[t][k - k0] = w[(k * r->C + c) * taps + t];
            /* Down each column of taps, then along each of the six rows that gives. */
            bn_vf t[6][5], o[6], col[5];
            for (int y = 0; y < 5; y++) col[y] = bn_vsplat(0.0f);
            for (int x = 0; x < ks; x++) {
                for (int y = 0; y < ks; y++) col[y] = bn_vload(lanes[y * ks + x]);
                g_of(ks, col, o);
                for (int i = 0; i < 6; i++) t[i][x] = o[i];
            }
            for (int i = 0; i < 6; i++) {
                g_of(ks, t[i], o);
                for (int j = 0; j < 6; j++) bn_vstore(u + (((size_t)i * 6 + j) * cp + c) * kp + k0, o[j]);
            }
        }
    for (size_t xi = 0; xi < XI; xi++)
        for (size_t c0 = 0; c0 < cp; c0 += LANES)
            for (size_t k0 = 0; k0 < kp; k0 += LANES) {
                bn_vf v[LANES];
                for (int i = 0; i < LANES; i++) v[i] = bn_vload(u + (xi * cp + c0 + i) * kp + k0);
                transpose16(v);
                for (int i = 0; i < LANES; i++) bn_vstore(ut + (xi * kp + k0 + i) * cp + c0, v[i]);
            }
}

/* out[p][n] (rows x ncols, ncols a multiple of LANES) = sum over q < inner of a[p][q] b[q][n];
 * rows a multiple of ROWS. */
BN_VINLINE void nn_block(int nv, int inner, const float *a, size_t lda, const float *b, size_t ldb, float *out,
                         size_t ldo)
{
    bn_vf acc[ROWS][2];
    for (int i = 0; i < ROWS; i++) acc[i][0] = acc[i][1] = bn_vsplat(0.0f);
    for (int q = 0; q < inner; q++) {
        bn_vf b0 = bn_vload(b + q * ldb), b1 = nv > 1 ? bn_vload(b + q * ldb + LANES) : b0;
        for (int i = 0; i < ROWS; i++) {
            bn_vf s = bn_vsplat(a[i * lda + q]);
            acc[i][0] += s * b0;
            if (nv > 1) acc[i][1] += s * b1;
        }
    }
    for (int i = 0; i < ROWS; i++) {
        bn_vstore(out + i * ldo, acc[i][0]);
        if (nv > 1) bn_vstore(out + i * ldo + LANES, acc[i][1]);
    }
}

BN_VINLINE void gemm_nn(size_t rows, int inner, size_t ncols, const float *a, size_t lda, const float *b, size_t ldb,
                        float *out, size_t ldo)
{
    size_t n0 = 0;
    for (; n0 + 2 * LANES <= ncols; n0 += 2 * LANES)
        for (size_t p = 0; p < rows; p += ROWS)
            nn_block(2, inner, a + p * lda, lda, b + n0, ldb, out + p * ldo + n0, ldo);
    if (n0 < ncols)
        for (size_t p = 0; p < rows; p += ROWS)
            nn_block(1, inner, a + p * lda, lda, b + n0, ldb, out + p * ldo + n0, ldo);
}

/* out[c][n] (crows x ncols, multiples of their blocks) += (or, `fresh`, =) sum over p < count of a[p][c] b[p][n]. */
BN_VINLINE void tn_block(int nv, int fresh, size_t count, const float *a, size_t lda, const float *b, size_t ldb,
                         float *out, size_t ldo)
{
    bn_vf acc[ROWS][2];
    for (int i = 0; i < ROWS; i++) {
        acc[i][0] = fresh ? bn_vsplat(0.0f) : bn_vload(out + i * ldo);
        acc[i][1] = nv > 1 && !fresh ? bn_vload(out + i * ldo + LANES) : acc[i][0];
    }
    for (size_t p = 0; p < count; p++) {
        bn_vf b0 = bn_vload(b + p * ldb), b1 = nv > 1 ? bn_vload(b + p * ldb + LANES) : b0;
        for (int i = 0; i < ROWS; i++) {
            bn_vf s = bn_vsplat(a[p * lda + i]);
            acc[i][0] += s * b0;
            if (nv > 1) acc[i][1] += s * b1;
        }
    }
    for (int i = 0; i < ROWS; i++) {
        bn_vstore(out + i * ldo, acc[i][0]);
        if (nv > 1) bn_vstore(out + i * ldo + LANES, acc[i][1]);
    }
}

BN_VINLINE void gemm_tn(int fresh, size_t count, size_t crows, size_t ncols, const float *a, size_t lda,
                        const float *b, size_t ldb, float *out, size_t ldo)
{
    size_t n0 = 0;
    for (; n0 + 2 * LANES <= ncols; n0 += 2 * LANES)
        for (size_t c = 0; c < crows; c += ROWS)
            tn_block(2, fresh, count, a + c, lda, b + n0, ldb, out + c * ldo + n0, ldo);
    if (n0 < ncols)
        for (size_t c = 0; c < crows; c += ROWS)
            tn_block(1, fresh, count, a + c, lda, b + n0, ldb, out + c * ldo + n0, ldo);
}

/* The chunk's examples [i0, i0 + cnt) into padded planes, channels innermost: blocks of 16
 * channels x 16 cells of a plane (read as one row) transposed in registers, each cell's channels
 * stored where the cell lies. */
BN_VINLINE void gather_input(const wg_run *r, int i0, int cnt, float *in)
{
    const bn_conv_geom *g = r->g;
    size_t plane = (size_t)g->h * g->w, cp = r->cp;
    zero_margins(in, (size_t)cnt, r->hp, r->wp, (size_t)g->pad, (size_t)g->h, (size_t)g->pad, (size_t)g->w, cp);
    for (int j = 0; j < cnt; j++) {
        const float *src = r->x + (size_t)(i0 + j) * r->C * plane;
        float *dst = in + (((size_t)j * r->hp + g->pad) * r->wp + g->pad) * cp;
        for (size_t q = 0; q < plane; q += LANES) {
            size_t q0 = block_start(q, plane), at[LANES];
            cell_offsets(q0, (size_t)g->w, r->wp, at);
            for (int c0 = 0; c0 < r->C; c0 += LANES) {
                bn_vf v[LANES];
                for (int i = 0; i < LANES; i++)
                    v[i] = c0 + i < r->C ? bn_vload(src + (size_t)(c0 + i) * plane + q0) : bn_vsplat(0.0f);
                transpose16(v);
                for (int i = 0; i < LANES; i++) bn_vstore(dst + at[i] * cp + c0, v[i]);
            }
        }
    }
}

/* Where tiles [p0, p0 + count) of the chunk start in planes `height` x `width` cells a side
 * (cells, not floats), worked out with one division for the group. */
static void tile_offsets(const wg_run *r, size_t p0, size_t count, size_t height, size_t width, size_t *at)
{
    size_t j = p0 / r->tiles, t = p0 % r->tiles, ty = t / r->tw, tx = t % r->tw;
    for (size_t p = 0; p < count; p++) {
        at[p] = (j * height + (size_t)r->tile * ty) * width + (size_t)r->tile * tx;
        if (++tx == r->tw) {
            tx = 0;
            if (++ty == r->th) ty = 0, j++;
        }
    }
}

/* Tiles [p0, p0 + count) of the chunk's padded input carried in: v[p - p0][xi][c] (a tile's 36
 * vectors of channels side by side, so that its stores fill whole lines; point xi's matrix is
 * read with a row stride of 36 vectors); rows count..GROUP-1 zero. */
BN_VINLINE void input_transform(const wg_run *r, size_t p0, size_t count, const float *in, float *v)
{
    size_t cp = r->cp, rs = r->wp * cp, ts = XI * cp;
    size_t at[GROUP];
    tile_offsets(r, p0, count, r->hp, r->wp, at);
    for (size_t p = 0; p < count; p++) {
        const float *base = in + at[p] * cp;
        for (size_t c = 0; c < cp; c += LANES) {
            bn_vf t[6][6], o[6];
            for (int s = 0; s < 6; s++) {
                const float *d = base + s * cp + c;
                bt6(bn_vload(d), bn_vload(d + rs), bn_vload(d + 2 * rs), bn_vload(d + 3 * rs), bn_vload(d + 4 * rs),
                    bn_vload(d + 5 * rs), o);
                for (int i = 0; i < 6; i++) t[i][s] = o[i];
            }
            for (int i = 0; i < 6; i++) {
                bt6(t[i][0], t[i][1], t[i][2], t[i][3], t[i][4], t[i][5], o);
                for (int jj = 0; jj < 6; jj++) bn_vstore(v + p * ts + (i * 6 + jj) * cp + c, o[jj]);
            }
        }
    }
    if (count < GROUP)
        memset(v + count * ts, 0, (GROUP - count) * ts * sizeof *v);
}

/* A^T along one axis: 6 -> 4 (F(4x4, 3x3)) or 6 -> 2 (F(2x2, 5x5)). */
BN_VINLINE void at_of(int tile, bn_vf m0, bn_vf m1, bn_vf m2, bn_vf m3, bn_vf m4, bn_vf m5, bn_vf *o)
{
    if (tile == 4) at6(m0, m1, m2, m3, m4, m5, o);
    else at2(m0, m1, m2, m3, m4, m5, o);
}

/* Tiles [p0, p0 + count) of M carried back: T x T tiles of every filter into o (height T th,
 * width T tw, filters innermost). */
BN_VINLINE void output_transform(const wg_run *r, size_t p0, size_t count, const float *m, float *o)
{
    const int tile = r->tile;
    size_t kp = r->kp, ow = (size_t)tile * r->tw, rs = ow * kp, xs = kp;
    size_t at[GROUP];
    tile_offsets(r, p0, count, (size_t)tile * r->th, ow, at);
    for (size_t p = 0; p < count; p++) {
        float *base = o + at[p] * kp;
        for (size_t k = 0; k < kp; k += LANES) {
            bn_vf t[TILE_MAX][6], q[TILE_MAX];
            const float *src = m + p * XI * kp + k;
            for (int j = 0; j < 6; j++) {
                at_of(tile, bn_vload(src + j * xs), bn_vload(src + (6 + j) * xs), bn_vload(src + (12 + j) * xs),
                      bn_vload(src + (18 + j) * xs), bn_vload(src + (24 + j) * xs), bn_vload(src + (30 + j) * xs), q);
                for (int a = 0; a < tile; a++) t[a][j] = q[a];
            }
            for (int a = 0; a < tile; a++) {
                at_of(tile, t[a][0], t[a][1], t[a][2], t[a][3], t[a][4], t[a][5], q);
                for (int b = 0; b < tile; b++) bn_vstore(base + a * rs + b * kp + k, q[b]);
            }
        }
    }
}

/* o (filters innermost) into y's planes with the bias, and the ReLU where asked: blocks of 16
 * cells of a plane x 16 filters transposed in registers. */
BN_VINLINE void scatter_output(const wg_run *r, int i0, int cnt, const float *o)
{
    const bn_conv_geom *g = r->g;
    size_t ow4 = (size_t)r->tile * r->tw, oh4 = (size_t)r->tile * r->th, kp = r->kp, plane = (size_t)g->oh * g->ow;
    for (int j = 0; j < cnt; j++) {
        size_t example = (size_t)(i0 + j) * r->K * plane;
        float *dst = r->y + example;
        const float *src = o + (size_t)j * oh4 * ow4 * kp;
        for (size_t q = 0; q < plane; q += LANES) {
            size_t q0 = block_start(q, plane), at[LANES];
            cell_offsets(q0, (size_t)g->ow, ow4, at);
            for (int k0 = 0; k0 < r->K; k0 += LANES) {
                bn_vf v[LANES];
                for (int i = 0; i < LANES; i++) v[i] = bn_vload(src + at[i] * kp + k0);
                transpose16(v);
                for (int k = 0; k < LANES && k0 + k < r->K; k++) {
                    size_t cell = (size_t)(k0 + k) * plane + q0;
                    bn_vf y = v[k] + bn_vsplat(r->b[k0 + k]);
                    for (int a = 0; a < r->num_addends; a++) y += bn_vload(r->addends[a] + example + cell);
                    if (r->relu) y = bn_vwhere_positive(y, y);
                    bn_vstore(dst + cell, y);
                }
            }
        }
    }
}

static void chunk_span(const wg_run *r, int chunk, int *i0, int *cnt)
{
    *i0 = chunk * r->nb;
    *cnt = r->n - *i0 < r->nb ? r->n - *i0 : r->nb;
}

/* A chunk: its input in padded planes; then per group of tiles, the transform in, the 36
 * products and the transform out, within a core's first caches; then the output into y. */
BN_CPU_CLONES static void forward_chunk(void *p, int chunk, int worker)
{
    const wg_run *r = p;
    int i0, cnt;
    chunk_span(r, chunk, &i0, &cnt);
    float *in = bn_cpu_scratch(0, worker), *v = in + r->in_f, *m = v + r->v_f, *o = m + r->m_f;
    size_t cp = r->cp, kp = r->kp, tiles = (size_t)cnt * r->tiles;
    gather_input(r, i0, cnt, in);
    for (size_t p0 = 0; p0 < tiles; p0 += GROUP) {
        size_t count = tiles - p0 < GROUP ? tiles - p0 : GROUP;
        input_transform(r, p0, count, in, v);
        for (int xi = 0; xi < XI; xi++)
            gemm_nn(round_up(count, ROWS), r->C, kp, v + xi * cp, XI * cp, r->u + xi * cp * kp, kp, m + xi * kp,
                    XI * kp);
        output_transform(r, p0, count, m, o);
    }
    scatter_output(r, i0, cnt, o);
}

/* The chunk's output gradient (zero where a ReLU done by the forward pass gave 0) into planes
 * of T th x T tw, filters innermost, zeros past the output (blocks of 16 filters x 16 cells
 * transposed in registers); its sums per filter (an example's in float, the examples' in
 * double) added to its task's bias gradient. */
BN_VINLINE void gather_gradient(const wg_run *r, int task, int i0, int cnt, float *o)
{
    const bn_conv_geom *g = r->g;
    size_t ow4 = (size_t)r->tile * r->tw, oh4 = (size_t)r->tile * r->th, kp = r->kp, plane = (size_t)g->oh * g->ow;
    double *sum = r->bias_parts + (size_t)task * r->K;
    zero_margins(o, (size_t)cnt, oh4, ow4, 0, (size_t)g->oh, 0, (size_t)g->ow, kp);
    for (int j = 0; j < cnt; j++) {
        size_t at = (size_t)(i0 + j) * r->K * plane;
        const float *src = r->dy + at, *y = r->relu_y ? r->relu_y + at : NULL;
        float *dst = o + (size_t)j * oh4 * ow4 * kp;
        for (int k0 = 0; k0 < r->K; k0 += LANES) {
            bn_vf total = bn_vsplat(0.0f);
            for (size_t q = 0; q < plane; q += LANES) {
                size_t q0 = block_start(q, plane), cells[LANES];
                cell_offsets(q0, (size_t)g->ow, ow4, cells);
                bn_vf v[LANES];
                for (int i = 0; i < LANES; i++) {
                    if (k0 + i >= r->K) {
                        v[i] = bn_vsplat(0.0f);
                        continue;
                    }
                    v[i] = bn_vload(src + (size_t)(k0 + i) * plane + q0);
                    if (y) v[i] = bn_vwhere_positive(bn_vload(y + (size_t)(k0 + i) * plane + q0), v[i]);
                }
                transpose16(v);
                for (int i = 0; i < LANES; i++) {
                    bn_vstore(dst + cells[i] * kp + k0, v[i]);
                    if (q0 + i >= q) total += v[i]; /* cells of an overlapping block counted once */
                }
            }
            for (int k = 0; k < LANES && k0 + k < r->K; k++) sum[k0 + k] += total[k];
        }
    }
}

/* A along one axis: 4 -> 6 (F(4x4, 3x3)) or 2 -> 6 (F(2x2, 5x5)), from `tile` vectors at y. */
BN_VINLINE void a_of(int tile, const bn_vf *y, bn_vf *o)
{
    if (tile == 4) a6(y[0], y[1], y[2], y[3], o);
    else a2(y[0], y[1], o);
}

/* Tiles [p0, p0 + count) of the output gradient carried in: dm[p - p0][xi][k]; rows
 * count..GROUP-1 zero. */
BN_VINLINE void gradient_transform(const wg_run *r, size_t p0, size_t count, const float *o, float *dm)
{
    const int tile = r->tile;
    size_t kp = r->kp, ow = (size_t)tile * r->tw, rs = ow * kp, ts = XI * kp;
    size_t at[GROUP];
    tile_offsets(r, p0, count, (size_t)tile * r->th, ow, at);
    for (size_t p = 0; p < count; p++) {
        const float *base = o + at[p] * kp;
        for (size_t k = 0; k < kp; k += LANES) {
            bn_vf t[6][TILE_MAX], q[6], col[TILE_MAX] = {bn_vsplat(0.0f)};
            for (int b = 0; b < tile; b++) {
                const float *d = base + b * kp + k;
                for (int a = 0; a < tile; a++) col[a] = bn_vload(d + a * rs);
                a_of(tile, col, q);
                for (int i = 0; i < 6; i++) t[i][b] = q[i];
            }
            for (int i = 0; i < 6; i++) {
                a_of(tile, t[i], q);
                for (int jj = 0; jj < 6; jj++) bn_vstore(dm + p * ts + (i * 6 + jj) * kp + k, q[jj]);
            }
        }
    }
    if (count < GROUP)
        memset(dm + count * ts, 0, (GROUP - count) * ts * sizeof *dm);
}

/* Tiles [p0, p0 + count) of dV carried back into the padded input gradient (channels
 * innermost), each tile's 6x6 added where its patch lies, tiles in order. */
BN_VINLINE void input_gradient(const wg_run *r, size_t p0, size_t count, const float *dv, float *din)
{
    size_t cp = r->cp, rs = r->wp * cp, xs = cp;
    size_t at[GROUP];
    tile_offsets(r, p0, count, r->hp, r->wp, at);
    for (size_t p = 0; p < count; p++) {
        float *base = din + at[p] * cp;
        for (size_t c = 0; c < cp; c += LANES) {
            bn_vf t[6][6], q[6];
            const float *src = dv + p * XI * cp + c;
            for (int j = 0; j < 6; j++) {
                b6(bn_vload(src + j * xs), bn_vload(src + (6 + j) * xs), bn_vload(src + (12 + j) * xs),
                   bn_vload(src + (18 + j) * xs), bn_vload(src + (24 + j) * xs), bn_vload(src + (30 + j) * xs), q);
                for (int a = 0; a < 6; a++) t[a][j] = q[a];
            }
            for (int a = 0; a < 6; a++) {
                b6(t[a][0], t[a][1], t[a][2], t[a][3], t[a][4], t[a][5], q);
                for (int b = 0; b < 6; b++) add_to(base + a * rs + b * cp + c, q[b]);
            }
        }
    }
}

/* The padded input gradient's cells inside the input into dx's planes: blocks of 16 cells of a
 * plane x 16 channels transposed in registers. */
BN_VINLINE void scatter_input_gradient(const wg_run *r, int i0, int cnt, const float *din)
{
    const bn_conv_geom *g = r->g;
    size_t plane = (size_t)g->h * g->w, cp = r->cp;
    for (int j = 0; j < cnt; j++) {
        float *dst = r->dx + (size_t)(i0 + j) * r->C * plane;
        const float *src = din + (((size_t)j * r->hp + g->pad) * r->wp + g->pad) * cp;
        for (size_t q = 0; q < plane; q += LANES) {
            size_t q0 = block_start(q, plane), at[LANES];
            cell_offsets(q0, (size_t)g->w, r->wp, at);
            for (int c0 = 0; c0 < r->C; c0 += LANES) {
                bn_vf v[LANES];
                for (int i = 0; i < LANES; i++) v[i] = bn_vload(src + at[i] * cp + c0);
                transpose16(v);
                for (int c = 0; c < LANES && c0 + c < r->C; c++) bn_vstore(dst + (size_t)(c0 + c) * plane + q0, v[c]);
            }
        }
    }
}

/* A chunk: its input and output gradient in padded planes; then per block of WGROUP tiles, both
 * carried in a group at a time, the weight gradient's 36 products over the block added to its
 * task's (written, not added, for the task's first block: `first`), and per group the input
 * gradient's 36 products carried back and added up; then the input gradient into dx. */
BN_VINLINE void backward_chunk(const wg_run *r, int chunk, int task, int worker, int first)
{
    int i0, cnt;
    chunk_span(r, chunk, &i0, &cnt);
    float *in = bn_cpu_scratch(0, worker), *v = in + r->in_f, *dm = v + r->v_f, *o = dm + r->m_f, *din = o + r->o_f;
    size_t cp = r->cp, kp = r->kp, tiles = (size_t)cnt * r->tiles;
    float *part = r->parts + (size_t)task * XI * cp * kp;
    gather_input(r, i0, cnt, in);
    gather_gradient(r, task, i0, cnt, o);
    if (r->dx) memset(din, 0, r->in_f * sizeof *din);
    for (size_t q0 = 0; q0 < tiles; q0 += WGROUP) {
        const size_t block = tiles - q0 < WGROUP ? tiles - q0 : WGROUP;
        /* The block's tiles carried in, GROUP at a time (a last short group's rows past it zero). */
        for (size_t p0 = q0; p0 < q0 + block; p0 += GROUP) {
            size_t count = q0 + block - p0 < GROUP ? q0 + block - p0 : GROUP;
            input_transform(r, p0, count, in, v + (p0 - q0) * XI * cp);
            gradient_transform(r, p0, count, o, dm + (p0 - q0) * XI * kp);
        }
        for (int xi = 0; xi < XI; xi++)
            gemm_tn(first && q0 == 0, block, cp, kp, v + xi * cp, XI * cp, dm + xi * kp, XI * kp,
                    part + xi * cp * kp, kp);
        if (!r->dx) continue;
        /* dV = dM U^T over V's buffer (V is spent), then carried back, a group at a time. */
        for (size_t p0 = q0; p0 < q0 + block; p0 += GROUP) {
            size_t count = q0 + block - p0 < GROUP ? q0 + block - p0 : GROUP;
            float *vg = v + (p0 - q0) * XI * cp;
            const float *dmg = dm + (p0 - q0) * XI * kp;
            for (int xi = 0; xi < XI; xi++)
                gemm_nn(round_up(count, ROWS), r->K, cp, dmg + xi * kp, XI * kp, r->ut + xi * kp * cp, cp, vg + xi * cp,
                        XI * cp);
            input_gradient(r, p0, count, vg, din);
        }
    }
    if (r->dx) scatter_input_gradient(r, i0, cnt, din);
}

/* A task: its chunks in order, their weight and bias gradients summed in its own products (written by its first). */
BN_CPU_CLONES static void backward_task(void *p, int task, int worker)
{
    const wg_run *r = p;
    double *sum = r->bias_parts + (size_t)task * r->K;
    for (int k = 0; k < r->K; k++) sum[k] = 0.0;
    const int first = task * r->group, end = first + r->group < r->chunks ? first + r->group : r->chunks;
    for (int chunk = first; chunk < end; chunk++) backward_chunk(r, chunk, task, worker, chunk == first);
}

/* Shared buffers: the weights carried in, both ways; the chunks' weight-gradient products; the
 * chunks' bias gradients (doubles). */
enum { SHARED_U, SHARED_UT, SHARED_PARTS, SHARED_BIAS };

static bn_status prepare(wg_run *r, const float *w)
{
    BN_TRY(bn_cpu_scratch_reserve(0, r->slab));
    size_t weights = XI * r->cp * r->kp;
    float *u = bn_cpu_shared_scratch(SHARED_U, weights), *ut = u ? bn_cpu_shared_scratch(SHARED_UT, weights) : NULL;
    if (!ut) return bn_last_status();
    transform_weights(r, w, u, ut);
    r->u = u, r->ut = ut;
    return BN_OK;
}

bn_status bn_winograd_forward(const bn_conv_geom *g, int filters, int n, const float *x, const float *w,
                              const float *b, float *y, int relu, const float *const *addends, int num_addends)
{
    wg_run r = {0};
    plan(&r, g, filters, n);
    if (n == 0) return BN_OK;
    r.x = x, r.b = b, r.y = y, r.relu = relu, r.addends = addends, r.num_addends = num_addends;
    BN_TRY(prepare(&r, w));
    bn_parallel_run(r.chunks, forward_chunk, &r);
    return BN_OK;
}

typedef struct wg_sums {
    const wg_run *r;
    float *dw;
} wg_sums;

/* The tasks' products summed into the first task's, in task order, over [lo, hi). */
static void sum_parts(void *p, size_t lo, size_t hi)
{
    const wg_sums *s = p;
    const wg_run *r = s->r;
    size_t weights = XI * r->cp * r->kp;
    float *restrict first = r->parts;
    for (int ch = 1; ch < r->tasks; ch++) {
        const float *restrict part = r->parts + ch * weights;
        for (size_t e = lo; e < hi; e++) first[e] += part[e];
    }
}

/* dw += G^T (the products' sum) G, for filter/channel pairs [lo, hi). */
static void weight_grad(void *p, size_t lo, size_t hi)
{
    const wg_sums *s = p;
    const wg_run *r = s->r;
    size_t cp = r->cp, kp = r->kp;
    const int ks = r->ks;
    for (size_t e = lo; e < hi; e++) {
        size_t k = e / (size_t)r->C, c = e % (size_t)r->C;
        double sum[XI], t[5][6], o[5];
        for (int xi = 0; xi < XI; xi++) sum[xi] = r->parts[(xi * cp + c) * kp + k];
        for (int j = 0; j < 6; j++) {
            gt6(ks, sum + j, 6, o);
            for (int a = 0; a < ks; a++) t[a][j] = o[a];
        }
        float *dst = s->dw + e * (size_t)(ks * ks);
        for (int a = 0; a < ks; a++) {
            gt6(ks, t[a], 1, o);
            for (int b = 0; b < ks; b++) dst[a * ks + b] += (float)o[b];
        }
    }
}

bn_status bn_winograd_backward(const bn_conv_geom *g, int filters, int n, const float *x, const float *w,
                               const float *dy, const float *relu_y, float *dx, float *dw, float *db)
{
    wg_run r = {0};
    plan(&r, g, filters, n);
    if (n == 0) return BN_OK;
    r.x = x, r.dy = dy, r.relu_y = relu_y, r.dx = dx;
    BN_TRY(prepare(&r, w));
    r.parts = bn_cpu_shared_scratch(SHARED_PARTS, (size_t)r.tasks * XI * r.cp * r.kp);
    /* Doubles, in a buffer of floats twice their count (realloc's alignment serves either). */
    float *bias = r.parts ? bn_cpu_shared_scratch(SHARED_BIAS, 2 * (size_t)filters * r.tasks) : NULL;
    if (!bias) return bn_last_status();
    r.bias_parts = (double *)bias;
    bn_parallel_run(r.tasks, backward_task, &r);
    wg_sums s = {&r, dw};
    bn_parallel_ranges(XI * r.cp * r.kp, 1024, sum_parts, &s);
    bn_parallel_ranges((size_t)filters * g->c, 64, weight_grad, &s);
    bn_conv2d_cpu_bias_grad(r.bias_parts, r.tasks, filters, db);
    return BN_OK;
}
