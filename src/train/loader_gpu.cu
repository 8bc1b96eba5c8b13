/* loader_gpu.cu - batches gathered on the device from the dataset uploaded once (uint8 pixels or
 * float values), or read from pinned host memory where it is past the data budget. */
#include <stdio.h>
#include <string.h>

#include "gpu/bf16.cuh"
#include "gpu/code_anchor.cuh"
#include "gpu/cuda_check.h"
#include "gpu/last_arrival.cuh"
#include "gpu/pdl.cuh"
#include "loader.h"

/* A pixel is fed as pixel/255 (a true division, as on the CPU); a float as it is. */
__device__ __forceinline__ float bn_fed_value(unsigned char v)
{
    return v / 255.0f;
}

__device__ __forceinline__ float bn_fed_value(float v)
{
    return v;
}

/* A column of blocks per example (blockIdx.x), a thread per pixel: no divisions unless the
 * example moves, and every load of a thread in flight at once. cursor, when set, gives start:
 * *cursor (a captured step reads its batch's position), and the last block moves it past the
 * batch (cursor[1] counts the blocks done). step, when set, is the training step whose draws move
 * the examples as aug says (core/augment.h) from each example's position in the global batch
 * (offset + its place here); the last block leaves that step in step[slot] (1: for the passes of
 * the step that draw in the input's own buffer, 2: in the stage; bn_pass.dev_step points at the
 * one the net reads), and advances step[0] to the next. The cursor moves by advance. */
template <typename T, typename S>
__global__ void gather_batch(const S *__restrict__ pixels, const uint16_t *__restrict__ labels,
                             const int *__restrict__ order, int start, int *cursor, unsigned long long *step,
                             int slot, bn_augment aug, unsigned long long seed, int offset, int n, int advance,
                             int height, int width, int per_example, const float *__restrict__ norm, int channels,
                             T *__restrict__ x,
                             float *__restrict__ y)
{
    bn_early_entry(); /* pdl.cuh */
    if (cursor) start = *cursor;
    const int e = (int)blockIdx.x, src = order[start + e];
    const int i = (int)(blockIdx.y * blockDim.x + threadIdx.x);
    if (i < per_example) {
        const int plane = height * width, c = channels == 1 ? 0 : i / plane;
        int from = i, cut = 0;
        if (step && bn_augment_active(aug)) {
            const int row = (i - c * plane) / width, col = i - c * plane - row * width;
            const bn_augment_draw d = bn_augment_pick(aug, height, width, seed, *step,
                                                      (unsigned long long)(offset + e));
            const int at = bn_augment_source(d, height, width, row, col);
            from = at < 0 ? -1 : c * plane + at;
            cut = bn_augment_cut(d, row, col);
        }
        const S v = from < 0 || cut ? S(0) : pixels[(size_t)src * per_example + from];
        /* The CPU path's operations in its order, so both give the same bits; a cut pixel is 0
         * whatever they give. */
        bn_st(x + (size_t)e * per_example + i, cut ? 0.0f : (bn_fed_value(v) - norm[c]) / norm[channels + c]);
    }
    if (i == 0) y[e] = (float)labels[src];
    if (cursor && bn_last_arrival((unsigned *)(cursor + 1), gridDim.x * gridDim.y) && threadIdx.x == 0) {
        *cursor = start + advance;
        if (step) step[slot] = step[0]++;
    }
}

static int per_example(const bn_dataset *d)
{
    return d->channels * d->height * d->width;
}

/* Leaves the dataset's values in host memory, pinned and mapped, for the gather to read over the
 * bus: a set past the data budget trains without a device copy. */
