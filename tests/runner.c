/* runner.c - runs every BN_TEST collected by the Makefile and prints the closing count
 * line.  run_tests [-x EXCLUDE] [FILTER]: only tests whose name contains FILTER, and none
 * whose name contains EXCLUDE. */
#define _POSIX_C_SOURCE 200809L
#include "testing.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "status.h"

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

int main(int argc, char **argv)
{
    const char *filter = NULL, *exclude = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-x") == 0 && i + 1 < argc) exclude = argv[++i];
        else filter = argv[i];
    }
    int passed = 0, failed = 0, skipped = 0;
    size_t n = sizeof all_tests / sizeof all_tests[0];
    for (size_t i = 0; i < n; i++) {
        if (filter && !strstr(all_tests[i].name, filter)) continue;
        if (exclude && strstr(all_tests[i].name, exclude)) continue;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        bn_clear_error();
        fflush(stdout);
        int r = all_tests[i].fn();
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
        const char *word = r == BN_PASS ? "ok  " : r == BN_SKIP ? "skip" : "FAIL";
        printf("%s %-44s %8.1f ms\n", word, all_tests[i].name, ms);
        fflush(stdout);
        if (r == BN_PASS) passed++;
        else if (r == BN_SKIP) skipped++;
        else failed++;
    }
    if (tmpdir[0]) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
