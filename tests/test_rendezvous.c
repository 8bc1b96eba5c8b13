/* test_rendezvous.c - ranks meeting over TCP on 127.0.0.1 (src/dist/rendezvous.c), each rank a
 * thread: every rank receives rank 0's id; a fingerprint that differs, a rank that joins twice and
 * a rank that never comes end the rendezvous on every rank with an error naming them; a stray
 * connection is dropped; HOST:PORT texts are checked. */
#include "testing.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/status.h"
#include "dist/dist.h"

/* A port of 127.0.0.1 that nothing listens on just now. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* One rank: its inputs, and what bn_rendezvous gave it. */
typedef struct rank_run {
    int port, rank, world;
    uint64_t fingerprint;
    double timeout_s;
    unsigned char id[BN_DIST_ID_BYTES];
    bn_status status;
    char message[1024];
    pthread_t thread;
} rank_run;

static void *run_rank(void *arg)
{
    rank_run *r = arg;
    r->status = bn_rendezvous("127.0.0.1", r->port, r->rank, r->world, r->fingerprint, r->id, sizeof r->id,
                              r->timeout_s);
    snprintf(r->message, sizeof r->message, "%s", r->status == BN_OK ? "" : bn_last_error());
    return NULL;
}

/* Runs ranks[0..n) as threads and waits for all of them; rank 0's id is a known pattern, the
 * others' are zero until they receive it. */
static int run_ranks(rank_run *ranks, int n)
{
    for (int i = 0; i < n; i++) {
        memset(ranks[i].id, 0, sizeof ranks[i].id);
        if (ranks[i].rank == 0)
            for (size_t b = 0; b < sizeof ranks[i].id; b++) ranks[i].id[b] = (unsigned char)(b * 7 + 3);
    }
    for (int i = 0; i < n; i++)
        if (pthread_create(&ranks[i].thread, NULL, run_rank, &ranks[i]) != 0) return 0;
    for (int i = 0; i < n; i++) pthread_join(ranks[i].thread, NULL);
    return 1;
}

BN_TEST(rendezvous_every_rank_receives_rank0s_id)
{
    int port = free_port();
    CHECK(port > 0);
    rank_run r[3];
    /* Rank 2 and 1 start before rank 0 listens: they must retry until it does. */
    int order[3] = {2, 1, 0};
    for (int i = 0; i < 3; i++)
        r[i] = (rank_run){.port = port, .rank = order[i], .world = 3, .fingerprint = 0x1234abcdULL, .timeout_s = 10};
    CHECK(run_ranks(r, 3));
    for (int i = 0; i < 3; i++) CHECK_MSG(r[i].status == BN_OK, "rank %d: %s", r[i].rank, r[i].message);
    for (int i = 0; i < 2; i++)
        CHECK_MSG(memcmp(r[i].id, r[2].id, sizeof r[i].id) == 0, "rank %d received other bytes than rank 0's id",
                  r[i].rank);
    CHECK(r[0].id[5] == (unsigned char)(5 * 7 + 3));
    return BN_PASS;
}

BN_TEST(rendezvous_world_of_one_needs_no_one)
{
    rank_run r = {.port = free_port(), .rank = 0, .world = 1, .timeout_s = 1};
    CHECK(run_ranks(&r, 1));
    CHECK_MSG(r.status == BN_OK, "%s", r.message);
    return BN_PASS;
}

BN_TEST(rendezvous_fingerprint_mismatch_fails_on_both_sides)
{
    int port = free_port();
    rank_run r[2] = {{.port = port, .rank = 0, .world = 2, .fingerprint = 0xaaaa1111ULL, .timeout_s = 10},
                     {.port = port, .rank = 1, .world = 2, .fingerprint = 0xbbbb2222ULL, .timeout_s = 10}};
    double start = seconds();
    CHECK(run_ranks(r, 2));
    for (int i = 0; i < 2; i++) {
        CHECK_MSG(r[i].status == BN_ERR_USAGE, "rank %d: status %d (%s)", i, (int)r[i].status, r[i].message);
        CHECK_MSG(strstr(r[i].message, "aaaa1111") && strstr(r[i].message, "bbbb2222"),
                  "rank %d's message names not both fingerprints: %s", i, r[i].message);
        CHECK_MSG(strstr(r[i].message, "rank 1"), "rank %d's message names not rank 1: %s", i, r[i].message);
    }
    CHECK_MSG(seconds() - start < 5, "the refusal took %.1f s: a rank waited for its timeout", seconds() - start);
    return BN_PASS;
}

