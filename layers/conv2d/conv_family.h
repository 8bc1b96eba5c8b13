/* conv_family.h - the common face of blobnet's convolution kernel families and their table.
 *
 * A family is a set of kernels for some of the three passes of a convolution (forward,
 * backward-data, backward-filter; cross-correlation, FP32 results, bias and its gradient fused).
 * Each one says through this face, for a shape (the layer's geometry, batch size, a fused 2x2 max
 * pooling, the tf32 flag), which passes it applies to and why not where it does not, what
 * workspace its filter pass needs, how it launches (its plan, made on the host with no device
 * work), and runs a pass from one entry point. conv2d's plan making, timing and cache choice
 * (conv_plan.cu, conv_choice.cu) and the conv-families command iterate over the table; nothing
 * else names a family. cuDNN is not in the table: conv2d's plans run it beside the families.
 *
 * Adding a family: its kernels (conv_X.h, conv_X.cu with its entry point bn_conv_run_X), its plan
 * and descriptor (conv_X_plan.c), a member of bn_conv_family_plan, a BN_CONV_FAMILY_* value and
 * one line of bn_conv_families (conv_family.c). */
#ifndef BN_CONV_FAMILY_H
#define BN_CONV_FAMILY_H

#include <stddef.h>

#include "conv_argmax.h"
#include "conv_direct.h"
#include "conv_fma.h"
#include "conv_halo.h"
#include "conv_igemm.h"
#include "conv_pooled.h"
#include "conv_relu.h"
#include "conv_rows.h"
#include "conv_tensor.h"
#include "conv_wino.h"
#include "core/status.h"
#include "im2col.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The passes, in the order plans and choices keep them. */
enum { BN_CONV_FORWARD, BN_CONV_DATA, BN_CONV_FILTER, BN_CONV_PASSES };
/* A family's serves or offered mask (bn_conv_family) when that is all three passes. */
#define BN_CONV_EVERY_PASS (1u << BN_CONV_FORWARD | 1u << BN_CONV_DATA | 1u << BN_CONV_FILTER)

/* The families by number, 1 up in the table's order (0: none, or cuDNN in a plan's runners);
 * bn_conv2d_gpu_force_own (conv2d.h) takes these. */
enum {
    BN_CONV_FAMILY_ANY = 0,
    BN_CONV_FAMILY_DIRECT = 1,
    BN_CONV_FAMILY_IGEMM = 2,
    BN_CONV_FAMILY_ROWS = 3,
    BN_CONV_FAMILY_TENSOR = 4,
    BN_CONV_FAMILY_ARGMAX = 5,
    BN_CONV_FAMILY_HALO = 6,
    BN_CONV_FAMILY_WINO = 7,
    BN_CONV_FAMILY_FMA = 8,
    BN_CONV_FAMILY_COUNT = 8
};

/* A split forward or data pass (its tiles' summed index shared among blocks, the last to finish
 * adding the others' partial sums) keeps its scratch as BN_CONV_SPLIT_COUNTERS counters, one a
 * tile (a pass of more tiles is not split), then the partial sums. Every family keeps its
 * counters there, so they sit at the same place for every plan of the layer whichever family runs
 * it, and each launch leaves its own at zero: no plan finds another's partial sums where it keeps
 * its counters. */
#define BN_CONV_SPLIT_COUNTERS 1024

/* Where a forward or data pass's tiles alone give fewer blocks than the multiprocessors, the
 * families that can (the implicit GEMM, the halo kernels) share each tile's summed index among up
 * to BN_CONV_SPLIT_MAX blocks, within BN_CONV_SPLIT_SLOTS blocks a multiprocessor (the blocks
 * their launch bounds let one hold). bn_conv_split_share is the one rule both plans take. */
#define BN_CONV_SPLIT_MAX 8
#define BN_CONV_SPLIT_SLOTS 2

