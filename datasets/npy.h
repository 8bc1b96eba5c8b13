/* npy.h - NumPy's .npy array format: the magic "\x93NUMPY", a version, and a header that is a
 * Python dict literal giving the element type ('descr'), the order ('fortran_order') and the
 * shape, then the elements, row-major unless the order says Fortran's. */
#ifndef BN_NPY_H
#define BN_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "zip.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BN_NPY_MAX_DIMS 8

/* Room for the preamble bn_npy_preamble writes. */
#define BN_NPY_PREAMBLE_MAX 512

/* An element type as 'descr' gives it: "<f4", "|u1", ">i8". */
typedef struct bn_npy_type {
    char kind;        /* NumPy's kind letter: 'u' unsigned, 'i' signed, 'f' float, 'b' bool, ... */
    int size;         /* bytes per element */
    int big_endian;   /* the bytes of an element run from the most significant */
    char descr[24];   /* as the header spells it, for messages */
} bn_npy_type;

typedef struct bn_npy_header {
    bn_npy_type type;
    int fortran_order;
    int ndim;
    uint64_t shape[BN_NPY_MAX_DIMS];
    char shape_text[BN_NPY_MAX_DIMS * 22 + 4];  /* "(60000, 28, 28)", for messages */
} bn_npy_header;

/* Reads an array's preamble and header from s, which is then at the first element; the shape must
 * account for exactly the bytes left in s. Errors start with s->what. */
bn_status bn_npy_read_header(bn_zip_stream *s, bn_npy_header *h);

/* Writes into buf (BN_NPY_PREAMBLE_MAX bytes) the version 1.0 preamble of a C-order array of
 * descr and shape[0..ndim); returns its length, a multiple of 64 as NumPy aligns it. */
size_t bn_npy_preamble(char *buf, const char *descr, const uint64_t *shape, int ndim);

#ifdef __cplusplus
}
#endif
#endif
