/* test_parallel.c - the CPU pool (core/parallel.c) and what runs on it: every task run exactly
 * once at any thread count, also over many runs back to back; nested runs, a forked child's
 * pool; conv2d's chunked CPU passes against a direct convolution and bit for bit across thread
 * counts; the banded GEMM against one OpenBLAS call; training on the CPU the same at 1 and 3
 * threads, for resnet_mini and for a net of batchnorm, concat, dropout, avgpool and softmax_ce
 * under every optimizer; --threads and $BLOBNET_THREADS refused when malformed. */
#include <cblas.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "conv2d/conv2d.h"
#include "core/cpu_gemm.h"
#include "core/optimizers/optimizers.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "layer_testing.h"
#include "layers.h"
#include "testing.h"

static char out[16384];

typedef struct counts {
    int tasks;
    atomic_int *seen;
    atomic_int bad_worker;
} counts;

static void count_task(void *p, int task, int worker)
{
    counts *c = p;
    atomic_fetch_add(&c->seen[task], 1);
    if (worker < 0 || worker >= bn_cpu_threads()) atomic_store(&c->bad_worker, 1);
}

BN_TEST(parallel_runs_every_task_once_at_any_thread_count)
{
    static const int threads[] = {1, 2, 3, 7};
    static const int tasks[] = {1, 2, 5, 64, 1000};
    for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
        CHECK_OK(bn_cpu_threads_set(threads[t]));
        CHECK(bn_cpu_threads() == threads[t]);
        for (size_t k = 0; k < sizeof tasks / sizeof *tasks; k++)
            for (int rep = 0; rep < 20; rep++) {
                counts c = {tasks[k], calloc((size_t)tasks[k], sizeof(atomic_int)), 0};
                CHECK(c.seen != NULL);
                bn_parallel_run(tasks[k], count_task, &c);
                for (int i = 0; i < tasks[k]; i++)
                    CHECK_MSG(atomic_load(&c.seen[i]) == 1, "%d threads, %d tasks: task %d ran %d times", threads[t],
                              tasks[k], i, atomic_load(&c.seen[i]));
                CHECK(atomic_load(&c.bad_worker) == 0);
                free(c.seen);
            }
    }
    CHECK_OK(bn_cpu_threads_set(0));
    CHECK_ERR(bn_cpu_threads_set(BN_CPU_MAX_THREADS + 1), BN_ERR_USAGE, "the CPU pool takes 1 to");
    return BN_PASS;
}

static void nothing_task(void *p, int task, int worker)
{
}

/* SIGCHLDs of 10 children that the calling thread takes with sigtimedwait while it blocks them
 * (as bn_supervise does), each sent while it is not yet waiting; how many it took. */