/* The blocks of a pass whose tiles each share their summed index in pieces of `per` steps. */
typedef long long (*bn_conv_split_blocks)(const void *pass, long long per);

/* The steps a block of a split pass takes: the summed index is `units` steps long (the implicit
 * GEMM's BK-deep stages, the halo kernels' chunks of channels), a block takes at least min_per of
 * them, and blocks(pass, per) counts the pass's blocks at that share. Of the shares of up to
 * BN_CONV_SPLIT_MAX pieces whose blocks stay within BN_CONV_SPLIT_SLOTS a multiprocessor, the one
 * whose fullest multiprocessor sums the least (the blocks spread evenly over `wave`, times a
 * block's steps). Of equal reckonings: alone on the GPU (a forward pass), the fewest blocks, since
 * two blocks of half the work on a multiprocessor that then holds two gain nothing and adding their
 * partial sums costs; `beside` another pass (a data pass, beside its layer's filter pass), the
 * most, since a wave of whole blocks waits for the multiprocessors the other pass holds, where
 * smaller blocks go to those that are free. Returns `units` (no split) where the unsplit blocks
 * fill a wave or no share gains. */
long long bn_conv_split_share(long long units, long long min_per, long long wave, int beside,
                              bn_conv_split_blocks blocks, const void *pass);

/* What a family is asked about. */
typedef struct bn_conv_shape {
    bn_conv_geom g;
    int filters, n;   /* output channels, batch size */
    int sms;          /* the device's multiprocessors (launch shapes aim at whole waves) */
    int tf32;         /* TF32 products allowed */
    int pooled;       /* a 2x2 max pooling at stride 2 reads the output, fused (conv_pooled.h) */
} bn_conv_shape;

/* One family's launch shapes for one shape: each family reads its own member alone. */
typedef union bn_conv_family_plan {
    bn_direct_plan direct;
    bn_igemm_plan igemm;
    bn_rows_plan rows;
    bn_tensor_plan tensor;
    bn_argmax_plan argmax;
    bn_halo_plan halo;
    bn_wino_plan wino;
    bn_fma_plan fma;
} bn_conv_family_plan;

/* The buffers of one pass (device pointers, NCHW; weights [filters][c][k][k]). */
typedef struct bn_conv_io {
    const float *x, *w, *b;
    float *y;                         /* forward: written, bias added */
    const bn_pooled_out *pooled_out;  /* forward: the pooling's output and mask written instead
                                         of y (only where writes_pooled says it can), or NULL */
    const float *dy;                  /* backward: the output gradient */
    const bn_pooled_dy *pooled_dy;    /* backward: dy read through the pooling instead (only where
                                         reads_pooled says it can), or NULL */
    float *dx;                        /* data: written */
    bn_conv_relu relu;                /* forward, data: a fused ReLU's output or input gradient
                                         written too (only where takes_relu says it can), or
                                         relu.out NULL */
    float *dw, *db;                   /* filter: added into */
    float *parts;                     /* filter: the family's partial sums (workspace bytes) */
    void *scratch;                    /* forward, data: the family's scratch (scratch bytes), apart
                                         from parts, since a data pass runs beside the filter
                                         pass */
    int beside;                       /* data, filter: the layer's other backward pass runs on the
                                         same family at the same time (the family may then size
                                         both to share the multiprocessors) */
} bn_conv_io;

/* One pass of a family on stream (a cudaStream_t). */
typedef bn_status (*bn_conv_entry)(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass, void *stream,
                                   const bn_conv_io *io);

