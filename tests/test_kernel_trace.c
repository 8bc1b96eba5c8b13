/* test_kernel_trace.c - the kernel tracer (tools/kernel_trace.c, a CUPTI injection library) and
 * its summary (tools/kernel_trace.py): the summary's arithmetic, a step's timeline and the
 * comparison with a base trace (kernel by kernel, and step piece by piece, by stream or, where the
 * two number their streams apart, by order) on traces written here, the pieces whose length falls
 * into two groups across the steps, each epoch's training steps, its refusal of a file that is not
 * a trace, its passing over a file that recorded nothing, and on a GPU with CUPTI a real trace of a
 * training run. */
#include "testing.h"

#include <stdarg.h>
#include <stdlib.h>

#include "core/device.h"

static char out[1 << 15];

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

/* Opens a new trace `name` in the test's folder (its path into path, `size` bytes) with the
 * tracer's header line written; NULL where it cannot. */
static FILE *new_trace(char *path, size_t size, const char *name)
{
    snprintf(path, size, "%s/%s", bn_test_tmpdir(), name);
    FILE *f = fopen(path, "w");
    if (f) fputs("kind,device,stream,start_ns,end_ns,what\n", f);
    return f;
}

/* Writes `steps` training steps into f from t0 on (ns), `period` ns apart, each a gather of 10 us
 * at its start and a convolution from conv_at to conv_end ns into it, on `stream`. */
static void write_steps(FILE *f, int stream, long t0, int steps, long period, long conv_at, long conv_end)
{
    for (long s = 0, t = t0; s < steps; s++, t += period) {
        fprintf(f, "kernel,0,%d,%ld,%ld,\"void gather_rows<float>(int, const float *)\"\n", stream, t, t + 10000);
        fprintf(f, "kernel,0,%d,%ld,%ld,\"conv_forward\"\n", stream, t + conv_at, t + conv_end);
    }
}

/* A new trace `name` of `steps` steps as write_steps writes them, from 1 ms on; 0, or -1 where
 * the file cannot be written. */
static int steps_trace(char *path, size_t size, const char *name, int stream, int steps, long period, long conv_at,
                       long conv_end)
{
    FILE *f = new_trace(path, size, name);
    if (!f) return -1;
    write_steps(f, stream, 1000000, steps, period, conv_at, conv_end);
    return fclose(f) == 0 ? 0 : -1;
}

/* The base of the comparisons: twelve steps of 100 us, the convolution 45 us from 12 us on. */
static int base_trace(char *path, size_t size, const char *name, int stream)
{
    return steps_trace(path, size, name, stream, 12, 100000, 12000, 57000);
}

/* Runs tools/kernel_trace.py with the arguments that format makes (shell text after the script's
 * name), its output into out; its exit status. */
static int summary(const char *format, ...) __attribute__((format(printf, 1, 2)));
static int summary(const char *format, ...)
{
    char cmd[4096] = "python3 tools/kernel_trace.py ";
    const size_t at = strlen(cmd);
    va_list ap;
    va_start(ap, format);
    vsnprintf(cmd + at, sizeof cmd - at, format, ap);
    va_end(ap);
    return bn_test_run(cmd, out, sizeof out);
}

/* The part of a summary's output (in out) from `heading` on, or NULL where the summary failed
 * (rc, its exit status) or printed no such heading. */
static const char *part_of(int rc, const char *heading)
{
    return rc == 0 ? strstr(out, heading) : NULL;
}

/* Twelve steps of 100 us: a gather (10 us), 2 us idle, a convolution (60 us) with an all-reduce
 * beside its last 20 us running 10 us past it, 28 us idle. Busy 80 us a step, idle 20. */
