/* test_layout.c - the tree's folder rules (docs/architecture.md): which folder's code may
 * include which, read from the sources' quoted includes; which folders' objects the core's
 * objects may need at link time, read with nm from the build's objects; and how long a source
 * file may grow. Run from the repository's root, as make test does. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file_testing.h"
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

/* ---- Link-time dependencies of the core ---- */

/* A symbol and where it was seen: the object for the core's, the folder for the others'. */
typedef struct sym {
    char name[256]; /* as long as the lines' names read into it */
    char where[160];
} sym;

typedef struct sym_list {
    sym *items;
    int count, cap;
} sym_list;

static int sym_add(sym_list *l, const char *name, const char *where)
{
    if (l->count == l->cap) {
        int cap = l->cap ? 2 * l->cap : 256;
        sym *grown = realloc(l->items, (size_t)cap * sizeof *grown);
        if (!grown) return 0;
        l->items = grown;
        l->cap = cap;
    }
    snprintf(l->items[l->count].name, sizeof l->items[0].name, "%s", name);
    snprintf(l->items[l->count].where, sizeof l->items[0].where, "%s", where);
    l->count++;
    return 1;
}

/* The entry named name, or NULL. */
static const sym *sym_find(const sym_list *l, const char *name)
{
    for (int i = 0; i < l->count; i++)
        if (strcmp(l->items[i].name, name) == 0) return &l->items[i];
    return NULL;
}

/* The first symbol a core object refers to that no core object defines but an object of a folder
 * above the core does, unless `allowed` lists it; 1 with the breach in why, 0 when none. */
static int first_breach(const sym_list *core_undefined, const sym_list *core_defined, const sym_list *others,
                        const sym_list *allowed, char *why, size_t cap)
{
    for (int i = 0; i < core_undefined->count; i++) {
        const sym *u = &core_undefined->items[i];
        const sym *other = sym_find(others, u->name);
        if (!other || sym_find(core_defined, u->name) || sym_find(allowed, u->name)) continue;
        snprintf(why, cap, "%s refers to %s, which only %s defines: the core must reach it through a table it "
                 "declares (core/device_ops.h) or not at all", u->where, u->name, other->where);
        return 1;
    }
    return 0;
}

/* The build folder that make test ran from: the BUILD= of BLOBNET_MAKE (how the Makefile hands
 * its settings to the tests), else the folder above BLOBNET_PLUGINS; "" when neither is set. */
static void build_dir(char *out, size_t cap)
{
    out[0] = '\0';
    const char *make = getenv("BLOBNET_MAKE"), *plugins = getenv("BLOBNET_PLUGINS");
    const char *at = make ? strstr(make, " BUILD=") : NULL;
    if (at) {
        at += strlen(" BUILD=");
        snprintf(out, cap, "%.*s", (int)strcspn(at, " '\""), at);
    } else if (plugins && plugins[0]) {
        const char *slash = strrchr(plugins, '/');
        if (slash) snprintf(out, cap, "%.*s", (int)(slash - plugins), plugins);
    }
}

/* The folder of an object under the build folder: "core" and the other src/ folders by name,
 * "layers" and "datasets" for everything beneath them, "" for the rest (tests, plugins). */
static const char *object_folder(const char *rel, char *buf, size_t cap)
{
    if (strncmp(rel, "src/", 4) == 0) {
        snprintf(buf, cap, "%.*s", (int)strcspn(rel + 4, "/"), rel + 4);
        return buf;
    }
    if (strncmp(rel, "layers/", 7) == 0) return "layers";
    if (strncmp(rel, "datasets/", 9) == 0) return "datasets";
    return "";
}

/* Whether a core object belongs to this build: one of src/core's sources compiled to it (an
 * object left behind by a source since moved or removed is no part of the library). */
static int live_core_object(const char *rel)
{
    char src[512];
    size_t n = strlen(rel);
    if (n < 3 || strcmp(rel + n - 2, ".o") != 0) return 0;
    snprintf(src, sizeof src, "%.*s.c", (int)(n - 2), rel);
    return is_file(src);
}

/* Reads every global symbol of the objects under dir (nm -P -g -A): what src/core's objects
 * refer to and define, and what the objects of gpu, train, cli, io, check, dist, datasets and
 * layers define. 0 when nm could not be run. */
static int read_symbols(const char *dir, sym_list *core_undefined, sym_list *core_defined, sym_list *others)
{
    static const char *const above = " gpu train cli io check dist datasets layers ";
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "find '%s/src' '%s/layers' '%s/datasets' -name '*.o' -exec nm -P -g -A {} + 2>/dev/null",
             dir, dir, dir);
    FILE *p = popen(cmd, "r");
    if (!p) return 0;
    char line[1024], path[512], name[256], type, folder_buf[64];
    size_t skip = strlen(dir) + 1;
    while (fgets(line, sizeof line, p)) {
        if (sscanf(line, "%511[^:]: %255s %c", path, name, &type) != 3 || strlen(path) <= skip) continue;
        const char *rel = path + skip, *folder = object_folder(rel, folder_buf, sizeof folder_buf);
        char padded[80];
        snprintf(padded, sizeof padded, " %s ", folder);
        int defined = !strchr("Uwv", type);
        if (strcmp(folder, "core") == 0) {
            if (live_core_object(rel)) sym_add(defined ? core_defined : core_undefined, name, path);
        } else if (folder[0] && defined && strstr(above, padded)) {
            sym_add(others, name, folder);
        }
    }
    return pclose(p) == 0;
}

/* The ops tables layers/layers.h declares: the registry's table of built-in types, which the
 * core may name (its include is allowed too). */
