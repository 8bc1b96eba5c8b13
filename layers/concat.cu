/* concat.cu - the concat layer on the GPU: each input's block of channels is a strided 2-D copy
 * (one row per example) into or out of the output, queued on the context stream, which a
 * captured CUDA graph keeps as copy nodes; an input that is a slice of the output (written in
 * place by its producer, fusion.c) is not copied either way. Under --precision bf16 the blobs
 * hold 2-byte elements and the same copies move them unchanged. */
#include <cuda_bf16.h>

#include "concat.h"
#include "gpu/cuda_check.h"

/* The layer's blobs' device data, for reading (forward) or writing (backward), whatever
 * precision they hold; NULL on failure with the error recorded. */
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
    size_t plane = (size_t)l->out->h * l->out->w, example = l->out->c * plane * elem, offset = 0;
    size_t rows = (size_t)l->out->n;
    const void *dy = NULL;
    void *y = NULL;
    if (backward) {
        if (!(dy = device_rd(l->out_grad))) return bn_last_status();
    } else if (!(y = device_wr(l->out))) {
        return bn_last_status();
    }
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
