/* timeline.c - the marks of BLOBNET_TIMELINE (timeline.h). */
#define _GNU_SOURCE
#include "timeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Seconds since boot now, on the clock /proc/self/stat's start time counts on. */
static double boot_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_BOOTTIME, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* The process's start in seconds since boot, from field 22 of /proc/self/stat (after the
 * command name, which may hold spaces and parentheses, so read from its last ')'); a negative
 * value when it cannot be read. */
static double process_start(void)
{
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f) return -1;
    char line[1024];
    size_t got = fread(line, 1, sizeof line - 1, f);
    fclose(f);
    line[got] = '\0';
    const char *p = strrchr(line, ')');
    if (!p) return -1;
    /* Field 3 (state) follows ") "; the start time is field 22, 19 fields on. */
    unsigned long long ticks = 0;
    int field = 2;
    for (p++; *p && field < 21; p++)
        if (*p == ' ') field++;
    if (field != 21 || sscanf(p, "%llu", &ticks) != 1) return -1;
    long hz = sysconf(_SC_CLK_TCK);
    return hz > 0 ? (double)ticks / (double)hz : -1;
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

void bn_timeline_mark(const char *what)
{
    static int begun;
    static double start, last;
    if (!bn_timeline_asked()) return;
    const double now = boot_seconds();
    if (!begun) {
        begun = 1;
        start = last = process_start();
        /* A start this clock cannot place (a sandbox whose boot clock is its own): count from
         * this first mark instead. */
        if (start < 0 || now < start || now - start > 600) start = last = now;
    }
    fprintf(stderr, "timeline: %8.1f ms %8.1f ms  %s\n", (now - start) * 1e3, (now - last) * 1e3, what);
    last = now;
}