BN_TEST(rendezvous_world_mismatch_is_refused)
{
    int port = free_port();
    rank_run r[2] = {{.port = port, .rank = 0, .world = 2, .timeout_s = 10},
                     {.port = port, .rank = 1, .world = 3, .timeout_s = 10}};
    CHECK(run_ranks(r, 2));
    for (int i = 0; i < 2; i++) {
        CHECK_MSG(r[i].status == BN_ERR_USAGE, "rank %d: status %d (%s)", i, (int)r[i].status, r[i].message);
        CHECK_MSG(strstr(r[i].message, "world 3") && strstr(r[i].message, "world 2"), "rank %d: %s", i, r[i].message);
    }
    return BN_PASS;
}

BN_TEST(rendezvous_missing_rank_is_named_after_the_timeout)
{
    int port = free_port();
    /* Rank 1 would wait longer: it must hear rank 0's reason before a timeout of its own. */
    rank_run r[2] = {{.port = port, .rank = 0, .world = 3, .timeout_s = 1},
                     {.port = port, .rank = 1, .world = 3, .timeout_s = 5}};
    double start = seconds();
    CHECK(run_ranks(r, 2));
    double took = seconds() - start;
    CHECK_MSG(took >= 0.9 && took < 4, "took %.2f s with a timeout of 1 s", took);
    CHECK_MSG(r[0].status == BN_ERR_IO, "rank 0: status %d (%s)", (int)r[0].status, r[0].message);
    CHECK_MSG(strstr(r[0].message, "rank 2 of 3 never joined within 1 s"), "rank 0: %s", r[0].message);
    CHECK_MSG(strstr(r[0].message, "127.0.0.1:"), "rank 0's message names not HOST:PORT: %s", r[0].message);
    /* Rank 1 learns why from rank 0 instead of waiting out a timeout of its own. */
    CHECK_MSG(r[1].status != BN_OK && strstr(r[1].message, "rank 2 of 3 never joined"), "rank 1: %s", r[1].message);
    return BN_PASS;
}

BN_TEST(rendezvous_missing_rank0_is_named_after_the_timeout)
{
    rank_run r = {.port = free_port(), .rank = 1, .world = 2, .timeout_s = 0.5};
    double start = seconds();
    CHECK(run_ranks(&r, 1));
    CHECK_MSG(seconds() - start < 3, "took %.2f s with a timeout of 0.5 s", seconds() - start);
    CHECK_MSG(r.status == BN_ERR_IO && strstr(r.message, "rank 1 could not reach rank 0 within 0.5 s"), "%s",
              r.message);
    return BN_PASS;
}

BN_TEST(rendezvous_duplicate_rank_is_refused)
{
    int port = free_port();
    rank_run r[3] = {{.port = port, .rank = 0, .world = 3, .timeout_s = 10},
                     {.port = port, .rank = 1, .world = 3, .timeout_s = 10},
                     {.port = port, .rank = 1, .world = 3, .timeout_s = 10}};
    double start = seconds();
    CHECK(run_ranks(r, 3));
    CHECK_MSG(seconds() - start < 5, "the refusal took %.1f s", seconds() - start);
    for (int i = 0; i < 3; i++) {
        CHECK_MSG(r[i].status == BN_ERR_USAGE, "process %d (rank %d): status %d (%s)", i, r[i].rank,
                  (int)r[i].status, r[i].message);
        CHECK_MSG(strstr(r[i].message, "rank 1 joined twice"), "process %d: %s", i, r[i].message);
    }
    return BN_PASS;
}

