/* test_chooser.c - the chooser (src/gpu/chooser.c) on its own: the mode a context gives, the
 * rule's first applicable candidate, the tie rule on given timings (5% and the fastest alone) and
 * the candidates it counts as tied, the key's scope and overflow, a cached choice taken, stale
 * (timed afresh and replaced) or unreadable (an error naming the file), the verbose switch, the
 * timing's warm-up and lone candidate without a device, the check of a pick against a reference (a
 * pick that disagrees dropped, named once on stderr, and the tie rule asked again), and on a
 * device (skipped without one) the timed choice of runs whose costs differ, a run that fails after
 * its warm-up, a timing that counts the device's work, not the host's pauses between launches, nor
 * a hold that a run waiting for the device waits out, a near tie timed again before the rule
 * settles it, and rounds that leave out the side work their settle joins. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "file_testing.h"
#include "gpu/chooser.h"
#include "testing.h"

BN_TEST(chooser_mode_follows_the_context)
{
    bn_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    CHECK(bn_chooser_mode(&ctx, 0) == BN_CHOOSE_CACHED);
    CHECK(bn_chooser_mode(&ctx, 1) == BN_CHOOSE_RULE);
    ctx.autotune = 1;
    CHECK(bn_chooser_mode(&ctx, 0) == BN_CHOOSE_TIMED);
    CHECK(bn_chooser_mode(&ctx, 1) == BN_CHOOSE_TIMED);
    ctx.deterministic = 1;
    CHECK(bn_chooser_mode(&ctx, 0) == BN_CHOOSE_RULE);
    ctx.autotune = 0;
    CHECK(bn_chooser_mode(&ctx, 0) == BN_CHOOSE_RULE);
    return BN_PASS;
}

BN_TEST(chooser_rule_takes_the_first_applicable_in_order)
{
    const int order[] = {3, 1, 0, 2};
    bool applicable[4] = {true, false, true, false};
    bn_candidates c = {4, NULL, applicable, order, 4, NULL, NULL, -1, NULL, NULL};
    CHECK(bn_chooser_rule(&c) == 0);
    applicable[3] = true;
    CHECK(bn_chooser_rule(&c) == 3);
    c.order = NULL;
    CHECK(bn_chooser_rule(&c) == 0);
    memset(applicable, 0, sizeof applicable);
    CHECK(bn_chooser_rule(&c) == -1);
    return BN_PASS;
}

BN_TEST(chooser_tie_goes_to_the_preferred_within_the_fraction)
{
    /* Candidate 2 is the fastest; 0 is 4% slower, 1 is 6% slower. */
    const float ms[4] = {1.04f, 1.06f, 1.00f, INFINITY};
    const int prefer_1[] = {1, 0, 2, 3}, prefer_3[] = {3, 1, 0, 2}, prefer_2[] = {2, 0};
    bn_candidates c = {4, NULL, NULL, prefer_1, 4, NULL, NULL, -1, NULL, NULL};
    CHECK_MSG(bn_chooser_pick(&c, ms, BN_CHOOSER_TIE) == 0, "got %d", bn_chooser_pick(&c, ms, BN_CHOOSER_TIE));
    CHECK(bn_chooser_pick(&c, ms, 0.10f) == 1);
    CHECK(bn_chooser_pick(&c, ms, 0.0f) == 2);
    /* One that did not run (INFINITY) is never taken, wherever it stands in the order. */
    c.order = prefer_3;
    CHECK(bn_chooser_pick(&c, ms, BN_CHOOSER_TIE) == 0);
    /* An order that leaves out every candidate within the tie takes none. */
    const int only_slow[] = {1};
    c.order = only_slow;
    c.order_count = 1;
    CHECK(bn_chooser_pick(&c, ms, BN_CHOOSER_TIE) == -1);
    c.order = prefer_2;
    c.order_count = 2;
    CHECK(bn_chooser_pick(&c, ms, BN_CHOOSER_TIE) == 2);
    return BN_PASS;
}

