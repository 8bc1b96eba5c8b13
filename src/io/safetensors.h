/* safetensors.h - the safetensors file format, for float32 tensors: an 8-byte little-endian
 * header length, a JSON header naming each tensor's dtype, shape and byte range in the data
 * section ("data_offsets"), then the raw little-endian data. String metadata lives in the
 * header's "__metadata__" object. Files are written atomically (temporary file, fsync,
 * rename, directory sync); reading trusts nothing and every message names the file. */
#ifndef BN_SAFETENSORS_H
#define BN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "json.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One "__metadata__" entry to write. */
typedef struct bn_safetensors_field {
    const char *key, *value;
} bn_safetensors_field;

/* One tensor to write: its product(dims) floats at data, in row-major order. */
typedef struct bn_safetensors_tensor {
    const char *name;
    int rank;
    const uint64_t *dims;
    const float *data;
} bn_safetensors_tensor;

/* A file opened by bn_safetensors_open. Callers only read the fields. */
typedef struct bn_safetensors {
    const char *path;       /* the caller's string, named in every message */
    int fd;
    uint64_t data_start;    /* 8 + header length */
    uint64_t data_len;      /* bytes after the header */
    bn_json *header;
    const bn_json *meta;    /* the "__metadata__" object, NULL when absent */
    size_t meta_index;      /* meta's place among the header's members, when meta is there */
    size_t num_tensors;     /* header members other than "__metadata__" */
} bn_safetensors;

/* One tensor entry of an open file, checked by bn_safetensors_check_entry. */
typedef struct bn_safetensors_entry {
    const char *name;       /* the header's key; owned by the open file */
    size_t name_len;        /* a key may hold NUL bytes */
    const bn_json *shape;   /* array of non-negative integers; owned by the open file */
    uint64_t begin;         /* byte offset into the data section */
    uint64_t count;         /* elements */
} bn_safetensors_entry;

/* Writes the metadata and the tensors, in the order given, to path, replacing any file
 * there only once the new one is complete and on disk. Temporary files that earlier saves to
 * path left behind (killed during the write) are removed. */
bn_status bn_safetensors_save(const char *path, const bn_safetensors_field *meta, size_t num_meta,
                              const bn_safetensors_tensor *tensors, size_t num_tensors);

/* Whether bn_safetensors_save could write path, checked before any work is done: path is not a
 * directory or another file that is not a regular one, and its directory exists and takes a
 * new file (one is created and removed). Its errors are usage errors: path is the user's. */
bn_status bn_safetensors_check_target(const char *path);

/* Opens path and checks its header length, that the header is a JSON object and that all
 * "__metadata__" values are strings. f holds the open file and the parsed header until
 * bn_safetensors_close, which it needs even when this fails. */
bn_status bn_safetensors_open(const char *path, bn_safetensors *f);

/* Closes the file and frees the header; safe to call twice. */
void bn_safetensors_close(bn_safetensors *f);

/* The metadata string under key, or NULL when absent; owned by f. */
const char *bn_safetensors_meta(const bn_safetensors *f, const char *key);

/* Checks tensor entry i (< f->num_tensors, in header order) for form, dtype F32, shape and
 * bounds within the data section, and describes it in *e. */
bn_status bn_safetensors_check_entry(const bn_safetensors *f, size_t i, bn_safetensors_entry *e);

/* 1 when e's shape is exactly dims[0..rank), else 0. */
int bn_safetensors_shape_is(const bn_safetensors_entry *e, const uint64_t *dims, int rank);

/* Writes e's shape as "[3,32]" into buf (at most cap bytes), for messages. */
void bn_safetensors_shape_text(const bn_safetensors_entry *e, char *buf, size_t cap);

/* Reads e's e->count floats into the caller's dst, refusing NaN and infinity. */
bn_status bn_safetensors_read_f32(const bn_safetensors *f, const bn_safetensors_entry *e, float *dst);

/* Copies len bytes of a string from a file into buf (cap bytes) for a message, control
 * characters as '?' and a long string cut with "..."; returns buf. */
const char *bn_safetensors_printable(const char *s, size_t len, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
