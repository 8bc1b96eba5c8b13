#include "blob.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_ops.h"
#include "nvtx.h"

static int shape_ok(int n, int c, int h, int w)
{
    return n > 0 && c > 0 && h > 0 && w > 0;
}

static size_t shape_count(int n, int c, int h, int w)
{
    return (size_t)n * (size_t)c * (size_t)h * (size_t)w;
}

bn_blob *bn_blob_new(const char *name, int n, int c, int h, int w)
{
    if (!shape_ok(n, c, h, w)) {
        bn_error(BN_ERR_INTERNAL, "blob %s: shape %dx%dx%dx%d has a non-positive dimension",
                 name, n, c, h, w);
        return NULL;
    }
    bn_blob *b = calloc(1, sizeof *b);
    if (!b) {
        bn_error(BN_ERR_NOMEM, "blob %s: out of host memory", name);
        return NULL;
    }
    snprintf(b->name, sizeof b->name, "%s", name);
    b->n = n, b->c = c, b->h = h, b->w = w;
    b->capacity = shape_count(n, c, h, w);
    b->root = b;
    return b;
}

bn_blob *bn_blob_new_view(const char *name, bn_blob *root, size_t offset, int n, int c, int h, int w)
{
    if (!shape_ok(n, c, h, w) || root->root != root ||
        offset + shape_count(n, c, h, w) > root->capacity) {
        bn_error(BN_ERR_INTERNAL, "view %s does not fit inside blob %s", name, root->name);
        return NULL;
    }
    bn_blob *b = calloc(1, sizeof *b);
    if (!b) {
        bn_error(BN_ERR_NOMEM, "view %s: out of host memory", name);
        return NULL;
    }
    snprintf(b->name, sizeof b->name, "%s", name);
    b->n = n, b->c = c, b->h = h, b->w = w;
    b->capacity = shape_count(n, c, h, w);
    b->root = root;
    b->offset = offset;
    return b;
}

bn_blob *bn_blob_new_slice(const char *name, bn_blob *root, int channel, int n, int c)
{
    const size_t plane = (size_t)root->h * root->w;
    /* A slice of a slice is a slice of the same root, its channels counted from the root's; any
     * other view refuses. */
    const int nested = bn_blob_is_slice(root);
    const bn_blob *base = root->root;
    const int first = nested ? (int)(root->offset / plane) : 0;
    if ((!nested && base != root) || channel < 0 || c <= 0 || channel + c > root->c || n <= 0 ||
        (size_t)n * base->c * plane > base->capacity) {
        bn_error(BN_ERR_INTERNAL, "slice %s (channels %d to %d) does not fit inside blob %s of %d channels", name,
                 channel, channel + c - 1, root->name, root->c);
        return NULL;
    }
    bn_blob *b = bn_blob_new_view(name, root->root, (size_t)(first + channel) * plane, n, c, root->h, root->w);
    if (b) b->example_stride = (size_t)base->c * plane;
    return b;
}

int bn_blob_is_slice(const bn_blob *b)
{
    return b->example_stride != 0;
}

/* Refuses a packed access to a slice, naming it: 1 when refused, the error recorded. */
static int refuses_packed(const bn_blob *b, const char *what)
{
    if (!b->example_stride) return 0;
    bn_error(BN_ERR_INTERNAL, "blob %s is a slice of %s's channels: %s", b->name, b->root->name, what);
    return 1;
}

void bn_blob_free(bn_blob *b)
{
    if (!b) return;
    free(b->gathered);
    if (b->root == b) {
        free(b->host);
        bn_device_ops_current()->free(b->dev);
    }
    bn_device_ops_current()->tensor_desc_free(b->desc);
    free(b);
}

size_t bn_blob_count(const bn_blob *b)
{
    return shape_count(b->n, b->c, b->h, b->w);
}

bn_status bn_blob_reshape(bn_blob *b, int n, int c, int h, int w)
{
    if (!shape_ok(n, c, h, w) || shape_count(n, c, h, w) > b->capacity)
        return bn_error(BN_ERR_INTERNAL, "blob %s: shape %dx%dx%dx%d exceeds its capacity of %zu",
                        b->name, n, c, h, w, b->capacity);
    b->n = n, b->c = c, b->h = h, b->w = w;
    return BN_OK;
}

bn_status bn_blob_set_bf16(bn_blob *b)
{
    bn_blob *r = b->root;
    if (r->dev)
        return bn_error(BN_ERR_INTERNAL, "blob %s: its device buffer exists already, so it cannot become BF16", r->name);
    r->dev_bf16 = 1;
    /* A descriptor made earlier describes floats. */
    bn_device_ops_current()->tensor_desc_free(b->desc);
    b->desc = NULL;
    return BN_OK;
}

