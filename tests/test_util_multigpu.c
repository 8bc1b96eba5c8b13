/* test_util_multigpu.c - what the tests of training on several GPUs share (multigpu_testing.h). */
#include "multigpu_testing.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/device.h"
#include "dist/dist.h"
#include "testing.h"

const char *mg_cannot_run(void)
{
    static char why[256];
    if (!bn_dist_compiled()) {
        snprintf(why, sizeof why, "%s", bn_dist_missing());
        return why;
    }
    int n = bn_device_count();
    if (n < 2) {
        snprintf(why, sizeof why, "needs 2 CUDA devices, this machine has %d", n);
        return why;
    }
    if (!bn_test_data_dir()) return "BLOBNET_TEST_DATA not set";
    return NULL;
}

int mg_files_equal(const char *a, const char *b)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
    return system(cmd) == 0;
}