BN_TEST(chooser_tied_marks_every_candidate_within_the_fraction)
{
    /* Candidate 2 is the fastest; 0 is 4% slower, 1 is 6% slower, 3 did not run. */
    const float ms[4] = {1.04f, 1.06f, 1.00f, INFINITY};
    bn_candidates c = {4, NULL, NULL, NULL, 0, NULL, NULL, -1, NULL, NULL};
    bool tied[4] = {false, false, false, true};
    CHECK(bn_chooser_tied(&c, ms, BN_CHOOSER_TIE, tied) == 2);
    CHECK(tied[0] && !tied[1] && tied[2] && !tied[3]);
    CHECK(bn_chooser_tied(&c, ms, 0.10f, tied) == 3);
    CHECK(tied[0] && tied[1] && tied[2] && !tied[3]);
    CHECK(bn_chooser_tied(&c, ms, 0.0f, tied) == 1);
    CHECK(!tied[0] && !tied[1] && tied[2] && !tied[3]);
    /* None ran: none ties. */
    const float none[4] = {INFINITY, INFINITY, INFINITY, INFINITY};
    CHECK(bn_chooser_tied(&c, none, BN_CHOOSER_TIE, tied) == 0);
    CHECK(!tied[0] && !tied[1] && !tied[2] && !tied[3]);
    return BN_PASS;
}

BN_TEST(chooser_fastest_alone_keeps_the_earlier_of_equal_times)
{
    const float ms[4] = {2.0f, 1.5f, 1.5f, 3.0f};
    bn_candidates c = {4, NULL, NULL, NULL, 0, NULL, NULL, -1, NULL, NULL};
    CHECK(bn_chooser_pick(&c, ms, 0.0f) == 1);
    const int later_first[] = {2, 1, 0, 3};
    c.order = later_first;
    c.order_count = 4;
    CHECK(bn_chooser_pick(&c, ms, 0.0f) == 2);
    const float none[2] = {INFINITY, INFINITY};
    bn_candidates two = {2, NULL, NULL, NULL, 0, NULL, NULL, -1, NULL, NULL};
    CHECK(bn_chooser_pick(&two, none, BN_CHOOSER_TIE) == -1);
    return BN_PASS;
}

/* bn_chooser_vkey through a variadic call, as bn_chooser_key makes it. */
static bn_status key_of(const char *scope, char *key, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bn_status s = bn_chooser_vkey(scope, key, cap, fmt, ap);
    va_end(ap);
    return s;
}

BN_TEST(chooser_key_is_the_scope_then_the_layers_part)
{
    char key[BN_KERNEL_KEY_MAX];
    CHECK_OK(key_of("GPU sm90 132SM kernels4", key, sizeof key, "dense %s n%d k%d m%d", "fwd", 8, 2304, 24));
    CHECK_MSG(strcmp(key, "GPU sm90 132SM kernels4 dense fwd n8 k2304 m24") == 0, "%s", key);
    char small[24];
    CHECK_ERR(key_of("GPU sm90 132SM kernels4", small, sizeof small, "dense %s", "fwd"), BN_ERR_INTERNAL,
              "no room");
    CHECK(small[0] == '\0');
    CHECK_ERR(key_of("a scope longer than the room", small, sizeof small, "x"), BN_ERR_INTERNAL, "no room");
    return BN_PASS;
}

/* A reader that takes "fast", calls "old" stale and cannot read anything else; it counts its
 * calls and keeps the last choice it took. */
typedef struct reader_env {
    int calls;
    char taken[32];
} reader_env;

