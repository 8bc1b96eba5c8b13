/* runner.c - runs every BN_TEST collected by the Makefile and prints the closing count
 * line.  run_tests [-x EXCLUDE]... [FILTER]...: only tests whose name contains one of the
 * FILTERs (every test where none is given), and none whose name contains an EXCLUDE.
 *
 * A run is repeatable: the tests draw their random data from one seed (BN_TEST_DEFAULT_SEED, or
 * BLOBNET_TEST_SEED), printed first, through lt_fresh_seed, which derives each test's seeds from
 * it and the test's name, so a test draws the same data whatever runs before it or is filtered
 * out. And quiet: what a test writes on stderr (its library's notes and warnings, the messages of
 * the child processes it runs, which inherit the stream) is kept aside and shown only when the
 * test fails; a test may assert on it (bn_test_stderr). */
#define _POSIX_C_SOURCE 200809L
#include "testing.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/status.h"

#define X(name) int test_##name(void);
#include "tests_list.h"
#undef X

struct test_entry {
    const char *name;
    int (*fn)(void);
};

static const struct test_entry all_tests[] = {
#define X(name) {#name, test_##name},
#include "tests_list.h"
#undef X
};

static char tmpdir[256];

/* The seed of runs that do not name one. */
#define BN_TEST_DEFAULT_SEED 20261126ULL

/* The test now running, and the file its stderr goes to. */
static const char *current_test = "";
static FILE *captured;

const char *bn_test_name(void)
{
    return current_test;
}

unsigned long long bn_test_seed(void)
{
    const char *given = getenv("BLOBNET_TEST_SEED");
    return given && *given ? strtoull(given, NULL, 10) : BN_TEST_DEFAULT_SEED;
}

const char *bn_test_stderr(void)
{
    static char text[65536];
    text[0] = '\0';
    if (!captured) return text;
    fflush(stderr);
    /* Through the descriptor that fd 2 shares: the stream's own idea of its position is not
     * told about writes to fd 2, so a second call would read only as far as the first. pread
     * leaves the offset where the next write goes. */
    int fd = fileno(captured);
    off_t end = lseek(fd, 0, SEEK_END);
    if (end > 0) {
        size_t want = (size_t)end < sizeof text - 1 ? (size_t)end : sizeof text - 1;
        ssize_t got = pread(fd, text, want, 0);
        text[got > 0 ? got : 0] = '\0';
    }
    return text;
}

/* Sends stderr (fd 2, which child processes inherit) to a fresh temporary file; *saved keeps the
 * real one. Without a file the stream is left as it is. */
static void capture_stderr(int *saved)
{
    fflush(stderr);
    *saved = -1;
    captured = tmpfile();
    if (!captured) return;
    *saved = dup(2);
    if (*saved < 0 || dup2(fileno(captured), 2) < 0) {
        fclose(captured);
        captured = NULL;
    }
}

/* Puts stderr back; the test's stream is shown when it failed (show) and dropped otherwise. */
static void release_stderr(int saved, int show)
{
    fflush(stderr);
    if (saved >= 0) {
        dup2(saved, 2);
        close(saved);
    }
    if (!captured) return;
    if (show) {
        rewind(captured);
        char buf[4096];
        size_t got;
        while ((got = fread(buf, 1, sizeof buf, captured)) > 0) fwrite(buf, 1, got, stderr);
        fflush(stderr);
    }
    fclose(captured);
    captured = NULL;
}

/* Why the test that just ran skipped, and the distinct reasons of the run with their counts. */
#define MAX_REASONS 64
static char skip_reason[256];
static struct {
    char text[256];
    int count;
} reasons[MAX_REASONS];
static int num_reasons;

int bn_test_skip(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(skip_reason, sizeof skip_reason, fmt, ap);
    va_end(ap);
    return BN_SKIP;
}

static void count_reason(const char *text)
{
    int i = 0;
    while (i < num_reasons && strcmp(reasons[i].text, text) != 0) i++;
    if (i == MAX_REASONS) i = MAX_REASONS - 1; /* the last slot takes what does not fit */
    else if (i == num_reasons) snprintf(reasons[num_reasons++].text, sizeof reasons[i].text, "%s", text);
    reasons[i].count++;
}

static void print_skip_summary(void)
{
    if (num_reasons == 0) return;
    printf("skipped, by reason:\n");
    for (int i = 0; i < num_reasons; i++) printf("  %4d  %s\n", reasons[i].count, reasons[i].text);
}

const char *bn_test_data_dir(void)
{
    const char *d = getenv("BLOBNET_TEST_DATA");
    return (d && *d) ? d : NULL;
}

const char *bn_test_cli(void)
{
    const char *c = getenv("BLOBNET_CLI");
    return (c && *c) ? c : "./blobnet";
}

int bn_test_cli_run(const char *args, char *out, size_t cap)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s", bn_test_cli(), args);
    return bn_test_run(cmd, out, cap);
}

const char *bn_test_tmpdir(void)
{
    if (!tmpdir[0]) {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/blobnet-test-XXXXXX");
        if (!mkdtemp(tmpdir)) {
            perror("mkdtemp");
            exit(1);
        }
    }
    return tmpdir;
}

