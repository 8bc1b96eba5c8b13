/* nvtx.h - named ranges on the profiler timeline, in the "blobnet" NVTX domain.
 * Header-only NVTX v3 underneath: with no tool attached a push costs one branch. Built
 * without NVTX headers (or with BN_NO_NVTX) the calls compile to nothing. */
#ifndef BN_NVTX_H
#define BN_NVTX_H

#ifdef __cplusplus
extern "C" {
#endif

/* Range categories; each has its own colour on the timeline. */
typedef enum bn_nvtx_kind {
    BN_NVTX_LAYER_COMPUTE,  /* dense, conv */
    BN_NVTX_LAYER_POOL,
    BN_NVTX_LAYER_ACTIVATION,
    BN_NVTX_LAYER_LOSS,
    BN_NVTX_LAYER_OTHER,
    BN_NVTX_OPTIMIZER,
    BN_NVTX_STEP,           /* step, epoch, eval */
    BN_NVTX_TRANSFER,       /* host-device copies */
    BN_NVTX_COMM            /* collectives between GPUs (allreduce) */
} bn_nvtx_kind;

/* Opens a range named `name` (copied by NVTX) in the blobnet domain. */
void bn_nvtx_push(const char *name, bn_nvtx_kind kind);

/* Closes the innermost open range. */
void bn_nvtx_pop(void);

#ifdef __cplusplus
}
#endif
#endif
