/* rendezvous.c - ranks meet over TCP before NCCL starts: rank 0 listens, checks who comes, and
 * hands every rank NCCL's unique id (dist.h).
 *
 * The wire format is two small frames, every number big-endian:
 *   hello (rank r -> rank 0): magic, version, rank, world (4 bytes each), fingerprint (8 bytes)
 *   reply (rank 0 -> rank r): magic, version, verdict (0 accepted, 1 refused), length (4 bytes
 *                             each), then `length` bytes: the id, or the reason for a refusal
 * A connection whose hello lacks the magic or the version is not a rank of this run (a port
 * scanner, an older blobnet) and is dropped without ending the rendezvous. Every wait polls
 * against one deadline, so no step can hang past timeout_s. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "dist.h"

#define MAGIC 0x424e5256u      /* "BNRV" */
#define VERSION 1u
#define HELLO_BYTES 24
#define REPLY_HEAD_BYTES 16
#define REASON_MAX 480
#define ACCEPTED 0u
#define REFUSED 1u

/* Milliseconds left before deadline, for poll(): at least 0, rounded up so a wait never ends
 * early. */
static int ms_left(double deadline)
{
    double left = (deadline - bn_clock_seconds()) * 1000.0;
    if (left <= 0) return 0;
    return left > 60000.0 ? 60000 : (int)left + 1;
}

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (24 - 8 * i));
}

static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put_u64(unsigned char *p, uint64_t v)
{
    put_u32(p, (uint32_t)(v >> 32));
    put_u32(p + 4, (uint32_t)v);
}

static uint64_t get_u64(const unsigned char *p)
{
    return (uint64_t)get_u32(p) << 32 | get_u32(p + 4);
}

bn_status bn_rendezvous_parse(const char *text, char *host, size_t host_len, int *port)
{
    const char *colon = strrchr(text, ':');
    size_t n = colon ? (size_t)(colon - text) : 0;
    const char *digits = colon ? colon + 1 : "";
    int ok = n > 0 && memchr(text, ':', n) == NULL && *digits && strlen(digits) <= 5;
    for (const char *p = digits; ok && *p; p++) ok = *p >= '0' && *p <= '9';
    long value = ok ? strtol(digits, NULL, 10) : 0;
    if (!ok || value < 1 || value > 65535)
        return bn_error(BN_ERR_USAGE, "'%s' is not HOST:PORT (a host name or IPv4 address, and a port 1-65535)",
                        text);
    if (n >= host_len)
        return bn_error(BN_ERR_USAGE, "'%s': the host name is longer than %zu bytes", text, host_len - 1);
    memcpy(host, text, n);
    host[n] = '\0';
    *port = (int)value;
    return BN_OK;
}

/* Waits until fd is ready for `events` or deadline passes; 0 when it may be ready (a signal
 * may also end the wait early: the caller tries again), -1 with errno set (ETIMEDOUT past the
 * deadline). */
static int wait_ready(int fd, short events, double deadline)
{
    struct pollfd pf = {.fd = fd, .events = events};
    int left = ms_left(deadline);
    if (left == 0) {
        errno = ETIMEDOUT;
        return -1;
    }
    return poll(&pf, 1, left) < 0 && errno != EINTR ? -1 : 0;
}

/* Writes all n bytes of buf to fd (non-blocking) before deadline; 0 when done, else -1 with errno
 * set (ETIMEDOUT past the deadline). */
static int send_all(int fd, const void *buf, size_t n, double deadline)
{
    const unsigned char *p = buf;
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
        if (wait_ready(fd, POLLOUT, deadline) != 0) return -1;
    }
    return 0;
}

/* Reads exactly n bytes from fd (non-blocking) before deadline; 0 when done, else -1 with errno
 * set (ETIMEDOUT past the deadline, ECONNRESET when the peer closed before n bytes). */
static int recv_all(int fd, void *buf, size_t n, double deadline)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t r = recv(fd, p, n, 0);
        if (r > 0) {
            p += r;
            n -= (size_t)r;
            continue;
        }
        if (r == 0) {
            errno = ECONNRESET;
            return -1;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
        if (wait_ready(fd, POLLIN, deadline) != 0) return -1;
    }
    return 0;
}

static int set_nonblocking(int fd)
{
    int flags = fcntl(fd, F_GETFL);
    return flags < 0 ? -1 : fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

/* Resolves host:port for TCP (passive: for listening). *res is freed with freeaddrinfo. */
static bn_status resolve(const char *host, int port, int passive, int rank, struct addrinfo **res)
{
    char service[8];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
                             .ai_flags = passive ? AI_PASSIVE : 0};
    int rc = getaddrinfo(host, service, &hints, res);
    if (rc != 0)
        return bn_error(BN_ERR_USAGE, "rendezvous %s:%d: rank %d cannot resolve host '%s': %s", host, port, rank, host,
                        gai_strerror(rc));
    return BN_OK;
}

