/* progress.h - the live progress line of `blobnet train` on a terminal: one line per epoch,
 * redrawn in place (carriage return, clear to end of line) at most 10 times a second and
 * cleared when the epoch ends, so that the epoch's summary line takes its place. */
#ifndef BN_PROGRESS_H
#define BN_PROGRESS_H

#include <stddef.h>
#include <stdio.h>

#include "trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bn_progress {
    FILE *out;
    int width;              /* columns of the terminal: lines are cut to width - 1 */
    double interval;        /* seconds between redraws */
    double last_draw;       /* when the line was last drawn; negative before the first */
    int shown;              /* a live line is on screen */
    long draws;             /* lines drawn so far */
} bn_progress;

/* A progress line on out, as wide as out's terminal (80 columns when it has none). */
void bn_progress_init(bn_progress *p, FILE *out);

/* The trainer's hook (a bn_progress_fn): user is a bn_progress. */
bn_status bn_progress_hook(void *user, bn_progress_event event, const bn_step_info *info);

/* The hook at time `now` (seconds on any monotonic clock): a step redraws only when
 * p->interval has passed since the last drawing, and only then reads the running loss. */
bn_status bn_progress_update(bn_progress *p, bn_progress_event event, const bn_step_info *info, double now);

/* Removes the live line, if one is shown (before an error message, say). */
void bn_progress_clear(bn_progress *p);

/* Writes the live line for info, with running loss and accuracy, into buf (cap bytes); its
 * bar takes what is left of width - 1 columns, and is left out when under 5 cells. */
void bn_progress_format(char *buf, size_t cap, int width, const bn_step_info *info, double loss, double acc);

#ifdef __cplusplus
}
#endif
#endif
