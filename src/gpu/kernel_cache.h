/* kernel_cache.h - the kernel choices timed on this machine, kept between runs, so that a layer
 * shape is timed once per device and library versions rather than at every start.
 *
 * A choice is a line of text under a key; the layers that time their kernels build both, the
 * key through the chooser (chooser.h: bn_chooser_key), which also reads a choice back and keeps
 * a new one (bn_chooser_lookup, bn_chooser_keep). A key begins with the scope
 * (bn_kernel_cache_scope): the device, its compute capability and multiprocessors, the CUDA
 * version of its driver, the CUDA runtime, cuDNN and cuBLASLt versions and
 * BN_KERNEL_CACHE_VERSION, so a new driver stack, another GPU or a change to blobnet's kernels
 * finds no old entry and times afresh. Choices live in the process (the first layer of a shape
 * times it, every later one takes its choice) and in a file of lines `KEY<TAB>CHOICE`, read at
 * the first lookup and rewritten whole (through a temporary file renamed over it) at every new
 * choice:
 *
 *   $BLOBNET_KERNEL_CACHE                       when set; "off" keeps choices in the process only
 *   $XDG_CACHE_HOME/blobnet/kernels.txt         else, when XDG_CACHE_HOME is set
 *   $HOME/.cache/blobnet/kernels.txt            else
 *
 * The training command keeps one more kind of entry there: which of the library's GPU code modules
 * a model's run launched kernels from (gpu/code_load.cu).
 *
 * Deleting the file makes every shape be timed again. Two processes that time at once may each
 * rewrite the file; the later one's entries win and the other's shapes are timed again later. */
#ifndef BN_KERNEL_CACHE_H
#define BN_KERNEL_CACHE_H

#include <stddef.h>

#include "core/device.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Part of every key: raise it whenever a kernel family, a candidate set, the timing or the check
 * of a timed pick changes, so that choices made by an older build are not taken (5: picks that
 * disagree with a reference are no longer taken, and older choices were never checked; 6: the
 * row-tiled family's small-batch launch shapes; 7: the implicit GEMM on the tensor cores, offered
 * for every pass; 9: the halo family's passes split where their tiles are few; 10: cuDNN's graph
 * passes also time every engine of the graph, not only the heuristics' configurations; 11: every
 * timing queued behind a hold of the stream, so that it times the device, not the host; 12: the
 * Winograd family, offered for 3x3 layers of 48 channels and filters or more; 13: the FP32 tiles'
 * data pass, offered for stride 1, windows up to 7 and up to 512 positions of dy; 14: the dense
 * layer's 32 x 32 tensor-core tiles in fewer, longer ranges for the forward and input-gradient
 * products; 15: a tie rule's pick that is not the fastest timed again beside the fastest, and the
 * data pass's runners that tie beside their filter pass timed to the data pass's own end; 16: a
 * data pass timed beside a cuDNN filter pass, which now runs on the side stream as in the step). */
#define BN_KERNEL_CACHE_VERSION 16

/* The longest key and choice, with their terminating zeros. */
#define BN_KERNEL_KEY_MAX 384
#define BN_KERNEL_CHOICE_MAX 128

/* The file the choices are kept in (owned by the library), or NULL when they are kept in the
 * process only. */
const char *bn_kernel_cache_path(void);

/* Looks key up: *found is 1 and the choice is copied into choice (cap bytes) when there is one,
 * else 0. Reads the file at the first lookup: a line that is not KEY<TAB>CHOICE, a key or choice
 * too long, or a file that cannot be read is an error naming the file (and line). */
bn_status bn_kernel_cache_get(const char *key, char *choice, size_t cap, int *found);

/* Records choice under key for the process and rewrites the file with it. A file that cannot be
 * written is reported once on stderr, as a warning: the run goes on with its choices in the
 * process. Returns an error only for a key or choice that cannot be kept (too long, a tab or a
 * line break in it). */
bn_status bn_kernel_cache_put(const char *key, const char *choice);

/* Forgets every choice of the process and the file's name, so that the next lookup reads
 * BLOBNET_KERNEL_CACHE and the file again (for tests). */
void bn_kernel_cache_reset(void);

/* Writes the scope of ctx's device (name, compute capability, multiprocessors, the CUDA version
 * of the driver, CUDA runtime, cuDNN and cuBLASLt versions, BN_KERNEL_CACHE_VERSION) into buf
 * (CUDA builds). */
bn_status bn_kernel_cache_scope(const bn_ctx *ctx, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