static int sigchlds_taken(void)
{
    sigset_t chld, old;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    struct sigaction dfl = {.sa_handler = SIG_DFL}, old_action;
    if (pthread_sigmask(SIG_BLOCK, &chld, &old) != 0 || sigaction(SIGCHLD, &dfl, &old_action) != 0) return -1;
    int got = 0;
    for (int k = 0; k < 10; k++) {
        pid_t pid = fork();
        if (pid == 0) _exit(0);
        if (pid < 0) break;
        nanosleep(&(struct timespec){0, 20000000}, NULL);
        struct timespec wait = {2, 0};
        got += sigtimedwait(&chld, NULL, &wait) == SIGCHLD;
        waitpid(pid, NULL, 0);
    }
    sigaction(SIGCHLD, &old_action, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return got;
}

/* The pool's workers leave process signals to the threads that wait for them: with workers
 * running, the SIGCHLDs reach the thread that waits, instead of a worker dropping them. In a
 * child of this process, whose only threads are its own and the pool's (a device's runtime may
 * have threads of its own here, which take signals alike). */
BN_TEST(parallel_workers_leave_signals_to_the_threads_that_wait)
{
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (bn_cpu_threads_set(3) != BN_OK) _exit(100);
        bn_parallel_run(8, nothing_task, NULL);
        _exit(sigchlds_taken());
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 10, "the waiting thread took %d of 10 SIGCHLDs",
              WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return BN_PASS;
}

static void inner_task(void *p, int task, int worker)
{
    atomic_fetch_add((atomic_int *)p, 1);
}

static void outer_task(void *p, int task, int worker)
{
    bn_parallel_run(10, inner_task, p);
}

BN_TEST(parallel_nested_run_completes_on_the_calling_thread)
{
    CHECK_OK(bn_cpu_threads_set(3));
    atomic_int total = 0;
    bn_parallel_run(8, outer_task, &total);
    CHECK(atomic_load(&total) == 80);
    CHECK_OK(bn_cpu_threads_set(0));
    return BN_PASS;
}

typedef struct sum_arg {
    const float *v;
    double *part;
} sum_arg;

static void sum_range(void *p, size_t lo, size_t hi)
{
    const sum_arg *a = p;
    double s = 0;
    for (size_t i = lo; i < hi; i++) s += a->v[i];
    a->part[lo] = s; /* each range writes at its own first index */
}

BN_TEST(parallel_ranges_cover_the_count_and_survive_fork)
{
    CHECK_OK(bn_cpu_threads_set(2));
    size_t n = 100003;
    float *v = malloc(n * sizeof *v);
    double *part = calloc(n, sizeof *part);
    CHECK(v && part);
    for (size_t i = 0; i < n; i++) v[i] = (float)(i % 17);
    sum_arg a = {v, part};
    bn_parallel_ranges(n, 1000, sum_range, &a);
    double total = 0, want = 0;
    for (size_t i = 0; i < n; i++) total += part[i], want += v[i];
    CHECK_NEAR(total, want, 0.5);
    /* The pool's workers are the parent's: a forked child starts its own and still finishes. */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        memset(part, 0, n * sizeof *part);
        bn_parallel_ranges(n, 1000, sum_range, &a);
        double t = 0;
        for (size_t i = 0; i < n; i++) t += part[i];
        _exit(fabs(t - want) < 0.5 ? 0 : 3);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    free(v), free(part);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child's run ended with status %d", status);
    CHECK_OK(bn_cpu_threads_set(0));
    return BN_PASS;
}

typedef struct tally {
    atomic_int ran[32];
} tally;

static void tally_task(void *p, int task, int worker)
{
    atomic_fetch_add(&((tally *)p)->ran[task], 1);
}

/* Runs of 1 to 31 tasks back to back at `threads` threads, each task checked to run once; on a
 * 2-core machine 3 threads leave a worker off its core for whole runs, the case where one once
 * took a run still being written. 0, or 3 at a task that ran other than once. */
static int back_to_back_runs(int threads, long runs)
{
    if (bn_cpu_threads_set(threads) != BN_OK) return 4;
    static tally t;
    for (long r = 0; r < runs; r++) {
        int tasks = 1 + (int)(r % 11) * 3;
        for (int k = 0; k < tasks; k++) atomic_store(&t.ran[k], 0);
        bn_parallel_run(tasks, tally_task, &t);
        for (int k = 0; k < tasks; k++)
            if (atomic_load(&t.ran[k]) != 1) return 3;
    }
    return 0;
}

BN_TEST(parallel_back_to_back_runs_neither_repeat_nor_lose_a_task)
{
    /* In a child with a deadline: what this catches may also show as a run that never ends. */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int rc = back_to_back_runs(3, 200000);
        _exit(rc ? rc : back_to_back_runs(2, 200000));
    }
    int status = 0, waited = 0;
    while (waitpid(pid, &status, WNOHANG) == 0 && waited < 600) {
        nanosleep(&(struct timespec){0, 100000000}, NULL);
        waited++;
    }
    if (waited == 600) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    CHECK_MSG(waited < 600, "400000 runs did not end within 60 s: one waits for a task that will not end");
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "a task ran other than once (status %d)", status);
    return BN_PASS;
}

static void fill(bn_rng *r, float *v, size_t n)
{
    for (size_t i = 0; i < n; i++) v[i] = (float)(2.0 * bn_rng_uniform(r) - 1.0);
}