typedef struct bn_conv_family {
    const char *name;   /* its runner name in the kernel cache's choices and, after "blobnet ", in
                           bn_conv2d_gpu_describe and the conv-families command */
    unsigned serves;    /* 1 << BN_CONV_* of the passes it has kernels for */
    unsigned offered;   /* of those, the passes conv2d's choice offers it for unless it is forced */
    int rank[BN_CONV_PASSES]; /* its place in the fixed rule's order of preference, per pass (0 first) */
    int needs_pooled;   /* its filter pass reads dy only through a fused pooling (never dy itself) */
    unsigned takes_relu; /* 1 << BN_CONV_FORWARD, _DATA: the passes whose epilogue also writes a
                            fused ReLU's output or input gradient (bn_conv_io.relu) */
    /* Fills p for shape s; no device work. */
    void (*plan)(bn_conv_family_plan *p, const bn_conv_shape *s);
    /* NULL when its kernels run `pass` (which it serves) of p, else why not, in a few words. */
    const char *(*refuses)(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass);
    /* Bytes of partial sums its filter pass needs (0 where it does not run it). */
    size_t (*workspace)(const bn_conv_family_plan *p);
    /* Bytes of scratch its forward and data passes need, a buffer of the layer's own for every
     * batch size's plan, zeroed when made: each launch leaves zeroed what the next one needs so.
     * NULL: none. */
    size_t (*scratch)(const bn_conv_family_plan *p);
    /* Whether its forward pass can write the pooling's output, and whether data (1) or filter (2)
     * can read dy through it; NULL: never. */
    int (*writes_pooled)(const bn_conv_family_plan *p);
    int (*reads_pooled)(const bn_conv_family_plan *p, int pass);
    /* How strongly the fixed rule takes it first for `pass` ahead of the order of preference (0:
     * not at all; the strongest claim among the families that can run the pass wins); NULL: 0. */
    int (*rule_claim)(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass);
    bn_conv_entry run;  /* NULL in a build without CUDA */
} bn_conv_family;

/* The table, BN_CONV_FAMILY_COUNT entries; family number f is bn_conv_families[f - 1]. */
extern const bn_conv_family *const bn_conv_families[BN_CONV_FAMILY_COUNT];

/* The family of that name, or NULL. */
const bn_conv_family *bn_conv_family_find(const char *name);

/* The family's number (BN_CONV_FAMILY_*) of that name, or 0. */
int bn_conv_family_number(const char *name);

/* Whether family f applies to pass `pass` of shape s with plan p (made by f->plan for s): 1, or
 * 0 with *why (a static string) saying why not. */
int bn_conv_family_applies(const bn_conv_family *f, const bn_conv_family_plan *p, const bn_conv_shape *s, int pass,
                           const char **why);

/* The families in the fixed rule's order of preference for pass `pass` (their ranks), by number:
 * the order the rule takes the first of, and the one a timed choice breaks ties in. */
void bn_conv_family_order(int pass, int order[BN_CONV_FAMILY_COUNT]);

/* "forward", "backward-data" or "backward-filter". */
const char *bn_conv_pass_name(int pass);

/* The families' descriptors (conv_X_plan.c) and entry points (conv_X.cu). */
extern const bn_conv_family bn_conv_family_direct, bn_conv_family_igemm, bn_conv_family_rows, bn_conv_family_tensor,
    bn_conv_family_argmax, bn_conv_family_halo, bn_conv_family_wino, bn_conv_family_fma;
bn_status bn_conv_run_direct(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass, void *stream,
                             const bn_conv_io *io);
bn_status bn_conv_run_igemm(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass, void *stream,
                            const bn_conv_io *io);
bn_status bn_conv_run_rows(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass, void *stream,
                           const bn_conv_io *io);
bn_status bn_conv_run_tensor(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass, void *stream,
                             const bn_conv_io *io);
bn_status bn_conv_run_argmax(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass, void *stream,
                             const bn_conv_io *io);
bn_status bn_conv_run_halo(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass, void *stream,
                           const bn_conv_io *io);
bn_status bn_conv_run_wino(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass, void *stream,
                           const bn_conv_io *io);
bn_status bn_conv_run_fma(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass, void *stream,
                          const bn_conv_io *io);

#ifdef __cplusplus
}
#endif
#endif
