/* dist_schedule.h - when a rank's gradient all-reduces run: beside the backward pass (each bucket
 * as soon as its layers' gradients are queued) or after it (the same buckets, in the same order,
 * once the whole backward pass is queued).
 *
 * Beside the backward pass an all-reduce hides behind the convolutions and products still to
 * come, but its kernels hold multiprocessors that those passes' blocks then wait for; after it,
 * nothing is slowed, but the all-reduce is the step's tail. Which costs less depends on the model,
 * its batch and the GPUs: a step's time each way, per model, is in docs/multi-gpu.md (version 46;
 * on the suite's models beside was as fast or faster, by up to 10%). Both ways issue the same collectives
 * on the same ranges of the gradient slab, so the sums are the same to the bit: the choice moves
 * time, never arithmetic, and a run repeats whichever way it went.
 *
 * BN_SCHEDULE_TIMED (the default) times BN_SCHEDULE_STEPS full steps each way, in the first
 * epoch (or, where an epoch is too short, the next ones), after BN_SCHEDULE_SETTLE full steps of
 * each way that are not timed (a changed way captures its step's graph again), and keeps the way
 * whose time summed over the ranks is less, so that every rank takes the same. The state machine
 * is host code without device work (bn_schedule_advance, _took, _decide), and bn_schedule_step
 * drives it with the device's timing events and the ranks' agreement. */
#ifndef BN_DIST_SCHEDULE_H
#define BN_DIST_SCHEDULE_H

#include <stdio.h>

#include "core/device.h"
#include "core/status.h"
#include "dist/dist.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { BN_SCHEDULE_TIMED, BN_SCHEDULE_BESIDE, BN_SCHEDULE_AFTER };

#define BN_SCHEDULE_STEPS 10
#define BN_SCHEDULE_SETTLE 2

/* What the trainer does after a step (bn_schedule_advance). */
enum { BN_SCHEDULE_NOTHING, BN_SCHEDULE_MARK, BN_SCHEDULE_MEASURE };

typedef struct bn_schedule {
    int mode;          /* BN_SCHEDULE_TIMED, _BESIDE or _AFTER */
    int after;         /* the steps queue their all-reduces after the backward pass */
    int phase;         /* timed: 0 timing beside, 1 timing after, 2 decided */
    int run;           /* full steps of this phase in this epoch so far */
    double ms[2];      /* timed: a step's milliseconds beside and after, this rank's */
    void *events[2];   /* the timed window's start and end on the context's stream */
    int *order;        /* after: the layers whose gradients wait, in the backward pass's order */
    int queued, capacity;
} bn_schedule;

/* Parses $BLOBNET_DIST_SCHEDULE's value ("timed", "beside" or "after"; NULL or empty: timed). */
bn_status bn_schedule_parse(const char *text, int *mode);

/* The name of a mode or way, for messages. */
const char *bn_schedule_name(int mode);

/* Opens a schedule of `mode` for a network of `layers` layers; bn_schedule_close frees it. */
bn_status bn_schedule_open(bn_schedule *s, int mode, int layers);
void bn_schedule_close(bn_schedule *s);

/* A new epoch: a timing window left open by the last one starts again. */
void bn_schedule_epoch(bn_schedule *s);

/* After a step is queued, `full` when it was a full batch (the same steps on every rank): what
 * the caller does next. MARK: record the window's start; MEASURE: record its end, then pass this
 * rank's milliseconds a step to bn_schedule_took. A step that is not full starts the window again. */
int bn_schedule_advance(bn_schedule *s, int full);

/* A timed window's milliseconds a step. Returns 1 when the way changed (the caller captures its
 * step's graph again), 2 when both ways are timed and the ranks must agree (bn_schedule_decide),
 * else 0. */
int bn_schedule_took(bn_schedule *s, double ms);

/* Takes the way whose summed time (over the ranks) is less, after where equal; returns 1 when that
 * changed the way. */
int bn_schedule_decide(bn_schedule *s, double beside, double after);

/* Drives the schedule after a step queued on ctx: the timing events, the ranks' agreement (d) and,
 * when the way changes, *changed set (the caller drops its captured step). The decision is
 * printed to out where out is not NULL. */
bn_status bn_schedule_step(bn_schedule *s, bn_dist *d, bn_ctx *ctx, int full, FILE *out, int *changed);

#ifdef __cplusplus
}
#endif
#endif