/* The convolution written out, in double: y[i][f][oy][ox]. */
static double direct(const bn_conv_geom *g, const float *x, const float *w, const float *b, int i, int f, int oy,
                     int ox)
{
    double s = b[f];
    for (int c = 0; c < g->c; c++)
        for (int ky = 0; ky < g->k; ky++)
            for (int kx = 0; kx < g->k; kx++) {
                int iy = oy * g->stride - g->pad + ky, ix = ox * g->stride - g->pad + kx;
                if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w) continue;
                s += (double)w[((f * g->c + c) * g->k + ky) * g->k + kx] *
                     x[((size_t)(i * g->c + c) * g->h + iy) * g->w + ix];
            }
    return s;
}

typedef struct conv_case {
    int c, h, w, k, stride, pad, filters, n;
} conv_case;

/* Forward, input and weight gradients of one case at `threads` threads into y, dx, dw, db. */
static bn_status conv_passes(const conv_case *cc, int threads, const float *x, const float *wt, const float *b,
                             const float *dy, float *y, float *dx, float *dw, float *db)
{
    bn_conv_geom g = {cc->c, cc->h, cc->w, cc->k, cc->stride, cc->pad, 0, 0};
    g.oh = bn_window_out(g.h, g.k, g.stride, g.pad), g.ow = bn_window_out(g.w, g.k, g.stride, g.pad);
    BN_TRY(bn_cpu_threads_set(threads));
    memset(dw, 0, (size_t)cc->filters * cc->c * cc->k * cc->k * sizeof *dw);
    memset(db, 0, (size_t)cc->filters * sizeof *db);
    BN_TRY(bn_conv2d_cpu_forward(&g, cc->filters, cc->n, x, wt, b, y, 0));
    return bn_conv2d_cpu_backward(&g, cc->filters, cc->n, x, wt, dy, NULL, dx, dw, db);
}

/* Shapes that make chunks of one example (28x28), of many (7x7, 5x3), a pointwise 1x1, strides
 * and the shifted products (an even window too), at batches that leave a short last chunk. */