/* One IDX file: big-endian magic and dimensions, then count * size bytes from pixel(). */
static int write_synthetic_idx(const char *path, unsigned magic, int count, int side, int labels)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    unsigned dims[4] = {magic, (unsigned)count, (unsigned)side, (unsigned)side};
    for (int i = 0; i < (labels ? 2 : 4); i++)
        for (int b = 3; b >= 0; b--) fputc((int)(dims[i] >> (8 * b)) & 0xff, f);
    unsigned x = 2463534242u; /* xorshift32: the same pixels on every machine */
    for (int i = 0; i < count; i++) {
        if (labels) {
            fputc(i % 10, f);
            continue;
        }
        for (int p = 0; p < side * side; p++) {
            x ^= x << 13, x ^= x >> 17, x ^= x << 5;
            /* Bright strokes whose place depends on the label, over faint noise. */
            int stroke = (p / side + i % 10 * 2) % 10 < 3 && p % side > 6 && p % side < 22;
            fputc(stroke ? 160 + (int)(x % 96) : (int)(x % 40), f);
        }
    }
    return fclose(f) == 0 ? 0 : -1;
}

const char *bn_test_synthetic_mnist(const char *dir, int train, int test)
{
    static char path[512];
    char file[700];
    snprintf(path, sizeof path, "%s/%s", bn_test_tmpdir(), dir);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) return NULL;
    static const char *const split[2] = {"train", "t10k"};
    for (int s = 0; s < 2; s++) {
        int count = s == 0 ? train : test;
        snprintf(file, sizeof file, "%s/%s-images-idx3-ubyte", path, split[s]);
        if (write_synthetic_idx(file, 0x803, count, 28, 0) != 0) return NULL;
        snprintf(file, sizeof file, "%s/%s-labels-idx1-ubyte", path, split[s]);
        if (write_synthetic_idx(file, 0x801, count, 28, 1) != 0) return NULL;
    }
    return path;
}

int bn_test_run(const char *command, char *out, size_t cap)
{
    char full[4096];
    snprintf(full, sizeof full, "%s 2>&1", command);
    FILE *p = popen(full, "r");
    if (!p) return -1;
    size_t len = 0;
    char buf[4096];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, p)) > 0) {
        size_t room = cap > len + 1 ? cap - len - 1 : 0;
        size_t take = got < room ? got : room;
        memcpy(out + len, buf, take);
        len += take;
    }
    if (cap) out[len] = '\0';
    int st = pclose(p);
    if (st == -1 || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

/* Whether `name` contains one of the n words. */
static int contains_any(const char *name, const char *const *words, int n)
{
    for (int k = 0; k < n; k++)
        if (strstr(name, words[k])) return 1;
    return 0;
}

#define MOST_WORDS 32

int main(int argc, char **argv)
{
    const char *filter[MOST_WORDS], *exclude[MOST_WORDS];
    int filters = 0, excludes = 0;
    for (int i = 1; i < argc; i++) {
        const int x = strcmp(argv[i], "-x") == 0;
        if (x && i + 1 == argc) {
            fprintf(stderr, "run_tests: -x needs a part of a test's name after it\n");
            return 2;
        }
        if ((x ? excludes : filters) == MOST_WORDS) {
            fprintf(stderr, "run_tests: at most %d %s\n", MOST_WORDS, x ? "exclusions (-x)" : "filters");
            return 2;
        }
        if (x) exclude[excludes++] = argv[++i];
        else filter[filters++] = argv[i];
    }
    /* Decoded data goes to a cache folder of the run's own, never to the user's. */
    char cache[320];
    snprintf(cache, sizeof cache, "%s/data-cache", bn_test_tmpdir());
    setenv("BLOBNET_DATA_CACHE", cache, 1);
    int passed = 0, failed = 0, skipped = 0;
    size_t n = sizeof all_tests / sizeof all_tests[0];
    printf("seed %llu%s: BLOBNET_TEST_SEED=N runs with another, make test-seeds RUNS=K with K fresh ones\n",
           bn_test_seed(), getenv("BLOBNET_TEST_SEED") && *getenv("BLOBNET_TEST_SEED") ? "" : " (the default)");
    for (size_t i = 0; i < n; i++) {
        if (filters && !contains_any(all_tests[i].name, filter, filters)) continue;
        if (contains_any(all_tests[i].name, exclude, excludes)) continue;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        bn_clear_error();
        skip_reason[0] = '\0';
        fflush(stdout);
        current_test = all_tests[i].name;
        int saved;
        capture_stderr(&saved);
        int r = all_tests[i].fn();
        release_stderr(saved, r != BN_PASS && r != BN_SKIP);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
        const char *word = r == BN_PASS ? "ok  " : r == BN_SKIP ? "skip" : "FAIL";
        const char *why = skip_reason[0] ? skip_reason : "no reason given";
        printf("%s %-44s %8.1f ms%s%s%s\n", word, all_tests[i].name, ms, r == BN_SKIP ? "  (" : "",
               r == BN_SKIP ? why : "", r == BN_SKIP ? ")" : "");
        fflush(stdout);
        if (r == BN_PASS) passed++;
        else if (r == BN_SKIP) skipped++, count_reason(why);
        else failed++;
    }
    if (tmpdir[0]) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    }
    print_skip_summary();
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