int bn_blob_is_bf16(const bn_blob *b)
{
    return b->root->dev_bf16;
}

/* Bytes of one element in the device buffer. */
static size_t dev_elem_bytes(const bn_blob *r)
{
    return r->dev_bf16 ? sizeof(uint16_t) : sizeof(float);
}

bn_status bn_blob_reserve_host(bn_blob *b)
{
    bn_blob *r = b->root;
    if (r->host) return BN_OK;
    r->host = calloc(r->capacity, sizeof(float));
    if (!r->host) return bn_error(BN_ERR_NOMEM, "blob %s: cannot allocate %zu floats on the host",
                                  r->name, r->capacity);
    return BN_OK;
}

bn_status bn_blob_reserve_device(bn_blob *b)
{
    bn_blob *r = b->root;
    if (r->dev) return BN_OK;
    const bn_device_ops *dev = bn_device_ops_current();
    BN_TRY(dev->alloc((void **)&r->dev, r->capacity * dev_elem_bytes(r)));
    bn_status s = dev->zero(r->dev, r->capacity * dev_elem_bytes(r));
    if (s != BN_OK) {
        dev->free(r->dev);
        r->dev = NULL;
    }
    return s;
}

/* The BF16 nearest to f, ties to even (what cuda_bf16.h's __float2bfloat16_rn gives); a NaN
 * stays a NaN. */
