/* blob.h - a float32 NCHW tensor with a host copy and a device copy.
 *
 * Under --precision bf16 the device copy of an activation blob holds BF16 (2 bytes an
 * element) while the host copy stays float32: the transfer rounds (to nearest even) or widens,
 * and the device pointers are taken with bn_blob_dev16_rd/wr instead of bn_blob_dev_rd/wr.
 *
 * Each copy is allocated on first use. The blob records which copy is current, so a
 * reader on one side gets a transfer only when the other side wrote last; all transfers
 * go through one function (blob.c: transfer) so a hidden copy shows up in a profile.
 * A view is a window into a larger root blob (parameters live in one slab): it shares the
 * root's buffers and sync state. A slice is a view of some of a root's channels: each example's
 * channels lie inside the root's example, so consecutive examples are `example_stride` elements
 * apart, not c*h*w (a producer writing its part of a concat's output, fusion.c). Only passes that
 * ask for the stride (bn_blob_dev_rows_rd/wr) may reach a slice's device data; the packed
 * accessors refuse it, so that a kernel written for packed examples fails loudly instead of
 * reading the wrong elements. Its host copy is read through a packed gather and never written. */
#ifndef BN_BLOB_H
#define BN_BLOB_H

#include <stddef.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum bn_sync {
    BN_SYNC_NONE,    /* nothing written yet */
    BN_SYNC_HOST,    /* host copy is newer */
    BN_SYNC_DEVICE,  /* device copy is newer */
    BN_SYNC_BOTH     /* both copies hold the same values */
} bn_sync;

typedef struct bn_blob bn_blob;
struct bn_blob {
    char name[64];
    int n, c, h, w;      /* current shape; n*c*h*w <= capacity */
    size_t capacity;     /* elements the buffers hold */
    float *host;         /* root only: host buffer, NULL until first use */
    float *dev;          /* root only: device buffer, NULL until first use */
    bn_sync state;       /* root only */
    bn_blob *root;       /* the blob owning the buffers (itself for a root) */
    size_t offset;       /* element offset of a view inside its root */
    void *desc;          /* cudnnTensorDescriptor_t, made on demand for the current shape */
    int desc_shape[4];
    int dev_bf16;        /* root only: the device buffer holds BF16, 2 bytes per element */
    size_t example_stride; /* a slice's elements from one example to the next; 0: packed */
    float *gathered;     /* a slice's packed host copy, made by bn_blob_host_rd */
};

/* A new root blob of shape (n,c,h,w); no buffer is allocated yet. NULL on allocation failure. */
bn_blob *bn_blob_new(const char *name, int n, int c, int h, int w);

/* A view of count = n*c*h*w elements of root starting at offset; NULL if it does not fit. */
bn_blob *bn_blob_new_view(const char *name, bn_blob *root, size_t offset, int n, int c, int h, int w);

/* A slice of root's channels [channel, channel + c) at root's height and width, n examples (the
 * root's examples root->c*h*w elements apart); NULL, the error recorded, if it does not fit. root
 * may itself be a slice: the new one is then a slice of root's root, at root's channels plus
 * `channel` (a join nested in another, fusion.c). */
bn_blob *bn_blob_new_slice(const char *name, bn_blob *root, int channel, int n, int c);

/* Whether b is a slice (its examples further apart than its c*h*w elements). */
int bn_blob_is_slice(const bn_blob *b);

/* Frees the blob, its buffers (roots only) and its descriptor. NULL is fine. */
void bn_blob_free(bn_blob *b);

/* Elements in the current shape. */
size_t bn_blob_count(const bn_blob *b);

/* Changes the shape; the new count must fit the capacity allocated at creation. */
bn_status bn_blob_reshape(bn_blob *b, int n, int c, int h, int w);

/* Pointers to current data. _rd makes that side current; _wr also marks it the newest copy
 * (the other side becomes stale). The pointer is owned by the blob. NULL on failure, with
 * the error recorded. A never-written blob reads as zeros. */
const float *bn_blob_host_rd(bn_blob *b);
float *bn_blob_host_wr(bn_blob *b);
const float *bn_blob_dev_rd(bn_blob *b);
float *bn_blob_dev_wr(bn_blob *b);

/* The device data of any blob, packed or a slice, for a pass that honours the stride: the first
 * element (float, or BF16 where bn_blob_is_bf16), with the sync rules of bn_blob_dev_rd/wr, and
 * in *stride the elements from one example to the next (c*h*w for a packed blob). NULL on
 * failure, with the error recorded. */
const void *bn_blob_dev_rows_rd(bn_blob *b, size_t *stride);
void *bn_blob_dev_rows_wr(bn_blob *b, size_t *stride);

/* Makes the device copy hold BF16; only before any device buffer exists (applies to b's root). */
bn_status bn_blob_set_bf16(bn_blob *b);

/* Whether the device copy holds BF16 (a view answers for its root). */
int bn_blob_is_bf16(const bn_blob *b);

/* The BF16 device data (__nv_bfloat16 in .cu files), with the sync rules of bn_blob_dev_rd/wr.
 * Each pair refuses a blob of the other kind with an error naming it: NULL, the error recorded. */
const void *bn_blob_dev16_rd(bn_blob *b);
void *bn_blob_dev16_wr(bn_blob *b);

/* Allocates the host (or device) buffer now, so that no allocation happens later in a step. */
bn_status bn_blob_reserve_host(bn_blob *b);
bn_status bn_blob_reserve_device(bn_blob *b);

/* Sets every element to zero on the side that is current (the device if it has a buffer). */
bn_status bn_blob_zero(bn_blob *b);

/* Records that the device copy changed behind the blob's back (a replayed CUDA graph wrote
 * it): a blob with a device buffer becomes device-newer, so the next host read transfers. */
void bn_blob_mark_device_written(bn_blob *b);

/* Points root blob b's device data at buf (a device buffer of at least its capacity's values,
 * owned by the caller) and returns the buffer it pointed at, which the caller puts back with the
 * same call before the blob is freed or its buffer is used for anything but this data. The blob
 * becomes device-newer: buf holds data written on the device. A loader reads a batch where it
 * was gathered instead of copying it (train/loader_gpu.cu). */
void *bn_blob_swap_device(bn_blob *b, void *buf);

/* The sync state of the blob's root. */
bn_sync bn_blob_state(const bn_blob *b);

/* A cuDNN tensor descriptor (cudnnTensorDescriptor_t) for the current NCHW shape and the
 * device copy's type (float or BF16), owned by the blob; NULL without CUDA. */
void *bn_blob_tensor_desc(bn_blob *b);

#ifdef __cplusplus
}
#endif
#endif
