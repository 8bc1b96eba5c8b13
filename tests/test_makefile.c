/* test_makefile.c - what the Makefile does for a newcomer: every core busy without -j, a short
 * line per step (V=1 for whole commands), `make test` reading the MNIST that `make train`
 * fetched, and nvcc planned only where a GPU is seen or CUDA=1 asks, for the architectures of
 * the GPUs present or of CUDA_ARCH. Runs make from the repository's root with an extra makefile
 * that shows what a recipe of this Makefile sees, outside the calling make's jobserver; the GPU
 * and nvcc are stand-ins in the temporary folder, so the plans are alike on every machine. */
#include "testing.h"

#include <stdlib.h>
#include <sys/stat.h>

static char out[1 << 19];

#define MAKE "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory"
/* make without the CUDA choice of the build that runs the tests (make exports its command line). */
#define MAKE_ALONE "env -u CPU_ONLY -u CUDA -u CUDA_ARCH " MAKE

/* TMP/show.mk: targets that print the MAKEFLAGS and BLOBNET_TEST_DATA a recipe gets. */
static const char *show_mk(void)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/show.mk", bn_test_tmpdir());
    FILE *f = fopen(path, "w");
    if (!f) return NULL;
    fputs("show-jobs:\n\t@echo \"flags: $(MAKEFLAGS)\"\nshow-data:\n\t@echo \"data: $$BLOBNET_TEST_DATA\"\n", f);
    return fclose(f) == 0 ? path : NULL;
}

BN_TEST(makefile_uses_every_core_and_prints_short_lines)
{
    const char *mk = show_mk();
    CHECK(mk != NULL);
    CHECK(bn_test_run("nproc", out, sizeof out) == 0);
    char jobs[32], cmd[2048];
    snprintf(jobs, sizeof jobs, "-j%d", atoi(out));
    snprintf(cmd, sizeof cmd, MAKE " -f Makefile -f %s show-jobs", mk);
    CHECK_MSG(bn_test_run(cmd, out, sizeof out) == 0 && strstr(out, jobs), "no %s in: %s", jobs, out);
    /* One object of the library, compiled into a folder of its own. */
    char build[512];
    snprintf(build, sizeof build, "%s/build-lines", bn_test_tmpdir());
    snprintf(cmd, sizeof cmd, MAKE " BUILD=%s %s/src/core/status.o", build, build);
    CHECK_MSG(bn_test_run(cmd, out, sizeof out) == 0 && strcmp(out, "  CC    src/core/status.c\n") == 0, "%s", out);
    snprintf(cmd, sizeof cmd, MAKE " V=1 -B BUILD=%s %s/src/core/status.o", build, build);
    CHECK_MSG(bn_test_run(cmd, out, sizeof out) == 0 && strstr(out, " -Wall ") &&
                  strstr(out, " -c src/core/status.c -o ") && !strstr(out, "  CC "),
              "%s", out);
    return BN_PASS;
}

BN_TEST(makefile_test_reads_the_mnist_make_train_fetched)
{
    const char *mk = show_mk();
    CHECK(mk != NULL);
    char dir[512], file[700], cmd[2048], want[600];
    snprintf(dir, sizeof dir, "%s/fetched-mnist", bn_test_tmpdir());
    CHECK(mkdir(dir, 0755) == 0);
    static const char *const names[] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                                        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte"};
    for (int i = 0; i < 4; i++) {
        snprintf(file, sizeof file, "%s/%s", dir, names[i]);
        FILE *f = fopen(file, "w");
        CHECK(f && fclose(f) == 0);
    }
    snprintf(cmd, sizeof cmd, "env -u BLOBNET_TEST_DATA " MAKE " -f Makefile -f %s show-data MNIST_DIR=%s", mk, dir);
    snprintf(want, sizeof want, "data: %s\n", dir);
    CHECK_MSG(bn_test_run(cmd, out, sizeof out) == 0 && strcmp(out, want) == 0, "%s", out);
    /* A copy named in the environment wins; a partial download is not used. */
    snprintf(cmd, sizeof cmd, "BLOBNET_TEST_DATA=/elsewhere " MAKE " -f Makefile -f %s show-data MNIST_DIR=%s", mk, dir);
    CHECK_MSG(bn_test_run(cmd, out, sizeof out) == 0 && strcmp(out, "data: /elsewhere\n") == 0, "%s", out);
    CHECK(remove(file) == 0);
    snprintf(cmd, sizeof cmd, "env -u BLOBNET_TEST_DATA " MAKE " -f Makefile -f %s show-data MNIST_DIR=%s", mk, dir);
    CHECK_MSG(bn_test_run(cmd, out, sizeof out) == 0 && strcmp(out, "data: \n") == 0, "%s", out);
    return BN_PASS;
}