static bn_status read_test_choice(void *env, const char *choice, int *verdict)
{
    reader_env *r = (reader_env *)env;
    r->calls++;
    if (strcmp(choice, "fast") == 0) {
        snprintf(r->taken, sizeof r->taken, "%s", choice);
        *verdict = BN_CHOICE_TAKEN;
    } else if (strcmp(choice, "old") == 0) {
        *verdict = BN_CHOICE_STALE;
    } else {
        *verdict = BN_CHOICE_UNREADABLE;
    }
    return BN_OK;
}

static int cached_choices(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/chooser-cache.txt", bn_test_tmpdir());
    remove(path);
    setenv("BLOBNET_KERNEL_CACHE", path, 1);
    bn_kernel_cache_reset();
    reader_env r = {0, ""};
    int hit = -1;
    /* Nothing kept yet, and an empty key (a plan whose choices are not kept) finds nothing. */
    CHECK_OK(bn_chooser_lookup("scope layer a", "layer a", read_test_choice, &r, &hit));
    CHECK(hit == 0 && r.calls == 0);
    CHECK_OK(bn_chooser_keep("", "fast"));
    CHECK_OK(bn_chooser_lookup("", "layer a", read_test_choice, &r, &hit));
    CHECK(hit == 0 && r.calls == 0);
    /* A choice kept is taken by the next lookup, in this process and from the file. */
    CHECK_OK(bn_chooser_keep("scope layer a", "fast"));
    bn_kernel_cache_reset();
    CHECK_OK(bn_chooser_lookup("scope layer a", "layer a", read_test_choice, &r, &hit));
    CHECK(hit == 1 && r.calls == 1 && strcmp(r.taken, "fast") == 0);
    /* A stale one is no hit, and the choice timed afresh replaces it. */
    CHECK_OK(bn_chooser_keep("scope layer b", "old"));
    CHECK_OK(bn_chooser_lookup("scope layer b", "layer b", read_test_choice, &r, &hit));
    CHECK(hit == 0 && r.calls == 2);
    CHECK_OK(bn_chooser_keep("scope layer b", "fast"));
    bn_kernel_cache_reset();
    CHECK_OK(bn_chooser_lookup("scope layer b", "layer b", read_test_choice, &r, &hit));
    CHECK(hit == 1 && r.calls == 3);
    /* One the layer cannot read stops the choice, naming the file, the choice and the layer. */
    CHECK_OK(bn_chooser_keep("scope layer c", "fastest"));
    hit = -1;
    CHECK_ERR(bn_chooser_lookup("scope layer c", "layer c", read_test_choice, &r, &hit), BN_ERR_DATA,
              "cannot read the choice 'fastest' of layer c; delete the file to time again");
    CHECK_MSG(strstr(bn_last_error(), path) != NULL, "%s", bn_last_error());
    CHECK(hit == 0);
    return BN_PASS;
}

BN_TEST(chooser_cached_choice_is_taken_stale_or_unreadable)
{
    const char *old = getenv("BLOBNET_KERNEL_CACHE");
    char *saved = old ? strdup(old) : NULL;
    int r = cached_choices();
    if (saved) setenv("BLOBNET_KERNEL_CACHE", saved, 1);
    else unsetenv("BLOBNET_KERNEL_CACHE");
    free(saved);
    bn_kernel_cache_reset();
    return r;
}

BN_TEST(chooser_verbose_reads_its_variable)
{
    const char *var = "BLOBNET_CHOOSER_TEST_VERBOSE";
    unsetenv(var);
    CHECK(!bn_chooser_verbose(var));
    CHECK(!bn_chooser_verbose(NULL));
    setenv(var, "0", 1);
    CHECK(!bn_chooser_verbose(var));
    setenv(var, "", 1);
    CHECK(!bn_chooser_verbose(var));
    setenv(var, "1", 1);
    CHECK(bn_chooser_verbose(var));
    unsetenv(var);
    return BN_PASS;
}

/* Candidates for the timing: each run of candidate i counts, fails (at warm-up or after it) as
 * told, and otherwise spins the device for i's share of work where there is one. */
