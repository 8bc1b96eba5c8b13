/* multigpu_testing.h - what the tests of training on several GPUs share: whether this machine and
 * build can run them, and a byte-for-byte comparison of the files the ranks write. */
#ifndef BN_MULTIGPU_TESTING_H
#define BN_MULTIGPU_TESTING_H

/* Why the two-GPU tests cannot run here (no NCCL in the build, fewer than two devices, no
 * $BLOBNET_TEST_DATA), or NULL when they can. */
const char *mg_cannot_run(void);

#define SKIP_WITHOUT_TWO_GPUS()                          \
    do {                                                 \
        const char *why_ = mg_cannot_run();              \
        if (why_) BN_SKIP_TEST("%s", why_);              \
    } while (0)

/* 1 when the files at a and b hold the same bytes. */
int mg_files_equal(const char *a, const char *b);

#endif
