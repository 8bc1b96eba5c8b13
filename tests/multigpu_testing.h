/* multigpu_testing.h - what the tests of training on several GPUs share: whether this machine and
 * build can run them, and comparisons of the weight files the ranks write (byte for byte, and
 * within the tolerance that the order of the sums allows). */
#ifndef BN_MULTIGPU_TESTING_H
#define BN_MULTIGPU_TESTING_H

#include <stddef.h>

/* Why the two-GPU tests cannot run here (no NCCL in the build, fewer than two devices, no
 * $BLOBNET_TEST_DATA), or NULL when they can. */
const char *mg_cannot_run(void);

#define SKIP_WITHOUT_TWO_GPUS()                          \
    do {                                                 \
        const char *why_ = mg_cannot_run();              \
        if (why_) BN_SKIP_TEST("%s", why_);              \
    } while (0)

/* The tests' LeNet run: 3200 training images at batch 64 are 50 steps an epoch. */
#define LENET "models/lenet.cfg --batch 64 --seed 1 --quiet"
#define STEPS_50 "--train-limit 3200 --epochs 1"
/* 320 training images: 5 steps, where runs whose sums differ in order only are compared: LeNet's
 * first steps at lr 0.01 amplify a last bit into a weight's percent within 25 to 50 steps. */
#define STEPS_5 "--train-limit 320 --epochs 1"

/* Runs `env ENV blobnet train ARGS --data <real MNIST>` to completion, its output into out (cap
 * bytes); the exit code as bn_test_run gives it. */
int mg_train(const char *env, const char *args, char *out, size_t cap);

/* Returns a helper's failing result from the test that called it. */
#define CHECK_PASS(expr)                \
    do {                                \
        int r_ = (expr);                \
        if (r_ != BN_PASS) return r_;   \
    } while (0)

/* 1 when the files at a and b hold the same bytes. */
int mg_files_equal(const char *a, const char *b);

/* 2-GPU and 1-GPU runs differ only in the order of floating-point sums: each rank's cuDNN and
 * cuBLAS kernels sum 32 examples instead of 64 (other algorithms may be picked for the smaller
 * batch), and NCCL adds the two halves. One such step differs by a few float32 ulps (about 1e-7
 * relative); training amplifies it: in LeNet with this seed and data order, one ulp in one weight
 * moves the per-step losses by up to 1e-3 relative by step 50 (tests/test_gpu_training.c), while
 * the weights, which integrate 50 small updates, move far less. 1e-4 of the tensor's largest
 * magnitude is above that drift and far below what a wrong gradient scale does (a missing
 * division by the world size doubles every update: about 1e-1 of the largest weight after 50
 * steps). The test prints the difference it observed, so the bound can be tightened from it. */
#define WEIGHT_TOL 1e-4
/* The epoch's mean training loss averages the 50 steps' losses, so the late steps' drift moves
 * it much less than the last step's loss. */
#define LOSS_TOL 1e-3

/* How two files' parameter tensors ("<layer>.<param>", one dot: the optimizer's state tensors
 * are "<state>.<layer>.<param>") compare: the largest difference as a fraction of that tensor's
 * largest magnitude, the tensor where it is, and how many parameter tensors there were. */
typedef struct mg_weight_diff {
    double worst;
    char where[128];
    int tensors;
} mg_weight_diff;

/* Compares the parameter tensors of the weight files a and b; -1 with a message when either
 * cannot be read or their tensors do not match by name and size. */
int mg_diff_weights(const char *pa, const char *pb, mg_weight_diff *d);

/* Fails (a test's result) unless the weights at pa and pb agree to WEIGHT_TOL and, when both logs
 * are given, the last epochs' training losses agree to LOSS_TOL relative; prints what was
 * observed. */
int mg_check_same_training(const char *what, const char *pa, const char *pb, const char *log_a, const char *log_b);

/* Fails unless training moved every parameter tensor of path away from init by more than
 * 10 x WEIGHT_TOL: a run that never trained (or trained on zero gradients) cannot pass the
 * comparisons above. */
int mg_check_trained(const char *path, const char *init);

#endif
