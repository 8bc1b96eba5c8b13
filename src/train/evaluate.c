#include "evaluate.h"

#include <string.h>

#include "core/nvtx.h"
#include "loader.h"

int bn_output_size(bn_net *net)
{
    const bn_blob *out = bn_net_output(net);
    return out->c * out->h * out->w;
}

int bn_argmax(const float *v, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

/* One batch: its outputs and predictions into place, its loss and correct count into sums. */
static bn_status run_batch(bn_net *net, bn_loader *ld, int start, int n, float *outputs, int *pred, float *sums)
{
    BN_TRY(bn_loader_fill(ld, net, start, n));
    BN_TRY(bn_net_forward(net, 0));
    if (sums) {
        double loss, correct;
        BN_TRY(bn_net_metrics(net, &loss, &correct));
        sums[0] += (float)loss;
        sums[1] += (float)correct;
    }
    if (!outputs && !pred) return BN_OK;
    int k = bn_output_size(net);
    const float *out = bn_blob_host_rd(bn_net_output(net));
    if (!out) return bn_last_status();
    if (outputs) memcpy(outputs + (size_t)start * k, out, (size_t)n * k * sizeof *out);
    if (pred)
        for (int i = 0; i < n; i++) pred[start + i] = bn_argmax(out + (size_t)i * k, k);
    return BN_OK;
}

bn_status bn_evaluate_each(bn_net *net, const bn_dataset *data, float *outputs, int *pred, double *loss, double *acc)
{
    int want_metrics = loss || acc;
    if (want_metrics && !bn_net_loss_layer(net))
        return bn_error(BN_ERR_USAGE, "%s: loss and accuracy need a loss layer (softmax_ce) at the end", net->source);
    bn_loader ld;
    BN_TRY(bn_loader_init(&ld, data, net->pass.ctx));
    float sums[2] = {0, 0};
    bn_status s = BN_OK;
    bn_nvtx_push("eval", BN_NVTX_STEP);
    for (int start = 0; s == BN_OK && start < data->count; start += net->capacity) {
        int n = data->count - start < net->capacity ? data->count - start : net->capacity;
        s = run_batch(net, &ld, start, n, outputs, pred, want_metrics ? sums : NULL);
    }
    bn_nvtx_pop();
    bn_loader_free(&ld);
    BN_TRY(s);
    /* Float sums and a float division, as bn_evaluate does, so both report the same values. */
    if (loss) *loss = sums[0] / data->count;
    if (acc) *acc = sums[1] / data->count;
    return BN_OK;
}
