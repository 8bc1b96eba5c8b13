#include "loader.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/options.h"

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

bn_status bn_loader_data_budget(size_t free_bytes, size_t *budget)
{
    const char *env = getenv("BLOBNET_DATA_BUDGET");
    *budget = free_bytes / 2;
    if (!env || !*env) return BN_OK;
    uint64_t v = 0;
    const char *why = bn_parse_bytes(env, &v);
    if (why) return bn_error(BN_ERR_USAGE, "BLOBNET_DATA_BUDGET: '%s' %s", env, why);
    *budget = v > SIZE_MAX ? SIZE_MAX : (size_t)v;
    return BN_OK;
}

bn_status bn_loader_set_order(bn_loader *ld, int shuffle, unsigned long long seed)
{
    const int ready = ld->prepared && shuffle && ld->prepared_seed == seed;
    ld->prepared = 0;
    if (ready) return BN_OK;
    if (shuffle) bn_dataset_shuffle(ld->order, ld->data->count, seed);
    else
        for (int i = 0; i < ld->data->count; i++) ld->order[i] = i;
    return ld->ctx ? bn_loader_upload_order(ld) : BN_OK;
}

/* bn_dataset_gather's work with each example moved by its draw at training step `step` and
 * standardised, its cutout then 0: the device gather's arithmetic, pixel for pixel. */
static void gather_augmented(const bn_dataset *d, const int *indices, int n, bn_augment a, uint64_t seed,
                             uint64_t step, int offset, const float *mean, const float *std, float *x, float *y)
{
    const int h = d->height, w = d->width;
    const size_t plane = (size_t)h * (size_t)w, size = (size_t)d->channels * plane;
    for (int e = 0; e < n; e++) {
        bn_augment_draw draw = bn_augment_pick(a, h, w, seed, step, (uint64_t)(offset + e));
        float *dst = x + (size_t)e * size;
        for (int c = 0; c < d->channels; c++, dst += plane)
            for (int r = 0; r < h; r++)
                for (int col = 0; col < w; col++) {
                    int from = bn_augment_source(draw, h, w, r, col);
                    float v = from < 0 ? 0.0f : bn_dataset_value(d, (size_t)indices[e], c * plane + from);
                    dst[r * w + col] = bn_augment_cut(draw, r, col) ? 0.0f : (v - mean[c]) / std[c];
                }
        y[e] = (float)d->labels[indices[e]];
    }
}

/* The CPU path's gather of examples order[start .. start+n) into the batch the net is set to;
 * with augment, each moved by its draw at the loader's step. */
static bn_status fill_host(bn_loader *ld, bn_net *net, int start, int n, int augment)
{
    BN_HOST_WR(x, net->input);
    BN_HOST_WR(y, net->labels);
    if (augment && bn_augment_active(net->augment)) {
        gather_augmented(ld->data, ld->order + start, n, net->augment, net->pass.seed, ld->host_step, net->pass.offset,
                         net->input_mean, net->input_std, x, y);
        return BN_OK;
    }
    bn_dataset_gather(ld->data, ld->order + start, n, x, y);
    const int channels = ld->data->channels;
    const size_t plane = (size_t)ld->data->height * (size_t)ld->data->width;
    /* The same two operations as the device gather, so both paths see the same bits. */
    for (int e = 0; e < n; e++)
        for (int c = 0; c < channels; c++) {
            const float mean = net->input_mean[c], std = net->input_std[c];
            if (mean == 0.0f && std == 1.0f) continue;
            float *p = x + ((size_t)e * channels + c) * plane;
            for (size_t i = 0; i < plane; i++) p[i] = (p[i] - mean) / std;
        }
    return BN_OK;
}

bn_status bn_loader_fill(bn_loader *ld, bn_net *net, int start, int n)
{
    if (start < 0 || n <= 0 || start + n > ld->data->count)
        return bn_error(BN_ERR_INTERNAL, "batch %d..%d outside the dataset of %d", start, start + n, ld->data->count);
    BN_TRY(bn_net_set_batch(net, n));
    return ld->ctx ? bn_loader_fill_gpu(ld, net, start, n) : fill_host(ld, net, start, n, 0);
}

