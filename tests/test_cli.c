/* The command line: exit codes, messages, summary, and short real trainings. */
#include <stdlib.h>

#include "core/device.h"
#include "core/parallel.h"
#include "testing.h"

static char out[1 << 16];

static int cli(const char *args)
{
    return bn_test_cli_run(args, out, sizeof out);
}

BN_TEST(cli_help_and_version)
{
    CHECK_CLI("--version", 0, "blobnet 0.");
    CHECK_CLI("--help", 0, "train");
    CHECK_CLI("help train", 0, "--train-limit N");
    CHECK_CLI("train --help", 0, "--resume FILE");
    CHECK_CLI("train --help", 0, "--flip, --no-flip");
    CHECK_CLI("train --help", 0, "--pad zero|reflect");
    CHECK_CLI("train --help", 0, "--cutout N");
    CHECK_CLI("train --help", 0, "--optimizer NAME    the optimizer (the list below; default sgd)");
    CHECK(strstr(out, "\n  adamw           torch.optim.AdamW") && strstr(out, "keys: momentum (0.9)\n"));
    CHECK(strstr(out, "\n  step            lr * gamma ^ floor(s / stepsize)\n") &&
          strstr(out, "keys: gamma (0.0001), stepsize (10000)\n"));
    CHECK_CLI("train --help", 0, "--warmup N");
    CHECK_CLI("test --help", 0, "usage: blobnet test MODEL WEIGHTS");
    CHECK_CLI("", 2, "usage: blobnet COMMAND");
    return BN_PASS;
}

BN_TEST(cli_version_names_the_build)
{
    CHECK_CLI("--version", 0, bn_device_compiled() ? "blobnet 0.1.0 (CUDA " : "blobnet 0.1.0 (CPU only)\n");
    if (bn_device_compiled()) CHECK_MSG(strstr(out, ", cuDNN ") && strstr(out, ")\n"), "%s", out);
    return BN_PASS;
}

BN_TEST(cli_help_lists_and_describes_layer_types)
{
    CHECK_CLI("help", 0, "layer types (model-file sections):\n  dense conv2d maxpool");
    CHECK(strstr(out, "batchnorm\n") != NULL && strstr(out, "help TYPE") != NULL);
    CHECK_CLI("help dense", 0, "[dense] fully connected Y = X W^T + b over the flattened input\n"
                               "  keys: outputs (required), init = xavier|he (xavier)\n");
    CHECK(strstr(out, "  inputs: 1\n") != NULL && strstr(out, "loss") == NULL);
    CHECK_CLI("help concat", 0, "  keys: none\n");
    CHECK(strstr(out, "  inputs: 2 to 8\n") != NULL);
    CHECK_CLI("help softmax_ce", 0, "  a loss layer: reads the labels");
    if (bn_device_compiled()) {
        CHECK_CLI("help relu", 0, "  GPU: forward and backward, graph_safe\n");
        CHECK_CLI("help dropout", 0, "  GPU: forward and backward, graph_safe\n");
    }
    /* Commands keep their place. */
    CHECK_CLI("help summary", 0, "usage: blobnet summary MODEL");
    CHECK_CLI("help fly", 2, "blobnet: error: help: 'fly' is neither a command nor a layer type");
    CHECK_CLI("help dense conv2d", 2, "help: expected one command or layer type");
    CHECK_CLI("help --colour", 2, "help: unknown option");
    CHECK_CLI("help dense --plugin", 2, "help: option --plugin needs a value");
    return BN_PASS;
}

