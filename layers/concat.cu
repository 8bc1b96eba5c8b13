/* concat.cu - the concat layer on the GPU: each input's block of channels is a strided 2-D copy
 * (one row per example) into or out of the output, queued on the context stream, which a
 * captured CUDA graph keeps as copy nodes. */
#include "concat.h"
#include "gpu/cuda_check.h"

static bn_status concat_copy(bn_layer *l, const bn_pass *p, int backward)
{
    cudaStream_t s = (cudaStream_t)p->ctx->stream;
    size_t plane = (size_t)l->out->h * l->out->w, example = l->out->c * plane * sizeof(float), offset = 0;
    size_t rows = (size_t)l->out->n;
    const float *dy = NULL;
    float *y = NULL;
    if (backward) {
        if (!(dy = bn_blob_dev_rd(l->out_grad))) return bn_last_status();
    } else if (!(y = bn_blob_dev_wr(l->out))) {
        return bn_last_status();
    }
    for (int j = 0; j < l->num_inputs; j++) {
        size_t block = (size_t)l->input_shapes[j].c * plane * sizeof(float);
        if (backward && l->input_grads[j]) {
            BN_DEV_WR(dx, l->input_grads[j]);
            BN_CUDA(cudaMemcpy2DAsync(dx, block, (const char *)dy + offset, example, block, rows,
                                      cudaMemcpyDeviceToDevice, s));
        } else if (!backward) {
            BN_DEV_RD(x, l->inputs[j]);
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