BN_TEST(parallel_conv_passes_match_direct_and_do_not_depend_on_threads)
{
    static const conv_case cases[] = {
        {3, 28, 28, 3, 1, 1, 5, 3}, {6, 7, 7, 3, 1, 1, 9, 37}, {4, 5, 3, 1, 1, 0, 7, 50},
        {5, 9, 11, 3, 2, 1, 4, 13}, {2, 13, 10, 5, 3, 2, 3, 21},
        /* the shifted products: 8 input channels or more at stride 1 */
        {9, 12, 10, 3, 1, 1, 6, 11}, {16, 7, 7, 3, 1, 1, 8, 37}, {8, 16, 16, 5, 1, 2, 5, 3}, {12, 6, 9, 2, 1, 0, 7, 4},
        /* the shifted products over wider rows: pads 0 to 2, filter counts that are not powers of two */
        {8, 13, 17, 3, 1, 1, 8, 5}, {12, 16, 14, 3, 1, 0, 6, 3}, {10, 12, 12, 3, 1, 2, 5, 2},
        /* Winograd's tiles (3x3 at stride 1, 8 channels and filters or more): outputs that are and
         * are not multiples of 4, pads 0 to 2, channel and filter counts past one vector of 16
         * and not multiples of it, a short last chunk */
        {9, 12, 10, 3, 1, 1, 13, 11}, {20, 13, 11, 3, 1, 2, 17, 7}, {33, 6, 9, 3, 1, 0, 40, 5},
        {16, 28, 28, 3, 1, 1, 16, 9}, {48, 7, 7, 3, 1, 1, 24, 29},
        /* F(2x2, 5x5): LeNet's conv2 (20 -> 50 at 12x12), outputs that are and are not even, pads 0
         * to 2, channel and filter counts past one vector and not multiples of it, a short last
         * chunk */
        {20, 12, 12, 5, 1, 0, 50, 9}, {9, 13, 11, 5, 1, 2, 13, 7}, {33, 9, 10, 5, 1, 1, 17, 5},
        {16, 16, 16, 5, 1, 2, 8, 37},
        /* more chunks than the backward pass's tasks: two chunks a task, the last task one */
        {33, 20, 20, 3, 1, 1, 17, 133},
        /* the few-channel forward pass (stride 1, under 8 channels, windows up to 3): rows
         * wider than 16 and not a multiple of it, an even window, a ReLU-less 1x1 */
        {1, 9, 40, 2, 1, 0, 5, 3}, {7, 5, 19, 3, 1, 2, 4, 6}, {16, 14, 14, 3, 1, 1, 32, 1}, {32, 14, 14, 1, 1, 0, 8, 1},
    };
    for (size_t t = 0; t < sizeof cases / sizeof *cases; t++) {
        const conv_case *cc = &cases[t];
        int oh = bn_window_out(cc->h, cc->k, cc->stride, cc->pad), ow = bn_window_out(cc->w, cc->k, cc->stride, cc->pad);
        size_t nx = (size_t)cc->n * cc->c * cc->h * cc->w, ny = (size_t)cc->n * cc->filters * oh * ow;
        size_t nw = (size_t)cc->filters * cc->c * cc->k * cc->k;
        float *x = malloc(nx * 4), *wt = malloc(nw * 4), *b = malloc((size_t)cc->filters * 4), *dy = malloc(ny * 4);
        float *y[2] = {malloc(ny * 4), malloc(ny * 4)}, *dx[2] = {malloc(nx * 4), malloc(nx * 4)};
        float *dw[2] = {malloc(nw * 4), malloc(nw * 4)}, *db[2] = {malloc((size_t)cc->filters * 4),
                                                                   malloc((size_t)cc->filters * 4)};
        CHECK(x && wt && b && dy && y[0] && y[1] && dx[0] && dx[1] && dw[0] && dw[1] && db[0] && db[1]);
        bn_rng r;
        bn_rng_seed(&r, bn_test_seed(), (uint64_t)t);
        fill(&r, x, nx), fill(&r, wt, nw), fill(&r, b, (size_t)cc->filters), fill(&r, dy, ny);
        CHECK_OK(conv_passes(cc, 1, x, wt, b, dy, y[0], dx[0], dw[0], db[0]));
        CHECK_OK(conv_passes(cc, 3, x, wt, b, dy, y[1], dx[1], dw[1], db[1]));
        CHECK_MSG(memcmp(y[0], y[1], ny * 4) == 0 && memcmp(dx[0], dx[1], nx * 4) == 0 &&
                      memcmp(dw[0], dw[1], nw * 4) == 0 && memcmp(db[0], db[1], (size_t)cc->filters * 4) == 0,
                  "case %zu: 1 and 3 threads differ", t);
        bn_conv_geom g = {cc->c, cc->h, cc->w, cc->k, cc->stride, cc->pad, oh, ow};
        for (int i = 0; i < cc->n; i++)
            for (int f = 0; f < cc->filters; f++)
                for (int q = 0; q < oh * ow; q++) {
                    double want = direct(&g, x, wt, b, i, f, q / ow, q % ow);
                    CHECK_NEAR(y[0][((size_t)i * cc->filters + f) * oh * ow + q], want, 1e-4 * (1 + fabs(want)));
                }
        /* dw[f][c][ky][kx] = sum over examples and positions of dy * the input the tap sees. */
        for (int f = 0; f < cc->filters; f++)
            for (int c = 0; c < cc->c; c++)
                for (int ky = 0; ky < cc->k; ky++)
                    for (int kx = 0; kx < cc->k; kx++) {
                        double want = 0;
                        for (int i = 0; i < cc->n; i++)
                            for (int oy = 0; oy < oh; oy++)
                                for (int ox = 0; ox < ow; ox++) {
                                    int iy = oy * cc->stride - cc->pad + ky, ix = ox * cc->stride - cc->pad + kx;
                                    if (iy < 0 || iy >= cc->h || ix < 0 || ix >= cc->w) continue;
                                    want += (double)dy[(((size_t)i * cc->filters + f) * oh + oy) * ow + ox] *
                                            x[(((size_t)i * cc->c + c) * cc->h + iy) * cc->w + ix];
                                }
                        CHECK_NEAR(dw[0][((f * cc->c + c) * cc->k + ky) * cc->k + kx], want, 1e-3 * (1 + fabs(want)));
                    }
        /* dx[i][c][iy][ix] = sum over filters and taps of dy at the output the tap reaches * the weight. */
        for (int i = 0; i < cc->n; i++)
            for (int c = 0; c < cc->c; c++)
                for (int iy = 0; iy < cc->h; iy++)
                    for (int ix = 0; ix < cc->w; ix++) {
                        double want = 0;
                        for (int f = 0; f < cc->filters; f++)
                            for (int ky = 0; ky < cc->k; ky++)
                                for (int kx = 0; kx < cc->k; kx++) {
                                    int sy = iy + cc->pad - ky, sx = ix + cc->pad - kx;
                                    if (sy < 0 || sx < 0 || sy % cc->stride || sx % cc->stride) continue;
                                    int oy = sy / cc->stride, ox = sx / cc->stride;
                                    if (oy >= oh || ox >= ow) continue;
                                    want += (double)dy[(((size_t)i * cc->filters + f) * oh + oy) * ow + ox] *
                                            wt[((f * cc->c + c) * cc->k + ky) * cc->k + kx];
                                }
                        CHECK_NEAR(dx[0][(((size_t)i * cc->c + c) * cc->h + iy) * cc->w + ix], want,
                                   1e-4 * (1 + fabs(want)));
                    }
        /* <dy, conv(x)> is linear in x: its gradient dx satisfies <dx, x> = <dy, y - b>. */
        double lhs = 0, rhs = 0;
        for (size_t i = 0; i < nx; i++) lhs += (double)dx[0][i] * x[i];
        for (size_t i = 0; i < ny; i++) rhs += (double)dy[i] * (y[0][i] - b[(i / (oh * ow)) % cc->filters]);
        CHECK_NEAR(lhs, rhs, 1e-3 * (1 + fabs(rhs)));
        free(x), free(wt), free(b), free(dy);
        for (int k = 0; k < 2; k++) free(y[k]), free(dx[k]), free(dw[k]), free(db[k]);
    }
    CHECK_OK(bn_cpu_threads_set(0));
    return BN_PASS;
}