BN_TEST(kernel_trace_summary_measures_steps_and_gaps)
{
    if (bn_test_run("python3 --version", out, sizeof out) != 0) BN_SKIP_TEST("no python3");
    char path[512], bad[512];
    snprintf(bad, sizeof bad, "%s/not_a_trace.csv", bn_test_tmpdir());
    FILE *f = new_trace(path, sizeof path, "trace.csv");
    CHECK(f != NULL);
    for (long s = 0, t = 1000000; s < 12; s++, t += 100000) {
        fprintf(f, "kernel,0,7,%ld,%ld,\"void gather_rows<float>(int, const float *)\"\n", t, t + 10000);
        fprintf(f, "kernel,0,7,%ld,%ld,\"conv_forward\"\n", t + 12000, t + 72000);
        fprintf(f, "kernel,0,9,%ld,%ld,\"ncclDevKernel_AllReduce_Sum_f32_RING_LL(args)\"\n", t + 52000, t + 82000);
    }
    CHECK(fclose(f) == 0);
    int rc = summary("%s --marker gather --skip 1 --steps 10", path);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    CHECK_MSG(strstr(out, "10 steps: median 100.0 us"), "%s", out);
    CHECK_MSG(strstr(out, "busy 80.0 us, idle 20.0 us, NCCL's kernels 30.0 us a step"), "%s", out);
    CHECK_MSG(strstr(out, "18.0 us at    82.0: after ncclDevKernel_AllReduce_Sum_f32_RING_LL, "
                          "before gather_rows"),
              "%s", out);
    CHECK_MSG(strstr(out, "conv_forward                                          10     0.600    60.00"), "%s", out);
    /* --timeline: the median step's work in start order, with what ran beside what. */
    rc = summary("%s --marker gather --skip 1 --steps 10 --timeline", path);
    const char *tl = part_of(rc, "that step's work in the order it started");
    CHECK_MSG(tl != NULL, "exit %d: %s", rc, out);
    const char *conv = strstr(tl, "    12.0     72.0     60.0       7  conv_forward\n");
    const char *nccl = strstr(tl, "    52.0     82.0     30.0       9  ncclDevKernel_AllReduce_Sum_f32_RING_LL\n");
    CHECK_MSG(strstr(tl, "     0.0     10.0     10.0       7  gather_rows\n") && conv && nccl && conv < nccl, "%s", tl);
    rc = summary("%s --timeline", path);
    CHECK_MSG(rc != 0 && strstr(out, "--timeline needs --marker"), "exit %d: %s", rc, out);
    /* --against: the same steps of a base trace whose convolution took 45 us and which had no
     * all-reduce, kernel by kernel, the largest move first. */
    char base[512];
    CHECK(base_trace(base, sizeof base, "base_trace.csv", 7) == 0);
    rc = summary("%s --marker gather --skip 1 --steps 10 --against %s", path, base);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    const char *vs = strstr(out, "against the base (10 steps): kernel time a step 55.0 -> 100.0 us\n");
    CHECK_MSG(vs != NULL, "%s", out);
    const char *v_nccl = strstr(vs, "ncclDevKernel_AllReduce_Sum_f32_RING_LL                0.0      30.0     "
                                    "+30.0  - -> 30.00\n");
    const char *v_conv = strstr(vs, "conv_forward                                          45.0      60.0     "
                                    "+15.0  45.00 -> 60.00\n");
    CHECK_MSG(v_nccl && v_conv && v_nccl < v_conv, "%s", vs);
    /* --against with --timeline: the steps piece by piece, in the base's order, then what it lacks. */
    rc = summary("%s --marker gather --skip 1 --steps 10 --timeline --against %s", path, base);
    const char *ps = part_of(rc, "the steps beside the base's");
    CHECK_MSG(ps != NULL, "exit %d: %s", rc, out);
    const char *p_gather = strstr(ps, "     0.0     10.0       0.0     10.0     +0.0       7  gather_rows 1\n");
    const char *p_conv = strstr(ps, "    12.0     45.0      12.0     60.0    +15.0       7  conv_forward 1\n");
    const char *p_nccl = strstr(ps, "       -        -      52.0     30.0    +30.0       9  "
                                    "ncclDevKernel_AllReduce_Sum_f32_RING_LL 1\n");
    CHECK_MSG(p_gather && p_conv && p_nccl && p_gather < p_conv && p_conv < p_nccl, "%s", ps);
    /* A base whose streams are numbered otherwise (another process's, as one GPU's run beside a
     * rank's): its pieces are matched by name and number in the step, this trace's stream shown. */
    char other[512];
    CHECK(base_trace(other, sizeof other, "other_streams.csv", 17) == 0);
    rc = summary("%s --marker gather --skip 1 --steps 10 --timeline --against %s", path, other);
    ps = part_of(rc, "each piece by its name and number in the step, the two traces sharing no stream");
    CHECK_MSG(ps != NULL, "exit %d: %s", rc, out);
    p_gather = strstr(ps, "     0.0     10.0       0.0     10.0     +0.0       7  gather_rows 1\n");
    p_conv = strstr(ps, "    12.0     45.0      12.0     60.0    +15.0       7  conv_forward 1\n");
    CHECK_MSG(p_gather && p_conv && p_gather < p_conv, "%s", ps);
    rc = summary("%s --against %s", path, base);
    CHECK_MSG(rc != 0 && strstr(out, "--against needs --marker"), "exit %d: %s", rc, out);
    CHECK(write_text(bad, "epoch,loss\n1,0.5\n") == 0);
    rc = summary("%s --marker gather --against %s", path, bad);
    CHECK_MSG(rc != 0 && strstr(out, "not_a_trace.csv: not a kernel trace"), "exit %d: %s", rc, out);
    /* A reader that stops at the first line (| head -1) of a summary longer than a pipe holds:
     * the summary ends quietly, without a broken pipe's traceback. */
    char big[512], err[512];
    snprintf(err, sizeof err, "%s/many_kernels.err", bn_test_tmpdir());
    f = new_trace(big, sizeof big, "many_kernels.csv");
    CHECK(f != NULL);
    for (long k = 0, t = 1000000; k < 6000; k++, t += 2000)
        fprintf(f, "kernel,0,7,%ld,%ld,\"kernel_%ld_with_a_name_long_enough_to_fill_a_pipe\"\n", t, t + 1000, k);
    CHECK(fclose(f) == 0);
    rc = summary("%s --top 6000 2>%s | head -1; cat %s", big, err, err);
    CHECK_MSG(rc == 0 && strstr(out, "GPU busy 6.000 ms") && !strstr(out, "Traceback"), "exit %d: %s", rc, out);
    CHECK(write_text(bad, "epoch,loss\n1,0.5\n") == 0);
    rc = summary("%s", bad);
    CHECK_MSG(rc != 0 && strstr(out, "not a kernel trace"), "exit %d: %s", rc, out);
    return BN_PASS;
}