typedef struct runs {
    int calls[4];
    int fail_warm[4], fail_later[4];
    float *buf;   /* a MiB of device memory the work zeroes (NULL: no work) */
    int work[4];  /* times it is zeroed per run */
} runs;

static bn_status run_test_candidate(void *env, int i, int warm, int *ok)
{
    runs *r = (runs *)env;
    r->calls[i]++;
    if ((warm && r->fail_warm[i]) || (!warm && r->fail_later[i])) {
        *ok = 0;
        return BN_OK;
    }
    *ok = 1;
    for (int m = 0; r->buf && m < r->work[i]; m++) BN_TRY(bn_device_zero(r->buf, (size_t)1 << 20));
    return BN_OK;
}

BN_TEST(chooser_warm_up_failure_and_a_lone_candidate_need_no_timing)
{
    runs r;
    memset(&r, 0, sizeof r);
    r.fail_warm[1] = 1;
    bn_candidates c = {2, NULL, NULL, NULL, 0, run_test_candidate, &r, -1, NULL, NULL};
    const bn_chooser_timing t = {2, 3, 4};
    float ms = 0.0f;
    /* A candidate that fails its first warm-up run is left out before any event is made. */
    CHECK_OK(bn_chooser_time_one(&t, &c, 1, &ms));
    CHECK(isinf(ms) && r.calls[1] == 1);
    /* The only candidate that applies is taken without a run. */
    const bool applicable[2] = {false, true};
    c.applicable = applicable;
    const bn_chooser ch = {t, BN_CHOOSER_TIE, NULL, NULL};
    float all[2] = {0.0f, 0.0f};
    int pick = -1;
    CHECK_OK(bn_chooser_timed(&ch, &c, all, &pick));
    CHECK(pick == 1 && r.calls[0] == 0 && r.calls[1] == 1 && isinf(all[0]) && isinf(all[1]));
    const bool none[2] = {false, false};
    c.applicable = none;
    CHECK_OK(bn_chooser_timed(&ch, &c, all, &pick));
    CHECK(pick == -1 && r.calls[0] == 0);
    /* Timing itself needs the device's events: a build without CUDA says so, a CUDA build on a
     * machine without a GPU passes on its runtime's error. */
    if (bn_device_count() == 0) {
        c.applicable = NULL;
        CHECK(bn_chooser_time_one(&t, &c, 0, &ms) == BN_ERR_DEVICE);
        CHECK(r.calls[0] == 2); /* the warm-up runs came first */
    }
    return BN_PASS;
}

static int timed_on_device(void)
{
    runs r;
    memset(&r, 0, sizeof r);
    CHECK_OK(bn_device_alloc((void **)&r.buf, (size_t)1 << 20));
    /* Candidate 0 does 8 times the work of 2; 1 fails after its warm-up; 3 fails at it. */
    r.work[0] = 32, r.work[1] = 1, r.work[2] = 4, r.work[3] = 1;
    r.fail_later[1] = 1;
    r.fail_warm[3] = 1;
    static const char *const names[4] = {"heavy", "flaky", "light", "broken"};
    const int order[4] = {0, 1, 2, 3};
    bn_candidates c = {4, names, NULL, order, 4, run_test_candidate, &r, -1, NULL, NULL};
    const bn_chooser ch = {{2, 3, 4}, BN_CHOOSER_TIE, NULL, "test"};
    float ms[4];
    int pick = -1;
    bn_status s = bn_chooser_timed(&ch, &c, ms, &pick);
    bn_device_free(r.buf);
    CHECK_OK(s);
    CHECK_MSG(pick == 2, "picked %d: %g %g %g %g ms", pick, ms[0], ms[1], ms[2], ms[3]);
    CHECK(ms[0] > ms[2] && ms[2] > 0.0f && isinf(ms[1]) && isinf(ms[3]));
    /* 2 warm-up runs and 3 rounds of 4; the flaky one stops at its first timed run, the broken
     * one at its first warm-up. */
    CHECK(r.calls[0] == 14 && r.calls[2] == 14 && r.calls[1] == 3 && r.calls[3] == 1);
    return BN_PASS;
}