static void read_layer_table(sym_list *allowed)
{
    FILE *f = fopen("layers/layers.h", "r");
    if (!f) return;
    char line[256], name[128];
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "extern const bn_layer_ops %127[A-Za-z0-9_];", name) == 1) sym_add(allowed, name, "layers.h");
    fclose(f);
}

static void free_lists(sym_list *lists, int n)
{
    for (int i = 0; i < n; i++) free(lists[i].items);
}

BN_TEST(layout_core_links_against_no_folder_above_it)
{
    if (!is_file("src/blobnet.h")) BN_SKIP_TEST("not run from the repository's root");
    char dir[512], probe[600];
    build_dir(dir, sizeof dir);
    if (!dir[0]) BN_SKIP_TEST("no build folder: run through make test (BLOBNET_MAKE names it)");
    snprintf(probe, sizeof probe, "%s/src/core/blob.o", dir);
    if (!is_file(probe)) BN_SKIP_TEST("no core objects in %s", dir);
    if (system("nm --version > /dev/null 2>&1") != 0) BN_SKIP_TEST("nm is not installed");
    sym_list lists[4] = {{0}};
    sym_list *core_undefined = &lists[0], *core_defined = &lists[1], *others = &lists[2], *allowed = &lists[3];
    int read = read_symbols(dir, core_undefined, core_defined, others);
    read_layer_table(allowed);
    char why[1024] = "";
    int breach = first_breach(core_undefined, core_defined, others, allowed, why, sizeof why);
    /* The reading saw what it should: the core's objects use the core's error calls, the gpu
     * folder's define the context, and the registry's table was found. */
    int saw = sym_find(core_undefined, "bn_error") && sym_find(core_defined, "bn_error") &&
              sym_find(others, "bn_ctx_open") && sym_find(allowed, "bn_dense_ops");
    /* The check catches a breach: a core object calling into gpu/. */
    sym_list fake[2] = {{0}};
    sym_add(&fake[0], "bn_ctx_open", "core/x.o");
    char fake_why[1024];
    int caught = first_breach(&fake[0], &fake[1], others, allowed, fake_why, sizeof fake_why) &&
                 strstr(fake_why, "bn_ctx_open") && strstr(fake_why, "gpu");
    free_lists(fake, 2);
    free_lists(lists, 4);
    CHECK_MSG(read, "nm could not read the objects under %s", dir);
    CHECK_MSG(saw, "the symbols read from %s lack bn_error, bn_ctx_open or the layer table", dir);
    CHECK_MSG(!breach, "%s", why);
    CHECK(caught);
    return BN_PASS;
}

/* ---- File size ---- */

#define MAX_SOURCE_LINES 800

static int count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int lines = 0, c;
    while ((c = getc(f)) != EOF) lines += c == '\n';
    fclose(f);
    return lines;
}

/* The sources past MAX_SOURCE_LINES, as "path (N lines)" joined by ", ", and how many sources
 * were seen. */
typedef struct long_list {
    char *list;
    size_t cap;
    int files;
} long_list;

static void note_if_long(const char *path, const char *name, void *user)
{
    long_list *l = user;
    if (!is_source(name)) return;
    l->files++;
    int lines = count_lines(path);
    size_t len = strlen(l->list);
    if (lines > MAX_SOURCE_LINES) snprintf(l->list + len, l->cap - len, "%s%s (%d lines)", len ? ", " : "", path, lines);
}

/* Appends "path (N lines)" to list for each source under dir, its subfolders too, longer than
 * MAX_SOURCE_LINES; counts the sources seen. */
static void long_sources(const char *dir, char *list, size_t cap, int *files)
{
    long_list l = {list, cap, *files};
    ft_each_file(dir, note_if_long, &l);
    *files = l.files;
}

BN_TEST(layout_no_source_file_over_800_lines)
{
    if (!is_file("src/blobnet.h")) BN_SKIP_TEST("not run from the repository's root");
    static const char *const roots[] = {"src", "layers", "datasets", "tests", "tools"};
    char list[4096] = "";
    int files = 0;
    for (size_t i = 0; i < sizeof roots / sizeof roots[0]; i++) long_sources(roots[i], list, sizeof list, &files);
    CHECK_MSG(files > 100, "only %d sources found", files);
    CHECK_MSG(!list[0], "a file past %d lines holds more than one concept; split it along them: %s",
              MAX_SOURCE_LINES, list);
    return BN_PASS;
}

BN_TEST(layout_size_check_finds_a_long_file_at_any_depth)
{
    char dir[512], deep[600], path[700], list[1024] = "";
    ft_path(dir, sizeof dir, "layout_sizes");
    snprintf(deep, sizeof deep, "%s/sub", dir);
    mkdir(dir, 0755);
    mkdir(deep, 0755);
    /* One line past the limit in a subfolder, exactly the limit beside it, and a long file that
     * is no source. */
    char text[MAX_SOURCE_LINES + 2], want[64];
    memset(text, '\n', sizeof text - 1);
    text[sizeof text - 1] = '\0';
    snprintf(path, sizeof path, "%s/long.cu", deep);
    CHECK(ft_write_text(path, text) == 0);
    snprintf(path, sizeof path, "%s/notes.txt", deep);
    CHECK(ft_write_text(path, text) == 0);
    text[sizeof text - 2] = '\0';
    snprintf(path, sizeof path, "%s/full.c", dir);
    CHECK(ft_write_text(path, text) == 0);
    int files = 0;
    long_sources(dir, list, sizeof list, &files);
    CHECK_MSG(files == 2, "%d sources counted", files);
    snprintf(want, sizeof want, "sub/long.cu (%d lines)", MAX_SOURCE_LINES + 1);
    CHECK_MSG(strstr(list, want) && !strstr(list, "full.c") && !strstr(list, "notes"), "listed: %s", list);
    return BN_PASS;
}
