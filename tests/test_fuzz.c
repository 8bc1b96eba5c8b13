/* test_fuzz.c - tools/fuzz.sh with the image target (tests/fuzz/fuzz_image.c): it builds, runs
 * its seeds and new inputs through predict's image path without a finding, and leaves nothing
 * behind in /dev/shm (or wherever its scratch files went). Needs clang with libFuzzer; the
 * instrumented library is kept in build-fuzz-test between runs. */
#include "testing.h"

#include <stdlib.h>

static char out[1 << 16];

/* The names under /dev/shm (else /tmp) that fuzz runs make, one per line, sorted. */
static void scratch_entries(char *buf, size_t cap)
{
    if (bn_test_run("ls -d /dev/shm/blobnet-fuzz* /tmp/blobnet-fuzz* 2>/dev/null | sort", buf, cap) < 0) buf[0] = '\0';
}

BN_TEST(fuzz_image_target_runs_clean_and_leaves_no_scratch_files)
{
    if (bn_test_run("command -v clang", out, sizeof out) != 0) BN_SKIP_TEST("no clang (Debian: clang)");
    char cmd[1024], before[4096], after[4096];
    snprintf(cmd, sizeof cmd, "printf 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }\\n' | "
             "clang -x c -fsanitize=fuzzer,address - -o %s/fuzz-probe", bn_test_tmpdir());
    if (bn_test_run(cmd, out, sizeof out) != 0) BN_SKIP_TEST("clang cannot link libFuzzer (Debian: libclang-rt-dev)");
    scratch_entries(before, sizeof before);
    int rc = bn_test_run("env FUZZ_BUILD=build-fuzz-test tools/fuzz.sh image 3", out, sizeof out);
    scratch_entries(after, sizeof after);
    CHECK_MSG(rc == 0 && strstr(out, "image: no findings"), "exit %d:\n%s", rc, out);
    const char *stats = strstr(out, "image: ");
    long execs = stats ? atol(stats + 7) : 0;
    CHECK_MSG(execs > 12, "%ld executions (12 seeds at least):\n%s", execs, out);
    /* Only a name that was not there before counts: another run's folder may come and go meanwhile. */
    for (char *line = after, *end; *line; line = end + 1) {
        if (!(end = strchr(line, '\n'))) break;
        *end = '\0';
        char with_newline[1100];
        snprintf(with_newline, sizeof with_newline, "%s\n", line);
        CHECK_MSG(strstr(before, with_newline) != NULL, "left behind: %s\nbefore:\n%s", line, before);
    }
    return BN_PASS;
}