static bn_status stream_pixels(bn_loader *ld, void *host, size_t bytes, size_t budget)
{
    static int told;
    if (!told++)
        fprintf(stderr, "blobnet: note: a dataset of %.1f MB is past the data budget of %.1f MB "
                "(BLOBNET_DATA_BUDGET): its batches are read from pinned host memory\n", bytes / 1e6, budget / 1e6);
    cudaError_t e = cudaHostRegister(host, bytes, cudaHostRegisterMapped);
    if (e == cudaSuccess) {
        ld->streamed = 1;
        BN_CUDA(cudaHostGetDevicePointer(&ld->dev_pixels, host, 0));
        return BN_OK;
    }
    /* A buffer sharing a page with one pinned already (a set the caller laid out; the readers'
     * own sets have whole pages) is copied into pinned memory of its own instead. */
    (void)cudaGetLastError();
    BN_CUDA(cudaHostAlloc(&ld->pinned_copy, bytes, cudaHostAllocMapped));
    memcpy(ld->pinned_copy, host, bytes);
    ld->streamed = 1;
    BN_CUDA(cudaHostGetDevicePointer(&ld->dev_pixels, ld->pinned_copy, 0));
    return BN_OK;
}

extern "C" void bn_loader_release_pixels(bn_loader *ld)
{
    const bn_dataset *d = ld->data;
    if (ld->pinned_copy) cudaFreeHost(ld->pinned_copy);
    else if (ld->streamed) cudaHostUnregister(d->values ? (void *)d->values : (void *)d->pixels);
    else bn_device_free(ld->dev_pixels);
    ld->pinned_copy = NULL;
    ld->streamed = 0;
    ld->dev_pixels = NULL;
}

extern "C" bn_status bn_loader_upload(bn_loader *ld)
{
    const bn_dataset *d = ld->data;
    size_t pixel_bytes = (size_t)d->count * per_example(d) * (d->values ? sizeof(float) : 1);
    size_t label_bytes = (size_t)d->count * sizeof *d->labels;
    void *host = d->values ? (void *)d->values : (void *)d->pixels;
    size_t free_bytes, total_bytes, budget;
    BN_TRY(bn_ctx_memory(ld->ctx, &free_bytes, &total_bytes));
    BN_TRY(bn_loader_data_budget(free_bytes, &budget));
    if (pixel_bytes > budget) BN_TRY(stream_pixels(ld, host, pixel_bytes, budget));
    else BN_TRY(bn_device_alloc(&ld->dev_pixels, pixel_bytes));
    BN_TRY(bn_device_alloc(&ld->dev_labels, label_bytes));
    BN_TRY(bn_device_alloc(&ld->dev_order, (size_t)d->count * sizeof(int)));
    /* The cursor and the count of gather blocks done with it. */
    BN_TRY(bn_device_alloc((void **)&ld->dev_cursor, 2 * sizeof(int)));
    BN_TRY(bn_device_zero(ld->dev_cursor, 2 * sizeof(int)));
    BN_TRY(bn_device_alloc((void **)&ld->dev_step, 3 * sizeof *ld->dev_step));
    BN_TRY(bn_device_zero(ld->dev_step, 3 * sizeof *ld->dev_step));
    if (!ld->streamed) BN_TRY(bn_device_h2d(ld->dev_pixels, host, pixel_bytes));
    BN_TRY(bn_device_h2d(ld->dev_labels, d->labels, label_bytes));
    return bn_loader_upload_order(ld);
}

extern "C" bn_status bn_loader_upload_order(bn_loader *ld)
{
    bn_nvtx_push("h2d order", BN_NVTX_TRANSFER);
    bn_status s = bn_device_h2d(ld->dev_order, ld->order, (size_t)ld->data->count * sizeof(int));
    bn_nvtx_pop();
    return s;
}

/* Where a gather leaves its batch: the stream it is queued on, x and y (the input's and the
 * labels' device data, or the loader's stage), and the slot of dev_step that gets its step. */
typedef struct gather_dest {
    cudaStream_t stream;
    void *x; /* float, or BF16 under --precision bf16: the input's type */
    float *y;
    int slot;
} gather_dest;

/* The stage's layout (bn_loader_reserve_stage): a batch of n examples of per values of `value`
 * bytes, then its n labels from the next 256-byte boundary. */
static size_t stage_labels_at(int n, int per, size_t value)
{
    return ((size_t)n * per * value + 255) / 256 * 256;
}