BN_TEST(cli_usage_errors_exit_2_with_one_line)
{
    CHECK_CLI("fly", 2, "blobnet: error: unknown command 'fly'");
    CHECK_CLI("train", 2, "blobnet: error: train: missing MODEL");
    CHECK_CLI("train models/lenet.cfg --epochs abc", 2, "blobnet: error: --epochs: 'abc' is not an integer");
    CHECK_CLI("train models/lenet.cfg --epochs", 2, "blobnet: error: option --epochs needs a value");
    CHECK_CLI("train models/lenet.cfg --batch 0", 2, "--batch: 0 is outside 1..65536");
    CHECK_CLI("train models/lenet.cfg --lr 1e999", 2, "--lr: '1e999' is too large to hold (it overflows to infinity)");
    CHECK_CLI("train models/lenet.cfg --lr 1e-400", 2, "--lr: '1e-400' is too small to hold (it underflows to 0)");
    CHECK_CLI("train models/lenet.cfg --lr inf", 2, "--lr: 'inf' is not a finite number");
    CHECK_CLI("train models/lenet.cfg --colour red", 2, "unknown option '--colour'");
    CHECK_CLI("train models/lenet.cfg --lr-policy warp", 2, "--lr-policy: 'warp' is not one of fixed, step, inv, "
              "cosine, onecycle");
    CHECK_CLI("train models/lenet.cfg --optimizer lion", 2, "--optimizer: 'lion' is not one of sgd, adam, adamw");
    CHECK_CLI("train models/lenet.cfg --warmup x", 2, "--warmup: 'x' is not an integer");
    CHECK_CLI("train models/lenet.cfg --shift 15", 2, "--shift: 15 is outside 0..14"); /* half of 28 */
    CHECK_CLI("train models/lenet.cfg --shift two", 2, "--shift: 'two' is not an integer");
    CHECK_CLI("train models/lenet.cfg --pad mirror", 2, "--pad: 'mirror' is not one of zero, reflect");
    CHECK_CLI("train models/lenet.cfg --cutout 29", 2, "--cutout: 29 is outside 0..28");
    CHECK_CLI("train models/lenet.cfg --cutout -1", 2, "--cutout: -1 is outside 0..28");
    CHECK_CLI("train models/lenet.cfg --dataset cifar", 2, "--dataset: 'cifar' is not a dataset format; formats are: mnist, fashion-mnist");
    CHECK_CLI("train models/lenet.cfg --device tpu", 2, "--device: 'tpu' is not one of cpu, gpu, gpu:N, auto");
    CHECK_CLI("train models/lenet.cfg --device gpu:x", 2, "--device: 'x' is not an integer");
    CHECK_CLI("train models/none.cfg", 2, "models/none.cfg: cannot open");
    CHECK_CLI("train models/lenet.cfg extra", 2, "unexpected argument 'extra'");
    CHECK_CLI("test models/lenet.cfg", 2, "test: expected MODEL and WEIGHTS");
    CHECK_CLI("summary", 2, "summary: expected exactly one MODEL");
    int rc = cli("train models/lenet.cfg --epochs abc");
    CHECK(rc == 2);
    CHECK_MSG(strchr(out, '\n') == out + strlen(out) - 1, "more than one line: %s", out);
    return BN_PASS;
}

BN_TEST(cli_bad_model_file_exit_2_names_line)
{
    char path[512];
    snprintf(path, sizeof path, "%s/bad.cfg", bn_test_tmpdir());
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fputs("[input]\nchannels=1\nheight=28\nwidth=28\n[dense]\noutputs=10\nsize=3\n", f);
    fclose(f);
    char args[600];
    snprintf(args, sizeof args, "summary %s", path);
    CHECK_CLI(args, 2, "bad.cfg:7: [dense] unknown key 'size'");
    return BN_PASS;
}

BN_TEST(cli_missing_data_exit_1_says_how_to_get_it)
{
    CHECK_CLI("train models/lenet.cfg --device cpu --data /nonexistent/mnist", 1, "fetch_mnist.sh");
    CHECK_CLI("test models/lenet.cfg w.safetensors --device cpu --data /nonexistent/mnist", 1, "/nonexistent/mnist");
    return BN_PASS;
}

BN_TEST(cli_summary_lists_lenet)
{
    CHECK_CLI("summary models/lenet.cfg", 0, "total: 8 layers, 431080 parameters");
    CHECK(strstr(out, "conv1") && strstr(out, "pool2") && strstr(out, "ip2") && strstr(out, "softmax_ce"));
    CHECK(strstr(out, "   20x  24x24") != NULL);
    /* conv1 forward: (2 * 25 + 1) * 20 * 24 * 24 = 587,520 FLOPs (multiply-adds and the bias). */
    CHECK(strstr(out, "0.588") != NULL);
    CHECK_CLI("summary models/mlp.cfg", 0, "397510 parameters");
    return BN_PASS;
}

