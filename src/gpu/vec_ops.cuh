/* vec_ops.cuh - V consecutive floats as one value (V = 1, 2 or 4: float, float2, float4), for
 * kernels that read and write rows through the widest loads the pointers' alignment allows, and
 * the few operations they need on them, each the same fmaf chain whatever V, so that results do
 * not depend on the width (the dense layer's few-outputs kernels, softmax_ce's dense head). */
#ifndef BN_VEC_OPS_CUH
#define BN_VEC_OPS_CUH

/* V consecutive floats (V = 1, 2 or 4, the pointer aligned to 4 V bytes). */
template <int V> struct vec_of;
template <> struct vec_of<1> { typedef float t; };
template <> struct vec_of<2> { typedef float2 t; };
template <> struct vec_of<4> { typedef float4 t; };

/* acc + the dot product of a and b, the lanes in order. */
static __device__ __forceinline__ float dot_v(float a, float b, float acc) { return fmaf(a, b, acc); }
static __device__ __forceinline__ float dot_v(float2 a, float2 b, float acc)
{
    return fmaf(a.x, b.x, fmaf(a.y, b.y, acc));
}
static __device__ __forceinline__ float dot_v(float4 a, float4 b, float acc)
{
    return fmaf(a.x, b.x, fmaf(a.y, b.y, fmaf(a.z, b.z, fmaf(a.w, b.w, acc))));
}

/* y += s * x, lane by lane. */
static __device__ __forceinline__ void axpy_v(float s, float x, float &y) { y = fmaf(s, x, y); }
static __device__ __forceinline__ void axpy_v(float s, float2 x, float2 &y)
{
    y.x = fmaf(s, x.x, y.x), y.y = fmaf(s, x.y, y.y);
}
static __device__ __forceinline__ void axpy_v(float s, float4 x, float4 &y)
{
    y.x = fmaf(s, x.x, y.x), y.y = fmaf(s, x.y, y.y), y.z = fmaf(s, x.z, y.z), y.w = fmaf(s, x.w, y.w);
}

/* a + b, lane by lane. */
static __device__ __forceinline__ float add_v(float a, float b) { return a + b; }
static __device__ __forceinline__ float4 add_v(float4 a, float4 b)
{
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

/* A ReLU's rules (activation.c), so that a fused one gives the CPU's bits: its output, and its
 * input gradient v where its output m is above 0 and 0 elsewhere. */
static __device__ __forceinline__ float relu_of(float v) { return v > 0.0f ? v : 0.0f; }
static __device__ __forceinline__ float masked(float v, float m) { return m > 0.0f ? v : 0.0f; }
static __device__ __forceinline__ float2 masked(float2 v, float2 m)
{
    return make_float2(masked(v.x, m.x), masked(v.y, m.y));
}
static __device__ __forceinline__ float4 masked(float4 v, float4 m)
{
    return make_float4(masked(v.x, m.x), masked(v.y, m.y), masked(v.z, m.z), masked(v.w, m.w));
}

#endif