/* A connection that is not a rank (it sends bytes without the magic) is dropped; the real rank
 * joins after it. */
static void *stray_then_rank(void *arg)
{
    rank_run *r = arg;
    int fd = -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)r->port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    for (int tries = 0; tries < 200; tries++) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) break;
        close(fd);
        fd = -1;
        nanosleep(&(struct timespec){.tv_nsec = 20000000L}, NULL);
    }
    if (fd >= 0) {
        const char junk[] = "GET / HTTP/1.0\r\n\r\n and more than a hello's bytes";
        ssize_t unused = write(fd, junk, sizeof junk);
        (void)unused;
    }
    run_rank(r);
    if (fd >= 0) close(fd);
    return NULL;
}

BN_TEST(rendezvous_drops_a_stray_connection)
{
    int port = free_port();
    rank_run r[2] = {{.port = port, .rank = 0, .world = 2, .timeout_s = 10},
                     {.port = port, .rank = 1, .world = 2, .timeout_s = 10}};
    for (int i = 0; i < 2; i++) memset(r[i].id, 0, sizeof r[i].id);
    for (size_t b = 0; b < sizeof r[0].id; b++) r[0].id[b] = (unsigned char)(255 - b);
    CHECK(pthread_create(&r[0].thread, NULL, run_rank, &r[0]) == 0);
    CHECK(pthread_create(&r[1].thread, NULL, stray_then_rank, &r[1]) == 0);
    pthread_join(r[0].thread, NULL);
    pthread_join(r[1].thread, NULL);
    CHECK_MSG(r[0].status == BN_OK, "rank 0: %s", r[0].message);
    CHECK_MSG(r[1].status == BN_OK, "rank 1: %s", r[1].message);
    CHECK(memcmp(r[0].id, r[1].id, sizeof r[0].id) == 0);
    return BN_PASS;
}

BN_TEST(rendezvous_parses_host_and_port)
{
    char host[64];
    int port = 0;
    CHECK_OK(bn_rendezvous_parse("127.0.0.1:29500", host, sizeof host, &port));
    CHECK(strcmp(host, "127.0.0.1") == 0 && port == 29500);
    CHECK_OK(bn_rendezvous_parse("node-3.cluster:1", host, sizeof host, &port));
    CHECK(strcmp(host, "node-3.cluster") == 0 && port == 1);
    const char *bad[] = {"localhost", "localhost:", ":29500", "h:0", "h:65536", "h:29x", "h:-1", "a:b:1", "h:+80",
                         "h:123456"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bn_clear_error();
        bn_status s = bn_rendezvous_parse(bad[i], host, sizeof host, &port);
        CHECK_MSG(s == BN_ERR_USAGE, "'%s' was taken (status %d)", bad[i], (int)s);
        CHECK_MSG(strstr(bn_last_error(), bad[i]) && strstr(bn_last_error(), "HOST:PORT"), "'%s': %s", bad[i],
                  bn_last_error());
    }
    char tiny[4];
    CHECK_ERR(bn_rendezvous_parse("longname:80", tiny, sizeof tiny, &port), BN_ERR_USAGE, "longer than 3 bytes");
    return BN_PASS;
}

BN_TEST(rendezvous_refuses_bad_arguments)
{
    unsigned char id[BN_DIST_ID_BYTES];
    CHECK_ERR(bn_rendezvous("127.0.0.1", 1, 2, 2, 0, id, sizeof id, 1), BN_ERR_USAGE, "rank 2 of world 2");
    CHECK_ERR(bn_rendezvous("127.0.0.1", 1, 0, 0, 0, id, sizeof id, 1), BN_ERR_USAGE, "world in 1..64");
    CHECK_ERR(bn_rendezvous("127.0.0.1", 1, 0, 2, 0, id, sizeof id, 0), BN_ERR_USAGE, "not positive");
    CHECK_ERR(bn_rendezvous("no.such.host.invalid", 1, 1, 2, 0, id, sizeof id, 1), BN_ERR_USAGE,
              "cannot resolve host 'no.such.host.invalid'");
    return BN_PASS;
}