/* Banded products against one cblas_sgemm, and at 1 and 3 threads bit for bit: bands of rows (a
 * dense layer's weight gradient), and bands of columns where C is at least twice as wide as tall
 * (its forward pass and input gradient at a small batch, a few outputs' weight gradient), both
 * ways of transposing, with a last band shorter than the others. */
BN_TEST(parallel_banded_gemm_matches_one_call)
{
    static const int shapes[][5] = {{64, 500, 800, 0, 1},  {500, 800, 64, 1, 0}, {129, 33, 257, 0, 0},
                                    {3, 7, 5, 1, 1},       {64, 800, 500, 0, 0}, {10, 2048, 128, 1, 0},
                                    {16, 300, 257, 1, 1}, {40, 81, 600, 0, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], ta = shapes[s][3], tb = shapes[s][4];
        float *a = malloc((size_t)m * k * 4), *b = malloc((size_t)k * n * 4);
        float *c1 = malloc((size_t)m * n * 4), *c2 = malloc((size_t)m * n * 4), *c3 = malloc((size_t)m * n * 4);
        CHECK(a && b && c1 && c2 && c3);
        bn_rng r;
        bn_rng_seed(&r, bn_test_seed(), 100 + (uint64_t)s);
        fill(&r, a, (size_t)m * k), fill(&r, b, (size_t)k * n), fill(&r, c1, (size_t)m * n);
        memcpy(c2, c1, (size_t)m * n * 4);
        memcpy(c3, c1, (size_t)m * n * 4);
        int lda = ta ? m : k, ldb = tb ? k : n;
        CHECK_OK(bn_cpu_threads_set(3));
        bn_cpu_sgemm(ta, tb, m, n, k, 0.5f, a, lda, b, ldb, 1.0f, c1, n);
        CHECK_OK(bn_cpu_threads_set(1));
        bn_cpu_sgemm(ta, tb, m, n, k, 0.5f, a, lda, b, ldb, 1.0f, c3, n);
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, 0.5f, a,
                    lda, b, ldb, 1.0f, c2, n);
        for (size_t i = 0; i < (size_t)m * n; i++) CHECK_NEAR(c1[i], c2[i], 1e-4 * (1 + fabs(c2[i])));
        CHECK_MSG(memcmp(c1, c3, (size_t)m * n * 4) == 0, "shape %zu: 1 and 3 threads differ", s);
        free(a), free(b), free(c1), free(c2), free(c3);
    }
    CHECK_OK(bn_cpu_threads_set(0));
    return BN_PASS;
}