/* ---- rank 0 ---- */

/* A connection rank 0 has accepted: its hello as far as it has come, and, once whole, the rank
 * it names. */
typedef struct peer {
    int fd;
    size_t got;
    unsigned char hello[HELLO_BYTES];
    int rank;               /* -1 until the hello is whole and checked */
} peer;

typedef struct host_state {
    const char *host;
    int port, world;
    uint64_t fingerprint;
    double deadline;
    int listener;
    peer peers[2 * BN_DIST_MAX_RANKS];
    int npeers;
    int joined;             /* ranks whose hello was accepted */
} host_state;

/* Sends a peer the reply frame: the verdict and its body. Failures are left to the peer to
 * notice: rank 0 reports its own error either way. */
static void reply(const host_state *h, int fd, uint32_t verdict, const void *body, size_t len)
{
    unsigned char head[REPLY_HEAD_BYTES];
    put_u32(head, MAGIC);
    put_u32(head + 4, VERSION);
    put_u32(head + 8, verdict);
    put_u32(head + 12, (uint32_t)len);
    if (send_all(fd, head, sizeof head, h->deadline) == 0) send_all(fd, body, len, h->deadline);
}

static void drop_peer(host_state *h, int i)
{
    close(h->peers[i].fd);
    h->peers[i] = h->peers[--h->npeers];
}

/* Tells every connected rank why the rendezvous failed (the message bn_error just recorded),
 * then returns code, so that every rank ends with the same reason instead of a timeout. */
static bn_status refuse_all(host_state *h, bn_status code)
{
    char reason[REASON_MAX];
    snprintf(reason, sizeof reason, "%s", bn_last_error());
    h->deadline = bn_clock_seconds() + 1.0;
    for (int i = 0; i < h->npeers; i++) reply(h, h->peers[i].fd, REFUSED, reason, strlen(reason));
    return code;
}

/* Checks the whole hello of peer i: drops a stranger (returns BN_OK), accepts a rank of this
 * run, or records a usage error naming both values when it would train something else. */
static bn_status check_hello(host_state *h, int i)
{
    peer *p = &h->peers[i];
    const unsigned char *m = p->hello;
    if (get_u32(m) != MAGIC || get_u32(m + 4) != VERSION) {
        drop_peer(h, i);
        return BN_OK;
    }
    long rank = (long)get_u32(m + 8), world = (long)get_u32(m + 12);
    uint64_t fp = get_u64(m + 16);
    if (world != h->world)
        return bn_error(BN_ERR_USAGE, "rendezvous %s:%d: rank %ld has world %ld but rank 0 has world %d", h->host,
                        h->port, rank, world, h->world);
    if (rank < 1 || rank >= h->world)
        return bn_error(BN_ERR_USAGE, "rendezvous %s:%d: a rank %ld joined, outside 1..%d", h->host, h->port, rank,
                        h->world - 1);
    for (int j = 0; j < h->npeers; j++)
        if (h->peers[j].rank == rank)
            return bn_error(BN_ERR_USAGE,
                            "rendezvous %s:%d: rank %ld joined twice (two processes were given --rank %ld)", h->host,
                            h->port, rank, rank);
    if (fp != h->fingerprint)
        return bn_error(BN_ERR_USAGE,
                        "rendezvous %s:%d: rank %ld trains something else: its fingerprint %016llx differs from rank "
                        "0's %016llx (the model, the training settings, the seed, the training set, the checkpoint "
                        "resumed, --precision, --tf32, --deterministic, BLOBNET_DIST_BUCKET or "
                        "BLOBNET_DIST_SCHEDULE differ)",
                        h->host, h->port, rank, (unsigned long long)fp, (unsigned long long)h->fingerprint);
    p->rank = (int)rank;
    h->joined++;
    return BN_OK;
}

/* Reads what peer i has sent; a peer that hangs up or fails before its hello is whole is
 * dropped. */
static bn_status read_peer(host_state *h, int i)
{
    peer *p = &h->peers[i];
    if (p->rank >= 0) {
        /* A rank that was accepted has nothing more to say: readable means it hung up. */
        char c;
        ssize_t r = recv(p->fd, &c, 1, 0);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            return bn_error(BN_ERR_IO, "rendezvous %s:%d: rank %d hung up before it received the id", h->host, h->port,
                            p->rank);
        return BN_OK;
    }
    ssize_t r = recv(p->fd, p->hello + p->got, HELLO_BYTES - p->got, 0);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return BN_OK;
    if (r <= 0) {
        drop_peer(h, i);
        return BN_OK;
    }
    p->got += (size_t)r;
    return p->got == HELLO_BYTES ? check_hello(h, i) : BN_OK;
}

