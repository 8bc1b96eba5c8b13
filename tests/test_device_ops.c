/* test_device_ops.c - the core's table of device calls (src/core/device_ops.c): the default
 * table's answers, and that blobs and the network's setup reach the device only through the
 * installed table, checked with a table whose "device" is host memory. */
#include <stdint.h>
#include <stdlib.h>

#include "core/blob.h"
#include "core/device_ops.h"
#include "core/net.h"
#include "testing.h"

/* What the fake table was asked. */
static struct {
    int alloc, free, zero, h2d, d2h, desc_set, desc_free, memory;
} calls;

static bn_status fake_alloc(void **ptr, size_t bytes)
{
    calls.alloc++;
    *ptr = calloc(1, bytes);
    return *ptr ? BN_OK : bn_error(BN_ERR_NOMEM, "fake device: out of memory");
}

static void fake_free(void *ptr)
{
    calls.free += ptr != NULL;
    free(ptr);
}

static bn_status fake_zero(void *ptr, size_t bytes)
{
    calls.zero++;
    memset(ptr, 0, bytes);
    return BN_OK;
}

static bn_status fake_h2d(void *dst, const void *src, size_t bytes)
{
    calls.h2d++;
    memcpy(dst, src, bytes);
    return BN_OK;
}

static bn_status fake_d2h(void *dst, const void *src, size_t bytes)
{
    calls.d2h++;
    memcpy(dst, src, bytes);
    return BN_OK;
}

static int fake_desc;

static bn_status fake_desc_set(void **desc, int n, int c, int h, int w, int bf16)
{
    calls.desc_set++;
    *desc = &fake_desc;
    return BN_OK;
}

static void fake_desc_free(void *desc) { calls.desc_free += desc != NULL; }

/* A device with 1000 bytes free of 2000. */
static bn_status fake_memory(bn_ctx *ctx, size_t *free_bytes, size_t *total_bytes)
{
    calls.memory++;
    *free_bytes = 1000;
    *total_bytes = 2000;
    return BN_OK;
}

static bn_status refuse_ctx(bn_ctx *ctx) { return bn_error(BN_ERR_INTERNAL, "fake device: not expected"); }

static bn_status refuse_beside(bn_ctx *ctx, void *ptr, size_t bytes)
{
    return bn_error(BN_ERR_INTERNAL, "fake device: not expected");
}

static bn_status refuse_add(float *dst, const float *src, size_t n, bn_ctx *ctx)
{
    return bn_error(BN_ERR_INTERNAL, "fake device: not expected");
}

static bn_status refuse_add_bf16(void *dst, const void *src, size_t n, bn_ctx *ctx)
{
    return bn_error(BN_ERR_INTERNAL, "fake device: not expected");
}

static const bn_device_ops fake_ops = {
    .alloc = fake_alloc,
    .free = fake_free,
    .zero = fake_zero,
    .h2d = fake_h2d,
    .d2h = fake_d2h,
    .tensor_desc_set = fake_desc_set,
    .tensor_desc_free = fake_desc_free,
    .ctx_memory = fake_memory,
    .ctx_join_side = refuse_ctx,
    .ctx_zero_beside = refuse_beside,
    .add = refuse_add,
    .add_bf16 = refuse_add_bf16,
};

BN_TEST(device_ops_default_table_refuses_device_work)
{
    const bn_device_ops *was = bn_device_ops_current();
    bn_device_ops_install(NULL);
    const bn_device_ops *d = bn_device_ops_current();
    void *p = &fake_desc;
    float x = 0.0f;
    size_t free_bytes = 1, total_bytes = 1;
    bn_clear_error();
    bn_status alloc = d->alloc(&p, 16);
    int named = strstr(bn_last_error(), "no device context is open") != NULL;
    bn_status others[] = {
        d->zero(&x, 4),
        d->h2d(&x, &x, 4),
        d->d2h(&x, &x, 4),
        d->tensor_desc_set(&p, 1, 1, 1, 1, 0),
        d->ctx_memory(NULL, &free_bytes, &total_bytes),
        d->ctx_zero_beside(NULL, &x, 4),
        d->add(&x, &x, 1, NULL),
        d->add_bf16(&x, &x, 1, NULL),
    };
    bn_status join = d->ctx_join_side(NULL);
    d->free(NULL);
    d->tensor_desc_free(NULL);
    bn_device_ops_install(was);
    CHECK(bn_device_ops_current() == was);
    CHECK(alloc == BN_ERR_DEVICE && p == NULL && named);
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) CHECK_MSG(others[i] == BN_ERR_DEVICE, "call %zu", i);
    CHECK(free_bytes == 0 && total_bytes == 0);
    CHECK(join == BN_OK); /* nothing can be pending without a device */
    return BN_PASS;
}

