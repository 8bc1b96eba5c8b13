/* add.cu - the add layer on the GPU: one kernel per pass over every element, the inputs (or
 * input gradients) passed by value. Each element is summed with round-to-nearest operations that
 * the compiler may not fuse (__fmul_rn, __fadd_rn), in input order, as the CPU path sums it. */
#include "add.h"
#include "gpu/cuda_check.h"

typedef struct add_args {
    const float *x[BN_MAX_INPUTS];
    float *dx[BN_MAX_INPUTS];
    float coeff[BN_MAX_INPUTS];
    int inputs;
    int scaled; /* 0: every coefficient is 1, no multiply */
} add_args;

static __global__ void add_forward(add_args a, float *__restrict__ y, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float acc = a.scaled ? __fmul_rn(a.coeff[0], a.x[0][i]) : a.x[0][i];
        for (int j = 1; j < a.inputs; j++) acc = __fadd_rn(acc, a.scaled ? __fmul_rn(a.coeff[j], a.x[j][i]) : a.x[j][i]);
        y[i] = acc;
    }
}

static __global__ void add_backward(add_args a, const float *__restrict__ dy, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float g = dy[i];
        for (int j = 0; j < a.inputs; j++)
            if (a.dx[j]) a.dx[j][i] = a.scaled ? __fmul_rn(a.coeff[j], g) : g;
    }
}

static int grid_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return (int)(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

static add_args args_of(const bn_layer *l)
{
    const add_priv *p = (const add_priv *)l->priv;
    add_args a = {};
    a.inputs = l->num_inputs;
    a.scaled = p->num_coeffs != 0;
    for (int j = 0; j < l->num_inputs; j++) a.coeff[j] = bn_add_coeff(p, j);
    return a;
}

extern "C" bn_status bn_add_forward_gpu(bn_layer *l, const bn_pass *p)
{
    add_args a = args_of(l);
    for (int j = 0; j < l->num_inputs; j++) {
        BN_DEV_RD(x, l->inputs[j]);
        a.x[j] = x;
    }
    BN_DEV_WR(y, l->out);
    size_t n = bn_blob_count(l->out);
    add_forward<<<grid_for(n), 256, 0, (cudaStream_t)p->ctx->stream>>>(a, y, n);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_add_backward_gpu(bn_layer *l, const bn_pass *p)
{
    add_args a = args_of(l);
    int any = 0;
    for (int j = 0; j < l->num_inputs; j++) {
        if (!l->input_grads[j]) continue;
        BN_DEV_WR(dx, l->input_grads[j]);
        a.dx[j] = dx;
        any = 1;
    }
    if (!any) return BN_OK;
    BN_DEV_RD(dy, l->out_grad);
    size_t n = bn_blob_count(l->out);
    add_backward<<<grid_for(n), 256, 0, (cudaStream_t)p->ctx->stream>>>(a, dy, n);
    BN_CUDA_LAUNCH();
    return BN_OK;
}