static void accept_peer(host_state *h)
{
    int fd = accept(h->listener, NULL, NULL);
    if (fd < 0) return;
    if (h->npeers == (int)(sizeof h->peers / sizeof h->peers[0]) || set_nonblocking(fd) != 0) {
        close(fd);
        return;
    }
    h->peers[h->npeers++] = (peer){.fd = fd, .rank = -1};
}

/* The ranks that never joined, as "1, 3" (cap bytes). */
static void missing_ranks(const host_state *h, char *out, size_t cap)
{
    out[0] = '\0';
    for (int r = 1; r < h->world; r++) {
        int seen = 0;
        for (int i = 0; i < h->npeers; i++) seen |= h->peers[i].rank == r;
        size_t len = strlen(out);
        if (!seen && len < cap) snprintf(out + len, cap - len, "%s%d", len ? ", " : "", r);
    }
}

/* Waits until world-1 ranks have joined, or an error. */
static bn_status gather(host_state *h, double timeout_s)
{
    while (h->joined < h->world - 1) {
        struct pollfd pf[1 + 2 * BN_DIST_MAX_RANKS];
        pf[0] = (struct pollfd){.fd = h->listener, .events = POLLIN};
        for (int i = 0; i < h->npeers; i++) pf[1 + i] = (struct pollfd){.fd = h->peers[i].fd, .events = POLLIN};
        int left = ms_left(h->deadline);
        if (left == 0) {
            char missing[256];
            missing_ranks(h, missing, sizeof missing);
            return bn_error(BN_ERR_IO, "rendezvous %s:%d: rank%s %s of %d never joined within %g s", h->host, h->port,
                            strchr(missing, ',') ? "s" : "", missing, h->world, timeout_s);
        }
        int n = poll(pf, (nfds_t)(1 + h->npeers), left);
        if (n < 0 && errno != EINTR)
            return bn_error(BN_ERR_IO, "rendezvous %s:%d: rank 0 cannot wait for the other ranks: %s", h->host, h->port,
                            strerror(errno));
        if (n <= 0) continue;
        /* From the last so that a dropped peer's place is refilled by one already looked at. */
        int count = h->npeers;
        for (int i = count - 1; i >= 0; i--)
            if (pf[1 + i].revents) BN_TRY(read_peer(h, i));
        if (pf[0].revents & POLLIN) accept_peer(h);
    }
    return BN_OK;
}

static bn_status open_listener(host_state *h)
{
    struct addrinfo *res;
    BN_TRY(resolve(h->host, h->port, 1, 0, &res));
    int err = 0;
    for (struct addrinfo *a = res; a && h->listener < 0; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        int one = 1;
        if (fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
            bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, BN_DIST_MAX_RANKS) == 0) {
            h->listener = fd;
            break;
        }
        err = errno;
        if (fd >= 0) close(fd);
    }
    freeaddrinfo(res);
    if (h->listener < 0)
        return bn_error(BN_ERR_IO, "rendezvous %s:%d: rank 0 cannot listen there: %s", h->host, h->port,
                        strerror(err));
    return BN_OK;
}

static bn_status host_rendezvous(host_state *h, const void *id, size_t id_len, double timeout_s)
{
    BN_TRY(open_listener(h));
    bn_status s = gather(h, timeout_s);
    if (s != BN_OK) return refuse_all(h, s);
    for (int i = 0; i < h->npeers; i++) reply(h, h->peers[i].fd, ACCEPTED, id, id_len);
    return BN_OK;
}

/* ---- ranks 1..world-1 ---- */

/* Connects to one address before deadline: the socket, or -1 with errno set. */
static int connect_once(const struct addrinfo *a, double deadline)
{
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) return -1;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) return fd;
    if (errno == EINPROGRESS) {
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        int err = 0;
        socklen_t len = sizeof err;
        int n;
        while ((n = poll(&pf, 1, ms_left(deadline))) < 0 && errno == EINTR) {}
        if (n == 0) err = ETIMEDOUT;
        else if (n < 0) err = errno;
        else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        if (err == 0) return fd;
        errno = err;
    }
    int saved = errno;
    close(fd);
    errno = saved;
    return -1;
}

/* Connects to rank 0, retrying while it is not listening yet, until the deadline. */
static bn_status connect_host(const char *host, int port, int rank, double deadline, double timeout_s, int *out)
{
    struct addrinfo *res;
    BN_TRY(resolve(host, port, 0, rank, &res));
    int err = ETIMEDOUT;
    for (;;) {
        for (struct addrinfo *a = res; a; a = a->ai_next) {
            int fd = connect_once(a, deadline);
            if (fd >= 0) {
                freeaddrinfo(res);
                *out = fd;
                return BN_OK;
            }
            err = errno;
        }
        if (ms_left(deadline) == 0) break;
        nanosleep(&(struct timespec){.tv_nsec = 50 * 1000000L}, NULL);
    }
    freeaddrinfo(res);
    return bn_error(BN_ERR_IO, "rendezvous %s:%d: rank %d could not reach rank 0 within %g s: %s", host, port, rank,
                    timeout_s, strerror(err));
}

