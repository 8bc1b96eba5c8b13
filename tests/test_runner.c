/* test_runner.c - the runner's own output: a skipped test's reason is in its line and in the
 * closing summary on stdout, not only on stderr; a run's seeds repeat; a passing test's stderr
 * is kept aside. */
#include "testing.h"

#include <stdint.h>
#include <stdio.h>

#include "layer_testing.h"

static char out[1 << 14];

BN_TEST(runner_prints_skip_reasons_in_the_summary)
{
    /* Without BLOBNET_TEST_DATA, this test skips; stderr is dropped to see stdout alone. */
    int rc = bn_test_run("env -u BLOBNET_TEST_DATA tests/run_tests digit_fit_is_identity_on_mnist 2>/dev/null", out,
                         sizeof out);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    CHECK_MSG(strstr(out, "skip digit_fit_is_identity_on_mnist_test_digits") &&
                  strstr(out, " ms  (BLOBNET_TEST_DATA not set)\n"),
              "%s", out);
    CHECK_MSG(strstr(out, "skipped, by reason:\n     1  BLOBNET_TEST_DATA not set\n0 passed, 0 failed, 1 skipped\n"),
              "%s", out);
    return BN_PASS;
}

/* Several filters run the tests that contain any of them; -x leaves out what it names; a -x
 * without a name is a one-line error. */
BN_TEST(runner_takes_several_filters)
{
    int rc = bn_test_run("env -u BLOBNET_TEST_DATA tests/run_tests runner_seed_draws digit_fit_is_identity_on_mnist "
                         "2>/dev/null", out, sizeof out);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    CHECK_MSG(strstr(out, "ok   runner_seed_draws") && strstr(out, "skip digit_fit_is_identity_on_mnist_test_digits"),
              "%s", out);
    CHECK_MSG(strstr(out, "\n1 passed, 0 failed, 1 skipped\n"), "%s", out);
    rc = bn_test_run("tests/run_tests runner_seed_draws digit_fit_is_identity_on_mnist -x digit_fit 2>/dev/null", out,
                     sizeof out);
    CHECK_MSG(rc == 0 && strstr(out, "\n1 passed, 0 failed, 0 skipped\n"), "exit %d: %s", rc, out);
    rc = bn_test_run("tests/run_tests runner_seed_draws -x 2>&1", out, sizeof out);
    CHECK_MSG(rc == 2 && strstr(out, "-x needs") && strchr(out, '\n') == strrchr(out, '\n'), "exit %d: %s", rc, out);
    return BN_PASS;
}

/* Draws two seeds and says so: the run's seed and the test's name make them. Also writes on
 * stderr, which a passing test's run does not show. */
BN_TEST(runner_seed_draws)
{
    const uint64_t a = lt_fresh_seed(), b = lt_fresh_seed();
    printf("    draws %llu %llu\n", (unsigned long long)a, (unsigned long long)b);
    fprintf(stderr, "a line on stderr the run keeps aside\n");
    CHECK(a != b);
    CHECK(strstr(bn_test_stderr(), "a line on stderr the run keeps aside\n") != NULL);
    /* Read again after more is written: the second read sees both lines. */
    size_t mark = strlen(bn_test_stderr());
    fprintf(stderr, "and a second one\n");
    CHECK(strcmp(bn_test_stderr() + mark, "and a second one\n") == 0);
    return BN_PASS;
}

/* The "draws" line of a child run of the runner, or "" when there is none. */
static const char *draws_of(const char *text, char *line, size_t cap)
{
    const char *p = strstr(text, "    draws ");
    size_t n = 0;
    while (p && p[n] && p[n] != '\n' && n + 1 < cap) n++;
    memcpy(line, p ? p : "", n);
    line[n] = '\0';
    return line;
}

/* A run repeats: the same seed gives a test the same draws, whether it runs alone or after
 * others, another seed other draws; the default seed is printed first; a passing test's stderr
 * is not shown. */
BN_TEST(runner_seeds_repeat_whatever_runs_before)
{
    static const char *const runs[] = {
        "env BLOBNET_TEST_SEED=7 tests/run_tests runner_seed_draws",
        "env BLOBNET_TEST_SEED=7 tests/run_tests runner_",           /* another runner test first */
        "env BLOBNET_TEST_SEED=8 tests/run_tests runner_seed_draws",
        "env -u BLOBNET_TEST_SEED tests/run_tests runner_seed_draws",
    };
    char lines[4][160];
    for (int i = 0; i < 4; i++) {
        /* The second run must not recurse into this test: it excludes it. */
        char cmd[256];
        snprintf(cmd, sizeof cmd, "%s%s", runs[i], i == 1 ? " -x runner_seeds_repeat" : "");
        int rc = bn_test_run(cmd, out, sizeof out);
        CHECK_MSG(rc == 0, "'%s' exited %d: %s", cmd, rc, out);
        CHECK_MSG(!strstr(out, "a line on stderr the run keeps aside"), "'%s' showed a passing test's stderr: %s",
                  cmd, out);
        draws_of(out, lines[i], sizeof lines[i]);
        CHECK_MSG(lines[i][0], "'%s' printed no draws: %s", cmd, out);
        if (i == 3) CHECK_MSG(strstr(out, "seed 20261126 (the default)"), "%s", out);
    }
    CHECK_MSG(strcmp(lines[0], lines[1]) == 0, "seed 7 alone and after others: '%s' and '%s'", lines[0], lines[1]);
    CHECK_MSG(strcmp(lines[0], lines[2]) != 0, "seeds 7 and 8 drew the same: '%s'", lines[0]);
    return BN_PASS;
}
