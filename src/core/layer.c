#include "layer.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int bn_layer_add_param(bn_layer *l, const char *name, int n, int c, int h, int w,
                       bn_init init, int fan_in, int fan_out)
{
    if (l->num_params >= BN_MAX_PARAMS) {
        bn_layer_error(l, "declares more than %d parameters", BN_MAX_PARAMS);
        return -1;
    }
    if (n <= 0 || c <= 0 || h <= 0 || w <= 0) {
        bn_layer_error(l, "parameter %s has shape %dx%dx%dx%d", name, n, c, h, w);
        return -1;
    }
    int i = l->num_params++;
    bn_param *p = &l->params[i];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->init = init;
    p->fan_in = fan_in;
    p->fan_out = fan_out;
    p->lr_mult = 1.0f;
    p->decay_mult = 1.0f;
    /* The network creates the views once every layer has declared its parameters; the
     * declared shape waits in a detached blob header until then. */
    p->value = bn_blob_new(name, n, c, h, w);
    if (!p->value) {
        l->num_params--;
        return -1;
    }
    return i;
}

int bn_layer_add_buffer(bn_layer *l, const char *name, int n, int c, int h, int w, float init_value)
{
    if (l->num_buffers >= BN_MAX_BUFFERS) {
        bn_layer_error(l, "declares more than %d buffers", BN_MAX_BUFFERS);
        return -1;
    }
    if (n <= 0 || c <= 0 || h <= 0 || w <= 0) {
        bn_layer_error(l, "buffer %s has shape %dx%dx%dx%d", name, n, c, h, w);
        return -1;
    }
    for (int k = 0; k < l->num_params; k++)
        if (strcmp(l->params[k].name, name) == 0) {
            bn_layer_error(l, "buffer %s has the name of a parameter", name);
            return -1;
        }
    bn_buffer *b = &l->buffers[l->num_buffers];
    memset(b, 0, sizeof *b);
    snprintf(b->name, sizeof b->name, "%s", name);
    b->init_value = init_value;
    /* Like a parameter's: a detached header until the network carves the slab. */
    if (!(b->value = bn_blob_new(name, n, c, h, w))) return -1;
    return l->num_buffers++;
}

void bn_param_mark_bias(bn_layer *l, int i)
{
    bn_param *p = &l->params[i];
    p->is_bias = 1;
    p->lr_mult = l->bias_lr_mult;
    p->decay_mult = 0.0f;
}

bn_status bn_layer_error(const bn_layer *l, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return bn_error(BN_ERR_USAGE, "layer %s (%s): %s", l->name, l->ops->type, msg);
}

int bn_window_out(int in, int size, int stride, int pad)
{
    if (in <= 0 || size <= 0 || stride <= 0 || pad < 0) return 0;
    long span = (long)in + 2L * pad - size;
    if (span < 0) return 0;
    return (int)(span / stride + 1);
}

size_t bn_layer_param_count(const bn_layer *l)
{
    size_t n = 0;
    for (int k = 0; k < l->num_params; k++) n += bn_blob_count(l->params[k].value);
    return n;
}

unsigned bn_layer_beside_always(const bn_layer *l)
{
    (void)l;
    return BN_BESIDE_FORWARD | BN_BESIDE_BACKWARD;
}

typedef bn_status (*pass_fn)(bn_layer *, const bn_pass *);

/* The pass runs inside the range path <layer>/<pass>: a range named after the layer holding one
 * named "forward" or "backward". Nsight Compute reads '/' in a filter as nesting, so
 * `--nvtx-include "blobnet@conv1/forward/"` selects exactly these kernels. */
static bn_status run_pass(bn_layer *l, const bn_pass *p, pass_fn cpu, pass_fn gpu, const char *what, int fused)
{
    bn_nvtx_push(l->name, l->ops->kind);
    bn_nvtx_push(what, l->ops->kind);
    bn_status s;
    if (p->ctx && gpu && (l->gpu_fused & fused)) {
        s = BN_OK; /* a neighbour's kernels did it (bn_layer_ops.fuse_gpu) */
    } else if (!p->ctx && l->cpu_fused) {
        s = BN_OK; /* its producer's CPU passes did it (bn_layer.cpu_relu) */
    } else if (p->ctx && gpu) {
        s = gpu(l, p);
    } else {
        if (p->ctx && !l->fallback_warned) {
            fprintf(stderr, "blobnet: warning: layer %s (%s) has no GPU code; it runs on the CPU\n",
                    l->name, l->ops->type);
            l->fallback_warned = 1;
        }
        s = cpu ? cpu(l, p) : bn_layer_error(l, "has no %s function", what);
    }
    bn_nvtx_pop();
    bn_nvtx_pop();
    return s;
}

bn_status bn_layer_forward(bn_layer *l, const bn_pass *p)
{
    return run_pass(l, p, l->ops->forward_cpu, l->ops->forward_gpu, "forward", BN_FUSED_FORWARD);
}

bn_status bn_layer_backward(bn_layer *l, const bn_pass *p)
{
    return run_pass(l, p, l->ops->backward_cpu, l->ops->backward_gpu, "backward", BN_FUSED_BACKWARD);
}
