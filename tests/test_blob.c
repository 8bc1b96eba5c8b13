/* Blob sync-state behaviour on the host side, views and reshape limits. */
#include <string.h>

#include "core/blob.h"
#include "core/device.h"
#include "testing.h"

BN_TEST(blob_starts_unsynced_and_reads_zeros)
{
    bn_blob *b = bn_blob_new("b", 2, 3, 4, 5);
    CHECK(b != NULL);
    CHECK(bn_blob_count(b) == 120);
    CHECK(bn_blob_state(b) == BN_SYNC_NONE);
    CHECK(b->host == NULL && b->dev == NULL); /* nothing allocated before first use */
    const float *h = bn_blob_host_rd(b);
    CHECK(h != NULL);
    for (int i = 0; i < 120; i++) CHECK(h[i] == 0.0f);
    CHECK(bn_blob_state(b) == BN_SYNC_HOST);
    bn_blob_free(b);
    return BN_PASS;
}

BN_TEST(blob_host_write_marks_host_newer)
{
    bn_blob *b = bn_blob_new("b", 1, 1, 1, 4);
    float *w = bn_blob_host_wr(b);
    CHECK(w != NULL);
    w[3] = 7.0f;
    CHECK(bn_blob_state(b) == BN_SYNC_HOST);
    CHECK(bn_blob_host_rd(b)[3] == 7.0f);
    bn_blob_free(b);
    return BN_PASS;
}

BN_TEST(blob_views_share_root_buffer_and_state)
{
    bn_blob *root = bn_blob_new("slab", 10, 1, 1, 1);
    bn_blob *v = bn_blob_new_view("v", root, 4, 2, 3, 1, 1);
    CHECK(v != NULL);
    float *vw = bn_blob_host_wr(v);
    CHECK(vw != NULL);
    for (int i = 0; i < 6; i++) vw[i] = (float)(i + 1);
    const float *r = bn_blob_host_rd(root);
    CHECK(r[3] == 0.0f && r[4] == 1.0f && r[9] == 6.0f);
    CHECK(vw == r + 4);
    CHECK(bn_blob_state(v) == bn_blob_state(root));
    bn_clear_error();
    CHECK(bn_blob_new_view("too big", root, 5, 6, 1, 1, 1) == NULL);
    CHECK(strstr(bn_last_error(), "does not fit") != NULL);
    bn_blob_free(v);
    bn_blob_free(root);
    return BN_PASS;
}

/* A slice of channels 1..2 of a 3-example, 4-channel root of 2-value planes: its host read is
 * the gathered examples, every packed access is refused by name, and it must fit its root. */
BN_TEST(blob_slices_gather_their_channels_and_refuse_packed_access)
{
    bn_blob *root = bn_blob_new("join.out", 3, 4, 1, 2);
    float *w = bn_blob_host_wr(root);
    CHECK(w != NULL);
    for (int i = 0; i < 24; i++) w[i] = (float)i;
    bn_blob *s = bn_blob_new_slice("r.out", root, 1, 3, 2);
    CHECK(s != NULL);
    CHECK(bn_blob_is_slice(s) && !bn_blob_is_slice(root));
    CHECK(s->c == 2 && s->h == 1 && s->w == 2 && s->example_stride == 8 && s->offset == 2);
    const float *g = bn_blob_host_rd(s);
    CHECK(g != NULL);
    /* Example e holds root elements 8e + 2 .. 8e + 5. */
    for (int e = 0; e < 3; e++)
        for (int k = 0; k < 4; k++) CHECK_MSG(g[e * 4 + k] == (float)(8 * e + 2 + k), "element %d of example %d", k, e);
    /* The root changes, and a second read sees it; at a smaller batch only those examples. */
    w = bn_blob_host_wr(root);
    w[10] = -1.0f;
    CHECK_OK(bn_blob_reshape(s, 2, 2, 1, 2));
    g = bn_blob_host_rd(s);
    CHECK(g[4] == -1.0f && g[7] == 13.0f);
    bn_clear_error();
    CHECK(bn_blob_host_wr(s) == NULL);
    CHECK(strstr(bn_last_error(), "r.out is a slice of join.out's channels") != NULL);
    CHECK(bn_blob_dev_rd(s) == NULL && strstr(bn_last_error(), "reads its examples as packed") != NULL);
    CHECK(bn_blob_dev_wr(s) == NULL && strstr(bn_last_error(), "r.out") != NULL);
    CHECK(bn_blob_dev16_rd(s) == NULL && bn_blob_dev16_wr(s) == NULL);
    CHECK_ERR(bn_blob_zero(s), BN_ERR_INTERNAL, "zeroed only through that blob");
    CHECK(bn_blob_tensor_desc(s) == NULL);
    CHECK(bn_blob_host_rd(root)[10] == -1.0f); /* none of it touched the root */
    CHECK(bn_blob_new_slice("past", root, 3, 3, 2) == NULL && strstr(bn_last_error(), "channels 3 to 4") != NULL);
    CHECK(bn_blob_new_slice("more", root, 0, 4, 1) == NULL && strstr(bn_last_error(), "does not fit") != NULL);
    bn_blob_free(s);
    bn_blob_free(root);
    return BN_PASS;
}