BN_TEST(gpu_chooser_times_and_picks_the_fastest_that_ran)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx)); /* the events and the work go on its stream */
    return timed_on_device();
}

/* A candidate the host queues slowly: a millisecond's sleep, then a zeroing of a few KiB. */
static bn_status run_slow_host(void *env, int i, int warm, int *ok)
{
    (void)i, (void)warm;
    *ok = 1;
    nanosleep(&(struct timespec){.tv_nsec = 1000000L}, NULL);
    return bn_device_zero(env, 4096);
}

/* A candidate that waits for the device in every run, as a library call that synchronises does. */
static bn_status run_waiting(void *env, int i, int warm, int *ok)
{
    (void)i, (void)warm;
    *ok = 1;
    BN_TRY(bn_device_zero(env, 4096));
    return bn_device_sync();
}

BN_TEST(gpu_chooser_times_the_device_not_the_host)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    void *buf = NULL;
    CHECK_OK(bn_device_alloc(&buf, 4096));
    bn_candidates c = {1, NULL, NULL, NULL, 0, run_slow_host, buf, -1, NULL, NULL};
    const bn_chooser_timing t = {1, 2, 4};
    float ms = 0.0f;
    const bn_status s = bn_chooser_time_one(&t, &c, 0, &ms);
    bn_device_free(buf);
    CHECK_OK(s);
    /* The zeroing takes microseconds: the host's millisecond before each launch must not count. */
    CHECK_MSG(ms > 0.0f && ms < 0.2f, "%g ms a run", ms);
    /* A run that waits for the device waits out the first round's hold, once: that round is timed
     * again without one, and so are the rest. */
    CHECK_OK(bn_device_alloc(&buf, 4096));
    c.run = run_waiting, c.env = buf;
    const bn_chooser_timing three = {1, 3, 4};
    const double started = bn_clock_seconds();
    const bn_status w = bn_chooser_time_one(&three, &c, 0, &ms);
    const double took = bn_clock_seconds() - started;
    bn_device_free(buf);
    CHECK_OK(w);
    CHECK_MSG(ms > 0.0f && ms < 5.0f, "%g ms a run", ms);
    CHECK_MSG(took < 2.5 * BN_STREAM_HOLD_MS * 1e-3, "the timing took %g s", took);
    return BN_PASS;
}

/* Candidates of fixed work (zeroings of a MiB a run), but for candidate i's first slow_runs[i]
 * runs, which do slow_work[i]: a first timing that reads slower than the candidate is. */
typedef struct drifting {
    int calls[2];
    int work[2], slow_work[2], slow_runs[2];
    float *buf;
} drifting;

static bn_status run_drifting(void *env, int i, int warm, int *ok)
{
    drifting *d = (drifting *)env;
    (void)warm;
    *ok = 1;
    const int work = d->calls[i]++ < d->slow_runs[i] ? d->slow_work[i] : d->work[i];
    for (int m = 0; m < work; m++) BN_TRY(bn_device_zero(d->buf, (size_t)1 << 20));
    return BN_OK;
}

