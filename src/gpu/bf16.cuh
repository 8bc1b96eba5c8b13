/* bf16.cuh - BF16 in kernels: loads widen to float, stores round to nearest even, and the
 * typed device pointers of a BF16 blob. All arithmetic happens in float. */
#ifndef BN_BF16_CUH
#define BN_BF16_CUH

#include <cuda_bf16.h>

#include "core/blob.h"

static __device__ __forceinline__ float bn_ld_bf16(const __nv_bfloat16 *p)
{
    return __bfloat162float(*p);
}

static __device__ __forceinline__ void bn_st_bf16(__nv_bfloat16 *p, float v)
{
    *p = __float2bfloat16_rn(v);
}

/* A kernel written once for both precisions loads and stores its activations with these. */
static __device__ __forceinline__ float bn_ld(const float *p) { return *p; }
static __device__ __forceinline__ float bn_ld(const __nv_bfloat16 *p) { return bn_ld_bf16(p); }
static __device__ __forceinline__ void bn_st(float *p, float v) { *p = v; }
static __device__ __forceinline__ void bn_st(__nv_bfloat16 *p, float v) { bn_st_bf16(p, v); }

/* v as a store to an element of the pointer's type and a load back would leave it. */
static __device__ __forceinline__ float bn_rounded(const float *, float v) { return v; }
static __device__ __forceinline__ float bn_rounded(const __nv_bfloat16 *, float v)
{
    return __bfloat162float(__float2bfloat16_rn(v));
}

/* 16 bytes of activations at once (8 BF16 or 4 FP32 values), widened to float; p must be
 * 16-byte aligned (bn_aligned16). Elementwise kernels take these where every pointer is. */
template <typename T> struct bn_pack {
    static const int N = 16 / (int)sizeof(T);
};

template <typename T> static __device__ __forceinline__ void bn_ld_pack(const T *p, float *v)
{
    const uint4 raw = *(const uint4 *)p;
    const T *e = (const T *)&raw;
#pragma unroll
    for (int i = 0; i < bn_pack<T>::N; i++) v[i] = bn_ld(e + i);
}

template <typename T> static __device__ __forceinline__ void bn_st_pack(T *p, const float *v)
{
    uint4 raw;
    T *e = (T *)&raw;
#pragma unroll
    for (int i = 0; i < bn_pack<T>::N; i++) bn_st(e + i, v[i]);
    *(uint4 *)p = raw;
}

/* N values at p widened to float: one (N = 1, any alignment) or a 16-byte pack (N =
 * bn_pack<T>::N, p 16-byte aligned); kernels written for both take N as a parameter. */
template <typename T, int N> static __device__ __forceinline__ void bn_ld_n(const T *p, float *v)
{
    if (N == 1) v[0] = bn_ld(p);
    else bn_ld_pack(p, v);
}

template <typename T, int N> static __device__ __forceinline__ void bn_st_n(T *p, const float *v)
{
    if (N == 1) bn_st(p, v[0]);
    else bn_st_pack(p, v);
}

/* A layer's N outputs v at y[at] (unless y is NULL: a layer whose output only the fused ReLU
 * reads, and which does that ReLU's backward pass too), and where relu_y is not NULL a fused
 * ReLU's, max(v, 0), at relu_y[relu_at] (at itself where the ReLU's output is packed like y;
 * further on where it is a slice of a channel join's output, blob.h); v is clamped in place. */
template <typename T, int N>
static __device__ __forceinline__ void bn_st_n_relu(T *y, T *relu_y, size_t at, size_t relu_at, float *v)
{
    if (y) bn_st_n<T, N>(&y[at], v);
    if (!relu_y) return;
#pragma unroll
    for (int k = 0; k < N; k++) v[k] = v[k] > 0.0f ? v[k] : 0.0f;
    bn_st_n<T, N>(&relu_y[relu_at], v);
}

/* Whether an elementwise kernel over `total` elements may index them in 32 bits (unsigned
 * divisions, several times cheaper than 64-bit ones): below 2^31, so that an index plus a
 * grid's stride cannot wrap. */
static inline bool bn_index_fits_32(size_t total)
{
    return total < ((size_t)1 << 31);
}

static inline bool bn_aligned16(const void *p)
{
    return ((unsigned long long)p & 15u) == 0;
}

/* Layer code: the BF16 device data of a blob as __nv_bfloat16, or return the recorded error. */
#define BN_DEV16_RD(var, blob)                                                         \
    const __nv_bfloat16 *var = (const __nv_bfloat16 *)bn_blob_dev16_rd(blob);          \
    if (!var) return bn_last_status()
#define BN_DEV16_WR(var, blob)                                                         \
    __nv_bfloat16 *var = (__nv_bfloat16 *)bn_blob_dev16_wr(blob);                      \
    if (!var) return bn_last_status()

#endif