bn_status bn_loader_prepare_order(bn_loader *ld, unsigned long long seed)
{
    ld->prepared = 0;
    bn_dataset_shuffle(ld->order, ld->data->count, seed);
    if (ld->ctx)
        BN_TRY(bn_device_h2d_queued(&ld->order_up, ld->dev_order, ld->order, (size_t)ld->data->count * sizeof(int)));
    ld->prepared = 1;
    ld->prepared_seed = seed;
    return BN_OK;
}

bn_status bn_loader_set_cursor(bn_loader *ld, int start)
{
    ld->host_cursor = start;
    return ld->ctx ? bn_device_h2d(ld->dev_cursor, &start, sizeof start) : BN_OK;
}

bn_status bn_loader_set_step(bn_loader *ld, unsigned long long step)
{
    ld->host_step = step;
    return ld->ctx ? bn_device_h2d(ld->dev_step, &step, sizeof step) : BN_OK;
}

/* The host's side of taking the next n examples: their start, checked against the set, and the
 * cursor moved past them. */
static bn_status next_batch(bn_loader *ld, int n, int *start)
{
    *start = ld->host_cursor;
    if (*start < 0 || n <= 0 || *start + n > ld->data->count)
        return bn_error(BN_ERR_INTERNAL, "batch %d..%d outside the dataset of %d", *start, *start + n,
                        ld->data->count);
    ld->host_cursor += ld->stride ? ld->stride : n;
    return BN_OK;
}

bn_status bn_loader_fill_next(bn_loader *ld, bn_net *net, int n, int train)
{
    int start;
    BN_TRY(next_batch(ld, n, &start));
    BN_TRY(bn_net_set_batch(net, n));
    if (ld->ctx) return train ? bn_loader_fill_train_gpu(ld, net, n) : bn_loader_fill_next_gpu(ld, net, n);
    BN_TRY(fill_host(ld, net, start, n, train));
    if (train) ld->host_step++;
    return BN_OK;
}

bn_status bn_loader_reserve_stage(bn_loader *ld, const bn_net *net, int n)
{
    if (!ld->ctx || n <= 0) return bn_error(BN_ERR_INTERNAL, "a batch is staged on the GPU only, and not empty");
    return bn_loader_reserve_stage_gpu(ld, net, n);
}

bn_status bn_loader_stage(bn_loader *ld, bn_net *net, int n)
{
    if (!ld->ctx || !ld->dev_stage || ld->staged || !ld->ctx->side_stream)
        return bn_error(BN_ERR_INTERNAL, "a batch staged with no stage made, no side stream, or one still staged");
    int start;
    BN_TRY(next_batch(ld, n, &start));
    BN_TRY(bn_loader_stage_gpu(ld, net, n));
    ld->staged = 1;
    ld->staged_n = n;
    ld->staged_own = ld->reading_stage;
    return BN_OK;
}

bn_status bn_loader_take(bn_loader *ld, bn_net *net, int n)
{
    if (!ld->staged || ld->staged_n != n)
        return bn_error(BN_ERR_INTERNAL, "a batch of %d taken where %d are staged", n, ld->staged ? ld->staged_n : 0);
    BN_TRY(bn_net_set_batch(net, n));
    BN_TRY(bn_loader_take_gpu(ld, net, n));
    ld->staged = 0;
    return BN_OK;
}

void bn_loader_read_own(bn_loader *ld, bn_net *net)
{
    if (ld->ctx) bn_loader_read_own_gpu(ld, net);
}

void bn_loader_unstage(bn_loader *ld)
{
    ld->staged = 0;
}

bn_loader_mark bn_loader_marked(const bn_loader *ld)
{
    bn_loader_mark m = {ld->host_cursor, ld->staged, ld->staged_n, ld->staged_own, ld->host_step};
    return m;
}

void bn_loader_rewind(bn_loader *ld, const bn_loader_mark *m)
{
    ld->host_cursor = m->cursor;
    ld->staged = m->staged;
    ld->staged_n = m->staged_n;
    ld->staged_own = m->staged_own;
    ld->host_step = m->step;
}

void bn_loader_free(bn_loader *ld)
{
    bn_device_free(ld->dev_stage);
    free(ld->order);
    bn_upload_buf_free(&ld->order_up);
    if (ld->ctx) bn_loader_release_pixels(ld);
    bn_device_free(ld->dev_labels);
    bn_device_free(ld->dev_order);
    bn_device_free(ld->dev_cursor);
    bn_device_free(ld->dev_step);
    memset(ld, 0, sizeof *ld);
}
