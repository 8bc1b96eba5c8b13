/* timeline.h - where the time of a run goes before and between its epochs: with
 * BLOBNET_TIMELINE set (and not "0"), each mark prints one line on stderr,
 *
 *   timeline: <ms since the zero> ms  <ms since the previous mark> ms  <what ended>
 *
 * so that the start-up of `blobnet train` (loading the program and its libraries, opening the
 * device, reading the data, setting the network up, the first step) can be measured piece by
 * piece. The zero is the launch time when the variable holds one, in seconds since the epoch
 * (BLOBNET_TIMELINE=$(date +%s.%N) blobnet train ...), so that the first mark shows what came
 * before main; otherwise the first mark. */
#ifndef BN_TIMELINE_H
#define BN_TIMELINE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Whether BLOBNET_TIMELINE asks for the marks (a caller may wait for the device before a mark
 * only then, so that the mark means the work is done). */
int bn_timeline_asked(void);

/* Prints the mark `what` when BLOBNET_TIMELINE asks for it; nothing otherwise. */
void bn_timeline_mark(const char *what);

#ifdef __cplusplus
}
#endif
#endif