/* The bytes of a file into buf; its length, or -1. */
static long slurp(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return (long)n;
}

BN_TEST(parallel_cpu_training_same_at_1_and_3_threads)
{
    const char *data = bn_test_synthetic_mnist("par_mnist", 600, 100);
    CHECK(data != NULL);
    static char saved[2][1 << 20];
    long len[2];
    for (int k = 0; k < 2; k++) {
        char args[1024], path[600];
        snprintf(path, sizeof path, "%s/par_%d.safetensors", bn_test_tmpdir(), k);
        snprintf(args, sizeof args, "train models/resnet_mini.cfg --device cpu --data %s --epochs 1 --batch 50 "
                 "--threads %d --save %s", data, k ? 3 : 1, path);
        CHECK_MSG(bn_test_cli_run(args, out, sizeof out) == 0, "%s", out);
        len[k] = slurp(path, saved[k], sizeof saved[k]);
        CHECK(len[k] > 0 && len[k] < (long)sizeof saved[k]);
    }
    /* The checkpoint holds the weights, the momentum and the step: all of them bit for bit. */
    CHECK_MSG(len[0] == len[1] && memcmp(saved[0], saved[1], (size_t)len[0]) == 0,
              "the checkpoints of 1 and 3 threads differ");
    return BN_PASS;
}

BN_TEST(parallel_threads_flag_and_variable_refused_when_malformed)
{
    CHECK_CLI("train models/lenet.cfg --threads 0", 2, "blobnet: error: --threads: 0 is outside 1..256");
    CHECK_CLI("time models/lenet.cfg --threads many", 2, "--threads: 'many' is not an integer");
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "BLOBNET_THREADS=x2 '%s' summary models/lenet.cfg", bn_test_cli());
    CHECK(bn_test_run(cmd, out, sizeof out) == 2);
    CHECK_MSG(strstr(out, "blobnet: error: environment: BLOBNET_THREADS: 'x2' is not an integer"), "%s", out);
    return BN_PASS;
}

/* Every layer type whose CPU passes are cut into tasks other than element by element, with the
 * optimizer, at shapes that cut each pass into more tasks than a pool of one thread makes (four at
 * most), so that 1 and 3 threads run different cuts: batchnorm by channels (16 of 18432 values),
 * concat by examples, the dropout's draws in ranges of its 202752 values, avgpool by planes,
 * softmax_ce by rows of 40 classes, the update over a slab of 80K parameters. */
static const char POOL_NET[] = "[input]\nchannels=3\nheight=12\nwidth=12\n"
                               "[conv2d]\nname=c1\nfilters=16\nsize=3\npad=1\n"
                               "[batchnorm]\nname=bn1\n[relu]\nname=r1\n"
                               "[conv2d]\nname=a\ninput=r1\nfilters=6\nsize=1\n"
                               "[conv2d]\nname=b\ninput=r1\nfilters=5\nsize=3\npad=1\n"
                               "[concat]\nname=join\ninput=a,b\n"
                               "[dropout]\nname=drop\nrate=0.3\n"
                               "[avgpool]\nname=pool\nsize=3\nstride=2\npad=1\n"
                               "[batchnorm]\nname=bn2\n"
                               "[dense]\nname=fc1\noutputs=192\n"
                               "[batchnorm]\nname=bn3\n[relu]\nname=r3\n"
                               "[dense]\nname=fc2\noutputs=40\n"
                               "[softmax_ce]\nname=loss\n";
