/* concat.cu - the concat layer on the GPU: each input's block of channels is a strided 2-D copy
 * (one row per example) into or out of the output, queued on the context stream, which a
 * captured CUDA graph keeps as copy nodes; an input that is a slice of the output (written in
 * place by its producer, fusion.c) is not copied either way, and the output may itself be a slice
 * of a later join's (its rows then that join's examples apart). Under --precision bf16 the blobs
 * hold 2-byte elements and the same copies move them unchanged. */
#include <cuda_bf16.h>

#include "concat.h"
#include "gpu/cuda_check.h"

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

static bn_status concat_copy(bn_layer *l, const bn_pass *p, int backward)
{
    cudaStream_t s = (cudaStream_t)p->ctx->stream;
    const size_t elem = bn_blob_is_bf16(l->out) ? sizeof(__nv_bfloat16) : sizeof(float);
    size_t plane = (size_t)l->out->h * l->out->w, stride = 0, offset = 0;
    size_t rows = (size_t)l->out->n;
    const void *dy = NULL;
    void *y = NULL;
    /* The output and its gradient at their stride: a slice of a later join's (fusion.c). */
    if (backward) {
        if (!(dy = bn_blob_dev_rows_rd(l->out_grad, &stride))) return bn_last_status();
    } else if (!(y = bn_blob_dev_rows_wr(l->out, &stride))) {
        return bn_last_status();
    }
    const size_t example = stride * elem;
    for (int j = 0; j < l->num_inputs; j++) {
        size_t block = (size_t)l->input_shapes[j].c * plane * elem;
        if (bn_concat_in_place(l, j)) {
            /* its producer wrote it there, and reads its gradient there */
        } else if (backward && l->input_grads[j]) {
            void *dx = device_wr(l->input_grads[j]);
            if (!dx) return bn_last_status();
            BN_CUDA(cudaMemcpy2DAsync(dx, block, (const char *)dy + offset, example, block, rows,
                                      cudaMemcpyDeviceToDevice, s));
        } else if (!backward) {
            const void *x = device_rd(l->inputs[j]);
            if (!x) return bn_last_status();
            BN_CUDA(cudaMemcpy2DAsync((char *)y + offset, example, x, block, block, rows, cudaMemcpyDeviceToDevice, s));
        }
        offset += block;
    }
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
