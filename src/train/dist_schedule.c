/* dist_schedule.c - when a rank's gradient all-reduces run (dist_schedule.h). */
#include "dist_schedule.h"

#include <stdlib.h>
#include <string.h>

static const char *const names[] = {"timed", "beside", "after"};

bn_status bn_schedule_parse(const char *text, int *mode)
{
    *mode = BN_SCHEDULE_TIMED;
    if (!text || !*text) return BN_OK;
    for (int i = 0; i < 3; i++)
        if (strcmp(text, names[i]) == 0) return *mode = i, BN_OK;
    return bn_error(BN_ERR_USAGE, "BLOBNET_DIST_SCHEDULE=%s: not one of timed, beside, after", text);
}

const char *bn_schedule_name(int mode)
{
    return mode >= 0 && mode < 3 ? names[mode] : "?";
}

bn_status bn_schedule_open(bn_schedule *s, int mode, int layers)
{
    memset(s, 0, sizeof *s);
    if (mode < BN_SCHEDULE_TIMED || mode > BN_SCHEDULE_AFTER)
        return bn_error(BN_ERR_INTERNAL, "gradient all-reduce schedule %d unknown", mode);
    s->mode = mode;
    s->after = mode == BN_SCHEDULE_AFTER;
    s->phase = mode == BN_SCHEDULE_TIMED ? 0 : 2;
    s->capacity = layers > 0 ? layers : 1;
    s->order = malloc((size_t)s->capacity * sizeof *s->order);
    if (!s->order) return bn_error(BN_ERR_NOMEM, "out of host memory for the all-reduce schedule");
    return BN_OK;
}

void bn_schedule_close(bn_schedule *s)
{
    for (int i = 0; i < 2; i++)
        if (s->events[i]) bn_event_destroy(s->events[i]);
    free(s->order);
    memset(s, 0, sizeof *s);
}

void bn_schedule_epoch(bn_schedule *s)
{
    s->run = 0;
}

int bn_schedule_advance(bn_schedule *s, int full)
{
    if (s->phase > 1) return BN_SCHEDULE_NOTHING;
    if (!full) {
        s->run = 0;
        return BN_SCHEDULE_NOTHING;
    }
    s->run++;
    if (s->run == BN_SCHEDULE_SETTLE) return BN_SCHEDULE_MARK;
    if (s->run == BN_SCHEDULE_SETTLE + BN_SCHEDULE_STEPS) return BN_SCHEDULE_MEASURE;
    return BN_SCHEDULE_NOTHING;
}

int bn_schedule_took(bn_schedule *s, double ms)
{
    if (s->phase > 1) return 0;
    s->ms[s->phase] = ms;
    s->run = 0;
    if (s->phase == 1) return 2;
    s->phase = 1;
    s->after = 1;
    return 1;
}

int bn_schedule_decide(bn_schedule *s, double beside, double after)
{
    const int was = s->after;
    s->after = after <= beside;
    s->phase = 2;
    return s->after != was;
}

bn_status bn_schedule_step(bn_schedule *s, bn_dist *d, bn_ctx *ctx, int full, FILE *out, int *changed)
{
    *changed = 0;
    const int what = bn_schedule_advance(s, full);
    if (what == BN_SCHEDULE_NOTHING) return BN_OK;
    for (int i = 0; i < 2; i++)
        if (!s->events[i]) BN_TRY(bn_event_create(&s->events[i]));
    if (what == BN_SCHEDULE_MARK) return bn_event_record(s->events[0]);
    BN_TRY(bn_event_record(s->events[1]));
    /* With the group's deadline: the window's end waits on the other ranks' collectives. */
    BN_TRY(bn_dist_wait(d, ctx));
    float ms;
    BN_TRY(bn_event_elapsed_ms(s->events[0], s->events[1], &ms));
    const int next = bn_schedule_took(s, ms / BN_SCHEDULE_STEPS);
    if (next == 1) *changed = 1;
    if (next != 2) return BN_OK;
    double v[2] = {s->ms[0], s->ms[1]};
    BN_TRY(bn_dist_sum(d, ctx, v, 2));
    *changed = bn_schedule_decide(s, v[0], v[1]);
    if (out)
        fprintf(out, "gradient all-reduces %s the backward pass: %.3f ms a step after it, %.3f beside it (%d GPUs%s)\n",
                s->after ? "after" : "beside", v[1] / d->world, v[0] / d->world, d->world,
                d->peer_sum ? ", summed through each other's memory" : ", by NCCL");
    return BN_OK;
}