/* Reads rank 0's reply into id (id_len bytes), or its reason for a refusal into an error. */
static bn_status read_reply(int fd, const char *host, int port, int rank, void *id, size_t id_len, double deadline,
                            double timeout_s)
{
    unsigned char head[REPLY_HEAD_BYTES];
    if (recv_all(fd, head, sizeof head, deadline) != 0) {
        if (errno == ETIMEDOUT)
            return bn_error(BN_ERR_IO, "rendezvous %s:%d: rank %d got no answer from rank 0 within %g s (are all "
                            "ranks started?)", host, port, rank, timeout_s);
        return bn_error(BN_ERR_IO, "rendezvous %s:%d: rank %d lost rank 0 before it answered: %s", host, port, rank,
                        strerror(errno));
    }
    uint32_t verdict = get_u32(head + 8), len = get_u32(head + 12);
    if (get_u32(head) != MAGIC || get_u32(head + 4) != VERSION || verdict > REFUSED ||
        (verdict == ACCEPTED && len != id_len) || (verdict == REFUSED && len >= REASON_MAX))
        return bn_error(BN_ERR_IO, "rendezvous %s:%d: rank %d got an answer that is not from a blobnet rank 0 of this "
                        "version", host, port, rank);
    if (verdict == ACCEPTED) {
        if (recv_all(fd, id, id_len, deadline) != 0)
            return bn_error(BN_ERR_IO, "rendezvous %s:%d: rank %d lost rank 0 while receiving the id: %s", host, port,
                            rank, strerror(errno));
        return BN_OK;
    }
    char reason[REASON_MAX];
    if (recv_all(fd, reason, len, deadline) != 0) snprintf(reason, sizeof reason, "no reason given");
    else reason[len] = '\0';
    return bn_error(BN_ERR_USAGE, "rank 0 refused rank %d: %s", rank, reason);
}

static bn_status join_host(const char *host, int port, int rank, int world, uint64_t fingerprint, void *id,
                           size_t id_len, double deadline, double timeout_s)
{
    int fd = -1;
    BN_TRY(connect_host(host, port, rank, deadline, timeout_s, &fd));
    unsigned char hello[HELLO_BYTES];
    put_u32(hello, MAGIC);
    put_u32(hello + 4, VERSION);
    put_u32(hello + 8, (uint32_t)rank);
    put_u32(hello + 12, (uint32_t)world);
    put_u64(hello + 16, fingerprint);
    bn_status s = BN_OK;
    if (send_all(fd, hello, sizeof hello, deadline) != 0)
        s = bn_error(BN_ERR_IO, "rendezvous %s:%d: rank %d cannot introduce itself to rank 0: %s", host, port, rank,
                     strerror(errno));
    if (s == BN_OK) s = read_reply(fd, host, port, rank, id, id_len, deadline, timeout_s);
    close(fd);
    return s;
}

bn_status bn_rendezvous(const char *host, int port, int rank, int world, uint64_t fingerprint, void *id,
                        size_t id_len, double timeout_s)
{
    if (world < 1 || world > BN_DIST_MAX_RANKS || rank < 0 || rank >= world)
        return bn_error(BN_ERR_USAGE, "rendezvous %s:%d: rank %d of world %d: the rank must be in 0..world-1 and the "
                        "world in 1..%d", host, port, rank, world, BN_DIST_MAX_RANKS);
    if (!(timeout_s > 0))
        return bn_error(BN_ERR_USAGE, "rendezvous %s:%d: rank %d: the timeout %g s is not positive", host, port, rank,
                        timeout_s);
    if (id_len == 0 || id_len > 4096)
        return bn_error(BN_ERR_USAGE, "rendezvous %s:%d: rank %d: an id of %zu bytes (1-4096)", host, port, rank,
                        id_len);
    double deadline = bn_clock_seconds() + timeout_s;
    if (rank != 0) return join_host(host, port, rank, world, fingerprint, id, id_len, deadline, timeout_s);
    if (world == 1) return BN_OK;
    host_state *h = calloc(1, sizeof *h);
    if (!h) return bn_error(BN_ERR_NOMEM, "rendezvous %s:%d: no memory for rank 0's state", host, port);
    *h = (host_state){.host = host, .port = port, .world = world, .fingerprint = fingerprint,
                      .deadline = deadline, .listener = -1};
    bn_status s = host_rendezvous(h, id, id_len, timeout_s);
    for (int i = 0; i < h->npeers; i++) close(h->peers[i].fd);
    if (h->listener >= 0) close(h->listener);
    free(h);
    return s;
}
