/* test_makefile.c - what the Makefile does for a newcomer: every core busy without -j, a short
 * line per step (V=1 for whole commands), and `make test` reading the MNIST that `make train`
 * fetched. Runs make from the repository's root with an extra makefile that shows what a recipe
 * of this Makefile sees, outside the calling make's jobserver. */
#include "testing.h"

#include <stdlib.h>
#include <sys/stat.h>

static char out[1 << 14];

#define MAKE "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory"

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
