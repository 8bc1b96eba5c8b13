/* device_ops.h - the device calls the core's own code makes (blob transfers, the network's
 * gradient sums and memory check), as a table of functions that gpu/ fills when it opens a
 * context. The core thus needs no device code to link: before a context is open, and in a
 * build without CUDA, a default table stands in, whose calls that need a device fail and whose
 * releases have nothing to release. Layers and the folders above the core call the device.h
 * functions directly. */
#ifndef BN_DEVICE_OPS_H
#define BN_DEVICE_OPS_H

#include <stddef.h>

#include "device.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Each entry does what the device.h function of the same name (bn_device_*, bn_tensor_desc_*,
 * bn_ctx_*, bn_gpu_*) does. */
typedef struct bn_device_ops {
    bn_status (*alloc)(void **ptr, size_t bytes);
    void (*free)(void *ptr);
    bn_status (*zero)(void *ptr, size_t bytes);
    bn_status (*h2d)(void *dst, const void *src, size_t bytes);
    bn_status (*d2h)(void *dst, const void *src, size_t bytes);
    bn_status (*tensor_desc_set)(void **desc, int n, int c, int h, int w, int bf16);
    void (*tensor_desc_free)(void *desc);
    bn_status (*ctx_memory)(bn_ctx *ctx, size_t *free_bytes, size_t *total_bytes);
    bn_status (*ctx_join_side)(bn_ctx *ctx);
    bn_status (*ctx_zero_beside)(bn_ctx *ctx, void *ptr, size_t bytes);
    bn_status (*add)(float *dst, const float *src, size_t n, bn_ctx *ctx);
    bn_status (*add_bf16)(void *dst, const void *src, size_t n, bn_ctx *ctx);
    bn_status (*ctx_open_lanes)(bn_ctx *ctx, int count);
    bn_status (*ctx_set_lane)(bn_ctx *ctx, int lane);
    void (*ctx_leave_lanes)(bn_ctx *ctx);
    bn_status (*order_event_create)(void **event);
    void (*order_event_destroy)(void *event);
    bn_status (*ctx_record)(bn_ctx *ctx, void *event);
    bn_status (*ctx_wait)(bn_ctx *ctx, void *event);
} bn_device_ops;

/* Makes ops the device the core calls from now on (gpu/device.cu, when it opens a context); NULL
 * puts the default table back. The table is not copied: it must live as long as the process. It
 * stays after the context closes, so that blobs freed later release their device buffers
 * through it. */
void bn_device_ops_install(const bn_device_ops *ops);

/* The table the core calls: the one installed last, or the default; owned by whoever installed
 * it, never NULL. */
const bn_device_ops *bn_device_ops_current(void);

#ifdef __cplusplus
}
#endif
#endif
