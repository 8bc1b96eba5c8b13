/* launch.c - `blobnet train --gpus N` on one machine: this program again, once per GPU, as the
 * ranks of one run that meet at a rendezvous on 127.0.0.1 (dist.h). The processes themselves are
 * watched by supervise.c. */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dist.h"
#include "supervise.h"

/* How long a rank asked to stop, after another one failed, may take before it is killed: long
 * enough to leave NCCL and write its last lines, short enough not to look like a hang. */
#define GRACE_S 3.0

/* How long the other ranks have to stop on their own after one stopped on a signal sent to it
 * alone: they agree to stop after the same step (a check every 20 steps) and rank 0 then writes
 * the checkpoint, which for a large model takes seconds. */
#define STOP_GRACE_S 60.0

/* Holds a free TCP port of 127.0.0.1 for the whole run: a socket bound there, never listening.
 * Rank 0 binds the same port with SO_REUSEADDR, which Linux allows beside a socket that does not
 * listen, while no other program can take the port between this choice and rank 0's bind. */
static bn_status reserve_port(int *fd, int *port)
{
    *fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (*fd < 0 || setsockopt(*fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(*fd, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(*fd, (struct sockaddr *)&a, &len) != 0) {
        bn_status s = bn_error(BN_ERR_IO, "cannot find a free port on 127.0.0.1 for the ranks' rendezvous: %s",
                               strerror(errno));
        if (*fd >= 0) close(*fd);
        return s;
    }
    *port = ntohs(a.sin_port);
    return BN_OK;
}

/* The texts of one rank's extra arguments. */
typedef struct rank_args {
    char rank[16], world[16], rendezvous[32], device[24], name[48];
} rank_args;

/* Rank r's argument vector: "blobnet", argv, then the rank's own flags (before a "--", after
 * which no flag would be read). Points into argv and ra; *out is freed by the caller. */
static bn_status rank_argv(int argc, char **argv, const rank_args *ra, char ***out)
{
    char **v = malloc(sizeof *v * (size_t)(argc + 10));
    if (!v) return bn_error(BN_ERR_NOMEM, "no memory for the ranks' arguments");
    int end = 0;
    while (end < argc && strcmp(argv[end], "--") != 0) end++;
    int k = 0;
    v[k++] = "blobnet";
    for (int i = 0; i < end; i++) v[k++] = argv[i];
    char *own[] = {"--rank", (char *)ra->rank, "--world", (char *)ra->world, "--rendezvous", (char *)ra->rendezvous,
                   "--device", (char *)ra->device};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) v[k++] = own[i];
    for (int i = end; i < argc; i++) v[k++] = argv[i];
    v[k] = NULL;
    *out = v;
    return BN_OK;
}

static bn_status run_ranks(int argc, char **argv, int n, const int *devices, int port, rank_args *ra, char ***argvs,
                           const char **names, int *exit_code)
{
    for (int r = 0; r < n; r++) {
        snprintf(ra[r].rank, sizeof ra[r].rank, "%d", r);
        snprintf(ra[r].world, sizeof ra[r].world, "%d", n);
        snprintf(ra[r].rendezvous, sizeof ra[r].rendezvous, "127.0.0.1:%d", port);
        snprintf(ra[r].device, sizeof ra[r].device, "gpu:%d", devices[r]);
        snprintf(ra[r].name, sizeof ra[r].name, "rank %d (gpu %d)", r, devices[r]);
        names[r] = ra[r].name;
        BN_TRY(rank_argv(argc, argv, &ra[r], &argvs[r]));
    }
    bn_children c = {.path = "/proc/self/exe", .argv = (char *const *const *)argvs, .name = names,
                     .plural = "ranks", .n = n, .grace_s = GRACE_S,
                     .stop_grace_s = STOP_GRACE_S};
    return bn_supervise(&c, exit_code);
}

bn_status bn_launch_ranks(int argc, char **argv, int n, const int *devices, int *exit_code)
{
    *exit_code = 1;
    if (n < 1 || n > BN_DIST_MAX_RANKS)
        return bn_error(BN_ERR_USAGE, "cannot launch %d ranks: 1 to %d", n, BN_DIST_MAX_RANKS);
    int fd = -1, port = 0;
    BN_TRY(reserve_port(&fd, &port));
    rank_args *ra = calloc((size_t)n, sizeof *ra);
    char ***argvs = calloc((size_t)n, sizeof *argvs);
    const char **names = calloc((size_t)n, sizeof *names);
    bn_status s = ra && argvs && names ? run_ranks(argc, argv, n, devices, port, ra, argvs, names, exit_code)
                                       : bn_error(BN_ERR_NOMEM, "no memory to launch %d ranks", n);
    for (int r = 0; argvs && r < n; r++) free(argvs[r]);
    free(argvs);
    free(names);
    free(ra);
    close(fd);
    return s;
}