BN_TEST(gpu_chooser_times_a_near_tie_again_before_taking_the_slower)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    float *buf = NULL;
    CHECK_OK(bn_device_alloc((void **)&buf, (size_t)1 << 20));
    /* Candidate 0, the rule's first, zeroes 100 MiB a run; candidate 1 zeroes 70, but 97 in its
     * first timing's 14 runs (2 warm-ups, 3 rounds of 4): timed once each, 1 is the fastest by 3%,
     * inside the tie, and the rule would take 0. Timed again, 1 is 30% faster and is taken. */
    drifting d = {{0, 0}, {100, 70}, {100, 97}, {0, 14}, buf};
    bn_candidates c = {2, NULL, NULL, NULL, 0, run_drifting, &d, -1, NULL, NULL};
    const bn_chooser ch = {{2, 3, 4}, BN_CHOOSER_TIE, NULL, NULL};
    float ms[2] = {0.0f, 0.0f};
    int pick = -1;
    bn_status s = bn_chooser_timed(&ch, &c, ms, &pick);
    /* Two candidates of the same work tie however often they are timed: the rule's first is kept,
     * after two more timings of each at most. */
    drifting e = {{0, 0}, {100, 100}, {0, 0}, {0, 0}, buf};
    bn_candidates same = {2, NULL, NULL, NULL, 0, run_drifting, &e, -1, NULL, NULL};
    float ms_same[2] = {0.0f, 0.0f};
    int pick_same = -1;
    if (s == BN_OK) s = bn_chooser_timed(&ch, &same, ms_same, &pick_same);
    bn_device_free(buf);
    CHECK_OK(s);
    CHECK_MSG(pick == 1 && ms[1] * 1.05f < ms[0], "took %d (%g ms against %g)", pick, ms[1], ms[0]);
    CHECK_MSG(d.calls[0] >= 28 && d.calls[1] >= 28, "runs %d and %d", d.calls[0], d.calls[1]);
    CHECK_MSG(pick_same == 0, "took %d (%g ms against %g)", pick_same, ms_same[1], ms_same[0]);
    CHECK_MSG(e.calls[0] <= 3 * 14 + 6 && e.calls[1] <= 3 * 14 + 6, "runs %d and %d", e.calls[0], e.calls[1]);
    return BN_PASS;
}

/* Candidates that queue a large zeroing on the context's side stream beside a small one on its
 * stream: candidate 0 leaves the side work pending for the chooser's settle, candidate 1 joins it
 * in every run, as a pair of passes timed to the end of both would. */
typedef struct beside_runs {
    bn_ctx *ctx;
    void *big, *small;
    size_t big_bytes;
    int settles;
} beside_runs;

static bn_status run_beside(void *env, int i, int warm, int *ok)
{
    beside_runs *b = (beside_runs *)env;
    (void)warm;
    *ok = 1;
    BN_TRY(bn_ctx_fork_side(b->ctx));
    BN_TRY(bn_ctx_zero_beside(b->ctx, b->big, b->big_bytes));
    BN_TRY(bn_device_zero(b->small, 4096));
    return i == 1 ? bn_ctx_join_side(b->ctx) : BN_OK;
}

static bn_status settle_beside(void *env)
{
    beside_runs *b = (beside_runs *)env;
    b->settles++;
    return bn_ctx_join_side(b->ctx);
}

BN_TEST(gpu_chooser_settle_leaves_the_side_work_out_of_a_round)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    beside_runs b = {0};
    CHECK_OK(bn_ctx_open(0, &b.ctx));
    b.big_bytes = (size_t)256 << 20;
    CHECK_OK(bn_device_alloc(&b.big, b.big_bytes));
    CHECK_OK(bn_device_alloc(&b.small, 4096));
    bn_candidates c = {2, NULL, NULL, NULL, 0, run_beside, &b, -1, NULL, settle_beside};
    const bn_chooser_timing t = {1, 3, 4};
    float pending = 0.0f, joined = 0.0f;
    bn_status s = bn_chooser_time_one(&t, &c, 0, &pending);
    const int settles = b.settles, left = b.ctx->side_pending;
    if (s == BN_OK) s = bn_chooser_time_one(&t, &c, 1, &joined);
    const bn_status synced = bn_device_sync();
    bn_device_free(b.big);
    bn_device_free(b.small);
    CHECK_OK(s);
    CHECK_OK(synced);
    /* Settled after the warm-up and after every round (a round timed again settles again), and
     * nothing is left pending once the candidate is timed. */
    CHECK_MSG(settles >= 1 + t.rounds, "%d settles", settles);
    CHECK(left == 0 && b.ctx->side_pending == 0);
    /* 256 MiB zeroed beside each run: tens of microseconds a run when joined, none when settled. */
    CHECK_MSG(pending > 0.0f && joined > 0.02f && pending < 0.5f * joined, "pending %g ms, joined %g ms a run",
              pending, joined);
    return BN_PASS;
}

