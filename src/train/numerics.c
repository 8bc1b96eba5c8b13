#include "numerics.h"

#include <math.h>

/* The host copy of a blob the training steps write on the device. A replayed CUDA graph
 * writes the device copy without telling the blob, so the device copy is marked the newest
 * again after the read: a later read then fetches fresh values instead of these. */
static const float *peek(bn_blob *b)
{
    const float *h = bn_blob_host_rd(b);
    if (h && bn_blob_state(b) == BN_SYNC_BOTH) bn_blob_mark_device_written(b);
    return h;
}

/* The index of the first non-finite element of b and that element in *v; -1 when there is
 * none (or b is NULL), -2 when b cannot be read. */
static long first_bad(bn_blob *b, float *v)
{
    if (!b) return -1;
    const float *x = peek(b);
    if (!x) return -2;
    size_t n = bn_blob_count(b);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) {
            *v = x[i];
            return (long)i;
        }
    return -1;
}

static int describe(bn_blob *b, const bn_layer *l, const char *what, char *buf, size_t cap)
{
    float v = 0;
    long i = first_bad(b, &v);
    if (i == -1) return 0;
    if (i == -2)
        snprintf(buf, cap, "layer %s (%s) %s could not be read: %s", l->name, l->ops->type, what, bn_last_error());
    else
        snprintf(buf, cap, "layer %s (%s) %s, element %ld: %s", l->name, l->ops->type, what, i,
                 isnan(v) ? "NaN" : v > 0 ? "+infinity" : "-infinity");
    return 1;
}

int bn_numerics_locate(bn_net *net, char *buf, size_t cap)
{
    char what[64];
    for (int i = 0; i < net->num_layers; i++) {
        bn_layer *l = net->layers[i];
        for (int k = 0; k < l->num_params; k++) {
            snprintf(what, sizeof what, "parameter %s", l->params[k].name);
            if (describe(l->params[k].value, l, what, buf, cap)) return 1;
        }
    }
    /* Blobs that fused kernels read past hold nothing of this step. */
    for (int i = 0; i < net->num_layers; i++)
        if (!bn_net_blob_unwritten(net, i, 0) && describe(net->layers[i]->out, net->layers[i], "output", buf, cap))
            return 1;
    for (int i = net->num_layers - 1; i >= 0; i--) {
        bn_layer *l = net->layers[i];
        if (!bn_net_blob_unwritten(net, i, 1) && describe(l->out_grad, l, "output gradient", buf, cap)) return 1;
        for (int k = 0; k < l->num_params; k++) {
            snprintf(what, sizeof what, "gradient of %s", l->params[k].name);
            if (describe(l->params[k].grad, l, what, buf, cap)) return 1;
        }
    }
    return 0;
}

/* Adds the absolute values of b into *sum and its element count into *count. */
static bn_status add_abs(bn_blob *b, double *sum, double *count)
{
    const float *v = peek(b);
    if (!v) return bn_last_status();
    size_t n = bn_blob_count(b);
    for (size_t i = 0; i < n; i++) *sum += fabs(v[i]);
    *count += (double)n;
    return BN_OK;
}

/* "%10.3e" of the mean, or "-" under it when there was nothing to average. */
static void cell(FILE *out, double sum, double count)
{
    if (count > 0) fprintf(out, "  %10.3e", sum / count);
    else fprintf(out, "  %10s", "-");
}

bn_status bn_numerics_print(bn_net *net, FILE *out, long step)
{
    fprintf(out, "numerics after step %ld (mean |x|):\n  %-16s %-12s  %10s  %10s  %10s  %10s\n", step, "layer", "type",
            "output", "out grad", "params", "param grad");
    for (int i = 0; i < net->num_layers; i++) {
        bn_layer *l = net->layers[i];
        double s[4] = {0}, n[4] = {0};
        /* "-" for blobs that fused kernels read past (they hold nothing of this step). */
        if (!bn_net_blob_unwritten(net, i, 0)) BN_TRY(add_abs(l->out, &s[0], &n[0]));
        if (l->out_grad && !bn_net_blob_unwritten(net, i, 1)) BN_TRY(add_abs(l->out_grad, &s[1], &n[1]));
        for (int k = 0; k < l->num_params; k++) {
            BN_TRY(add_abs(l->params[k].value, &s[2], &n[2]));
            BN_TRY(add_abs(l->params[k].grad, &s[3], &n[3]));
        }
        fprintf(out, "  %-16s %-12s", l->name, l->ops->type);
        for (int c = 0; c < 4; c++) cell(out, s[c], n[c]);
        fputc('\n', out);
    }
    fflush(out);
    return BN_OK;
}
