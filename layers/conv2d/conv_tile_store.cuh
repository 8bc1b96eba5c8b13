/* conv_tile_store.cuh - the output tile of blobnet's tensor-core convolution kernels
 * (conv_igemm.cu, conv_halo.cu) stored a row at a time.
 *
 * A block's BM x BN tile of sums lies in m16n8 fragments: lane (gq, tq) of a warp holds rows gq
 * and gq + 8 at columns 2 tq and 2 tq + 1 of each product. Stored from there, a warp's store
 * reaches 8 rows at 4 columns each, and at the suite's sizes the forward and data passes' stores
 * took about as long as their products (docs/performance.md, version 53). So the tile goes
 * through shared memory first, and each warp then stores whole rows of it: 32 lanes, 32
 * consecutive columns, which lie next to each other in the output within an image. A tile whose
 * summed index several blocks share is added up first (split_tile_sum). Device code only. */
#ifndef BN_CONV_TILE_STORE_CUH
#define BN_CONV_TILE_STORE_CUH

#include "gpu/last_arrival.cuh"
#include "gpu/vec_ops.cuh"

/* Floats from one row of a staged tile of BN columns to the next: rows 4 apart then fall in
 * other banks. */
static __host__ __device__ constexpr int tile_pitch(int bn)
{
    return bn + 8;
}

/* Puts the block's BM x BN accumulators into shared memory at tile (tile_pitch(BN) floats a
 * row), between two barriers: the first lets every warp finish with what the tile overwrites,
 * the second makes the whole tile visible. The warps lie WM along the rows and WN along the
 * columns, each an MT x NTL grid of m16n8 products. */
template <int BM, int BN, int WM, int WN, int MT, int NTL>
static __device__ __forceinline__ void tile_to_shared(float *tile, const float (&acc)[MT][NTL][4], int wm, int wn,
                                                      int gq, int tq)
{
    constexpr int CP = tile_pitch(BN);
    __syncthreads();
#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
        for (int ni = 0; ni < NTL; ni++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int r = wm * (BM / WM) + mi * 16 + gq + h * 8, c = wn * (BN / WN) + ni * 8 + 2 * tq;
                *(float2 *)(tile + r * CP + c) = make_float2(acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
            }
    __syncthreads();
}

/* Stores the staged tile's rows row0 + r below m_end. Warp `warp` of WARPS takes rows warp +
 * WARPS u, its lane `lane` columns lane + 32 k (k < CK), whose places the caller worked out once
 * (the same in every row): column k of row m goes to out[yoff[k] + m q_count] (yoff[k] < 0: no
 * such column) and,
 * with a fused ReLU (relu_out not NULL, conv_relu.h), to relu_out[roff[k] + m q_count] as well:
 * the ReLU's output, max(v, 0), or with MASKED its input gradient, v where relu_mask at the
 * output's place is above 0. v is the staged sum plus bias[m] where bias is not NULL. The rows'
 * biases and masks are all loaded before the first store, so that their latencies overlap (a mask
 * loaded row by row waited for the stores before it). */
template <int BM, int BN, int WARPS, int CK, bool MASKED>
static __device__ __forceinline__ void store_tile_rows(const float *tile, int warp, int lane, int row0, int m_end,
                                                       long long q_count, const long long (&yoff)[CK],
                                                       const long long (&roff)[CK],
                                                       const float *bias, float *out, float *relu_out,
                                                       const float *relu_mask)
{
    constexpr int CP = tile_pitch(BN), MR = BM / WARPS;
    static_assert(BM % WARPS == 0, "every warp stores as many rows");
    float b[MR], mask[MR][CK];
    const bool masking = MASKED && relu_out;
#pragma unroll
    for (int u = 0; u < MR; u++) {
        const int m = row0 + warp + WARPS * u;
        b[u] = bias && m < m_end ? __ldg(bias + m) : 0.0f;
#pragma unroll
        for (int k = 0; k < CK; k++)
            mask[u][k] = masking && m < m_end && yoff[k] >= 0 ? __ldg(relu_mask + yoff[k] + m * q_count) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < MR; u++) {
        const int r = warp + WARPS * u, m = row0 + r;
        if (m >= m_end) break;
        const long long mq = m * q_count;
#pragma unroll
        for (int k = 0; k < CK; k++) {
            if (yoff[k] < 0) continue;
            const float v = tile[r * CP + lane + 32 * k] + b[u];
            out[yoff[k] + mq] = v;
            if (relu_out) relu_out[roff[k] + mq] = MASKED ? masked(v, mask[u][k]) : relu_of(v);
        }
    }
}

/* Tile `tile` shared among `splits` blocks along its summed index, this one number z: its NT
 * threads' accumulators go to its slot of the partial sums (BM x BN floats at part + (tile slots
 * + z) BM BN, element ((mi NTL + ni) 4 + e) NT + tid holding acc[mi][ni][e]; `slots` at least
 * `splits`) and its arrival is counted at counters[tile]. Returns false in every block but the
 * tile's last to arrive, which gets the sum of every slot in split order in acc (its own from
 * registers), so that the result depends on the split, never on timing; the counter is back at
 * zero after it. */
template <int MT, int NTL, int NT>
static __device__ bool split_tile_sum(float (&acc)[MT][NTL][4], float *part, unsigned *counters, unsigned tile,
                                      unsigned slots, unsigned splits, unsigned z, int tid)
{
    constexpr int SLOT = MT * NTL * 4 * NT;
    float *mine = part + ((size_t)tile * slots + z) * SLOT;
#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
        for (int ni = 0; ni < NTL; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) mine[((mi * NTL + ni) * 4 + e) * NT + tid] = acc[mi][ni][e];
    if (!bn_last_arrival(&counters[tile], splits)) return false;
    float sum[MT][NTL][4] = {};
    for (unsigned q = 0; q < splits; q++) {
        const float *slot = part + ((size_t)tile * slots + q) * SLOT;
#pragma unroll
        for (int mi = 0; mi < MT; mi++)
#pragma unroll
            for (int ni = 0; ni < NTL; ni++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float *at = slot + ((mi * NTL + ni) * 4 + e) * NT + tid;
                    sum[mi][ni][e] += q == z ? acc[mi][ni][e] : __ldcg(at);
                }
    }
#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
        for (int ni = 0; ni < NTL; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mi][ni][e] = sum[mi][ni][e];
    return true;
}

#endif