/* The blob's life on the fake device; 0 when a check fails (the table is put back either way). */
static int blob_round_trip(void)
{
    bn_blob *b = bn_blob_new("b", 1, 1, 1, 3);
    float *h = b ? bn_blob_host_wr(b) : NULL;
    if (!h) return 0;
    h[0] = 1.0f, h[1] = -2.0f, h[2] = 0.5f;
    const float *d = bn_blob_dev_rd(b); /* allocates, zeroes and sends */
    int ok = d && calls.alloc == 1 && calls.zero == 1 && calls.h2d == 1 && d[1] == -2.0f;
    float *w = bn_blob_dev_wr(b);
    if (w) w[2] = 4.0f; /* the fake device is host memory */
    const float *back = bn_blob_host_rd(b);
    ok = ok && w && back && calls.d2h == 1 && back[2] == 4.0f && back[0] == 1.0f;
    ok = ok && bn_blob_tensor_desc(b) == &fake_desc && calls.desc_set == 1;
    bn_blob_free(b);
    ok = ok && calls.free == 1 && calls.desc_free == 1;

    /* A BF16 device copy is staged through the same table: 3.0 rounds to 0x4040. */
    bn_blob *s = bn_blob_new("s", 1, 1, 1, 2);
    if (!s || bn_blob_set_bf16(s) != BN_OK || !(h = bn_blob_host_wr(s))) return 0;
    h[0] = 3.0f, h[1] = 1.0f;
    const uint16_t *d16 = bn_blob_dev16_rd(s);
    ok = ok && d16 && d16[0] == 0x4040 && d16[1] == 0x3f80 && calls.h2d == 2;
    bn_blob_free(s);
    return ok && calls.free == 2;
}

BN_TEST(device_ops_blobs_reach_the_device_through_the_table)
{
    const bn_device_ops *was = bn_device_ops_current();
    memset(&calls, 0, sizeof calls);
    bn_device_ops_install(&fake_ops);
    int ok = blob_round_trip();
    bn_device_ops_install(was);
    CHECK_MSG(ok, "calls: alloc %d zero %d h2d %d d2h %d free %d desc %d/%d", calls.alloc, calls.zero, calls.h2d,
              calls.d2h, calls.free, calls.desc_set, calls.desc_free);
    return BN_PASS;
}

BN_TEST(device_ops_net_setup_asks_the_table_for_device_memory)
{
    bn_net *net;
    CHECK_OK(bn_net_from_text("[input]\nchannels = 1\nheight = 8\nwidth = 8\n[dense]\noutputs = 10\n[softmax_ce]\n",
                              "memory.cfg", &net));
    bn_ctx ctx = {.device = 0, .name = "fake"};
    const bn_device_ops *was = bn_device_ops_current();
    memset(&calls, 0, sizeof calls);
    bn_device_ops_install(&fake_ops);
    bn_clear_error();
    bn_status s = bn_net_setup(net, 64, &ctx, 0, 1);
    bn_device_ops_install(was);
    /* Refused on the fake device's 1000 free bytes, before any device buffer was made. */
    CHECK_MSG(s == BN_ERR_USAGE && strstr(bn_last_error(), "device memory") && strstr(bn_last_error(), "fake"),
              "status %d: %s", (int)s, bn_last_error());
    CHECK(calls.memory == 1 && calls.alloc == 0);
    bn_net_free(net);
    return BN_PASS;
}