/* TMP/NAME: an executable shell script with body, for a stand-in nvidia-smi or nvcc. */
static const char *script(const char *name, const char *body)
{
    static char paths[4][512];
    static int next;
    char *path = paths[next++ % 4];
    snprintf(path, sizeof paths[0], "%s/%s", bn_test_tmpdir(), name);
    FILE *f = fopen(path, "w");
    if (!f) return NULL;
    fprintf(f, "#!/bin/sh\n%s\n", body);
    if (fclose(f) != 0 || chmod(path, 0755) != 0) return NULL;
    return path;
}

/* An nvidia-smi that lists two GPUs of compute capability 8.6 and one of 8.0. */
#define SMI_AMPERE "case \"$1\" in -L) echo 'GPU 0: A (UUID: GPU-0)';; *) printf '8.6\\n8.0\\n8.6\\n';; esac"
/* One that finds no driver, as on a machine without a GPU that has the tools. */
#define SMI_NO_DRIVER "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'; exit 9"

/* The plan of `make -n V=1 vars target` in a fresh build folder, with nvcc at TMP/nvcc and the
 * GPU seen (or not) through the nvidia-smi at smi and no /dev/nvidia0; 0 when make succeeded. */
static int plan(const char *smi, const char *vars, const char *target)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             MAKE_ALONE " -n V=1 BUILD=%s/build-plan NVCC=%s/nvcc GPU_DEVICE=%s/no-such-device NVIDIA_SMI=%s %s %s",
             bn_test_tmpdir(), bn_test_tmpdir(), bn_test_tmpdir(), smi, vars, target);
    return bn_test_run(cmd, out, sizeof out);
}

/* How many lines of the plan in out run the stand-in nvcc. */
static int nvcc_lines(void)
{
    char nvcc[600];
    snprintf(nvcc, sizeof nvcc, "\n%s/nvcc ", bn_test_tmpdir());
    int n = 0;
    for (const char *at = out; (at = strstr(at, nvcc)) != NULL; at++) n++;
    return n;
}

/* The architecture flags of the plan's nvcc line for layers/activation.cu (between -O3 and
 * -lineinfo), or "" when it has none. */
static const char *activation_cu_arch(void)
{
    static char flags[512];
    flags[0] = '\0';
    const char *end = strstr(out, " -c layers/activation.cu ");
    if (!end) return flags;
    const char *line = end;
    while (line > out && line[-1] != '\n') line--;
    const char *from = strstr(line, " -O3 "), *to = strstr(line, " -lineinfo ");
    if (from && to && from < to) snprintf(flags, sizeof flags, "%.*s", (int)(to - from - 5), from + 5);
    return flags;
}

