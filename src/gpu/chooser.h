/* chooser.h - how a layer chooses among the candidates for a plan (the kernels or library
 * algorithms that could run one of its products or passes), in one place for every layer that
 * times its kernels (dense, conv2d, conv2d's BF16 and graph-API paths):
 *
 * - the mode: the layer's fixed rule, timing every candidate, or the kernel cache's choice with
 *   timing only where the cache has none (bn_chooser_mode);
 * - the candidates: how many, their names, which apply, the rule's order of preference and a
 *   function that runs one (bn_candidates);
 * - the timing: warm-up runs, then the least of a few rounds' means (bn_chooser_timing), on
 *   events of the context stream, each round queued behind a hold of the stream
 *   (core/device.h: bn_stream_hold) so that it times the device's work, not the launches, and
 *   ended where the stream's own work ends, what the runs left beside it joined afterwards
 *   (bn_chooser_settle);
 * - the tie rule: of the candidates timed within a fraction of the fastest, the first in the
 *   rule's order (bn_chooser_pick), so that runs of the timing agree where candidates are that
 *   close and a tie goes where the rule would have gone; where that pick is not the fastest, the
 *   two are timed again before the rule is asked again, so that a near tie is judged on more
 *   than one timing of each;
 * - the kernel cache's key (the device's scope, then the layer's part) and the cached choice,
 *   read back through the layer, which says whether it can take it (bn_chooser_lookup), and kept
 *   after timing (bn_chooser_keep);
 * - the check of a timed choice: the pick run against a reference and, where the two disagree,
 *   dropped and the tie rule asked again (bn_chooser_pick_checked);
 * - the verbose print of a timed choice (bn_chooser_timed, bn_chooser_say).
 *
 * The layer keeps what only it knows: its candidates and what running one means, the text of a
 * choice, and what the rule takes where it differs from "the first that applies". */
#ifndef BN_CHOOSER_H
#define BN_CHOOSER_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/device.h"
#include "core/status.h"
#include "kernel_cache.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a layer chooses the kernels of a plan: by its fixed rule, by timing every candidate, or as
 * the kernel cache says, timing only what the cache lacks. */
enum { BN_CHOOSE_RULE, BN_CHOOSE_TIMED, BN_CHOOSE_CACHED };

/* The choice for a plan in ctx: the rule in a deterministic context (whose runs must pick the
 * same kernels) and where the layer says its rule was measured (rule_measured: the shape is one
 * the rule's preferences were measured on against the timed choice), timing with --autotune, the
 * cache otherwise. */
static inline int bn_chooser_mode(const bn_ctx *ctx, int rule_measured)
{
    if (ctx->deterministic) return BN_CHOOSE_RULE;
    if (ctx->autotune) return BN_CHOOSE_TIMED;
    return rule_measured ? BN_CHOOSE_RULE : BN_CHOOSE_CACHED;
}

/* The layers' tie: timed candidates within 5% of the fastest count as equally fast. */
#define BN_CHOOSER_TIE 0.05f

/* Runs candidate i once on the context stream (env: the layer's). *ok = 0 when it could not
 * run, which leaves it out of the choice; warm = 1 for the untimed warm-up runs (a layer whose
 * candidates may fail there but not afterwards returns an error for a later failure). A status
 * other than BN_OK stops the choice. */
typedef bn_status (*bn_chooser_run)(void *env, int i, int warm, int *ok);

/* Whether candidate i computes what the reference computes on the same inputs (env: the
 * layer's): reference is bn_candidates.reference (a candidate, or -1 for a reference the function
 * computes itself). *err: the largest difference of the two outputs relative to the reference's
 * scale; *tol: the bound the layer allows for it; *agrees: 0 where err exceeds tol (or the
 * output is not finite). A status other than BN_OK stops the choice. */
typedef bn_status (*bn_chooser_agree)(void *env, int i, int reference, double *err, double *tol, int *agrees);

/* After a candidate's warm-up runs, and after each of its timed rounds once the round's end is
 * recorded (env: the layer's): joins what its runs left pending on another stream. A run may queue
 * work beside it that the step does not wait for at that point (a weight gradient whose join the
 * net defers to the end of its backward pass); the round then times only what the stream itself
 * waits for, and the next round starts with nothing left beside it. A status other than BN_OK
 * stops the choice. */
typedef bn_status (*bn_chooser_settle)(void *env);

/* A plan's candidates 0 .. count - 1. */
typedef struct bn_candidates {
    int count;
    const char *const *names; /* for the verbose print; NULL: none printed */
    const bool *applicable;   /* whether each may run here; NULL: all */
    const int *order;         /* the rule's order of preference, most preferred first: order_count
                                 candidates; NULL: 0 .. count - 1 */
    int order_count;
    bn_chooser_run run;
    void *env;
    int reference;            /* with agree: the candidate trusted to be right (never checked), or
                                 -1 for a reference agree computes itself */
    bn_chooser_agree agree;   /* NULL: the timed pick is taken unchecked */
    bn_chooser_settle settle; /* NULL: the runs leave nothing pending */
} bn_candidates;

