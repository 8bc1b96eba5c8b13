/* clock.c - the monotonic clock (clock.h). */
#include "clock.h"

#include <time.h>

double bn_clock_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}
