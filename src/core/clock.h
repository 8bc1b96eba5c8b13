/* clock.h - seconds on a clock that never jumps, for timings, rates and deadlines. */
#ifndef BN_CLOCK_H
#define BN_CLOCK_H

#ifdef __cplusplus
extern "C" {
#endif

/* Seconds since an arbitrary start, on CLOCK_MONOTONIC: differences are elapsed time. */
double bn_clock_seconds(void);

#ifdef __cplusplus
}
#endif
#endif
