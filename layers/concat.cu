/* concat.cu - the concat layer on the GPU: each input's block of channels is copied (one row per
 * example) into or out of the output, all of a pass's blocks by one kernel on the context
 * stream, in 16-byte units where every address and length allows. An input that is a slice of
 * the output (written in place by its producer, fusion.c) is not copied either way, and the
 * output may itself be a slice of a later join's (its rows then that join's examples apart).
 * Under --precision bf16 the blobs hold 2-byte elements and the same copies move them unchanged. */
#include <cuda_bf16.h>
#include <stdint.h>

#include "concat.h"
#include "gpu/code_anchor.cuh"
#include "gpu/cuda_check.h"
#include "gpu/grid_stride.h"
#include "gpu/pdl.cuh"

/* An input's (forward) or input gradient's (backward) device data, whatever precision it holds;
 * NULL on failure with the error recorded. */
static const void *device_rd(bn_blob *b)
{
    return bn_blob_is_bf16(b) ? bn_blob_dev16_rd(b) : (const void *)bn_blob_dev_rd(b);
}

static void *device_wr(bn_blob *b)
{
    return bn_blob_is_bf16(b) ? bn_blob_dev16_wr(b) : (void *)bn_blob_dev_wr(b);
}

/* The blocks one pass copies: for each input that is not in place, `units` units of every example
 * from src to dst, the examples src_step and dst_step units apart (one side the input's or its
 * gradient's, the other the output's or its gradient's at the input's channels). */
typedef struct concat_blocks {
    int count;
    unsigned units[BN_MAX_INPUTS], first[BN_MAX_INPUTS + 1]; /* first: the pass's units before block k */
    size_t src_step[BN_MAX_INPUTS], dst_step[BN_MAX_INPUTS];
    const char *src[BN_MAX_INPUTS];
    char *dst[BN_MAX_INPUTS];
} concat_blocks;

/* Every block's units in one launch, each thread a unit (U: 16, 4 or 2 bytes) at a time: the
 * block whose range holds it, then its example and place in the example (32-bit divisions). */
template <typename U>
static __global__ void concat_blocks_kernel(concat_blocks b)
{
    bn_early_entry(); /* pdl.cuh */
    const unsigned total = b.first[b.count];
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int k = 0;
        while (i >= b.first[k + 1]) k++;
        const unsigned at = i - b.first[k], row = at / b.units[k], col = at - row * b.units[k];
        const U *src = (const U *)b.src[k] + (size_t)row * b.src_step[k] + col;
        U *dst = (U *)b.dst[k] + (size_t)row * b.dst_step[k] + col;
        *dst = *src;
    }
}

/* The widest unit of 16, 4 and 2 bytes that every pointer, length and pitch of b is a multiple of. */
static int unit_bytes(const concat_blocks &b, const size_t *bytes, const size_t *src_pitch, const size_t *dst_pitch)
{
    static const int widths[2] = {16, 4};
    for (int t = 0; t < 2; t++) {
        const int u = widths[t];
        bool all = true;
        for (int k = 0; k < b.count && all; k++)
            all = (uintptr_t)b.src[k] % u == 0 && (uintptr_t)b.dst[k] % u == 0 && bytes[k] % u == 0 &&
                  src_pitch[k] % u == 0 && dst_pitch[k] % u == 0;
        if (all) return u;
    }
    return 2;
}

static bn_status concat_copy(bn_layer *l, const bn_pass *p, int backward)
{
    cudaStream_t s = (cudaStream_t)p->ctx->stream;
    const size_t elem = bn_blob_is_bf16(l->out) ? sizeof(__nv_bfloat16) : sizeof(float);
    size_t plane = (size_t)l->out->h * l->out->w, stride = 0, offset = 0;
    const size_t rows = (size_t)l->out->n;
    const void *dy = NULL;
    void *y = NULL;
    /* The output and its gradient at their stride: a slice of a later join's (fusion.c). */
    if (backward) {
        if (!(dy = bn_blob_dev_rows_rd(l->out_grad, &stride))) return bn_last_status();
    } else if (!(y = bn_blob_dev_rows_wr(l->out, &stride))) {
        return bn_last_status();
    }
    const size_t example = stride * elem;
    concat_blocks b = {};
    size_t bytes[BN_MAX_INPUTS], src_pitch[BN_MAX_INPUTS], dst_pitch[BN_MAX_INPUTS];
    for (int j = 0; j < l->num_inputs; j++) {
        const size_t block = (size_t)l->input_shapes[j].c * plane * elem;
        const int k = b.count;
        if (bn_concat_in_place(l, j)) {
            /* its producer wrote it there, and reads its gradient there */
        } else if (backward && l->input_grads[j]) {
            void *dx = device_wr(l->input_grads[j]);
            if (!dx) return bn_last_status();
            b.src[k] = (const char *)dy + offset, b.dst[k] = (char *)dx;
            src_pitch[k] = example, dst_pitch[k] = block, bytes[k] = block, b.count++;
        } else if (!backward) {
            const void *x = device_rd(l->inputs[j]);
            if (!x) return bn_last_status();
            b.src[k] = (const char *)x, b.dst[k] = (char *)y + offset;
            src_pitch[k] = block, dst_pitch[k] = example, bytes[k] = block, b.count++;
        }
        offset += block;
    }
    if (!b.count) return BN_OK;
    const int u = unit_bytes(b, bytes, src_pitch, dst_pitch);
    size_t total = 0;
    for (int k = 0; k < b.count; k++) {
        b.units[k] = (unsigned)(bytes[k] / u);
        b.src_step[k] = src_pitch[k] / u, b.dst_step[k] = dst_pitch[k] / u;
        b.first[k] = (unsigned)total;
        total += rows * b.units[k];
    }
    if (total >= 0x80000000u)
        return bn_error(BN_ERR_DEVICE, "layer %s: a join of %zu %d-byte units is too large to copy", l->name, total, u);
    b.first[b.count] = (unsigned)total;
    const int grid = bn_grid_stride_blocks(total);
    if (u == 16) bn_launch_early(concat_blocks_kernel<uint4>, grid, 256, 0, s, b);
    else if (u == 4) bn_launch_early(concat_blocks_kernel<unsigned>, grid, 256, 0, s, b);
    else bn_launch_early(concat_blocks_kernel<unsigned short>, grid, 256, 0, s, b);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_concat_forward_gpu(bn_layer *l, const bn_pass *p)
{
    return concat_copy(l, p, 0);
}

extern "C" bn_status bn_concat_backward_gpu(bn_layer *l, const bn_pass *p)
{
    return concat_copy(l, p, 1);
}

BN_CODE_ANCHOR(concat, concat_blocks_kernel<uint4>) /* code_load.cu */