/* Candidates whose agreement with the reference is given: candidate i disagrees where wrong[i],
 * by 5% of the output's scale; every check is counted. */
typedef struct verdicts {
    int wrong[4];
    int checks[4];
    int reference; /* the reference the chooser passed on the last check */
} verdicts;

static bn_status agree_test(void *env, int i, int reference, double *err, double *tol, int *agrees)
{
    verdicts *v = (verdicts *)env;
    v->checks[i]++;
    v->reference = reference;
    *err = v->wrong[i] ? 0.05 : 1e-6;
    *tol = 1e-3;
    *agrees = !v->wrong[i];
    return BN_OK;
}

/* stderr sent to the file at path (stderr_begin returns what to restore), then restored with the
 * text written meanwhile read into buf (stderr_end). */
static int stderr_begin(const char *path)
{
    fflush(stderr);
    const int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (saved >= 0 && fd >= 0) dup2(fd, 2);
    if (fd >= 0) close(fd);
    return saved;
}

static void stderr_end(int saved, const char *path, char *buf, size_t cap)
{
    fflush(stderr);
    if (saved >= 0) {
        dup2(saved, 2);
        close(saved);
    }
    if (ft_read_text(path, buf, cap) != 0 && cap) buf[0] = '\0';
}

/* How often needle occurs in text. */
static int occurrences(const char *text, const char *needle)
{
    int n = 0;
    for (const char *at = strstr(text, needle); at; at = strstr(at + 1, needle)) n++;
    return n;
}

BN_TEST(chooser_pick_that_disagrees_is_dropped_and_the_next_taken)
{
    /* 0 is the fastest, 1 within the tie, 2 and 3 slower; the order prefers 0, then 1. */
    float ms[4] = {1.00f, 1.03f, 2.0f, 3.0f};
    static const char *const names[4] = {"fast", "close", "slow", "slowest"};
    verdicts v;
    memset(&v, 0, sizeof v);
    v.wrong[0] = 1;
    bn_candidates c = {4, names, NULL, NULL, 0, NULL, &v, 3, agree_test, NULL};
    const bn_chooser ch = {{1, 1, 1}, BN_CHOOSER_TIE, NULL, "test pass"};
    char path[512], text[4096];
    snprintf(path, sizeof path, "%s/chooser-note.txt", bn_test_tmpdir());
    const int before = bn_chooser_rejections();
    int pick = -1;
    const int saved = stderr_begin(path);
    const bn_status s = bn_chooser_pick_checked(&ch, &c, ms, &pick);
    stderr_end(saved, path, text, sizeof text);
    CHECK_OK(s);
    CHECK_MSG(pick == 1, "picked %d", pick);
    CHECK(v.checks[0] == 1 && v.checks[1] == 1 && v.checks[2] == 0 && v.checks[3] == 0 && v.reference == 3);
    CHECK(isinf(ms[0]) && ms[1] == 1.03f);
    CHECK(bn_chooser_rejections() == before + 1);
    const char *note = "blobnet: note: test pass: candidate fast disagrees with the reference (max error 0.05 of "
                       "the output's scale, tolerance 0.001); not taken\n";
    CHECK_MSG(occurrences(text, note) == 1 && occurrences(text, "blobnet: note:") == 1, "stderr: \"%s\"", text);
    return BN_PASS;
}

