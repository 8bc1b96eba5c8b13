/* testing.h - the test runner's small vocabulary.
 *
 * A test is `BN_TEST(name) { ... }` in any tests/test_*.c file; the Makefile collects the
 * names into a generated list, so adding a test never means editing a table. A test passes
 * by returning BN_PASS; CHECK* macros print the failing condition and return BN_FAIL;
 * BN_SKIP_TEST(why) reports it skipped (GPU tests without a device), the reason shown in the
 * test's line and counted in the summary. */
#ifndef BN_TESTING_H
#define BN_TESTING_H

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { BN_PASS = 0, BN_FAIL = 1, BN_SKIP = 2 };

#define BN_TEST(name) int test_##name(void); int test_##name(void)

/* Prints "file:line: message" for the failing check and fails the test. */
#define CHECK_MSG(cond, ...)                                              \
    do {                                                                  \
        if (!(cond)) {                                                    \
            fprintf(stderr, "    %s:%d: check failed: %s: ", __FILE__,    \
                    __LINE__, #cond);                                     \
            fprintf(stderr, __VA_ARGS__);                                 \
            fputc('\n', stderr);                                          \
            return BN_FAIL;                                               \
        }                                                                 \
    } while (0)

#define CHECK(cond) CHECK_MSG(cond, "%s", "")

/* Fails unless the bn_status expression is BN_OK; prints the library's message. */
#define CHECK_OK(expr)                                                    \
    do {                                                                  \
        bn_status check_s_ = (expr);                                      \
        CHECK_MSG(check_s_ == BN_OK, "status %d: %s", (int)check_s_,      \
                  bn_last_error());                                       \
    } while (0)

/* Fails unless expr returns `code` and the message contains `needle`. */
#define CHECK_ERR(expr, code, needle)                                     \
    do {                                                                  \
        bn_clear_error();                                                 \
        bn_status check_s_ = (expr);                                      \
        CHECK_MSG(check_s_ == (code), "expected status %d, got %d (%s)",  \
                  (int)(code), (int)check_s_, bn_last_error());           \
        CHECK_MSG(strstr(bn_last_error(), (needle)) != NULL,              \
                  "message \"%s\" lacks \"%s\"", bn_last_error(), (needle)); \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                             \
    do {                                                                  \
        double check_a_ = (a), check_b_ = (b);                            \
        CHECK_MSG(fabs(check_a_ - check_b_) <= (tol),                     \
                  "%.9g vs %.9g (tolerance %g)", check_a_, check_b_,      \
                  (double)(tol));                                         \
    } while (0)

/* Records why the running test is skipped, for its line and the closing summary of the
 * runner's output (stdout); returns BN_SKIP. */
int bn_test_skip(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

#define BN_SKIP_TEST(...) return bn_test_skip(__VA_ARGS__)

/* The name of the test now running. */
const char *bn_test_name(void);

/* The run's seed: BLOBNET_TEST_SEED, or the runner's default, so that a run is repeatable. */
unsigned long long bn_test_seed(void);

/* What the running test has written on stderr so far, itself and the child processes it ran
 * (the runner keeps it aside, and shows it only when the test fails). */
const char *bn_test_stderr(void);

/* Directory of the real MNIST files ($BLOBNET_TEST_DATA), or NULL when unset. */
const char *bn_test_data_dir(void);

/* Path of the built CLI binary, for tests that run it. */
const char *bn_test_cli(void);

/* Runs `command` through the shell, captures stdout+stderr into out (NUL-terminated,
 * truncated to cap) and returns the exit status (or -1 when it could not run). */
int bn_test_run(const char *command, char *out, size_t cap);

/* Runs the blobnet CLI with args (a shell-quoted string) like bn_test_run. */
int bn_test_cli_run(const char *args, char *out, size_t cap);

/* Fails unless the CLI run with args exits with code and prints needle; the output lands in
 * the calling file's `out` buffer (static char out[...]). */
#define CHECK_CLI(args, code, needle)                                                              \
    do {                                                                                           \
        int rc_ = bn_test_cli_run(args, out, sizeof out);                                          \
        CHECK_MSG(rc_ == (code), "'%s' exited %d, expected %d; output:\n%s", args, rc_, code, out); \
        CHECK_MSG(strstr(out, needle) != NULL, "'%s' output lacks \"%s\":\n%s", args, needle, out); \
    } while (0)

/* A fresh temporary directory for this test run (created once, removed by the runner). */
const char *bn_test_tmpdir(void);

/* Makes dir (inside the temporary directory) an MNIST-shaped data set of raw IDX files with
 * `train` and `test` 28x28 images of fixed pseudo-random pixels, labels i % 10: for tests that
 * need real files and fast runs but no particular accuracy. Returns dir's full path (static
 * storage) or NULL when it cannot be written. */
const char *bn_test_synthetic_mnist(const char *dir, int train, int test);

#endif
