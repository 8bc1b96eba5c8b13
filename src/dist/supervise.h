/* supervise.h - runs a group of child processes that live and die together: the part of the
 * launcher (launch.c) that knows nothing of ranks or GPUs, so that tests can point it at any
 * program. */
#ifndef BN_SUPERVISE_H
#define BN_SUPERVISE_H

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What to run: n children of one program, each with its own arguments and a name for messages.
 * The caller owns every array and string. */
typedef struct bn_children {
    const char *path;             /* the program every child executes */
    char *const *const *argv;     /* argv[i]: child i's NULL-terminated argument vector, argv[0] included */
    const char *const *name;      /* name[i]: how messages name child i, e.g. "rank 1 (gpu 1)" */
    const char *plural;           /* what messages call the children together, e.g. "ranks" */
    int n;
    double grace_s;               /* how long a child asked to stop (SIGTERM) has before SIGKILL */
    double stop_grace_s;          /* how long the others have to end on their own after a child
                                     stopped on a signal sent to it alone (before SIGKILL) */
} bn_children;

/* Starts every child (each in a process group of its own, killed when this process dies) and
 * waits for all of them. SIGINT, SIGTERM and SIGHUP sent to this process are passed to every
 * child still running. When a child ends with a non-zero code or by a signal that was not passed
 * on, the others are sent SIGTERM, then SIGKILL after grace_s; except a child that exits with
 * 128 + SIGINT, SIGTERM or SIGHUP, the code of a clean stop on such a signal sent to it alone:
 * the others are then left stop_grace_s to end on their own (children that agree on stopping,
 * as ranks do, stop with it) and the run counts as interrupted. *exit_code receives 0 when every
 * child exits 0, else the code the first child to fail ended with (128 + the signal when a
 * signal ended it). Returns BN_OK when every child exits 0; BN_ERR_INTERRUPTED when the children
 * ended after a signal passed on or a clean stop (no message of its own: the children report); otherwise
 * BN_ERR_IO, naming the first child that failed and how: "rank 1 (gpu 1) was killed by signal 9
 * (Killed); the other ranks were stopped". */
bn_status bn_supervise(const bn_children *c, int *exit_code);

/* Blocks, in the calling thread, the signals bn_supervise takes (SIGCHLD, SIGINT, SIGTERM,
 * SIGHUP), so that every thread made afterwards (a device runtime's, when this process asks it
 * how many GPUs there are) inherits the block and cannot take one of them and drop it or die of
 * it: called before anything that may make threads. The children start with them unblocked. */
void bn_supervise_take_signals(void);

#ifdef __cplusplus
}
#endif
#endif
