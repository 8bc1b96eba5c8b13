/* test_host_memory.c - the host memory a process may still take (src/core/host_memory.c), read
 * from made-up /proc and cgroup trees (v2, nested v1, a namespaced mount, none), and setup's
 * refusal of a network that needs more than the machine, or a cgroup, leaves. */
#include "testing.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/host_memory.h"
#include "core/net.h"

static char out[1 << 14];

/* Writes text to root + path, making the folders on the way. */
static int put(const char *root, const char *path, const char *text)
{
    char full[1024];
    snprintf(full, sizeof full, "%s%s", root, path);
    for (char *p = full + strlen(root) + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        if (mkdir(full, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    FILE *f = fopen(full, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

#define MEMINFO "MemTotal:       16000000 kB\nMemFree:         9000000 kB\nMemAvailable:   15000000 kB\n"

/* A file of a fake root: its path from / and its text. */
typedef struct fake_file {
    const char *path, *text;
} fake_file;

/* A fresh fake root named `name` holding files[0..n); its path (static storage), or NULL. */
static const char *fake_root(const char *name, const fake_file *files, int n)
{
    static char root[512];
    snprintf(root, sizeof root, "%s/%s", bn_test_tmpdir(), name);
    if (mkdir(root, 0755) != 0) return NULL;
    for (int i = 0; i < n; i++)
        if (put(root, files[i].path, files[i].text) != 0) return NULL;
    return root;
}

/* What bn_host_memory_available_at reads under a fake root made of files. */
static bn_host_memory read_fake(const char *name, const fake_file *files, int n)
{
    bn_host_memory m = {.bytes = -2};
    const char *root = fake_root(name, files, n);
    if (root) bn_host_memory_available_at(root, &m);
    return m;
}

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

BN_TEST(host_memory_reads_memavailable_without_cgroup_limits)
{
    static const fake_file files[] = {{"/proc/meminfo", MEMINFO}};
    bn_host_memory m = read_fake("meminfo-only", files, COUNT(files));
    CHECK_NEAR(m.bytes, 15000000.0 * 1024, 1);
    CHECK_MSG(strcmp(m.source, "the 15.4 GB available on this machine (MemAvailable in /proc/meminfo)") == 0, "%s",
              m.source);
    /* Nothing to read: unknown, which refuses nothing. */
    m = read_fake("empty", NULL, 0);
    CHECK(m.bytes == -1 && m.source[0] == '\0');
    return BN_PASS;
}

/* cgroup v2: the limit less what is in use, not counting file pages the kernel can reclaim; an
 * ancestor without a limit ("max") adds none. */
BN_TEST(host_memory_takes_the_cgroup_v2_limit)
{
    static const fake_file files[] = {
        {"/proc/meminfo", MEMINFO},
        {"/proc/self/mountinfo", "22 1 0:21 / /proc rw,nosuid - proc proc rw\n"
                                 "30 22 0:27 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"},
        {"/proc/self/cgroup", "0::/user.slice/job\n"},
        {"/sys/fs/cgroup/user.slice/memory.max", "max\n"},
        {"/sys/fs/cgroup/user.slice/memory.current", "9000000000\n"},
        {"/sys/fs/cgroup/user.slice/job/memory.max", "4000000000\n"},
        {"/sys/fs/cgroup/user.slice/job/memory.current", "1500000000\n"},
        {"/sys/fs/cgroup/user.slice/job/memory.stat",
         "anon 900000000\nfile 600000000\nactive_file 100000000\ninactive_file 500000000\n"},
    };
    bn_host_memory m = read_fake("v2", files, COUNT(files));
    CHECK_NEAR(m.bytes, 3e9, 1);
    CHECK_MSG(strcmp(m.source, "the 3 GB left under the memory limit of 4 GB of cgroup /sys/fs/cgroup/user.slice/job") == 0,
              "%s", m.source);
    return BN_PASS;
}

/* cgroup v1: the memory controller's own mount and line; a parent's tighter limit binds, and
 * the top's "no limit" (2^63 - 1 rounded to a page) is none. */
BN_TEST(host_memory_takes_the_tightest_cgroup_v1_ancestor)
{
    static const fake_file files[] = {
        {"/proc/meminfo", MEMINFO},
        {"/proc/self/mountinfo", "31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
                                 "34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
                                 "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"},
        {"/proc/self/cgroup", "5:cpu:/a/b\n4:memory:/a/b\n0::/\n"},
        {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n"},
        {"/sys/fs/cgroup/memory/memory.usage_in_bytes", "9000000000\n"},
        {"/sys/fs/cgroup/memory/a/memory.limit_in_bytes", "2000000000\n"},
        {"/sys/fs/cgroup/memory/a/memory.usage_in_bytes", "1200000000\n"},
        {"/sys/fs/cgroup/memory/a/memory.stat", "cache 300000000\ninactive_file 1\ntotal_inactive_file 200000000\n"},
        {"/sys/fs/cgroup/memory/a/b/memory.limit_in_bytes", "8000000000\n"},
        {"/sys/fs/cgroup/memory/a/b/memory.usage_in_bytes", "1000000000\n"},
    };
    bn_host_memory m = read_fake("v1", files, COUNT(files));
    CHECK_NEAR(m.bytes, 1e9, 1);
    CHECK_MSG(strstr(m.source, "limit of 2 GB of cgroup /sys/fs/cgroup/memory/a"), "%s", m.source);
    return BN_PASS;
}

/* In a cgroup namespace the mount shows only the process's part of the hierarchy: its files are
 * at the mount's top. */
BN_TEST(host_memory_reads_a_namespaced_cgroup_mount)
{
    static const fake_file files[] = {
        {"/proc/meminfo", MEMINFO},
        {"/proc/self/mountinfo", "34 30 0:31 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n"},
        {"/proc/self/cgroup", "4:memory:/docker/abc\n"},
        {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "536870912\n"},
        {"/sys/fs/cgroup/memory/memory.usage_in_bytes", "36870912\n"},
    };
    bn_host_memory m = read_fake("namespaced", files, COUNT(files));
    CHECK_NEAR(m.bytes, 5e8, 1);
    return BN_PASS;
}

/* Setup's limit is what this machine leaves, not a fixed figure: a network needing half as much
 * again is refused before anything is allocated, with both figures; an explicit max_bytes
 * still rules. */
BN_TEST(host_memory_setup_refuses_more_than_the_machine_has)
{
    bn_host_memory m;
    bn_host_memory_available(&m);
    if (m.bytes < 0) BN_SKIP_TEST("no /proc/meminfo to read the machine's memory from");
    /* A 1x1024x1024 input: 4 MiB per example, and nothing else of note. */
    bn_net *net;
    CHECK_OK(bn_net_from_text("[input]\nchannels=1\nheight=1024\nwidth=1024\n[avgpool]\nglobal=1\n", "big.cfg", &net));
    int batch = (int)(1.5 * m.bytes / (4 << 20)) + 1;
    bn_status s = bn_net_setup(net, batch, NULL, 0, 1);
    char message[1100];
    snprintf(message, sizeof message, "%s", bn_last_error());
    bn_net_free(net);
    CHECK_MSG(s == BN_ERR_USAGE, "status %d: %s", (int)s, message);
    char want[200];
    snprintf(want, sizeof want, "big.cfg: at batch %d the network needs over ", batch);
    CHECK_MSG(strstr(message, want) && strstr(message, " GB of host memory (at the input), more than the ") &&
                  (strstr(message, "GB available on this machine (MemAvailable in /proc/meminfo)") ||
                   strstr(message, "GB left under the memory limit of")) &&
                  strstr(message, "; use a smaller batch or smaller layers"),
              "%s", message);
    CHECK_OK(bn_net_from_text("[input]\nchannels=1\nheight=1024\nwidth=1024\n[avgpool]\nglobal=1\n", "big.cfg", &net));
    net->max_bytes = 1 << 20;
    CHECK_ERR(bn_net_setup(net, 1, NULL, 0, 1), BN_ERR_USAGE, "more than the limit of 0.00105 GB set for it");
    bn_net_free(net);
    return BN_PASS;
}

/* The memory cgroup folder of this process (v1), made writable for a child, or NULL. */
static const char *child_cgroup(char *dir, size_t cap)
{
    char line[1024];
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return NULL;
    const char *path = NULL;
    while (!path && fgets(line, sizeof line, f)) {
        char *mem = strstr(line, ":memory:");
        if (mem) path = mem + strlen(":memory:");
    }
    fclose(f);
    if (!path) return NULL;
    line[strcspn(line, "\n")] = '\0';
    snprintf(dir, cap, "/sys/fs/cgroup/memory%s/blobnet-test-%ld", strcmp(path, "/") == 0 ? "" : path, (long)getpid());
    return mkdir(dir, 0755) == 0 ? dir : NULL;
}

/* What the issue saw: a model needing more than the cgroup allows was killed by the kernel
 * without a word. Now it is refused before it allocates, naming the cgroup's limit. Needs a
 * cgroup v1 memory controller this user may make a child cgroup in (root, usually). */
BN_TEST(host_memory_cli_refuses_what_the_cgroup_cannot_hold)
{
    char dir[1200], path[1300], cmd[4096];
    if (!child_cgroup(dir, sizeof dir)) BN_SKIP_TEST("cannot make a child cgroup in the cgroup v1 memory controller (needs root)");
    snprintf(path, sizeof path, "%s/memory.limit_in_bytes", dir);
    FILE *f = fopen(path, "w");
    int limited = f && fprintf(f, "%d\n", 256 << 20) > 0;
    if (f) limited &= fclose(f) == 0;
    const char *data = bn_test_synthetic_mnist("cgroup-data", 20, 10);
    char model[512];
    snprintf(model, sizeof model, "%s/wide.cfg", bn_test_tmpdir());
    /* 78.4 million weights: 627 MB with their gradients, over twice the cgroup's 256 MiB. */
    f = fopen(model, "w");
    if (f) {
        fputs("[input]\nchannels=1\nheight=28\nwidth=28\n[dense]\noutputs=100000\n[dense]\noutputs=10\n[softmax_ce]\n", f);
        fclose(f);
    }
    int rc = -1;
    if (limited && data && f) {
        snprintf(cmd, sizeof cmd, "sh -c 'echo $$ > %s/cgroup.procs && exec %s train %s --data %s --device cpu --epochs 1'",
                 dir, bn_test_cli(), model, data);
        rc = bn_test_run(cmd, out, sizeof out);
    }
    rmdir(dir);
    CHECK_MSG(limited && data && f, "could not set up the cgroup, data or model");
    CHECK_MSG(rc == 2, "exit %d: %s", rc, out);
    CHECK_MSG(strstr(out, "wide.cfg: at batch 64 the network needs over ") &&
                  strstr(out, "GB left under the memory limit of 0.268 GB of cgroup ") && strstr(out, dir),
              "%s", out);
    return BN_PASS;
}