/* How a candidate is timed: `warmups` untimed runs, then `rounds` rounds of `reps` runs between
 * two events, each round queued behind a hold of the stream and released once queued; its time
 * is the least of the rounds' means (the least, because other work on the device only ever adds
 * time). A round whose queueing took as long as the hold (a run that waits for the device
 * waits it out) is timed again without one, and so are the candidate's later rounds. */
typedef struct bn_chooser_timing {
    int warmups, rounds, reps;
} bn_chooser_timing;

/* How a timed choice is made: the timing, the tie (a fraction of the fastest, BN_CHOOSER_TIE or
 * 0 for the fastest alone) and the verbose print: when the environment variable `verbose` (may
 * be NULL) is set and not "0", "<label>: <name> <ms> ms ...; takes <name>" goes to stderr. */
typedef struct bn_chooser {
    bn_chooser_timing timing;
    float tie;
    const char *verbose;
    const char *label;
} bn_chooser;

/* The rule's candidate: the first of c's order that applies; -1 when none does. */
int bn_chooser_rule(const bn_candidates *c);

/* Candidate i of c timed as t says, in milliseconds per run into *ms; INFINITY when it did not
 * run (*ok = 0 from c->run). */
bn_status bn_chooser_time_one(const bn_chooser_timing *t, const bn_candidates *c, int i, float *ms);

/* The tie rule: of the candidates with a time in ms (INFINITY: not timed or did not run), the
 * first of c's order whose time is within tie of the fastest (ms <= fastest * (1 + tie)); -1
 * when none ran or none of the order is within. */
int bn_chooser_pick(const bn_candidates *c, const float *ms, float tie);

/* The candidates the tie rule counts as fast as the fastest (a time in ms within tie of the
 * least), marked in tied (c->count entries); returns how many, 0 when none ran. */
int bn_chooser_tied(const bn_candidates *c, const float *ms, float tie, bool *tied);

/* The tie rule's pick among ms (ch->tie), checked: where c has an agree function and the pick is
 * not c->reference, the pick runs against the reference; one that disagrees is named once on
 * stderr ("blobnet: note: <label>: candidate <name> disagrees with the reference ..."), dropped
 * (its ms set to INFINITY, as if it had not run) and the tie rule picks again among the rest, each
 * new pick checked alike. *pick: the first pick that agrees (or needs no check); -1 when none ran
 * or every one that ran disagreed. */
bn_status bn_chooser_pick_checked(const bn_chooser *ch, const bn_candidates *c, float *ms, int *pick);

/* The timed choice among c: *pick the only candidate that applies, untimed, or of those timed
 * (ms[i]; INFINITY for the others) the one bn_chooser_pick_checked takes, printed when ch says
 * so; -1 when none applies, none ran or none that ran agreed with the reference. Where the tie
 * rule's pick is not the fastest, the two are timed again, the pick first, each keeping the
 * least of its times, up to twice while that holds. ms holds c->count entries. */
bn_status bn_chooser_timed(const bn_chooser *ch, const bn_candidates *c, float *ms, int *pick);

/* How many picks bn_chooser_pick_checked has dropped in this process: a timed choice that drops
 * one prints why, and a test that expects none asserts it on this count. */
int bn_chooser_rejections(void);

/* Whether the environment variable `variable` asks for the verbose print (set and not "0"). */
bool bn_chooser_verbose(const char *variable);

/* printf to stderr when bn_chooser_verbose(variable): a layer's notes on its candidates. */
void bn_chooser_say(const char *variable, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Writes the kernel cache key "<scope> <layer's part>" into key (cap bytes), the layer's part
 * formatted from fmt and ap; an error when it does not fit. scope: bn_kernel_cache_scope's. */
bn_status bn_chooser_vkey(const char *scope, char *key, size_t cap, const char *fmt, va_list ap);

/* bn_chooser_vkey with the scope of ctx's device (CUDA builds: kernel_scope.cu). */
bn_status bn_chooser_key(const bn_ctx *ctx, char *key, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* What a layer makes of the choice the cache holds for its plan. */
enum {
    BN_CHOICE_TAKEN,     /* the plan runs it */
    BN_CHOICE_STALE,     /* it cannot here (another set of candidates, a shape it no longer fits) */
    BN_CHOICE_UNREADABLE /* it is no choice the layer writes */
};

/* Reads choice into the layer's plan (env) and says which of BN_CHOICE_* it is in *verdict. */
typedef bn_status (*bn_choice_reader)(void *env, const char *choice, int *verdict);

/* The cache's choice under key, given to read: *hit = 1 when the plan took it. A stale one is
 * no hit: the plan is timed afresh and its new choice replaces the old (bn_chooser_keep). An
 * unreadable one is an error naming the cache file, the choice and `what` ("a dense product",
 * "layer conv1"). An empty key finds nothing. */
bn_status bn_chooser_lookup(const char *key, const char *what, bn_choice_reader read, void *env, int *hit);

/* Keeps choice under key in the kernel cache (bn_kernel_cache_put); nothing for an empty key. */
bn_status bn_chooser_keep(const char *key, const char *choice);

#ifdef __cplusplus
}
#endif
#endif
