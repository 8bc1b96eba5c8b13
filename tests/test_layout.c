/* test_layout.c - the tree's folder rules (docs/architecture.md): which folder's code may
 * include which, read from the sources' quoted includes. Run from the repository's root, as
 * make test does. */
#include <dirent.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testing.h"

typedef struct folder_rule {
    const char *dir;      /* a folder of sources, from the root */
    const char *may;      /* the folders its includes may name, space-separated */
} folder_rule;

/* The core knows the built-in layers only through the registry's table (layers/layers.h) and
 * the plugin entry point (blobnet.h); layers see only the core, the GPU helpers and each other. */
static const folder_rule rules[] = {
    {"src/core", "core layers public"},
    {"src/core/optimizers", "core core/optimizers"},
    {"src/core/lr_policies", "core core/lr_policies"},
    {"src/gpu", "core gpu"},
    {"src/io", "core io"},
    {"src/train", "core gpu io train dist datasets"},
    {"src/check", "core gpu io train check datasets"},
    {"src/dist", "core gpu dist"},
    {"src/cli", "core gpu io train check cli dist datasets layers public"},
    {"layers", "core gpu layers"},
    {"layers/conv2d", "core gpu layers"},
    {"layers/dense", "core gpu layers"},
    {"datasets", "core io datasets"},
};

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The folder an include of `name` from a file in `dir` names: a src/ folder, "layers",
 * "datasets" or "public" (src/blobnet.h); "" when it resolves nowhere. */
static void folder_of(const char *dir, const char *name, char *out, size_t cap)
{
    char path[512];
    const char *slash = strchr(name, '/');
    if (slash) {
        snprintf(path, sizeof path, "src/%s", name);
        if (is_file(path)) {
            snprintf(out, cap, "%.*s", (int)(slash - name), name);
            return;
        }
        snprintf(path, sizeof path, "layers/%s", name);
        snprintf(out, cap, "%s", is_file(path) ? "layers" : "");
        return;
    }
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (is_file(path)) {
        const char *own = strncmp(dir, "src/", 4) == 0 ? dir + 4 : strncmp(dir, "layers", 6) == 0 ? "layers" : dir;
        snprintf(out, cap, "%s", own);
        return;
    }
    static const char *const roots[][2] = {{"layers", "layers"}, {"datasets", "datasets"}, {"src", "public"}};
    out[0] = '\0';
    for (size_t i = 0; i < sizeof roots / sizeof roots[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", roots[i][0], name);
        if (is_file(path)) {
            snprintf(out, cap, "%s", roots[i][1]);
            return;
        }
    }
}

static int allowed(const char *may, const char *folder)
{
    size_t n = strlen(folder);
    for (const char *p = may; (p = strstr(p, folder)) != NULL; p += n)
        if ((p == may || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return 1;
    return 0;
}

static int is_source(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot && (!strcmp(dot, ".c") || !strcmp(dot, ".h") || !strcmp(dot, ".cu") || !strcmp(dot, ".cuh"));
}

/* Checks every quoted include of every source in rule->dir; the first breach is in why. */
static int check_folder(const folder_rule *rule, int *files, char *why, size_t cap)
{
    DIR *d = opendir(rule->dir);
    if (!d) {
        snprintf(why, cap, "cannot open %s", rule->dir);
        return 0;
    }
    int ok = 1;
    struct dirent *e;
    while (ok && (e = readdir(d)) != NULL) {
        if (!is_source(e->d_name)) continue;
        char path[512], line[512];
        snprintf(path, sizeof path, "%s/%s", rule->dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        ++*files;
        for (int ln = 1; ok && fgets(line, sizeof line, f); ln++) {
            char name[256], folder[64];
            if (sscanf(line, " #include \"%255[^\"]\"", name) != 1) continue;
            folder_of(rule->dir, name, folder, sizeof folder);
            if (folder[0] && allowed(rule->may, folder)) continue;
            snprintf(why, cap, "%s:%d includes \"%s\" (%s), but %s may include only: %s", path, ln, name,
                     folder[0] ? folder : "found nowhere", rule->dir, rule->may);
            ok = 0;
        }
        fclose(f);
    }
    closedir(d);
    return ok;
}

BN_TEST(layout_folders_include_only_what_they_may)
{
    if (!is_file("src/blobnet.h")) BN_SKIP_TEST("not run from the repository's root");
    char why[1024];
    int files = 0;
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        CHECK_MSG(check_folder(&rules[i], &files, why, sizeof why), "%s", why);
    CHECK_MSG(files > 100, "only %d sources found", files);
    /* The rule catches a breach: the core naming the trainer. */
    char folder[64];
    folder_of("src/core", "train/trainer.h", folder, sizeof folder);
    CHECK(strcmp(folder, "train") == 0 && !allowed(rules[0].may, folder));
    return BN_PASS;
}

BN_TEST(layout_src_top_holds_only_public_headers)
{
    DIR *d = opendir("src");
    if (!d) BN_SKIP_TEST("not run from the repository's root");
    struct dirent *e;
    char stray[600] = "";
    while ((e = readdir(d)) != NULL) {
        char path[512];
        snprintf(path, sizeof path, "src/%s", e->d_name);
        const char *dot = strrchr(e->d_name, '.');
        if (is_file(path) && !(dot && strcmp(dot, ".h") == 0)) snprintf(stray, sizeof stray, "%s", path);
    }
    closedir(d);
    CHECK_MSG(!stray[0], "%s belongs in one of src/'s folders", stray);
    return BN_PASS;
}
