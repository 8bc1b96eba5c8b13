#include "device_ops.h"

/* The default table's answer to every call that needs a device. */
static bn_status no_device(void)
{
    return bn_error(BN_ERR_DEVICE, "no device context is open (use --device gpu)");
}

static bn_status none_alloc(void **ptr, size_t bytes)
{
    (void)bytes;
    *ptr = NULL;
    return no_device();
}

/* Nothing was ever allocated through the default table, so there is nothing to release. */
static void none_release(void *ptr) { (void)ptr; }

static bn_status none_zero(void *ptr, size_t bytes)
{
    (void)ptr, (void)bytes;
    return no_device();
}

static bn_status none_copy(void *dst, const void *src, size_t bytes)
{
    (void)dst, (void)src, (void)bytes;
    return no_device();
}

static bn_status none_tensor_desc_set(void **desc, int n, int c, int h, int w, int bf16)
{
    (void)desc, (void)n, (void)c, (void)h, (void)w, (void)bf16;
    return no_device();
}

static bn_status none_ctx_memory(bn_ctx *ctx, size_t *free_bytes, size_t *total_bytes)
{
    (void)ctx;
    *free_bytes = *total_bytes = 0;
    return no_device();
}

/* Without a device nothing can be pending on a side stream. */
static bn_status none_ctx_join_side(bn_ctx *ctx)
{
    (void)ctx;
    return BN_OK;
}

static bn_status none_ctx_zero_beside(bn_ctx *ctx, void *ptr, size_t bytes)
{
    (void)ctx, (void)ptr, (void)bytes;
    return no_device();
}

static bn_status none_add(float *dst, const float *src, size_t n, bn_ctx *ctx)
{
    (void)dst, (void)src, (void)n, (void)ctx;
    return no_device();
}

static bn_status none_add_bf16(void *dst, const void *src, size_t n, bn_ctx *ctx)
{
    (void)dst, (void)src, (void)n, (void)ctx;
    return no_device();
}

static bn_status none_ctx_open_lanes(bn_ctx *ctx, int count)
{
    (void)ctx, (void)count;
    return no_device();
}

static bn_status none_ctx_set_lane(bn_ctx *ctx, int lane)
{
    (void)ctx, (void)lane;
    return no_device();
}

/* Without a device no lane was ever entered. */
static void none_ctx_leave_lanes(bn_ctx *ctx) { (void)ctx; }

static bn_status none_order_event_create(void **event)
{
    *event = NULL;
    return no_device();
}

static bn_status none_ctx_event(bn_ctx *ctx, void *event)
{
    (void)ctx, (void)event;
    return no_device();
}

static const bn_device_ops none = {
    .alloc = none_alloc,
    .free = none_release,
    .zero = none_zero,
    .h2d = none_copy,
    .d2h = none_copy,
    .tensor_desc_set = none_tensor_desc_set,
    .tensor_desc_free = none_release,
    .ctx_memory = none_ctx_memory,
    .ctx_join_side = none_ctx_join_side,
    .ctx_zero_beside = none_ctx_zero_beside,
    .add = none_add,
    .add_bf16 = none_add_bf16,
    .ctx_open_lanes = none_ctx_open_lanes,
    .ctx_set_lane = none_ctx_set_lane,
    .ctx_leave_lanes = none_ctx_leave_lanes,
    .order_event_create = none_order_event_create,
    .order_event_destroy = none_release,
    .ctx_record = none_ctx_event,
    .ctx_wait = none_ctx_event,
};

static const bn_device_ops *installed = &none;

void bn_device_ops_install(const bn_device_ops *ops)
{
    installed = ops ? ops : &none;
}

const bn_device_ops *bn_device_ops_current(void)
{
    return installed;
}