/* The traces of a run on several GPUs (BLOBNET_KERNEL_TRACE=...%p...) include the supervisor's,
 * which opened CUDA and launched nothing: the summary names that file, passes over it and
 * summarises the ranks' files, and fails only when no file given recorded any work (or when the
 * base of --against did not). */
BN_TEST(kernel_trace_summary_passes_over_a_file_that_recorded_nothing)
{
    if (bn_test_run("python3 --version", out, sizeof out) != 0) BN_SKIP_TEST("no python3");
    char empty[512], rank[512];
    FILE *f = new_trace(empty, sizeof empty, "supervisor.csv");
    CHECK(f != NULL && fclose(f) == 0);
    CHECK(steps_trace(rank, sizeof rank, "rank.csv", 7, 5, 50000, 10000, 40000) == 0);
    int rc = summary("%s %s --marker gather --skip 1 --steps 2 2>&1", empty, rank);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    CHECK_MSG(strstr(out, "supervisor.csv: no kernels, copies or fills recorded: passed over"), "%s", out);
    CHECK_MSG(strstr(out, "2 steps: median 50.0 us") && strstr(out, "busy 40.0 us, idle 10.0 us"), "%s", out);
    rc = summary("%s --marker gather --skip 1 --steps 2 --against %s 2>&1", rank, empty);
    CHECK_MSG(rc != 0 && strstr(out, "supervisor.csv: no kernels, copies or fills recorded"), "exit %d: %s", rc, out);
    rc = summary("%s 2>&1", empty);
    CHECK_MSG(rc != 0 && strstr(out, "no trace given recorded any work"), "exit %d: %s", rc, out);
    return BN_PASS;
}

/* --against sums each kernel's time a step over the typical steps only: a step of the base over
 * twice its median (a plan's timing, an epoch's end: here a 10 ms kernel) is left out and
 * counted, and the convolution reads 45 -> 60 us a step, not the long step's share. */
BN_TEST(kernel_trace_against_leaves_out_steps_over_twice_the_median)
{
    if (bn_test_run("python3 --version", out, sizeof out) != 0) BN_SKIP_TEST("no python3");
    char path[512], base[512];
    CHECK(steps_trace(path, sizeof path, "typical.csv", 7, 12, 100000, 12000, 72000) == 0);
    /* The base's sixth step holds a 10 ms kernel after its convolution, and runs 10 ms longer. */
    FILE *f = new_trace(base, sizeof base, "long_step.csv");
    CHECK(f != NULL);
    write_steps(f, 7, 1000000, 6, 100000, 12000, 57000);
    fprintf(f, "kernel,0,7,%ld,%ld,\"timing_run\"\n", 1557000L, 11557000L);
    write_steps(f, 7, 11600000, 6, 100000, 12000, 57000);
    CHECK(fclose(f) == 0);
    int rc = summary("%s --marker gather --skip 1 --steps 10 --against %s", path, base);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    CHECK_MSG(strstr(out, "against the base (9 steps): kernel time a step 55.0 -> 70.0 us\n"
                          "(steps over twice their trace's median left out: 0 of 10 here, 1 of 10 in the base)"),
              "%s", out);
    CHECK_MSG(strstr(out, "conv_forward                                          45.0      60.0     +15.0  "
                          "45.00 -> 60.00\n"),
              "%s", out);
    CHECK_MSG(!strstr(out, "timing_run"), "%s", out);
    return BN_PASS;
}

