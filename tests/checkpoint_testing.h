/* checkpoint_testing.h - what the checkpoint tests share (test_checkpoint.c, its saves in
 * test_checkpoint_save.c, the files it refuses in test_checkpoint_bad_input.c): a small model and
 * a fixture of it whose every saved value differs from the defaults, and helpers that read, write
 * and edit a safetensors file byte by byte. Defined in test_util_checkpoint.c. */
#ifndef BN_CHECKPOINT_TESTING_H
#define BN_CHECKPOINT_TESTING_H

#include <stddef.h>

#include "core/net.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"

/* conv2d1.weight [2,1,3,3], conv2d1.bias [2], dense1.weight [3,32], dense1.bias [3]:
 * 119 floats, 476 bytes of weights, then as many of momentum. */
#define CK_MODEL \
    "[input]\nchannels=1\nheight=6\nwidth=6\n[conv2d]\nfilters=2\nsize=3\n[dense]\noutputs=3\n[softmax_ce]\n"
#define CK_NUM_PARAMS 119
#define CK_WEIGHT_BYTES (4 * CK_NUM_PARAMS)

typedef struct ck_fixture {
    bn_net *net;
    bn_optimizer *opt;
    bn_train_state st;
} ck_fixture;

/* Writes tmpdir/name into buf and returns buf. */
const char *ck_tmp_path(char *buf, size_t cap, const char *name);

/* Distinct values in every element, derived from base. */
void ck_fill(bn_blob *b, float base);

/* A set-up net with the optimizer called optimizer, whose weights, optimizer state, iter and training
 * state all differ from their defaults, with a few awkward floats. Returns BN_PASS or BN_FAIL. */
int ck_make_fixture_of(ck_fixture *f, const char *model, float base, const char *optimizer);

/* ck_make_fixture_of with SGD. */
int ck_make_fixture(ck_fixture *f, const char *model, float base);

void ck_free_fixture(ck_fixture *f);

/* A copy of b's current elements (freed by the caller), or NULL. */
float *ck_copy_floats(bn_blob *b);

/* 1 when b's current elements are ref's bits. */
int ck_same_floats(bn_blob *b, const float *ref);

/* 1 when every field of the two training states is the same (the sums bit for bit). */
int ck_same_state(const bn_train_state *a, const bn_train_state *b);

/* Writes n bytes to path; 0 or -1. */
int ck_write_raw(const char *path, const void *bytes, size_t n);

/* A safetensors file with this header (no padding added) and data; 0 or -1. */
int ck_write_parts(const char *path, const char *header, size_t hlen, const void *data, size_t dlen);

/* A safetensors file read whole, its header and data located. */
typedef struct ck_file_parts {
    unsigned char *bytes;   /* the whole file */
    size_t size;
    char *header;           /* NUL-terminated copy of the header */
    size_t header_len;
    unsigned char *data;    /* points into bytes */
    size_t data_len;
} ck_file_parts;

/* Reads path into p (freed with ck_free_parts); 0 or -1. */
int ck_read_parts(const char *path, ck_file_parts *p);

void ck_free_parts(ck_file_parts *p);

/* Copies src to dst with the first `from` in the header replaced by `to`; -1 if absent. */
int ck_edit_header(const char *src, const char *dst, const char *from, const char *to);

/* Copies src to dst without the header entry `"name":{...}` (and its leading comma). */
int ck_drop_entry(const char *src, const char *dst, const char *name);

/* Copies src to dst with the 4 data bytes at byte offset `at` of the data section set to v. */
int ck_poke_float(const char *src, const char *dst, size_t at, float v);

/* 1 when dir holds a save's temporary file (or cannot be read). */
int ck_has_temp_files(const char *dir);

/* Fails unless bn_checkpoint_load(path) fails with code and needle, and leaves weights,
 * optimizer state, iter and training state exactly as they were. */
int ck_load_fails(ck_fixture *f, const char *path, bn_status code, const char *needle);

/* The same for bn_checkpoint_load_weights. */
int ck_load_weights_fails(ck_fixture *f, const char *path, bn_status code, const char *needle);

/* A fixture and a checkpoint of it at tmpdir/name. */
int ck_saved_fixture(ck_fixture *f, char *path, size_t cap, const char *name);

#endif
