/* held.c - work queued behind a hold of the stream, and whether it waited the hold out
 * (core/device.h: bn_held_begin, bn_held_end). */
#include "core/clock.h"
#include "core/device.h"

/* Queueing that took this share of the hold or more waited it out. */
#define WAITED_SHARE 0.9

bn_status bn_held_begin(bn_held_span *h, int hold)
{
    h->hold = hold;
    h->queued_from = bn_clock_seconds();
    return hold ? bn_stream_hold() : BN_OK;
}

int bn_held_end(bn_held_span *h)
{
    if (!h->hold) return 0;
    bn_stream_release();
    return (bn_clock_seconds() - h->queued_from) * 1e3 >= WAITED_SHARE * BN_STREAM_HOLD_MS;
}
