/* conv_stage.cuh - staging input planes in shared memory for blobnet's convolution kernels
 * (conv_rows.cu, conv_tensor.cu): each plane copied with its zero border, so that the kernels
 * read windows without bounds tests. Device code only. */
#ifndef BN_CONV_STAGE_CUH
#define BN_CONV_STAGE_CUH

#include <cuda_pipeline.h>

/* Copies `planes` consecutive hi x wi planes from src into shared memory as hp x wp planes, each
 * input value at (row + pad, column + pad), zeros everywhere else; planes from `valid` on are all
 * zeros (src is not read for them). vec: src is 16-byte aligned and wi and pad are multiples of
 * 4, so every 4-float piece of a staged row lies wholly inside the input or wholly outside. */
static __device__ void stage_planes(float *dst, const float *src, int planes, int valid, int hi, int wi, int pad,
                                    int hp, int wp, bool vec)
{
    const int wq = wp / 4, per_plane = hp * wq, total = planes * per_plane;
    for (int e = threadIdx.x; e < total; e += blockDim.x) {
        const int pl = e / per_plane, rem = e - pl * per_plane, yy = rem / wq, x0 = (rem - yy * wq) * 4;
        const int iy = yy - pad, ix = x0 - pad;
        float *d = dst + (pl * hp + yy) * wp + x0;
        const bool row_in = pl < valid && iy >= 0 && iy < hi;
        if (vec) {
            if (row_in && ix >= 0 && ix < wi)
                __pipeline_memcpy_async(d, src + ((size_t)pl * hi + iy) * wi + ix, 16);
            else
                *(float4 *)d = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            continue;
        }
#pragma unroll
        for (int q = 0; q < 4; q++) {
            if (row_in && ix + q >= 0 && ix + q < wi)
                __pipeline_memcpy_async(d + q, src + ((size_t)pl * hi + iy) * wi + ix + q, 4);
            else
                d[q] = 0.0f;
        }
    }
}

#endif