/* Steps piece by piece: a kernel that runs twice a step on one stream is matched by its number
 * there (the second call got shorter, the first did not), and one of the same name on another
 * stream by its stream, though it starts between the two. */
BN_TEST(kernel_trace_sets_steps_beside_the_base_piece_by_piece)
{
    if (bn_test_run("python3 --version", out, sizeof out) != 0) BN_SKIP_TEST("no python3");
    char path[2][512];
    for (int v = 0; v < 2; v++) {
        FILE *f = new_trace(path[v], sizeof path[v], v ? "pieces_1.csv" : "pieces_0.csv");
        CHECK(f != NULL);
        for (long s = 0, t = 1000000; s < 8; s++, t += 100000) {
            fprintf(f, "kernel,0,7,%ld,%ld,\"gather\"\n", t, t + 5000);
            fprintf(f, "kernel,0,7,%ld,%ld,\"conv\"\n", t + 10000, t + 30000);
            fprintf(f, "kernel,0,9,%ld,%ld,\"conv\"\n", t + 20000, t + 60000);
            fprintf(f, "kernel,0,7,%ld,%ld,\"conv\"\n", t + 40000, t + (v ? 50000 : 70000));
        }
        CHECK(fclose(f) == 0);
    }
    int rc = summary("%s --marker gather --skip 1 --steps 6 --timeline --against %s", path[1], path[0]);
    const char *ps = part_of(rc, "the steps beside the base's");
    CHECK_MSG(ps != NULL, "exit %d: %s", rc, out);
    const char *first = strstr(ps, "    10.0     20.0      10.0     20.0     +0.0       7  conv 1\n");
    const char *other = strstr(ps, "    20.0     40.0      20.0     40.0     +0.0       9  conv 1\n");
    const char *second = strstr(ps, "    40.0     30.0      40.0     10.0    -20.0       7  conv 2\n");
    CHECK_MSG(first && other && second && first < other && other < second, "%s", ps);
    return BN_PASS;
}

/* Pieces in two groups across the steps: a convolution of 20 us in even steps and 40 us in odd
 * ones, whose odd steps are 20 us longer; a ReLU of 10 us that jitters by 0.2 us is not listed, nor
 * is a bias kernel that is slow in a single step (a group needs two); without --marker, an error. */
BN_TEST(kernel_trace_spread_finds_the_pieces_of_two_lengths)
{
    if (bn_test_run("python3 --version", out, sizeof out) != 0) BN_SKIP_TEST("no python3");
    char path[512];
    FILE *f = new_trace(path, sizeof path, "spread.csv");
    CHECK(f != NULL);
    long t = 1000000;
    for (int s = 0; s < 12; s++) {
        const long conv = s % 2 ? 40000 : 20000, relu = 10000 + (s % 3) * 100, bias = s == 5 ? 30000 : 5000;
        fprintf(f, "kernel,0,7,%ld,%ld,\"gather\"\n", t, t + 5000);
        fprintf(f, "kernel,0,7,%ld,%ld,\"conv\"\n", t + 10000, t + 10000 + conv);
        fprintf(f, "kernel,0,8,%ld,%ld,\"relu\"\n", t + 10000, t + 10000 + relu);
        fprintf(f, "kernel,0,8,%ld,%ld,\"bias\"\n", t + 60000, t + 60000 + bias);
        t += 80000 + conv;
    }
    CHECK(fclose(f) == 0);
    int rc = summary("%s --marker gather --skip 1 --steps 10 --spread", path);
    const char *sp = part_of(rc, "the pieces whose length falls into two groups");
    CHECK_MSG(sp != NULL, "exit %d: %s", rc, out);
    /* Steps 1-10: five odd (40 us, steps of 120) and five even (20 us, steps of 100). */
    CHECK_MSG(strstr(sp, "     5     20.0    100.0       5     40.0    120.0    +20.0       7  conv 1\n"), "%s", sp);
    CHECK_MSG(!strstr(sp, "relu") && !strstr(sp, "bias"), "%s", sp);
    rc = summary("%s --spread", path);
    CHECK_MSG(rc != 0 && strstr(out, "--spread needs --marker"), "exit %d: %s", rc, out);
    return BN_PASS;
}