/* Bytes of a binary file, or control characters in a name, reach the terminal escaped as \xNN
 * in an error line; UTF-8 text passes as it is. */
BN_TEST(cli_errors_escape_control_and_binary_bytes)
{
    char path[512], args[700];
    snprintf(path, sizeof path, "%s/binary.cfg", bn_test_tmpdir());
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    fputs("[input]\n\x1b[2J\x07\xff\xfe caf\xc3\xa9 \xc2\x9b\n", f);
    fclose(f);
    snprintf(args, sizeof args, "summary %s", path);
    CHECK_CLI(args, 2, "binary.cfg:2: expected 'key = value' or '[section]', got '\\x1b[2J\\x07\\xff\\xfe caf\xc3\xa9 \\xc2\\x9b'");
    for (const char *p = out; *p; p++)
        CHECK_MSG((unsigned char)*p >= 0x20 || *p == '\n', "raw byte 0x%02x in: %s", (unsigned char)*p, out);
    CHECK_CLI("'fly\x1b]0;title\x07'", 2, "unknown command 'fly\\x1b]0;title\\x07'");
    return BN_PASS;
}

/* "no CUDA device found" is said once, and only when the user asked for auto (train's default
 * and time's too, where the device is what the run is about); test and predict use the GPU when
 * there is one and the CPU without a word. */
BN_TEST(cli_no_cuda_warning_only_where_auto_was_asked_for)
{
    const char *warning = "blobnet: warning: no CUDA device found";
    CHECK_CLI("test models/lenet.cfg w.safetensors --data /nonexistent/mnist", 1, "/nonexistent/mnist");
    CHECK_MSG(!strstr(out, warning), "%s", out);
    CHECK_CLI("test models/lenet.cfg w.safetensors --data /nonexistent/mnist --device auto", 1, "/nonexistent/mnist");
    int expected = bn_device_compiled() && bn_device_count() == 0;
    const char *first = strstr(out, warning);
    CHECK_MSG(expected ? first && !strstr(first + 1, warning) : !first, "%s", out);
    return BN_PASS;
}

/* blobnet restarts itself once to choose OpenBLAS's kernels (main.c), but not when a tool runs
 * it: under valgrind, /proc/self/exe is valgrind's, and executing it stopped the run with
 * "You cannot run './blobnet' directly". Run natively (seen with strace, where there is one),
 * it restarts where OpenBLAS took a lesser class of kernels than the CPU runs
 * (bn_blas_core_wanted, as this process's OpenBLAS took them), and only there. */
BN_TEST(cli_runs_under_valgrind_and_restarts_itself_natively)
{
    char cmd[1024];
#if defined(__SANITIZE_ADDRESS__)
    /* The CLI of this build carries AddressSanitizer's runtime, which refuses to start under
     * valgrind (both take over the process's memory). */
    BN_SKIP_TEST("a SANITIZE=1 build: valgrind cannot run a program built with AddressSanitizer");
#endif
    if (bn_test_run("valgrind --version", out, sizeof out) != 0) BN_SKIP_TEST("no valgrind (Debian: valgrind)");
    snprintf(cmd, sizeof cmd, "{ env -u OPENBLAS_CORETYPE valgrind -q %s --version 2>/dev/null; }", bn_test_cli());
    int rc = bn_test_run(cmd, out, sizeof out);
    CHECK_MSG(rc == 0 && strncmp(out, "blobnet ", 8) == 0, "exit %d: %s", rc, out);
    snprintf(cmd, sizeof cmd, "env -u OPENBLAS_CORETYPE strace -f -e trace=execve %s --version 2>&1 | grep -c '^.*execve(\"'",
             bn_test_cli());
    /* This process's OpenBLAS chose as the CLI's does where no choice is set in the environment. */
    if (bn_test_run("strace -V", out, sizeof out) == 0 && !getenv("OPENBLAS_CORETYPE")) {
        const char *core = bn_blas_core_wanted();
        CHECK(bn_test_run(cmd, out, sizeof out) == 0);
        CHECK_MSG(atoi(out) == (core ? 2 : 1), "%d execve calls, expected %s", atoi(out),
                  core ? "the start and one restart" : "the start alone (OpenBLAS chose kernels of the CPU's class)");
    }
    return BN_PASS;
}

