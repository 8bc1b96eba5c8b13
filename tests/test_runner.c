/* test_runner.c - the runner's own output: a skipped test's reason is in its line and in the
 * closing summary on stdout, not only on stderr. */
#include "testing.h"

#include <stdio.h>

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