#define POOL_NET_BATCH 128
#define POOL_NET_CLASSES 40

/* The values of blobs, one after another. */
typedef struct snapshot {
    float *v;
    size_t len, cap;
} snapshot;

static bn_status keep_blob(bn_blob *b, void *arg)
{
    snapshot *s = arg;
    size_t n = bn_blob_count(b);
    const float *v = bn_blob_host_rd(b);
    if (!v) return bn_last_status();
    if (s->len + n > s->cap) {
        size_t cap = 2 * (s->len + n);
        float *grown = realloc(s->v, cap * sizeof *grown);
        if (!grown) return bn_error(BN_ERR_NOMEM, "no memory for a snapshot of %zu floats", cap);
        s->v = grown, s->cap = cap;
    }
    memcpy(s->v + s->len, v, n * sizeof *v);
    s->len += n;
    return BN_OK;
}

/* Three training steps of POOL_NET with optimizer kind at `threads` threads, then every blob of
 * the network (each layer's output and gradient, the parameters, their gradients, the running
 * averages, the metrics) and the optimizer's state into s; the dropout layer's output into
 * *dropped as the count of its zeros. */
static bn_status pool_net_run(int kind, int threads, uint64_t seed, snapshot *s, size_t *dropped)
{
    BN_TRY(bn_cpu_threads_set(threads));
    bn_net *net;
    BN_TRY(lt_net(POOL_NET, POOL_NET_BATCH, seed, &net));
    bn_train_config cfg = net->train;
    cfg.optimizer = kind;
    cfg.lr = 0.05;
    cfg.weight_decay = 1e-3;
    bn_optimizer *o = NULL;
    bn_status st = bn_optimizer_create(net, &cfg, &o);
    if (st == BN_OK) st = lt_train_steps(net, o, 0, 3, POOL_NET_CLASSES, seed, seed + 1000);
    if (st == BN_OK) st = bn_net_each_blob(net, keep_blob, s);
    for (int k = 0; st == BN_OK && o && k < o->num_state; k++) st = keep_blob(o->state[k], s);
    const bn_layer *drop = bn_net_find_layer(net, "drop");
    const float *y = st == BN_OK && drop ? bn_blob_host_rd(drop->out) : NULL;
    *dropped = 0;
    for (size_t i = 0; y && i < bn_blob_count(drop->out); i++) *dropped += y[i] == 0.0f;
    bn_optimizer_free(o);
    bn_net_free(net);
    return st;
}

BN_TEST(parallel_cpu_passes_of_a_net_same_at_1_and_3_threads)
{
    uint64_t seed = lt_fresh_seed();
    for (int kind = 0; kind < bn_optimizer_type_count(); kind++) {
        snapshot s[2] = {{0}, {0}};
        size_t dropped[2];
        CHECK_OK(pool_net_run(kind, 1, seed, &s[0], &dropped[0]));
        CHECK_OK(pool_net_run(kind, 3, seed, &s[1], &dropped[1]));
        CHECK(s[0].len == s[1].len && s[0].len > 0);
        size_t first = s[0].len;
        for (size_t i = 0; i < s[0].len && first == s[0].len; i++)
            if (memcmp(&s[0].v[i], &s[1].v[i], sizeof(float)) != 0) first = i;
        CHECK_MSG(first == s[0].len, "%s: 1 and 3 threads differ first at value %zu of %zu: %.9g against %.9g (%s)",
                  bn_optimizer_names[kind], first, s[0].len, s[0].v[first], s[1].v[first], lt_replay());
        /* The dropout's draws ran: about 30% of its values are zero. */
        size_t count = (size_t)POOL_NET_BATCH * 11 * 12 * 12;
        CHECK_MSG(dropped[0] > count / 5 && dropped[0] < count * 2 / 5, "%zu of %zu dropped at rate 0.3", dropped[0],
                  count);
        for (int k = 0; k < 2; k++) free(s[k].v);
    }
    CHECK_OK(bn_cpu_threads_set(0));
    return BN_PASS;
}