BN_TEST(makefile_plans_nvcc_only_where_a_gpu_is_seen_or_cuda_is_asked)
{
    CHECK(script("nvcc", "exit 1") != NULL);
    const char *ampere = script("smi-ampere", SMI_AMPERE), *none = script("smi-none", SMI_NO_DRIVER);
    CHECK(ampere && none);
    /* No GPU: the CPU binary alone, then the fetch and the training run. */
    CHECK_MSG(plan(none, "", "train") == 0, "%s", out);
    CHECK_MSG(nvcc_lines() == 0, "nvcc planned without a GPU:\n%.2000s", out);
    CHECK(strstr(out, " -c src/core/net.c -o ") != NULL);
    CHECK(strstr(out, "-DBN_WITH_CUDA") == NULL);
    CHECK(strstr(out, "tools/fetch_mnist.sh data/mnist") != NULL);
    CHECK(strstr(out, "./blobnet train models/lenet.cfg --data data/mnist") != NULL);
    CHECK_MSG(plan("false", "", "all") == 0 && nvcc_lines() == 0, "%.2000s", out);
    /* CUDA=1 asks for the GPU code without a GPU: every .cu file of layers/ among the rest. */
    CHECK(bn_test_run("ls layers/*.cu | wc -l", out, sizeof out) == 0);
    int layer_cus = atoi(out);
    CHECK(layer_cus > 5);
    CHECK_MSG(plan(none, "CUDA=1", "train") == 0, "%s", out);
    CHECK_MSG(nvcc_lines() > layer_cus, "%d nvcc lines for %d layer .cu files", nvcc_lines(), layer_cus);
    CHECK(strstr(out, "-DBN_WITH_CUDA") != NULL);
    /* A GPU seen by nvidia-smi, or through its device file, builds the GPU code unasked. */
    CHECK_MSG(plan(ampere, "", "train") == 0 && nvcc_lines() > layer_cus, "%.2000s", out);
    char vars[700];
    snprintf(vars, sizeof vars, "GPU_DEVICE=%s/nvcc", bn_test_tmpdir());
    CHECK_MSG(plan(none, vars, "all") == 0 && nvcc_lines() > layer_cus, "%.2000s", out);
    /* CPU_ONLY=1 and CUDA=0 keep it out even then. */
    CHECK_MSG(plan(ampere, "CPU_ONLY=1", "train") == 0 && nvcc_lines() == 0, "%.2000s", out);
    CHECK_MSG(plan(ampere, "CUDA=0", "all") == 0 && nvcc_lines() == 0, "%.2000s", out);
    CHECK_MSG(plan(ampere, "CPU_ONLY=1 CUDA=1", "all") == 0 && nvcc_lines() == 0, "%.2000s", out);
    /* CUDA=1 without nvcc says so rather than building a CPU binary in its place. */
    CHECK(plan(none, "CUDA=1 NVCC=/nonexistent/nvcc", "train") != 0);
    CHECK_MSG(strstr(out, "CUDA=1 but there is no nvcc at /nonexistent/nvcc") != NULL, "%s", out);
    return BN_PASS;
}

#define CHECK_ARCH(want) \
    CHECK_MSG(strcmp(activation_cu_arch(), want) == 0, "nvcc's architectures: '%s', expected '%s'", activation_cu_arch(), want)

BN_TEST(makefile_builds_for_the_gpus_present_or_cuda_arch)
{
    CHECK(script("nvcc", "exit 1") != NULL);
    const char *ampere = script("smi-ampere", SMI_AMPERE), *none = script("smi-none", SMI_NO_DRIVER);
    CHECK(ampere && none);
    /* The GPUs present: machine code for each capability once, PTX for the newest. */
    CHECK_MSG(plan(ampere, "", "libblobnet.a") == 0, "%s", out);
    CHECK_ARCH("-gencode arch=compute_80,code=sm_80 -gencode arch=compute_86,code=sm_86 "
                               "-gencode arch=compute_86,code=compute_86");
    /* No GPU to ask (or no driver): Hopper and its PTX. */
    CHECK_MSG(plan(none, "CUDA=1", "libblobnet.a") == 0, "%s", out);
    CHECK_ARCH("-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90");
    CHECK_MSG(plan("false", "CUDA=1", "libblobnet.a") == 0, "%s", out);
    CHECK_ARCH("-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90");
    /* CUDA_ARCH wins over the GPUs present, as capabilities or as whole flags. */
    CHECK_MSG(plan(ampere, "CUDA_ARCH=75", "libblobnet.a") == 0, "%s", out);
    CHECK_ARCH("-gencode arch=compute_75,code=sm_75 -gencode arch=compute_75,code=compute_75");
    CHECK_MSG(plan(none, "CUDA=1 CUDA_ARCH='80 90'", "libblobnet.a") == 0, "%s", out);
    CHECK_ARCH("-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 "
                               "-gencode arch=compute_90,code=compute_90");
    CHECK_MSG(plan(ampere, "CUDA_ARCH=-arch=sm_89", "libblobnet.a") == 0, "%s", out);
    CHECK_ARCH("-arch=sm_89");
    return BN_PASS;
}

