/* test_safetensors.c - the safetensors format alone, without a network: two tensors and their
 * metadata through a save and a read, a header written by hand with "__metadata__" between
 * tensors, and broken files (header length, offsets, NaN) refused with messages naming them. */
#include "testing.h"

#include <float.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/status.h"
#include "io/safetensors.h"

static const char *tmp_path(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", bn_test_tmpdir(), name);
    return buf;
}

/* A file of header's 8-byte length, header itself, then count floats, all little-endian. */
static int write_file(const char *path, const char *header, const float *v, size_t count)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t hlen = strlen(header);
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    int ok = fwrite(len, 1, 8, f) == 8 && fwrite(header, 1, hlen, f) == hlen;
    for (size_t i = 0; ok && i < count; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        unsigned char le[4] = {(unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16),
                               (unsigned char)(u >> 24)};
        ok = fwrite(le, 1, 4, f) == 4;
    }
    return fclose(f) == 0 && ok ? 0 : -1;
}

BN_TEST(safetensors_round_trip_keeps_tensors_and_metadata)
{
    char path[512];
    tmp_path(path, sizeof path, "pair.safetensors");
    const float a[6] = {1.5f, -0.0f, 1e-40f /* subnormal */, FLT_MAX, -FLT_MIN, 3.0f};
    const float b[4] = {-2.25f, 0.0f, 7.0f, 1.0f / 3.0f};
    const uint64_t a_dims[2] = {2, 3}, b_dims[1] = {4};
    const bn_safetensors_tensor tensors[2] = {{"layer.a", 2, a_dims, a}, {"b", 1, b_dims, b}};
    const bn_safetensors_field meta[2] = {{"kind", "test"}, {"note", "a \"quoted\"\nvalue"}};
    CHECK_OK(bn_safetensors_save(path, meta, 2, tensors, 2));

    bn_safetensors f;
    CHECK_OK(bn_safetensors_open(path, &f));
    CHECK(f.data_start % 8 == 0);
    CHECK(f.data_len == sizeof a + sizeof b);
    CHECK(f.num_tensors == 2);
    CHECK(strcmp(bn_safetensors_meta(&f, "kind"), "test") == 0);
    CHECK(strcmp(bn_safetensors_meta(&f, "note"), "a \"quoted\"\nvalue") == 0);
    CHECK(bn_safetensors_meta(&f, "absent") == NULL);

    bn_safetensors_entry e;
    char shape[32];
    float got[6];
    CHECK_OK(bn_safetensors_check_entry(&f, 0, &e));
    CHECK(e.name_len == 7 && memcmp(e.name, "layer.a", 7) == 0);
    CHECK(e.begin == 0 && e.count == 6);
    CHECK(bn_safetensors_shape_is(&e, a_dims, 2) && !bn_safetensors_shape_is(&e, b_dims, 1));
    bn_safetensors_shape_text(&e, shape, sizeof shape);
    CHECK(strcmp(shape, "[2,3]") == 0);
    CHECK_OK(bn_safetensors_read_f32(&f, &e, got));
    CHECK(memcmp(got, a, sizeof a) == 0);

    CHECK_OK(bn_safetensors_check_entry(&f, 1, &e));
    CHECK(e.name_len == 1 && e.name[0] == 'b');
    CHECK(e.begin == sizeof a && e.count == 4);
    CHECK(bn_safetensors_shape_is(&e, b_dims, 1));
    CHECK_OK(bn_safetensors_read_f32(&f, &e, got));
    CHECK(memcmp(got, b, sizeof b) == 0);
    bn_safetensors_close(&f);
    bn_safetensors_close(&f);
    return BN_PASS;
}

BN_TEST(safetensors_reads_metadata_between_tensors)
{
    char path[512];
    tmp_path(path, sizeof path, "middle.safetensors");
    const float data[3] = {1.0f, 2.0f, 3.0f};
    CHECK(write_file(path,
                     "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                     "\"__metadata__\":{\"k\":\"v\"},"
                     "\"y\":{\"dtype\":\"F32\",\"shape\":[2,1],\"data_offsets\":[4,12]}}",
                     data, 3) == 0);
    bn_safetensors f;
    CHECK_OK(bn_safetensors_open(path, &f));
    CHECK(f.num_tensors == 2);
    CHECK(strcmp(bn_safetensors_meta(&f, "k"), "v") == 0);
    bn_safetensors_entry e;
    float got[2];
    CHECK_OK(bn_safetensors_check_entry(&f, 0, &e));
    CHECK(e.name_len == 1 && e.name[0] == 'x');
    CHECK_OK(bn_safetensors_check_entry(&f, 1, &e));
    CHECK(e.name_len == 1 && e.name[0] == 'y' && e.begin == 4 && e.count == 2);
    CHECK_OK(bn_safetensors_read_f32(&f, &e, got));
    CHECK(got[0] == 2.0f && got[1] == 3.0f);
    bn_safetensors_close(&f);
    return BN_PASS;
}

BN_TEST(safetensors_refuses_a_corrupted_header_length)
{
    char path[512];
    tmp_path(path, sizeof path, "length.safetensors");
    const uint64_t dims[1] = {2};
    const float v[2] = {1.0f, 2.0f};
    const bn_safetensors_tensor t = {"t", 1, dims, v};
    CHECK_OK(bn_safetensors_save(path, NULL, 0, &t, 1));
    FILE *fp = fopen(path, "r+b");
    CHECK(fp);
    CHECK(fputc(0x7f, fp) != EOF && fseek(fp, 2, SEEK_SET) == 0 && fputc(0x01, fp) != EOF);
    CHECK(fclose(fp) == 0);
    bn_safetensors f;
    CHECK_ERR(bn_safetensors_open(path, &f), BN_ERR_DATA, "runs past the end of the file");
    CHECK(strstr(bn_last_error(), path) != NULL);
    bn_safetensors_close(&f);
    return BN_PASS;
}

BN_TEST(safetensors_refuses_offsets_past_the_data)
{
    char path[512];
    tmp_path(path, sizeof path, "bounds.safetensors");
    const float data[2] = {1.0f, 2.0f};
    CHECK(write_file(path, "{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", data, 2) == 0);
    bn_safetensors f;
    CHECK_OK(bn_safetensors_open(path, &f));
    bn_safetensors_entry e;
    CHECK_ERR(bn_safetensors_check_entry(&f, 0, &e), BN_ERR_DATA,
              "tensor t: data_offsets end 16 is past the data section (8 bytes)");
    CHECK(strstr(bn_last_error(), path) != NULL);
    bn_safetensors_close(&f);
    return BN_PASS;
}

BN_TEST(safetensors_refuses_nan)
{
    char path[512];
    tmp_path(path, sizeof path, "nan.safetensors");
    const float data[2] = {1.0f, NAN};
    CHECK(write_file(path, "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 2) == 0);
    bn_safetensors f;
    CHECK_OK(bn_safetensors_open(path, &f));
    bn_safetensors_entry e;
    float got[2];
    CHECK_OK(bn_safetensors_check_entry(&f, 0, &e));
    CHECK_ERR(bn_safetensors_read_f32(&f, &e, got), BN_ERR_DATA, "tensor t holds NaN at element 1");
    CHECK(strstr(bn_last_error(), path) != NULL);
    bn_safetensors_close(&f);
    return BN_PASS;
}
