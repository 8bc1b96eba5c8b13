#include "host_memory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GB 1e9

/* cgroup v1 writes "no limit" as 2^63 - 1 rounded down to a page. */
#define NO_LIMIT 4e18

#define PATH_CAP 1024

/* Reads root + path into buf (NUL-terminated, cut at cap - 1 bytes); 0 on success. */
static int read_file(const char *root, const char *path, char *buf, size_t cap)
{
    char full[4 * PATH_CAP];
    snprintf(full, sizeof full, "%s%s", root, path);
    FILE *f = fopen(full, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return 0;
}

/* The number after "key" at the start of a line of text (as in meminfo and memory.stat), or -1. */
static double field(const char *text, const char *key)
{
    size_t len = strlen(key);
    for (const char *line = text; line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (strncmp(line, key, len) == 0) return strtod(line + len, NULL);
    return -1;
}

/* A cgroup hierarchy as this process sees it: where it is mounted, which part of the hierarchy
 * the mount shows, and the process's cgroup in it. */
typedef struct hierarchy {
    char mount_root[PATH_CAP], mount_point[PATH_CAP], cgroup[PATH_CAP];
} hierarchy;

/* Whether the comma-separated list holds word. */
static int has_word(const char *list, const char *word)
{
    size_t len = strlen(word);
    for (const char *p = list; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (strncmp(p, word, len) == 0 && (p[len] == ',' || p[len] == '\0')) return 1;
    return 0;
}

/* Fills v2's and v1 memory's mount from /proc/self/mountinfo ("ID PARENT DEV ROOT POINT OPTS
 * [OPTIONAL...] - TYPE SOURCE SUPEROPTS"); a mount not found stays empty. */
static void find_mounts(const char *root, hierarchy *v2, hierarchy *v1)
{
    size_t cap = 1 << 18;
    char *text = malloc(cap), *save = NULL;
    if (!text || read_file(root, "/proc/self/mountinfo", text, cap) != 0) {
        free(text);
        return;
    }
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char mount_root[PATH_CAP], point[PATH_CAP], type[64], super[256];
        const char *dash = strstr(line, " - ");
        if (!dash || sscanf(line, "%*s %*s %*s %1023s %1023s", mount_root, point) != 2 ||
            sscanf(dash + 3, "%63s %*s %255s", type, super) != 2)
            continue;
        hierarchy *h = strcmp(type, "cgroup2") == 0                            ? v2
                       : strcmp(type, "cgroup") == 0 && has_word(super, "memory") ? v1
                                                                               : NULL;
        if (!h) continue;
        snprintf(h->mount_root, sizeof h->mount_root, "%s", mount_root);
        snprintf(h->mount_point, sizeof h->mount_point, "%s", point);
    }
    free(text);
}

/* Fills the process's cgroup in v2 ("0::PATH") and v1 memory ("N:...memory...:PATH") from
 * /proc/self/cgroup. */
static void find_cgroups(const char *root, hierarchy *v2, hierarchy *v1)
{
    char text[8192], *save = NULL;
    if (read_file(root, "/proc/self/cgroup", text, sizeof text) != 0) return;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = '\0';
        hierarchy *h = strcmp(line, "0:") == 0 ? v2 : has_word(c1 + 1, "memory") ? v1 : NULL;
        if (h) snprintf(h->cgroup, sizeof h->cgroup, "%s", c2 + 1);
    }
}

/* The names of one hierarchy's files: the limit, the usage, and the usage the kernel can
 * reclaim (file pages not recently used) in memory.stat. */
typedef struct cgroup_files {
    const char *limit, *usage, *inactive;
} cgroup_files;

/* Keeps in out the least room under a limit from the process's cgroup up to the top of the
 * mount: limit less what is in use that cannot be reclaimed. */
static void walk_limits(const char *root, const hierarchy *h, const cgroup_files *names, bn_host_memory *out)
{
    if (!h->mount_point[0] || !h->cgroup[0]) return;
    size_t shown = strcmp(h->mount_root, "/") == 0 ? 0 : strlen(h->mount_root);
    /* A cgroup outside the part of the hierarchy the mount shows: the mount's top is all there is. */
    const char *below = strncmp(h->cgroup, h->mount_root, shown) == 0 ? h->cgroup + shown : "";
    char dir[2 * PATH_CAP], path[2 * PATH_CAP + 64], text[8192];
    snprintf(dir, sizeof dir, "%s%s", h->mount_point, strcmp(below, "/") == 0 ? "" : below);
    for (;;) {
        snprintf(path, sizeof path, "%s/%s", dir, names->limit);
        double limit = -1;
        if (read_file(root, path, text, sizeof text) == 0 && strncmp(text, "max", 3) != 0) limit = strtod(text, NULL);
        snprintf(path, sizeof path, "%s/%s", dir, names->usage);
        if (limit > 0 && limit < NO_LIMIT && read_file(root, path, text, sizeof text) == 0) {
            double used = strtod(text, NULL);
            snprintf(path, sizeof path, "%s/memory.stat", dir);
            double inactive = read_file(root, path, text, sizeof text) == 0 ? field(text, names->inactive) : -1;
            if (inactive > 0 && inactive < used) used -= inactive;
            double room = limit > used ? limit - used : 0;
            if (out->bytes < 0 || room < out->bytes) {
                out->bytes = room;
                snprintf(out->source, sizeof out->source, "the %.3g GB left under the memory limit of %.3g GB of cgroup %.200s",
                         room / GB, limit / GB, dir);
            }
        }
        char *slash = strrchr(dir, '/');
        if (strlen(dir) <= strlen(h->mount_point) || !slash) return;
        *slash = '\0';
    }
}

void bn_host_memory_available_at(const char *root, bn_host_memory *out)
{
    out->bytes = -1;
    out->source[0] = '\0';
    char text[8192];
    if (read_file(root, "/proc/meminfo", text, sizeof text) == 0) {
        double kb = field(text, "MemAvailable:");
        if (kb >= 0) {
            out->bytes = kb * 1024;
            snprintf(out->source, sizeof out->source, "the %.3g GB available on this machine (MemAvailable in /proc/meminfo)",
                     out->bytes / GB);
        }
    }
    hierarchy v2, v1;
    memset(&v2, 0, sizeof v2);
    memset(&v1, 0, sizeof v1);
    find_mounts(root, &v2, &v1);
    find_cgroups(root, &v2, &v1);
    static const cgroup_files v2_files = {"memory.max", "memory.current", "inactive_file "};
    static const cgroup_files v1_files = {"memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file "};
    walk_limits(root, &v2, &v2_files, out);
    walk_limits(root, &v1, &v1_files, out);
}

void bn_host_memory_available(bn_host_memory *out)
{
    bn_host_memory_available_at("", out);
}