BN_TEST(blob_reshape_within_capacity_only)
{
    bn_blob *b = bn_blob_new("b", 8, 2, 3, 3);
    CHECK_OK(bn_blob_reshape(b, 3, 2, 3, 3));
    CHECK(bn_blob_count(b) == 54 && b->capacity == 144);
    CHECK_ERR(bn_blob_reshape(b, 9, 2, 3, 3), BN_ERR_INTERNAL, "exceeds its capacity");
    CHECK_ERR(bn_blob_reshape(b, 0, 2, 3, 3), BN_ERR_INTERNAL, "capacity");
    bn_blob_free(b);
    return BN_PASS;
}

BN_TEST(blob_rejects_non_positive_shape)
{
    bn_clear_error();
    CHECK(bn_blob_new("bad", 1, 0, 3, 3) == NULL);
    CHECK(strstr(bn_last_error(), "non-positive") != NULL);
    return BN_PASS;
}

BN_TEST(blob_zero_clears_host_values)
{
    bn_blob *b = bn_blob_new("b", 1, 1, 2, 2);
    float *w = bn_blob_host_wr(b);
    for (int i = 0; i < 4; i++) w[i] = 1.0f;
    CHECK_OK(bn_blob_zero(b));
    for (int i = 0; i < 4; i++) CHECK(bn_blob_host_rd(b)[i] == 0.0f);
    bn_blob_free(b);
    return BN_PASS;
}

BN_TEST(blob_device_access_without_context_fails_cleanly)
{
    if (bn_ctx_current()) BN_SKIP_TEST("a device context is open");
    bn_blob *b = bn_blob_new("b", 1, 1, 1, 4);
    bn_clear_error();
    CHECK(bn_blob_dev_rd(b) == NULL);
    CHECK(bn_last_status() == BN_ERR_DEVICE);
    CHECK(bn_blob_state(b) == BN_SYNC_NONE);
    bn_blob_free(b);
    return BN_PASS;
}

BN_TEST(gpu_blob_round_trip_tracks_newest_copy)
{
    bn_ctx *ctx;
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    CHECK_OK(bn_ctx_open(0, &ctx));
    bn_blob *b = bn_blob_new("b", 1, 1, 1, 5);
    float *h = bn_blob_host_wr(b);
    for (int i = 0; i < 5; i++) h[i] = (float)i;
    CHECK(bn_blob_state(b) == BN_SYNC_HOST);
    CHECK(bn_blob_dev_rd(b) != NULL);
    CHECK(bn_blob_state(b) == BN_SYNC_BOTH);
    CHECK(bn_blob_dev_wr(b) != NULL);
    CHECK(bn_blob_state(b) == BN_SYNC_DEVICE);
    CHECK_OK(bn_blob_zero(b)); /* on the device, since it has a buffer there */
    const float *back = bn_blob_host_rd(b);
    CHECK(bn_blob_state(b) == BN_SYNC_BOTH);
    for (int i = 0; i < 5; i++) CHECK(back[i] == 0.0f);
    CHECK(bn_blob_tensor_desc(b) != NULL);
    bn_blob_free(b);
    return BN_PASS;
}
