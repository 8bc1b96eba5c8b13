/* typed.cuh - a blob's device data as the element type T it holds (float, or __nv_bfloat16
 * under --precision bf16), for layer code templated on T that loads and stores through
 * bf16.cuh's bn_ld / bn_st: one body serves both precisions, and the FP32 instantiation is the
 * code it was before. */
#ifndef BN_TYPED_CUH
#define BN_TYPED_CUH

#include <cuda_bf16.h>

#include "core/blob.h"

/* With bn_blob_dev_rd/wr's (or bn_blob_dev16_rd/wr's) sync rules and errors: NULL on failure,
 * the error recorded, a blob that holds the other type among them. */
template <typename T> const T *bn_typed_rd(bn_blob *b);
template <typename T> T *bn_typed_wr(bn_blob *b);
template <> inline const float *bn_typed_rd<float>(bn_blob *b) { return bn_blob_dev_rd(b); }
template <> inline float *bn_typed_wr<float>(bn_blob *b) { return bn_blob_dev_wr(b); }
template <> inline const __nv_bfloat16 *bn_typed_rd<__nv_bfloat16>(bn_blob *b)
{
    return (const __nv_bfloat16 *)bn_blob_dev16_rd(b);
}
template <> inline __nv_bfloat16 *bn_typed_wr<__nv_bfloat16>(bn_blob *b)
{
    return (__nv_bfloat16 *)bn_blob_dev16_wr(b);
}

/* Whether b holds T on the device; if not, the error is recorded, naming the blob. */
template <typename T> bool bn_typed_holds(const bn_blob *b)
{
    const bool want16 = sizeof(T) == sizeof(__nv_bfloat16);
    if (bn_blob_is_bf16(b) == (int)want16) return true;
    bn_error(BN_ERR_INTERNAL, "a layer reached blob %s as %s, but it holds %s", b->name, want16 ? "BF16" : "FP32",
             want16 ? "FP32" : "BF16");
    return false;
}

/* bn_blob_dev_rows_rd/wr as T, for a pass that honours a slice's stride (*stride, elements
 * between examples): NULL on failure, the error recorded, a blob that holds the other type
 * among them. */
template <typename T> const T *bn_typed_rows_rd(bn_blob *b, size_t *stride)
{
    return bn_typed_holds<T>(b) ? (const T *)bn_blob_dev_rows_rd(b, stride) : NULL;
}

template <typename T> T *bn_typed_rows_wr(bn_blob *b, size_t *stride)
{
    return bn_typed_holds<T>(b) ? (T *)bn_blob_dev_rows_wr(b, stride) : NULL;
}

/* Declares var as the blob's device data as T, or returns the recorded error. */
#define BN_TYPED_RD(T, var, blob) const T *var = bn_typed_rd<T>(blob); if (!var) return bn_last_status()
#define BN_TYPED_WR(T, var, blob) T *var = bn_typed_wr<T>(blob); if (!var) return bn_last_status()

#endif
