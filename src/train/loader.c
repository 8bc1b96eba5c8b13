#include "loader.h"

#include <stdlib.h>
#include <string.h>

bn_status bn_loader_init(bn_loader *ld, const bn_dataset *data, bn_ctx *ctx)
{
    memset(ld, 0, sizeof *ld);
    ld->data = data;
    ld->ctx = ctx;
    ld->order = malloc((size_t)data->count * sizeof *ld->order);
    if (!ld->order) return bn_error(BN_ERR_NOMEM, "out of host memory for the data order");
    for (int i = 0; i < data->count; i++) ld->order[i] = i;
    return ctx ? bn_loader_upload(ld) : BN_OK;
}

bn_status bn_loader_set_order(bn_loader *ld, int shuffle, unsigned long long seed)
{
    if (shuffle) bn_dataset_shuffle(ld->order, ld->data->count, seed);
    else
        for (int i = 0; i < ld->data->count; i++) ld->order[i] = i;
    return ld->ctx ? bn_loader_upload_order(ld) : BN_OK;
}

bn_status bn_loader_fill(bn_loader *ld, bn_net *net, int start, int n)
{
    if (start < 0 || n <= 0 || start + n > ld->data->count)
        return bn_error(BN_ERR_INTERNAL, "batch %d..%d outside the dataset of %d", start, start + n, ld->data->count);
    BN_TRY(bn_net_set_batch(net, n));
    if (ld->ctx) return bn_loader_fill_gpu(ld, net, start, n);
    BN_HOST_WR(x, net->input);
    BN_HOST_WR(y, net->labels);
    bn_dataset_gather(ld->data, ld->order + start, n, x, y);
    if (net->input_mean != 0.0f || net->input_std != 1.0f) {
        size_t count = bn_blob_count(net->input);
        /* The same two operations as the device gather, so both paths see the same bits. */
        for (size_t i = 0; i < count; i++) x[i] = (x[i] - net->input_mean) / net->input_std;
    }
    return BN_OK;
}

bn_status bn_loader_set_cursor(bn_loader *ld, int start)
{
    ld->host_cursor = start;
    return ld->ctx ? bn_device_h2d(ld->dev_cursor, &start, sizeof start) : BN_OK;
}

bn_status bn_loader_fill_next(bn_loader *ld, bn_net *net, int n)
{
    int start = ld->host_cursor;
    if (start < 0 || n <= 0 || start + n > ld->data->count)
        return bn_error(BN_ERR_INTERNAL, "batch %d..%d outside the dataset of %d", start, start + n, ld->data->count);
    ld->host_cursor += n;
    if (!ld->ctx) return bn_loader_fill(ld, net, start, n);
    BN_TRY(bn_net_set_batch(net, n));
    return bn_loader_fill_next_gpu(ld, net, n);
}

void bn_loader_free(bn_loader *ld)
{
    free(ld->order);
    bn_device_free(ld->dev_pixels);
    bn_device_free(ld->dev_labels);
    bn_device_free(ld->dev_order);
    bn_device_free(ld->dev_cursor);
    memset(ld, 0, sizeof *ld);
}