/* A new trace of two epochs of five training steps (a gather, and an update 50 us in), each
 * followed by three steps of an evaluation (a gather alone, 30 us); the second epoch's third step
 * takes 300 us, the others 100. 0, or -1 where the file cannot be written. */
static int epochs_trace(char *path, size_t size)
{
    FILE *f = new_trace(path, size, "epochs.csv");
    if (!f) return -1;
    for (long e = 0, t = 1000000; e < 2; e++) {
        for (int s = 0; s < 5; s++) {
            fprintf(f, "kernel,0,7,%ld,%ld,\"gather\"\n", t, t + 10000);
            fprintf(f, "kernel,0,8,%ld,%ld,\"update\"\n", t + 50000, t + 60000);
            t += e == 1 && s == 2 ? 300000 : 100000;
        }
        for (int s = 0; s < 3; s++, t += 30000) fprintf(f, "kernel,0,7,%ld,%ld,\"gather\"\n", t, t + 10000);
    }
    return fclose(f) == 0 ? 0 : -1;
}

/* --epochs cuts the whole trace (--skip and --steps aside) and sums each run of steps that hold an
 * update; --train names another kernel. */
BN_TEST(kernel_trace_epochs_sum_each_run_of_training_steps)
{
    if (bn_test_run("python3 --version", out, sizeof out) != 0) BN_SKIP_TEST("no python3");
    char path[512];
    CHECK(epochs_trace(path, sizeof path) == 0);
    int rc = summary("%s --marker gather --skip 2 --steps 3 --epochs", path);
    const char *ep = part_of(rc, "epochs: runs of steps holding a kernel that matches ^update");
    CHECK_MSG(ep != NULL, "exit %d: %s", rc, out);
    CHECK_MSG(strstr(ep, "  epoch 1: 5 steps, 0.500 ms; median 100.0, mean 100.0, 90th percentile 100.0, "
                         "longest 100.0\n"),
              "%s", ep);
    CHECK_MSG(strstr(ep, "  epoch 2: 5 steps, 0.700 ms; median 100.0, mean 140.0, 90th percentile 300.0, "
                         "longest 300.0\n"),
              "%s", ep);
    CHECK_MSG(!strstr(ep, "epoch 3"), "%s", ep);
    rc = summary("%s --marker gather --skip 0 --epochs --train nothing_of_the_kind", path);
    ep = part_of(rc, "epochs: runs of steps holding a kernel that matches nothing_of_the_kind");
    CHECK_MSG(ep && strstr(ep, "  none\n"), "exit %d: %s", rc, out);
    rc = summary("%s --epochs", path);
    CHECK_MSG(rc != 0 && strstr(out, "--epochs needs --marker"), "exit %d: %s", rc, out);
    return BN_PASS;
}

/* On a GPU, with the tracer built: LeNet's steps are recorded kernel by kernel, graph replays
 * included, and the summary cuts them at the batch gather. */
BN_TEST(kernel_trace_records_a_training_run)
{
    if (!bn_device_compiled() || bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    const char *data = bn_test_data_dir(); /* an empty value, as make exports one without MNIST, is unset */
    if (!data) BN_SKIP_TEST("BLOBNET_TEST_DATA is not set");
    const char *lib = getenv("BLOBNET_KERNEL_TRACER");
    if (!lib || !*lib) BN_SKIP_TEST("the tracer is not built (make trace: a CUDA build with CUPTI)");
    char path[512], cmd[4096];
    snprintf(path, sizeof path, "%s/lenet_trace.csv", bn_test_tmpdir());
    snprintf(cmd, sizeof cmd,
             "CUDA_INJECTION64_PATH=%s BLOBNET_KERNEL_TRACE=%s %s train models/lenet.cfg --device gpu --epochs 1 "
             "--train-limit 6400 --data %s --quiet >/dev/null 2>&1 && python3 tools/kernel_trace.py %s --marker gather "
             "--skip 5 --steps 50",
             lib, path, bn_test_cli(), data, path);
    int rc = bn_test_run(cmd, out, sizeof out);
    CHECK_MSG(rc == 0 && strstr(out, "50 steps: median "), "exit %d: %s", rc, out);
    double step = atof(strstr(out, "50 steps: median ") + 17);
    CHECK_MSG(step > 5 && step < 5000, "a LeNet step of %.1f us: %s", step, out);
    return BN_PASS;
}