static uint16_t bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float float_of(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* A BF16 device copy crosses through a staging buffer. Going to the device, the host copy is
 * rounded in place as well, so that the two copies hold the same values when both are current. */
static bn_status transfer_bf16(bn_blob *r, int to_device)
{
    uint16_t *stage = malloc(r->capacity * sizeof *stage);
    if (!stage) return bn_error(BN_ERR_NOMEM, "blob %s: cannot stage %zu BF16 values on the host", r->name, r->capacity);
    bn_status s;
    if (to_device) {
        for (size_t i = 0; i < r->capacity; i++) {
            stage[i] = bf16_of(r->host[i]);
            r->host[i] = float_of(stage[i]);
        }
        s = bn_device_ops_current()->h2d(r->dev, stage, r->capacity * sizeof *stage);
    } else {
        s = bn_device_ops_current()->d2h(stage, r->dev, r->capacity * sizeof *stage);
        for (size_t i = 0; s == BN_OK && i < r->capacity; i++) r->host[i] = float_of(stage[i]);
    }
    free(stage);
    return s;
}

/* The one place where blob data crosses between host and device. */
static bn_status transfer(bn_blob *r, int to_device)
{
    char range[96];
    snprintf(range, sizeof range, "%s %s", to_device ? "h2d" : "d2h", r->name);
    bn_nvtx_push(range, BN_NVTX_TRANSFER);
    size_t bytes = r->capacity * sizeof(float);
    const bn_device_ops *dev = bn_device_ops_current();
    bn_status s = r->dev_bf16 ? transfer_bf16(r, to_device)
                  : to_device ? dev->h2d(r->dev, r->host, bytes)
                              : dev->d2h(r->host, r->dev, bytes);
    bn_nvtx_pop();
    if (s == BN_OK) r->state = BN_SYNC_BOTH;
    return s;
}

static bn_status make_host_current(bn_blob *r)
{
    BN_TRY(bn_blob_reserve_host(r));
    if (r->state == BN_SYNC_DEVICE) return transfer(r, 0);
    return BN_OK;
}

static bn_status make_device_current(bn_blob *r)
{
    BN_TRY(bn_blob_reserve_device(r));
    if (r->state == BN_SYNC_HOST) return transfer(r, 1);
    return BN_OK;
}

/* A slice's examples copied out of its root's host copy into its own packed buffer. */
static const float *gather_slice(bn_blob *b)
{
    const size_t per = (size_t)b->c * b->h * b->w;
    if (!b->gathered && !(b->gathered = malloc(b->capacity * sizeof *b->gathered))) {
        bn_error(BN_ERR_NOMEM, "blob %s: cannot allocate %zu floats on the host", b->name, b->capacity);
        return NULL;
    }
    for (int e = 0; e < b->n; e++)
        memcpy(b->gathered + e * per, b->root->host + b->offset + e * b->example_stride, per * sizeof(float));
    return b->gathered;
}

const float *bn_blob_host_rd(bn_blob *b)
{
    bn_blob *r = b->root;
    if (make_host_current(r) != BN_OK) return NULL;
    if (r->state == BN_SYNC_NONE) r->state = r->dev ? BN_SYNC_BOTH : BN_SYNC_HOST;
    return b->example_stride ? gather_slice(b) : r->host + b->offset;
}

float *bn_blob_host_wr(bn_blob *b)
{
    bn_blob *r = b->root;
    if (refuses_packed(b, "it is written on the host only through that blob")) return NULL;
    if (make_host_current(r) != BN_OK) return NULL;
    r->state = BN_SYNC_HOST;
    return r->host + b->offset;
}

/* Refuses a device pointer of the wrong type for the blob: a layer whose pass does not match
 * the precision its blobs were set up for. */
static int wrong_type(const bn_blob *b, int want_bf16)
{
    if (b->root->dev_bf16 == want_bf16) return 0;
    if (want_bf16)
        bn_error(BN_ERR_INTERNAL, "a layer read blob %s as BF16, but it holds FP32 (BF16 blobs exist only under "
                 "--precision bf16)", b->name);
    else
        bn_error(BN_ERR_INTERNAL, "a layer read blob %s as FP32, but it holds BF16 under --precision bf16", b->name);
    return 1;
}

/* The device copy made current for reading (write = 0) or writing; the root's buffer, NULL on
 * failure. */
static void *device_side(bn_blob *b, int write)
{
    bn_blob *r = b->root;
    if (make_device_current(r) != BN_OK) return NULL;
    if (write) r->state = BN_SYNC_DEVICE;
    else if (r->state == BN_SYNC_NONE) r->state = r->host ? BN_SYNC_BOTH : BN_SYNC_DEVICE;
    return r->dev;
}

/* The packed accessors refuse a slice: the pass reading it would take its examples as packed. */
#define PACKED_ONLY "this pass reads its examples as packed (bn_blob_dev_rows_rd/wr give the stride)"

const float *bn_blob_dev_rd(bn_blob *b)
{
    float *d = refuses_packed(b, PACKED_ONLY) || wrong_type(b, 0) ? NULL : device_side(b, 0);
    return d ? d + b->offset : NULL;
}

float *bn_blob_dev_wr(bn_blob *b)
{
    float *d = refuses_packed(b, PACKED_ONLY) || wrong_type(b, 0) ? NULL : device_side(b, 1);
    return d ? d + b->offset : NULL;
}

const void *bn_blob_dev16_rd(bn_blob *b)
{
    uint16_t *d = refuses_packed(b, PACKED_ONLY) || wrong_type(b, 1) ? NULL : device_side(b, 0);
    return d ? d + b->offset : NULL;
}

void *bn_blob_dev16_wr(bn_blob *b)
{
    uint16_t *d = refuses_packed(b, PACKED_ONLY) || wrong_type(b, 1) ? NULL : device_side(b, 1);
    return d ? d + b->offset : NULL;
}

/* Either type's device data at the blob's first element, and its examples' stride. */
static void *rows_side(bn_blob *b, int write, size_t *stride)
{
    char *d = device_side(b, write);
    if (!d) return NULL;
    *stride = b->example_stride ? b->example_stride : (size_t)b->c * b->h * b->w;
    return d + b->offset * dev_elem_bytes(b->root);
}

const void *bn_blob_dev_rows_rd(bn_blob *b, size_t *stride)
{
    return rows_side(b, 0, stride);
}

void *bn_blob_dev_rows_wr(bn_blob *b, size_t *stride)
{
    return rows_side(b, 1, stride);
}

bn_status bn_blob_zero(bn_blob *b)
{
    if (refuses_packed(b, "it is zeroed only through that blob")) return bn_last_status();
    size_t bytes = bn_blob_count(b) * sizeof(float);
    if (b->root->dev) {
        void *d = b->root->dev_bf16 ? bn_blob_dev16_wr(b) : (void *)bn_blob_dev_wr(b);
        if (!d) return bn_last_status();
        return bn_device_ops_current()->zero(d, bn_blob_count(b) * dev_elem_bytes(b->root));
    }
    float *h = bn_blob_host_wr(b);
    if (!h) return bn_last_status();
    memset(h, 0, bytes);
    return BN_OK;
}

void bn_blob_mark_device_written(bn_blob *b)
{
    if (b && b->root->dev) b->root->state = BN_SYNC_DEVICE;
}

void *bn_blob_swap_device(bn_blob *b, void *buf)
{
    void *old = b->dev;
    b->dev = buf;
    b->state = BN_SYNC_DEVICE;
    return old;
}

bn_sync bn_blob_state(const bn_blob *b)
{
    return b->root->state;
}

void *bn_blob_tensor_desc(bn_blob *b)
{
    if (refuses_packed(b, "no tensor descriptor describes it")) return NULL;
    int shape[4] = {b->n, b->c, b->h, b->w};
    if (b->desc && memcmp(shape, b->desc_shape, sizeof shape) == 0) return b->desc;
    if (bn_device_ops_current()->tensor_desc_set(&b->desc, b->n, b->c, b->h, b->w, b->root->dev_bf16) != BN_OK)
        return NULL;
    memcpy(b->desc_shape, shape, sizeof shape);
    return b->desc;
}