/* One object compiled for real in a folder of its own with vars; its short lines. */
static int compile_status(const char *vars)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             MAKE_ALONE " BUILD=%s/build-switch NVCC=%s/nvcc GPU_DEVICE=/nonexistent NVIDIA_SMI=false %s %s/build-switch/src/core/status.o",
             bn_test_tmpdir(), bn_test_tmpdir(), vars, bn_test_tmpdir());
    return bn_test_run(cmd, out, sizeof out);
}

BN_TEST(makefile_recompiles_a_build_folder_when_cuda_comes_or_goes)
{
    CHECK(script("nvcc", "exit 1") != NULL);
    CHECK_MSG(compile_status("") == 0 && strcmp(out, "  CC    src/core/status.c\n") == 0, "%s", out);
    CHECK_MSG(compile_status("") == 0 && strcmp(out, "") == 0, "%s", out);
    CHECK_MSG(compile_status("CUDA=1") == 0 && strcmp(out, "  CC    src/core/status.c\n") == 0, "%s", out);
    CHECK_MSG(compile_status("CUDA=1") == 0 && strcmp(out, "") == 0, "%s", out);
    CHECK_MSG(compile_status("CUDA=1 CUDA_ARCH=80") == 0 && strcmp(out, "  CC    src/core/status.c\n") == 0, "%s", out);
    CHECK_MSG(compile_status("CUDA=0") == 0 && strcmp(out, "  CC    src/core/status.c\n") == 0, "%s", out);
    return BN_PASS;
}

/* The list of tests follows the test files: one whose file is gone leaves it. A removed file
 * changes no file the list is made from, so the Makefile keeps the files' names in a stamp and
 * rewrites it when they differ; here the stamp names a file that is not there, as after a removal,
 * and the list names that file's test. */
BN_TEST(makefile_drops_the_tests_of_a_removed_test_file)
{
    char build[512], path[600], cmd[2048];
    snprintf(build, sizeof build, "%s/build-list", bn_test_tmpdir());
    snprintf(cmd, sizeof cmd, MAKE " BUILD=%s %s/tests_list.h", build, build);
    CHECK_MSG(bn_test_run(cmd, out, sizeof out) == 0, "%s", out);
    snprintf(path, sizeof path, "%s/tests_files.txt", build);
    FILE *f = fopen(path, "w");
    CHECK_MSG(f != NULL, "no stamp %s", path);
    fputs("tests/test_gone.c tests/test_makefile.c\n", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/tests_list.h", build);
    f = fopen(path, "a");
    CHECK(f != NULL);
    fputs("X(a_test_of_a_removed_file)\n", f);
    fclose(f);
    /* The list is now newer than every test file. */
    CHECK(bn_test_run(cmd, out, sizeof out) == 0);
    snprintf(cmd, sizeof cmd, "cat %s", path);
    CHECK(bn_test_run(cmd, out, sizeof out) == 0);
    CHECK_MSG(strstr(out, "X(makefile_drops_the_tests_of_a_removed_test_file)") != NULL, "%.300s", out);
    CHECK_MSG(strstr(out, "a_test_of_a_removed_file") == NULL, "the removed file's test is still listed");
    return BN_PASS;
}