BN_TEST(chooser_reference_is_never_checked)
{
    /* The reference (2) is the fastest: taken unchecked, whatever its verdict would have been. */
    float ms[4] = {2.0f, 1.5f, 1.0f, INFINITY};
    verdicts v;
    memset(&v, 0, sizeof v);
    v.wrong[2] = 1;
    bn_candidates c = {4, NULL, NULL, NULL, 0, NULL, &v, 2, agree_test, NULL};
    const bn_chooser ch = {{1, 1, 1}, 0.0f, NULL, "test pass"};
    const int before = bn_chooser_rejections();
    int pick = -1;
    CHECK_OK(bn_chooser_pick_checked(&ch, &c, ms, &pick));
    CHECK(pick == 2 && v.checks[2] == 0 && v.checks[0] + v.checks[1] + v.checks[3] == 0);
    /* Without an agree function nothing is checked, whatever the reference says. */
    c.agree = NULL;
    v.wrong[1] = 1;
    ms[1] = 0.5f;
    CHECK_OK(bn_chooser_pick_checked(&ch, &c, ms, &pick));
    CHECK(pick == 1 && v.checks[1] == 0);
    /* A pick dropped in favour of the reference: 1 disagrees, 2 (the reference) comes next. */
    c.agree = agree_test;
    char path[512], text[4096];
    snprintf(path, sizeof path, "%s/chooser-note-index.txt", bn_test_tmpdir());
    const int saved = stderr_begin(path);
    const bn_status s = bn_chooser_pick_checked(&ch, &c, ms, &pick);
    stderr_end(saved, path, text, sizeof text);
    CHECK_OK(s);
    CHECK(pick == 2 && v.checks[1] == 1 && v.checks[2] == 0 && isinf(ms[1]));
    CHECK_MSG(occurrences(text, "candidate 1 disagrees") == 1, "stderr: \"%s\"", text);
    CHECK(bn_chooser_rejections() == before + 1);
    return BN_PASS;
}

BN_TEST(chooser_none_taken_when_every_pick_disagrees)
{
    /* An external reference (-1): every candidate that ran is checked once and disagrees; the one
     * that did not run (3) is never checked. The note names a candidate by its index where the
     * candidates have no names. */
    float ms[4] = {1.0f, 1.2f, 1.1f, INFINITY};
    verdicts v;
    memset(&v, 0, sizeof v);
    for (int i = 0; i < 4; i++) v.wrong[i] = 1;
    bn_candidates c = {4, NULL, NULL, NULL, 0, NULL, &v, -1, agree_test, NULL};
    const bn_chooser ch = {{1, 1, 1}, BN_CHOOSER_TIE, NULL, "test pass"};
    char path[512], text[4096];
    snprintf(path, sizeof path, "%s/chooser-notes.txt", bn_test_tmpdir());
    const int before = bn_chooser_rejections();
    int pick = 0;
    const int saved = stderr_begin(path);
    const bn_status s = bn_chooser_pick_checked(&ch, &c, ms, &pick);
    stderr_end(saved, path, text, sizeof text);
    CHECK_OK(s);
    CHECK_MSG(pick == -1, "picked %d", pick);
    CHECK(v.checks[0] == 1 && v.checks[1] == 1 && v.checks[2] == 1 && v.checks[3] == 0 && v.reference == -1);
    CHECK(bn_chooser_rejections() == before + 3);
    for (int i = 0; i < 3; i++) {
        char needle[64];
        snprintf(needle, sizeof needle, "candidate %d disagrees", i);
        CHECK_MSG(occurrences(text, needle) == 1, "stderr lacks \"%s\" once: \"%s\"", needle, text);
    }
    CHECK(occurrences(text, "blobnet: note: test pass: ") == 3);
    /* The first of them is dropped first: the tie rule's order is kept among the rest. */
    CHECK(strstr(text, "candidate 0") < strstr(text, "candidate 2") &&
          strstr(text, "candidate 2") < strstr(text, "candidate 1"));
    return BN_PASS;
}