/* The bytes of a stage for such a batch and its labels. */
static size_t stage_size(int n, int per, size_t value)
{
    return stage_labels_at(n, per, value) + (size_t)n * sizeof(float);
}

/* The bytes of one value of the input as the gather writes it. */
static size_t input_value_bytes(const bn_net *net)
{
    return bn_blob_is_bf16(net->input) ? sizeof(__nv_bfloat16) : sizeof(float);
}

/* The input's device data, of either type, marked as written there; NULL with the error recorded. */
static void *input_dev_wr(bn_net *net)
{
    return bn_blob_is_bf16(net->input) ? (void *)bn_blob_dev16_wr(net->input) : (void *)bn_blob_dev_wr(net->input);
}

/* The batch's examples into to.x and their labels into to.y, from the device copy of the dataset. */
template <typename T, typename S>
static bn_status gather_into(bn_loader *ld, bn_net *net, int start, int *cursor, unsigned long long *step, int n,
                             const S *pixels, const gather_dest &to)
{
    BN_DEV_RD(norm, net->input_norm);
    const bn_dataset *d = ld->data;
    int per = per_example(d);
    const int threads = 256;
    const dim3 grid((unsigned)n, (unsigned)((per + threads - 1) / threads));
    bn_launch_early(gather_batch<T, S>, grid, dim3(threads), 0, to.stream,
                    pixels, (const uint16_t *)ld->dev_labels,
                    (const int *)ld->dev_order, start, cursor, step, to.slot, net->augment, net->pass.seed,
                    net->pass.offset, n, ld->stride ? ld->stride : n, d->height, d->width, per, norm, d->channels,
                    (T *)to.x, to.y);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

/* The same from the dataset's pixels or float values. */
static bn_status gather_to(bn_loader *ld, bn_net *net, int start, int *cursor, unsigned long long *step, int n,
                           const gather_dest &to)
{
    const bool bf16 = bn_blob_is_bf16(net->input);
    if (ld->data->values) {
        const float *v = (const float *)ld->dev_pixels;
        return bf16 ? gather_into<__nv_bfloat16>(ld, net, start, cursor, step, n, v, to)
                    : gather_into<float>(ld, net, start, cursor, step, n, v, to);
    }
    const unsigned char *p = (const unsigned char *)ld->dev_pixels;
    return bf16 ? gather_into<__nv_bfloat16>(ld, net, start, cursor, step, n, p, to)
                : gather_into<float>(ld, net, start, cursor, step, n, p, to);
}

/* Into the input and labels, on the context's stream. */
static bn_status gather(bn_loader *ld, bn_net *net, int start, int *cursor, unsigned long long *step, int n)
{
    if (n <= 0) return BN_OK;
    if (ld->reading_stage)
        return bn_error(BN_ERR_INTERNAL, "a batch gathered while the input reads the loader's stage "
                                         "(bn_loader_read_own first)");
    BN_DEV_WR(y, net->labels);
    void *x = input_dev_wr(net);
    if (!x) return bn_last_status();
    const gather_dest to = {(cudaStream_t)ld->ctx->stream, x, y, 1};
    return gather_to(ld, net, start, cursor, step, n, to);
}

extern "C" bn_status bn_loader_fill_gpu(bn_loader *ld, bn_net *net, int start, int n)
{
    return gather(ld, net, start, NULL, NULL, n);
}

extern "C" bn_status bn_loader_fill_next_gpu(bn_loader *ld, bn_net *net, int n)
{
    return gather(ld, net, 0, ld->dev_cursor, NULL, n);
}

extern "C" bn_status bn_loader_fill_train_gpu(bn_loader *ld, bn_net *net, int n)
{
    return gather(ld, net, 0, ld->dev_cursor, ld->dev_step, n);
}

extern "C" bn_status bn_loader_reserve_stage_gpu(bn_loader *ld, const bn_net *net, int n)
{
    /* At least the input's and labels' capacity from its start and from its labels' on: the net
     * reads them there as its own buffers (bn_loader_take). */
    const int examples = n > net->capacity ? n : net->capacity;
    const size_t bytes = stage_size(examples, per_example(ld->data), input_value_bytes(net));
    if (bytes <= ld->stage_bytes) return BN_OK;
    /* A group captured before reads and writes the old stage within each of its replays: it is
     * kept while that graph lives. */
    bn_device_retire(ld->dev_stage);
    ld->dev_stage = NULL;
    ld->stage_bytes = 0;
    BN_TRY(bn_device_alloc(&ld->dev_stage, bytes));
    ld->stage_bytes = bytes;
    return BN_OK;
}

extern "C" bn_status bn_loader_stage_gpu(bn_loader *ld, bn_net *net, int n)
{
    bn_ctx *ctx = ld->ctx;
    const int per = per_example(ld->data);
    const size_t value = input_value_bytes(net);
    if (stage_size(n, per, value) > ld->stage_bytes)
        return bn_error(BN_ERR_INTERNAL, "a batch of %d staged in a stage made for fewer", n);
    if (ld->reading_stage && ((size_t)n * per > net->input->capacity || (size_t)n > net->labels->capacity))
        return bn_error(BN_ERR_INTERNAL, "a batch of %d staged into an input made for fewer", n);
    char *stage = (char *)ld->dev_stage;
    /* Beside what the stream queues next, after what it held when the side stream was last forked
     * in this step (the step's start, where the gradients' zeroing forks it: a fork after the
     * first layer's pass, which the trainer queues this behind, made the gather wait for that
     * pass), else after everything it holds; the stream joins the side stream before the backward
     * pass. Where the net reads the stage, the batch goes into the input's own buffers, which the
     * step before read: its passes are behind the stream's join. */
    if (!ctx->side_pending) BN_TRY(bn_ctx_fork_side(ctx));
    const gather_dest own = {(cudaStream_t)ctx->side_stream, ld->own_x, (float *)ld->own_y, 1};
    float *stage_y = (float *)(stage + stage_labels_at(n, per, value));
    const gather_dest staged = {(cudaStream_t)ctx->side_stream, stage, stage_y, 2};
    return gather_to(ld, net, 0, ld->dev_cursor, ld->dev_step, n, ld->reading_stage ? own : staged);
}

/* The net's input, labels and draws' step pointed at the stage (to_stage: a batch of n there) or
 * back at their own buffers. */
static void point_input(bn_loader *ld, bn_net *net, int to_stage, int n)
{
    if (to_stage == ld->reading_stage) return;
    if (to_stage) {
        const int per = per_example(ld->data);
        char *stage = (char *)ld->dev_stage;
        ld->own_x = bn_blob_swap_device(net->input, stage);
        ld->own_y = bn_blob_swap_device(net->labels, stage + stage_labels_at(n, per, input_value_bytes(net)));
    } else {
        bn_blob_swap_device(net->input, ld->own_x);
        bn_blob_swap_device(net->labels, ld->own_y);
        ld->own_x = ld->own_y = NULL;
    }
    net->pass.dev_step = ld->dev_step + (to_stage ? 2 : 1);
    ld->reading_stage = to_stage;
}

/* The staged batch made the net's batch where it lies: no copy, so the step's first pass starts
 * as soon as the step before ends (a copy of LeNet's batch of 256 took 1.7 us on an H200). */
extern "C" bn_status bn_loader_take_gpu(bn_loader *ld, bn_net *net, int n)
{
    /* Where the net turns to the stage, its own buffers must exist: the next batch is staged into
     * them. A gather into them made them already; reserving again costs nothing. */
    if (!ld->staged_own) {
        BN_TRY(bn_blob_reserve_device(net->input));
        BN_TRY(bn_blob_reserve_device(net->labels));
    }
    point_input(ld, net, !ld->staged_own, n);
    return BN_OK;
}

extern "C" void bn_loader_read_own_gpu(bn_loader *ld, bn_net *net)
{
    point_input(ld, net, 0, 0);
}

BN_CODE_ANCHOR(loader_gpu, gather_batch<float, unsigned char>) /* code_load.cu */
