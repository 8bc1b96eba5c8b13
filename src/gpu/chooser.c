/* chooser.c - choosing among a plan's candidates (chooser.h). In C for every build: only the
 * timing needs a device, and it reaches it through core/device.h's events. */
#include "chooser.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rounds of timing again where the tie rule's pick is not the fastest (bn_chooser_timed). */
#define CONTESTS 2

/* Candidate k of c's order. */
static int nth(const bn_candidates *c, int k)
{
    return c->order ? c->order[k] : k;
}

static int order_count(const bn_candidates *c)
{
    return c->order ? c->order_count : c->count;
}

static bool applies(const bn_candidates *c, int i)
{
    return !c->applicable || c->applicable[i];
}

int bn_chooser_rule(const bn_candidates *c)
{
    for (int k = 0; k < order_count(c); k++)
        if (applies(c, nth(c, k))) return nth(c, k);
    return -1;
}

bn_status bn_chooser_time_one(const bn_chooser_timing *t, const bn_candidates *c, int i, float *ms)
{
    *ms = INFINITY;
    int ok = 1;
    bn_status s = BN_OK;
    for (int w = 0; w < t->warmups && s == BN_OK && ok; w++) s = c->run(c->env, i, 1, &ok);
    if (s == BN_OK && c->settle) s = c->settle(c->env);
    if (s != BN_OK || !ok) return s;
    void *start = NULL, *end = NULL;
    s = bn_event_create(&start);
    if (s == BN_OK) s = bn_event_create(&end);
    float best = INFINITY;
    /* Behind a hold the round's launches run back to back, so the round times the device, not
     * the host: a cuBLASLt call's host work (10-15 us) outlasts a small product's run (7 us), and
     * without the hold every algorithm read alike and the pick fell at random (performance.md,
     * version 57). A candidate whose run waits for the device waits out the hold instead: when
     * queueing a round took that long, the round is timed again, and the rest, without one. */
    int hold = 1, timed = 0;
    while (timed < t->rounds && s == BN_OK && ok) {
        float total = 0.0f;
        bn_held_span held;
        s = bn_held_begin(&held, hold);
        if (s == BN_OK) s = bn_event_record(start);
        for (int rep = 0; rep < t->reps && s == BN_OK && ok; rep++) s = c->run(c->env, i, 0, &ok);
        if (s == BN_OK) s = bn_event_record(end);
        if (s == BN_OK && c->settle) s = c->settle(c->env);
        const int waited = bn_held_end(&held);
        if (s == BN_OK) s = bn_event_elapsed_ms(start, end, &total);
        if (waited) {
            hold = 0;
            continue;
        }
        if (s == BN_OK && ok && (timed == 0 || total / t->reps < best)) best = total / t->reps;
        timed++;
    }
    if (start) bn_event_destroy(start);
    if (end) bn_event_destroy(end);
    if (s == BN_OK && ok) *ms = best;
    return s;
}

/* The candidate with the least time (the first of equal ones); -1 when none ran. */
static int fastest_of(const bn_candidates *c, const float *ms)
{
    int best = -1;
    for (int i = 0; i < c->count; i++)
        if (ms[i] < INFINITY && (best < 0 || ms[i] < ms[best])) best = i;
    return best;
}

/* The least of the candidates' times; INFINITY when none ran. */
static float least_time(const bn_candidates *c, const float *ms)
{
    const int i = fastest_of(c, ms);
    return i < 0 ? INFINITY : ms[i];
}

/* The tie rule's measure: a time within tie of the fastest (which ran). */
static bool within_tie(float ms, float fastest, float tie)
{
    return fastest < INFINITY && ms <= fastest * (1.0f + tie);
}

int bn_chooser_pick(const bn_candidates *c, const float *ms, float tie)
{
    const float fastest = least_time(c, ms);
    for (int k = 0; k < order_count(c); k++)
        if (within_tie(ms[nth(c, k)], fastest, tie)) return nth(c, k);
    return -1;
}

int bn_chooser_tied(const bn_candidates *c, const float *ms, float tie, bool *tied)
{
    const float fastest = least_time(c, ms);
    int count = 0;
    for (int i = 0; i < c->count; i++) {
        tied[i] = within_tie(ms[i], fastest, tie);
        count += tied[i];
    }
    return count;
}

bool bn_chooser_verbose(const char *variable)
{
    const char *e = variable ? getenv(variable) : NULL;
    return e && e[0] && strcmp(e, "0") != 0;
}

