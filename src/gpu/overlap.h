/* overlap.h - a backward pass's parameter gradient beside its input gradient: the one on the
 * context's side stream, the other on its stream, neither reading what the other writes. The side
 * work is forked from what the stream holds so far and joined back before the pass returns, or,
 * where the net defers joins (bn_pass.defer_joins), marked pending for the net to join at the end
 * of its backward pass (bn_ctx_defer_side), so that it also runs beside the layers below. For .cu
 * files and C alike: streams and events are the context's void pointers. */
#ifndef BN_OVERLAP_H
#define BN_OVERLAP_H

#include "core/device.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The two events a layer keeps for it: the fork (the side stream waits for the stream) and the
 * join (the stream waits for the side stream). */
typedef struct bn_overlap {
    void *fork, *join;
} bn_overlap;

/* Creates o's events (no timing); on an error o holds what was made, for bn_overlap_destroy. */
bn_status bn_overlap_create(bn_overlap *o);

/* Destroys o's events and clears them; a cleared o is fine. */
void bn_overlap_destroy(bn_overlap *o);

/* Queues the work on the side stream (side_stream) after what ctx's stream holds so far. */
typedef bn_status (*bn_overlap_side)(void *env, void *side_stream);
/* Queues the work on ctx's stream. */
typedef bn_status (*bn_overlap_main)(void *env);

/* Runs side on ctx->side_stream beside main (NULL: nothing) on ctx->stream: the fork, the side
 * work, then with `defer` the side stream marked pending and main; else main and the join. The
 * caller has checked that ctx has a side stream and that the two are independent. */
bn_status bn_overlap_run(bn_ctx *ctx, const bn_overlap *o, int defer, bn_overlap_side side, bn_overlap_main main,
                         void *env);

#ifdef __cplusplus
}
#endif
#endif
