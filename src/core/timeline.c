/* timeline.c - the marks of BLOBNET_TIMELINE (timeline.h). */
#include "timeline.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Seconds since the epoch now (the clock `date +%s.%N` reads, so a launch time given by the
 * shell and these marks count alike). */
static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

int bn_timeline_asked(void)
{
    static int asked = -1;
    if (asked < 0) {
        const char *e = getenv("BLOBNET_TIMELINE");
        asked = e && e[0] && strcmp(e, "0") != 0;
    }
    return asked;
}

static void at_exit(void);

void bn_timeline_mark(const char *what)
{
    static int begun;
    static double start, last;
    /* Marks come from the thread that opens the device too. */
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    if (!bn_timeline_asked()) return;
    pthread_mutex_lock(&lock);
    const double now = now_seconds();
    if (!begun) {
        begun = 1;
        atexit(at_exit);
        /* A launch time in the variable (seconds since the epoch) is the zero; else this mark. */
        char *end;
        const double given = strtod(getenv("BLOBNET_TIMELINE"), &end);
        start = last = *end == '\0' && given > 1e9 && given <= now ? given : now;
    }
    fprintf(stderr, "timeline: %8.1f ms %8.1f ms  %s\n", (now - start) * 1e3, (now - last) * 1e3, what);
    last = now;
    pthread_mutex_unlock(&lock);
}

/* Registered at the first mark, so it runs after the exit handlers registered later (the CUDA
 * runtime's, which releases the device's context). */
static void at_exit(void)
{
    bn_timeline_mark("exit handlers run");
}