/* cuBLAS is opened at run time (gpu/blas_load.cu): a command that uses no GPU never loads it,
 * which kept 80-100 ms of the dynamic loader's work off every start; one that trains on the GPU
 * loads it and runs its products. LD_DEBUG=libs makes the loader name each library it starts. */
BN_TEST(cli_loads_cublas_only_when_a_gpu_computes)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "LD_DEBUG=libs %s --version 2>&1", bn_test_cli());
    int rc = bn_test_run(cmd, out, sizeof out);
    CHECK_MSG(rc == 0 && strstr(out, "blobnet "), "exit %d: %.300s", rc, out);
    CHECK_MSG(!strstr(out, "libcublas"), "--version loaded cuBLAS: %.300s", strstr(out, "libcublas"));
    if (!bn_device_compiled() || bn_device_count() == 0) BN_SKIP_TEST("no CUDA device: the GPU half does not apply");
    snprintf(cmd, sizeof cmd, "LD_DEBUG=libs %s time models/mlp.cfg --device gpu --batch 16 --iters 2 2>&1 | "
             "grep -E 'calling init: .*libcublas|^step:'", bn_test_cli());
    rc = bn_test_run(cmd, out, sizeof out);
    CHECK_MSG(rc == 0 && strstr(out, "step:"), "exit %d, no step time: %.400s", rc, out);
    CHECK_MSG(strstr(out, "calling init: ") && strstr(out, "libcublasLt.so"), "cuBLAS was not loaded for a GPU run");
    return BN_PASS;
}

/* Where mark's line starts in the BLOBNET_TIMELINE lines of text, or -1 when it is not there. */
static long mark_at(const char *text, const char *mark)
{
    const char *p = strstr(text, mark);
    return p ? (long)(p - text) : -1;
}

/* Trains LeNet for one short epoch on `device` with the timeline's marks: 0, or the exit status. */
static int timed_start(const char *device)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "BLOBNET_TIMELINE=1 %s train models/lenet.cfg --device %s --epochs 1 --train-limit 640 "
             "--test-limit 640 --quiet --data %s", bn_test_cli(), device, bn_test_data_dir());
    return bn_test_run(cmd, out, sizeof out);
}

/* On the CPU, `train` neither starts the CUDA driver nor loads cuBLAS. */
BN_TEST(cli_train_on_the_cpu_starts_no_cuda)
{
    if (!bn_test_data_dir()) BN_SKIP_TEST("BLOBNET_TEST_DATA not set");
    CHECK_MSG(timed_start("cpu") == 0, "%s", out);
    CHECK_MSG(mark_at(out, "data read") >= 0, "no data read mark: %s", out);
    CHECK_MSG(mark_at(out, "the CUDA driver") < 0 && mark_at(out, "cuBLAS loaded") < 0, "the CPU run touched CUDA: %s",
              out);
    return BN_PASS;
}

/* On a GPU, `train` reads the data once the CUDA driver has started and loads cuBLAS beside the
 * context's making (bn_cli_open_device_wait_driver), and the device is open after all three. */
BN_TEST(cli_train_reads_the_data_once_the_driver_has_started)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    if (!bn_test_data_dir()) BN_SKIP_TEST("BLOBNET_TEST_DATA not set");
    CHECK_MSG(timed_start("gpu") == 0, "%s", out);
    const long driver = mark_at(out, "the CUDA driver started"), data = mark_at(out, "data read"),
               blas = mark_at(out, "cuBLAS loaded"), made = mark_at(out, "the device's context made"),
               open = mark_at(out, "device open");
    CHECK_MSG(driver >= 0 && data > driver && blas > driver && made > driver, "out of order: %s", out);
    CHECK_MSG(open > data && open > blas && open > made, "the device was open before its work was done: %s", out);
    return BN_PASS;
}