void bn_chooser_say(const char *variable, const char *fmt, ...)
{
    if (!bn_chooser_verbose(variable)) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

/* The verbose line of a timed choice: each timed candidate's milliseconds, then the one taken. */
static void report(const bn_chooser *ch, const bn_candidates *c, const float *ms, int pick)
{
    if (!c->names || !bn_chooser_verbose(ch->verbose)) return;
    fprintf(stderr, "%s:", ch->label);
    for (int i = 0; i < c->count; i++)
        if (applies(c, i)) fprintf(stderr, " %s %.4f ms", c->names[i], ms[i]);
    fprintf(stderr, "; takes %s\n", pick >= 0 ? c->names[pick] : "none");
}

/* Picks dropped by bn_chooser_pick_checked: choices are made on the host thread that sets a net
 * up, one at a time, so a plain counter serves. */
static int rejections = 0;

int bn_chooser_rejections(void)
{
    return rejections;
}

bn_status bn_chooser_pick_checked(const bn_chooser *ch, const bn_candidates *c, float *ms, int *pick)
{
    *pick = bn_chooser_pick(c, ms, ch->tie);
    while (*pick >= 0 && c->agree && *pick != c->reference) {
        double err = 0.0, tol = 0.0;
        int agrees = 0;
        BN_TRY(c->agree(c->env, *pick, c->reference, &err, &tol, &agrees));
        if (agrees) break;
        char index[16];
        snprintf(index, sizeof index, "%d", *pick);
        fprintf(stderr,
                "blobnet: note: %s: candidate %s disagrees with the reference (max error %.3g of the output's "
                "scale, tolerance %.3g); not taken\n",
                ch->label ? ch->label : "a timed choice", c->names ? c->names[*pick] : index, err, tol);
        rejections++;
        ms[*pick] = INFINITY;
        *pick = bn_chooser_pick(c, ms, ch->tie);
    }
    return BN_OK;
}

/* Candidate i timed again, its time the least of the two timings. */
static bn_status time_again(const bn_chooser *ch, const bn_candidates *c, int i, float *ms)
{
    float again = INFINITY;
    BN_TRY(bn_chooser_time_one(&ch->timing, c, i, &again));
    if (again < ms[i]) ms[i] = again;
    return BN_OK;
}

bn_status bn_chooser_timed(const bn_chooser *ch, const bn_candidates *c, float *ms, int *pick)
{
    int applicable = 0, only = -1;
    for (int i = 0; i < c->count; i++) {
        ms[i] = INFINITY;
        if (applies(c, i)) {
            applicable++;
            only = i;
        }
    }
    *pick = only;
    if (applicable < 2) return BN_OK;
    for (int i = 0; i < c->count; i++)
        if (applies(c, i)) BN_TRY(bn_chooser_time_one(&ch->timing, c, i, &ms[i]));
    /* A pick within the tie that is not the fastest turns on a few percent, about what two
     * timings of one candidate differ by, so the two are timed again, one after the other, each
     * keeping its least time, until the pick is the fastest or CONTESTS rounds are spent. Measured
     * in version 85 (performance.md): inception_fashion's 1x1 data pass left the tensor cores for
     * the implicit GEMM in every draw (+2%); lenet5_tanh's c3 data pass still tied in half the
     * draws, which conv2d's break_data_tie settles. */
    for (int r = 0; r < CONTESTS; r++) {
        const int first = bn_chooser_pick(c, ms, ch->tie), fastest = fastest_of(c, ms);
        if (first < 0 || first == fastest) break;
        BN_TRY(time_again(ch, c, first, ms));
        BN_TRY(time_again(ch, c, fastest, ms));
    }
    BN_TRY(bn_chooser_pick_checked(ch, c, ms, pick));
    report(ch, c, ms, *pick);
    return BN_OK;
}

bn_status bn_chooser_vkey(const char *scope, char *key, size_t cap, const char *fmt, va_list ap)
{
    int w = snprintf(key, cap, "%s ", scope);
    if (w >= 0 && (size_t)w < cap) {
        int tail = vsnprintf(key + w, cap - (size_t)w, fmt, ap);
        w = tail < 0 ? tail : w + tail;
    }
    if (w < 0 || (size_t)w >= cap) {
        if (cap) key[0] = '\0';
        return bn_error(BN_ERR_INTERNAL, "kernel cache: no room for a key of %zu bytes", cap);
    }
    return BN_OK;
}

bn_status bn_chooser_lookup(const char *key, const char *what, bn_choice_reader read, void *env, int *hit)
{
    *hit = 0;
    if (!key[0]) return BN_OK;
    char choice[BN_KERNEL_CHOICE_MAX];
    int found = 0, verdict = BN_CHOICE_STALE;
    BN_TRY(bn_kernel_cache_get(key, choice, sizeof choice, &found));
    if (!found) return BN_OK;
    BN_TRY(read(env, choice, &verdict));
    if (verdict == BN_CHOICE_UNREADABLE)
        return bn_error(BN_ERR_DATA, "kernel cache %s: cannot read the choice '%s' of %s; delete the file to time "
                        "again", bn_kernel_cache_path(), choice, what);
    *hit = verdict == BN_CHOICE_TAKEN;
    return BN_OK;
}

bn_status bn_chooser_keep(const char *key, const char *choice)
{
    return key[0] ? bn_kernel_cache_put(key, choice) : BN_OK;
}
