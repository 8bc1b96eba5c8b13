/* test_data_cache.c - the decoded-dataset cache behind bn_data_load, on gzip IDX sets and folders
 * of PNGs written here: a miss writes one entry and the next load takes it (proved by a source
 * overwritten under the same size, time and inode), every change of the source or the request
 * misses, a truncated, altered or foreign entry is a warning and the set is decoded again, and
 * "off", an unwritable folder, raw IDX files, fresh sources and the size limit keep nothing; an
 * entry whose class names hold an empty one is refused. The sizes the cache's limit and the GPU's
 * data budget are given in, and the CLI's refusal of either when it is not one. */
#include "testing.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "core/options.h"
#include "data_cache.h"
#include "dataset.h"
#include "io/image.h"

#define TRAIN_COUNT 30
#define TEST_COUNT 10
#define SIDE 5

static char err[1 << 14];

/* "<test directory>/dc-NAME", made afresh. */
static const char *fresh_dir(const char *name, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/dc-%s", bn_test_tmpdir(), name);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", buf, buf);
    return system(cmd) == 0 ? buf : NULL;
}

/* Sets the modification time of every file below path to `ago` seconds before now, so that the
 * cache may keep what is decoded from them. */
static int age(const char *path, int ago)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "find '%s' -type f -exec touch -m -d @%lld {} +", path,
             (long long)time(NULL) - ago);
    return system(cmd) == 0 ? 0 : -1;
}

static unsigned char pixel(int example, int at, int seed)
{
    return (unsigned char)(example * 37 + at * 11 + seed * 101);
}

/* One gzip IDX file: images (count x SIDE x SIDE from pixel()) or labels (i % 10). */
static int write_gz_idx(const char *path, int count, int labels, int seed)
{
    size_t body = labels ? (size_t)count : (size_t)count * SIDE * SIDE;
    size_t head = labels ? 8 : 16, n = head + body;
    unsigned char *buf = malloc(n);
    if (!buf) return -1;
    uint32_t words[4] = {labels ? 0x801u : 0x803u, (uint32_t)count, SIDE, SIDE};
    for (size_t w = 0; w < head / 4; w++)
        for (int b = 0; b < 4; b++) buf[4 * w + (size_t)b] = (unsigned char)(words[w] >> (24 - 8 * b));
    for (size_t i = 0; i < body; i++)
        buf[head + i] = labels ? (unsigned char)(i % 10) : pixel((int)(i / (SIDE * SIDE)), (int)(i % (SIDE * SIDE)), seed);
    gzFile f = gzopen(path, "wb");
    int ok = f && gzwrite(f, buf, (unsigned)n) == (int)n;
    ok = f && gzclose(f) == Z_OK && ok;
    free(buf);
    return ok ? 0 : -1;
}

/* DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz, images from seed, aged a minute. */
static int write_mnist_gz(const char *dir, int seed)
{
    char path[1100];
    static const char *const split[2] = {"train", "t10k"};
    for (int s = 0; s < 2; s++) {
        int count = s ? TEST_COUNT : TRAIN_COUNT;
        snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte.gz", dir, split[s]);
        if (write_gz_idx(path, count, 0, seed) != 0) return -1;
        snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte.gz", dir, split[s]);
        if (write_gz_idx(path, count, 1, seed) != 0) return -1;
    }
    return age(dir, 60);
}

/* Loads with format `name`, stderr captured in err. */
static bn_status load(const char *name, const char *path, bn_options *opts, int train, int limit, int quiet,
                      bn_dataset *d)
{
    const bn_data_format *f;
    BN_TRY(bn_data_format_find(name, "test", &f));
    for (int i = 0; opts && i < opts->count; i++) opts->items[i].used = 0;
    bn_data_request rq = {.format = name, .path = path, .opts = opts, .fit = {1, SIDE, SIDE}, .train = train,
                          .limit = limit, .quiet = quiet};
    /* What the load writes on stderr: the runner keeps it aside (bn_test_stderr). */
    size_t mark = strlen(bn_test_stderr());
    bn_status s = bn_data_load(f, &rq, d);
    snprintf(err, sizeof err, "%s", bn_test_stderr() + mark);
    return s;
}

/* The entries in the cache folder (temporary files left out); the last one's path in last. */
static int entries(const char *dir, char *last, size_t cap)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') {
            n++;
            if (last) snprintf(last, cap, "%s/%s", dir, e->d_name);
        }
    closedir(d);
    return n;
}

/* Whether two sets hold the same shape, kind, bytes, labels and class names. */
static int same_set(const bn_dataset *a, const bn_dataset *b)
{
    if (a->count != b->count || a->channels != b->channels || a->height != b->height || a->width != b->width ||
        a->num_classes != b->num_classes || !a->pixels != !b->pixels || !a->class_names != !b->class_names)
        return 0;
    size_t n = bn_dataset_example_size(a) * (size_t)a->count;
    if (a->pixels ? memcmp(a->pixels, b->pixels, n) != 0 : memcmp(a->values, b->values, n * sizeof(float)) != 0)
        return 0;
    if (memcmp(a->labels, b->labels, (size_t)a->count * sizeof *a->labels) != 0) return 0;
    for (int c = 0; a->class_names && c < a->num_classes; c++)
        if (strcmp(a->class_names[c], b->class_names[c]) != 0) return 0;
    return 1;
}

/* Whether d holds the gzip set's training split as write_mnist_gz(seed) wrote it. */
static int is_written_set(const bn_dataset *d, int count, int seed)
{
    if (d->count != count || d->channels != 1 || d->height != SIDE || d->width != SIDE || !d->pixels) return 0;
    for (int i = 0; i < count; i++) {
        if (d->labels[i] != i % 10) return 0;
        for (int p = 0; p < SIDE * SIDE; p++)
            if (d->pixels[(size_t)i * SIDE * SIDE + (size_t)p] != pixel(i, p, seed)) return 0;
    }
    return 1;
}

/* Runs body with BLOBNET_DATA_CACHE set to value, restoring the variable afterwards. */
static int with_cache(const char *value, int (*body)(const char *cache))
{
    const char *old = getenv("BLOBNET_DATA_CACHE");
    char *saved = old ? strdup(old) : NULL;
    setenv("BLOBNET_DATA_CACHE", value, 1);
    bn_data_cache_reset();
    int r = body(value);
    if (saved) setenv("BLOBNET_DATA_CACHE", saved, 1);
    else unsetenv("BLOBNET_DATA_CACHE");
    free(saved);
    bn_data_cache_reset();
    return r;
}

/* A folder of its own for a test's cache. */
static int with_new_cache(const char *name, int (*body)(const char *cache))
{
    char dir[512];
    if (!fresh_dir(name, dir, sizeof dir)) return BN_FAIL;
    return with_cache(dir, body);
}

/* Overwrites the file's bytes (but the first two) with others and puts its times back: the
 * cache's signature is unchanged, so only a load from the cache can still return the set. */
static int overwrite_in_place(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    int fd = open(path, O_WRONLY);
    if (fd < 0) return -1;
    char junk[256];
    memset(junk, 'x', sizeof junk);
    /* gzip's two magic bytes stay, so the file is still taken for a compressed one. */
    int ok = lseek(fd, 2, SEEK_SET) == 2;
    for (off_t at = 2; ok && at < st.st_size; at += (off_t)sizeof junk) {
        size_t n = st.st_size - at < (off_t)sizeof junk ? (size_t)(st.st_size - at) : sizeof junk;
        ok = write(fd, junk, n) == (ssize_t)n;
    }
    struct timespec times[2] = {st.st_atim, st.st_mtim};
    ok = close(fd) == 0 && ok;
    return utimensat(AT_FDCWD, path, times, 0) == 0 && ok ? 0 : -1;
}

/* ROOT/REL: a SIDE x SIDE gray PNG from seed. */
static int write_png(const char *root, const char *rel, int seed)
{
    unsigned char px[SIDE * SIDE];
    for (int i = 0; i < SIDE * SIDE; i++) px[i] = (unsigned char)(seed * 29 + i * 3);
    char path[1100];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    return bn_image_write_png_color(path, px, 1, SIDE, SIDE) == BN_OK ? 0 : -1;
}

/* ROOT with train/ and test/ of classes cat and dog: three images a class to train, one to test. */
static int write_folder(const char *root)
{
    static const char *const dirs[] = {"train/cat", "train/dog", "test/cat", "test/dog"};
    char path[1100];
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "mkdir -p '%s/%s'", root, dirs[i]);
        if (system(path) != 0) return -1;
    }
    static const char *const files[] = {"train/cat/a.png", "train/cat/b.png", "train/cat/c.png", "train/dog/a.png",
                                        "train/dog/b.png", "train/dog/c.png", "test/cat/a.png",  "test/dog/a.png"};
    for (int i = 0; i < 8; i++)
        if (write_png(root, files[i], i) != 0) return -1;
    return age(root, 60);
}

static int gzip_miss_then_hit(const char *cache)
{
    char dir[512], entry[1100], after[1100], images[1100];
    CHECK(fresh_dir("gz-hit", dir, sizeof dir) && write_mnist_gz(dir, 1) == 0);
    bn_dataset first, second;
    CHECK_OK(load("mnist", dir, NULL, 1, 0, 0, &first));
    CHECK(is_written_set(&first, TRAIN_COUNT, 1) && first.num_classes == 10);
    CHECK_MSG(err[0] == '\0', "%s", err);
    CHECK(entries(cache, entry, sizeof entry) == 1);
    struct stat st;
    CHECK(stat(entry, &st) == 0);
    ino_t written = st.st_ino;
    /* Only the entry still holds the images once they are overwritten under the same signature. */
    snprintf(images, sizeof images, "%s/train-images-idx3-ubyte.gz", dir);
    CHECK(overwrite_in_place(images) == 0);
    CHECK_OK(load("mnist", dir, NULL, 1, 0, 0, &second));
    CHECK(same_set(&first, &second));
    CHECK_MSG(err[0] == '\0', "%s", err);
    /* A hit rewrites nothing. */
    CHECK(entries(cache, after, sizeof after) == 1 && strcmp(entry, after) == 0);
    CHECK(stat(after, &st) == 0 && st.st_ino == written);
    bn_dataset_free(&first);
    bn_dataset_free(&second);
    /* Without the cache the overwritten file is what it is: corrupt. */
    setenv("BLOBNET_DATA_CACHE", "off", 1);
    bn_data_cache_reset();
    CHECK(load("mnist", dir, NULL, 1, 0, 1, &second) == BN_ERR_DATA);
    return BN_PASS;
}

BN_TEST(data_cache_miss_writes_an_entry_the_next_load_takes)
{
    return with_new_cache("cache-hit", gzip_miss_then_hit);
}

static int folder_miss_then_hit(const char *cache)
{
    char root[512], entry[1100], after[1100], png[1100];
    CHECK(fresh_dir("png", root, sizeof root) && write_folder(root) == 0);
    bn_dataset first, second;
    CHECK_OK(load("folder", root, NULL, 1, 0, 1, &first));
    CHECK(first.count == 6 && first.num_classes == 2 && first.class_names);
    CHECK(strcmp(first.class_names[0], "cat") == 0 && strcmp(first.class_names[1], "dog") == 0);
    CHECK(entries(cache, entry, sizeof entry) == 1);
    snprintf(png, sizeof png, "%s/train/cat/a.png", root);
    CHECK(overwrite_in_place(png) == 0);
    /* Not quiet: the copy from the cache says so in the line the reader would print. */
    CHECK_OK(load("folder", root, NULL, 1, 0, 0, &second));
    CHECK(same_set(&first, &second));
    CHECK_MSG(strstr(err, "6 training examples, 1x5x5, 2 classes (decoded copy from the data cache)"), "%s", err);
    bn_dataset_free(&second);
    /* A file added to the folder misses; the entry of the folder as it was is replaced. */
    CHECK(write_png(root, "train/cat/a.png", 0) == 0 && write_png(root, "train/dog/d.png", 9) == 0);
    CHECK(age(root, 120) == 0);
    CHECK_OK(load("folder", root, NULL, 1, 0, 1, &second));
    CHECK(second.count == 7 && second.labels[6] == 1);
    CHECK(memcmp(second.pixels, first.pixels, (size_t)6 * SIDE * SIDE) == 0);
    CHECK(entries(cache, after, sizeof after) == 1 && strcmp(entry, after) != 0);
    bn_dataset_free(&first);
    bn_dataset_free(&second);
    return BN_PASS;
}

BN_TEST(data_cache_keeps_a_folder_of_pngs_with_its_class_names)
{
    return with_new_cache("cache-png", folder_miss_then_hit);
}

static int changes_miss(const char *cache)
{
    char dir[512], entry[1100], now[1100], images[1100];
    CHECK(fresh_dir("gz-change", dir, sizeof dir) && write_mnist_gz(dir, 1) == 0);
    bn_dataset d;
    CHECK_OK(load("mnist", dir, NULL, 1, 0, 1, &d));
    bn_dataset_free(&d);
    CHECK(entries(cache, entry, sizeof entry) == 1);
    /* Another modification time: a new entry, the old one gone. */
    snprintf(images, sizeof images, "%s/train-images-idx3-ubyte.gz", dir);
    CHECK(age(images, 300) == 0);
    CHECK_OK(load("mnist", dir, NULL, 1, 0, 1, &d));
    CHECK(is_written_set(&d, TRAIN_COUNT, 1));
    bn_dataset_free(&d);
    CHECK(entries(cache, now, sizeof now) == 1 && strcmp(entry, now) != 0);
    /* Other contents. */
    CHECK(write_mnist_gz(dir, 2) == 0);
    CHECK_OK(load("mnist", dir, NULL, 1, 0, 1, &d));
    CHECK(is_written_set(&d, TRAIN_COUNT, 2));
    bn_dataset_free(&d);
    /* Another limit, the other split: entries of their own. */
    CHECK_OK(load("mnist", dir, NULL, 1, 7, 1, &d));
    CHECK(is_written_set(&d, 7, 2));
    bn_dataset_free(&d);
    CHECK(entries(cache, NULL, 0) == 2);
    CHECK_OK(load("mnist", dir, NULL, 0, 0, 1, &d));
    CHECK(d.count == TEST_COUNT);
    bn_dataset_free(&d);
    CHECK(entries(cache, NULL, 0) == 3);
    /* Another option value: the `idx` format reads the same files with a class count. */
    bn_options o = {0};
    CHECK_OK(bn_options_add(&o, "classes", "12", 1));
    CHECK_OK(load("idx", dir, &o, 1, 0, 1, &d));
    CHECK(d.num_classes == 12);
    bn_dataset_free(&d);
    CHECK(entries(cache, NULL, 0) == 4);
    free(o.items[0].value);
    o.items[0].value = strdup("11");
    CHECK_OK(load("idx", dir, &o, 1, 0, 1, &d));
    CHECK(d.num_classes == 11 && o.items[0].used);
    bn_dataset_free(&d);
    CHECK(entries(cache, NULL, 0) == 5);
    /* The same options again: a hit, which marks them read as the reader did. */
    CHECK_OK(load("idx", dir, &o, 1, 0, 1, &d));
    CHECK(d.num_classes == 11 && o.items[0].used);
    bn_dataset_free(&d);
    CHECK(entries(cache, NULL, 0) == 5);
    bn_options_clear(&o);
    return BN_PASS;
}

BN_TEST(data_cache_misses_when_the_source_or_the_request_changes)
{
    return with_new_cache("cache-change", changes_miss);
}

/* Damages the entry at path as `how` says: 0 cut in half, 1 a data byte flipped, 2 the magic. */
static int damage(const char *path, int how)
{
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    if (how == 0) return truncate(path, st.st_size / 2);
    int fd = open(path, O_RDWR);
    if (fd < 0) return -1;
    off_t at = how == 1 ? st.st_size - 8 - 3 : 0;
    unsigned char b;
    int ok = pread(fd, &b, 1, at) == 1;
    b ^= 0x40;
    ok = ok && pwrite(fd, &b, 1, at) == 1;
    return close(fd) == 0 && ok ? 0 : -1;
}

static int bad_entries(const char *cache)
{
    static const char *const why[] = {"truncated", "checksum mismatch", "bad magic"};
    char dir[512], entry[1100];
    CHECK(fresh_dir("gz-bad", dir, sizeof dir) && write_mnist_gz(dir, 3) == 0);
    bn_dataset ref, d;
    CHECK_OK(load("mnist", dir, NULL, 1, 0, 1, &ref));
    CHECK(entries(cache, entry, sizeof entry) == 1);
    struct stat st;
    CHECK(stat(entry, &st) == 0);
    off_t size = st.st_size;
    for (int how = 0; how < 3; how++) {
        CHECK(damage(entry, how) == 0);
        CHECK_OK(load("mnist", dir, NULL, 1, 0, 1, &d));
        CHECK(same_set(&ref, &d) && is_written_set(&d, TRAIN_COUNT, 3));
        bn_dataset_free(&d);
        CHECK_MSG(strstr(err, "blobnet: warning: data cache ") && strstr(err, entry) && strstr(err, why[how]) &&
                      strstr(err, "; decoding the data again"), "%s", err);
        CHECK_MSG(!strchr(err, '\n') || !strchr(err, '\n')[1], "one line: %s", err);
        /* Rewritten whole: the next load takes it without a word. */
        CHECK(stat(entry, &st) == 0 && st.st_size == size);
        CHECK_OK(load("mnist", dir, NULL, 1, 0, 1, &d));
        CHECK(same_set(&ref, &d));
        CHECK_MSG(err[0] == '\0', "%s", err);
        bn_dataset_free(&d);
    }
    bn_dataset_free(&ref);
    return BN_PASS;
}

BN_TEST(data_cache_bad_entry_warns_and_the_set_is_decoded_again)
{
    return with_new_cache("cache-bad", bad_entries);
}

/* Sets or unsets (value NULL) an environment variable. */
static void put_env(const char *name, const char *value)
{
    if (value) setenv(name, value, 1);
    else unsetenv(name);
}

static int off_and_defaults(const char *off)
{
    char home[512], xdg[512], dir[512], want[1100];
    CHECK(fresh_dir("home", home, sizeof home) && fresh_dir("xdg", xdg, sizeof xdg));
    CHECK(fresh_dir("gz-off", dir, sizeof dir) && write_mnist_gz(dir, 4) == 0);
    setenv("HOME", home, 1);
    setenv("XDG_CACHE_HOME", xdg, 1);
    CHECK(bn_data_cache_dir() == NULL);
    bn_dataset d;
    CHECK_OK(load("mnist", dir, NULL, 1, 0, 1, &d));
    CHECK(is_written_set(&d, TRAIN_COUNT, 4));
    bn_dataset_free(&d);
    CHECK(entries(home, NULL, 0) == 0 && entries(xdg, NULL, 0) == 0);
    /* Unset: under XDG_CACHE_HOME, else under HOME. */
    unsetenv("BLOBNET_DATA_CACHE");
    bn_data_cache_reset();
    snprintf(want, sizeof want, "%s/blobnet/data", xdg);
    CHECK(bn_data_cache_dir() && strcmp(bn_data_cache_dir(), want) == 0);
    unsetenv("XDG_CACHE_HOME");
    bn_data_cache_reset();
    snprintf(want, sizeof want, "%s/.cache/blobnet/data", home);
    CHECK(bn_data_cache_dir() && strcmp(bn_data_cache_dir(), want) == 0);
    CHECK_OK(load("mnist", dir, NULL, 1, 0, 1, &d));
    bn_dataset_free(&d);
    CHECK(entries(want, NULL, 0) == 1);
    return BN_PASS;
}

BN_TEST(data_cache_off_keeps_nothing_and_the_default_folders_follow_xdg_and_home)
{
    const char *h = getenv("HOME"), *x = getenv("XDG_CACHE_HOME");
    char *home = h ? strdup(h) : NULL, *xdg = x ? strdup(x) : NULL;
    int r = with_cache("off", off_and_defaults);
    put_env("HOME", home);
    put_env("XDG_CACHE_HOME", xdg);
    free(home);
    free(xdg);
    return r;
}

static int unwritable(const char *cache)
{
    char dir[512];
    CHECK(fresh_dir("gz-unwritable", dir, sizeof dir) && write_mnist_gz(dir, 5) == 0);
    bn_dataset d;
    CHECK_OK(load("mnist", dir, NULL, 1, 0, 1, &d));
    CHECK(is_written_set(&d, TRAIN_COUNT, 5));
    bn_dataset_free(&d);
    CHECK_MSG(strstr(err, "blobnet: warning: data cache ") && strstr(err, cache) &&
                  strstr(err, "the decoded data is not kept for the next run"), "%s", err);
    /* Said once. */
    CHECK_OK(load("mnist", dir, NULL, 0, 0, 1, &d));
    CHECK(d.count == TEST_COUNT);
    bn_dataset_free(&d);
    CHECK_MSG(err[0] == '\0', "%s", err);
    return BN_PASS;
}

BN_TEST(data_cache_folder_that_cannot_be_written_is_a_warning_once)
{
    char blocker[512], cache[600];
    if (!fresh_dir("blocker", blocker, sizeof blocker)) return BN_FAIL;
    snprintf(cache, sizeof cache, "%s/file", blocker);
    FILE *f = fopen(cache, "w");
    if (!f || fclose(f) != 0) return BN_FAIL;
    snprintf(cache, sizeof cache, "%s/file/cache", blocker);
    return with_cache(cache, unwritable);
}

/* The cache's entries after the gzip MNIST set in dir is loaded under BLOBNET_DATA_CACHE_MAX=limit;
 * -1 when the load fails. */
static int entries_with_limit(const char *cache, const char *dir, const char *limit)
{
    bn_dataset d;
    setenv("BLOBNET_DATA_CACHE_MAX", limit, 1);
    bn_status s = load("mnist", dir, NULL, 1, 0, 1, &d);
    unsetenv("BLOBNET_DATA_CACHE_MAX");
    if (s != BN_OK) return -1;
    bn_dataset_free(&d);
    return entries(cache, NULL, 0);
}

static int nothing_kept(const char *cache)
{
    bn_dataset d;
    /* Raw IDX files read as fast as a copy would. */
    const char *raw = bn_test_synthetic_mnist("dc-raw", 20, 10);
    CHECK(raw && age(raw, 60) == 0);
    CHECK_OK(load("mnist", raw, NULL, 1, 0, 1, &d));
    CHECK(d.count == 20);
    bn_dataset_free(&d);
    CHECK(entries(cache, NULL, 0) == 0);
    /* Files written a moment ago could change again within their timestamp's tick. */
    char dir[512];
    CHECK(fresh_dir("gz-fresh", dir, sizeof dir) && write_mnist_gz(dir, 6) == 0 && age(dir, -1) == 0);
    CHECK_OK(load("mnist", dir, NULL, 1, 0, 1, &d));
    CHECK(is_written_set(&d, TRAIN_COUNT, 6));
    bn_dataset_free(&d);
    CHECK(entries(cache, NULL, 0) == 0);
    /* A set past BLOBNET_DATA_CACHE_MAX, and a limit that is not a size (a warning: the CLI
     * refuses it before it loads anything). */
    CHECK(age(dir, 60) == 0);
    CHECK(entries_with_limit(cache, dir, "700") == 0);
    CHECK(entries_with_limit(cache, dir, "1KB") == 0);
    /* A load that left an option unread, which its caller refuses. */
    bn_options o = {0};
    CHECK_OK(bn_options_add(&o, "colour", "red", 1));
    CHECK_OK(load("idx", dir, &o, 1, 0, 1, &d));
    CHECK(!o.items[0].used);
    bn_dataset_free(&d);
    bn_options_clear(&o);
    CHECK(entries(cache, NULL, 0) == 0);
    /* The same set within the limit is kept. */
    CHECK(entries_with_limit(cache, dir, "1K") == 1);
    return BN_PASS;
}

BN_TEST(data_cache_keeps_nothing_for_raw_idx_fresh_files_large_sets_or_unread_options)
{
    return with_new_cache("cache-none", nothing_kept);
}

/* An entry of a 4-class set named cat, dog, emu and fox, kept under key by the cache itself,
 * read back: 1, and the names as kept. Then its names block rewritten as "cat", "", "odg", ...
 * (the same bytes, one name empty) with the checksum made right again: refused, since a class
 * name is never empty (the fuzz target found the reader taking one). */
static int empty_class_name(const char *cache)
{
    static const uint64_t key[3] = {7, 8, 9};
    bn_dataset d, back;
    CHECK_OK(bn_dataset_alloc(&d, "names", 2, 1, 1, 2, 4, 0));
    const char *names[4] = {"cat", "dog", "emu", "fox"};
    CHECK_OK(bn_dataset_set_class_names(&d, (char **)names));
    for (int i = 0; i < 4; i++) d.pixels[i] = (unsigned char)(40 * i);
    d.labels[0] = 3, d.labels[1] = 1;
    bn_data_cache_entry e = {.key = {key[0], key[1], key[2]}};
    snprintf(e.path, sizeof e.path, "%s/names-entry", cache);
    const bn_data_request rq = {.format = "test"};
    bn_data_cache_keep(&e, &rq, &d);
    bn_dataset_free(&d);
    char why[256] = "";
    CHECK_MSG(bn_data_cache_read(e.path, key, &back, why, sizeof why) == 1, "%s", why);
    CHECK(back.num_classes == 4 && strcmp(back.class_names[1], "dog") == 0 && back.labels[0] == 3);
    bn_dataset_free(&back);
    FILE *f = fopen(e.path, "r+b");
    unsigned char bytes[4096];
    const size_t n = f ? fread(bytes, 1, sizeof bytes, f) : 0;
    CHECK(f && n > 8 && n < sizeof bytes);
    unsigned char *at = NULL;
    for (size_t i = 0; !at && i + 8 <= n; i++)
        if (memcmp(bytes + i, "cat\0dog\0", 8) == 0) at = bytes + i;
    CHECK(at != NULL);
    memcpy(at, "cat\0\0odg", 8);
    const uint64_t crc = crc32(crc32(0, Z_NULL, 0), bytes, (uInt)(n - 8));
    memcpy(bytes + n - 8, &crc, 8);
    CHECK(fseek(f, 0, SEEK_SET) == 0 && fwrite(bytes, 1, n, f) == n && fclose(f) == 0);
    CHECK(bn_data_cache_read(e.path, key, &back, why, sizeof why) == -1);
    CHECK_MSG(strstr(why, "class names") && !back.class_names && !back.pixels, "%s", why);
    return BN_PASS;
}

BN_TEST(data_cache_refuses_an_entry_with_an_empty_class_name)
{
    return with_new_cache("data-cache-names", empty_class_name);
}

/* Sizes in bytes as $BLOBNET_DATA_CACHE_MAX and $BLOBNET_DATA_BUDGET take them: whole and fractional
 * numbers with K, M or G (thousands, millions, billions) in either case; no other suffix, nothing
 * negative, nothing past 1e18 bytes, each refused with why and *out untouched. The cache's limit
 * unset or empty is its default, 4G. */
BN_TEST(data_cache_sizes_are_bytes_with_k_m_or_g_after_them)
{
    static const struct {
        const char *text;
        uint64_t bytes;
    } good[] = {{"0", 0},           {"700", 700},       {"1K", 1000},           {"1k", 1000},
                {"2.5M", 2500000},  {"3m", 3000000},    {"4G", 4000000000ull}, {"0.5g", 500000000},
                {"1e18", 1000000000000000000ull}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint64_t v = 77;
        const char *why = bn_parse_bytes(good[i].text, &v);
        CHECK_MSG(!why && v == good[i].bytes, "'%s': %s, %llu bytes", good[i].text, why ? why : "read",
                  (unsigned long long)v);
    }
    static const char *const bad[] = {"", " ", "K", "lots", "-1", "-2K", "1KB", "1 K", "1T", "nan", "inf", "2e18",
                                      "1e10G", "1e999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v = 77;
        const char *why = bn_parse_bytes(bad[i], &v);
        CHECK_MSG(why && v == 77, "'%s' read as %llu bytes", bad[i], (unsigned long long)v);
    }
    CHECK(strcmp(bn_parse_bytes("2e18", &(uint64_t){0}), "is more than 1e18 bytes") == 0);
    /* The limit's default, 4G, is what the variable set to 4G says. */
    uint64_t limit = 0, four = 1;
    unsetenv("BLOBNET_DATA_CACHE_MAX");
    CHECK_OK(bn_data_cache_max_bytes(&limit));
    CHECK(!bn_parse_bytes("4G", &four) && limit == four);
    setenv("BLOBNET_DATA_CACHE_MAX", "", 1);
    CHECK_OK(bn_data_cache_max_bytes(&limit));
    unsetenv("BLOBNET_DATA_CACHE_MAX");
    CHECK(limit == four);
    return BN_PASS;
}

/* Either variable when it is not a size ends any command before it starts: one line naming it and
 * what is wrong, and exit status 2. */
BN_TEST(data_cache_size_variables_refused_when_malformed)
{
    static const char *const cases[][2] = {
        {"BLOBNET_DATA_CACHE_MAX=lots", "blobnet: error: environment: BLOBNET_DATA_CACHE_MAX: 'lots' is not a size in "
                                        "bytes (a number, K, M or G after it)"},
        {"BLOBNET_DATA_CACHE_MAX=2e18", "blobnet: error: environment: BLOBNET_DATA_CACHE_MAX: '2e18' is more than 1e18 "
                                        "bytes"},
        {"BLOBNET_DATA_BUDGET=-1", "blobnet: error: environment: BLOBNET_DATA_BUDGET: '-1' is not a size in bytes"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "%s '%s' summary models/lenet.cfg", cases[i][0], bn_test_cli());
        CHECK_MSG(bn_test_run(cmd, err, sizeof err) == 2, "%s:\n%s", cases[i][0], err);
        const char *nl = strchr(err, '\n');
        CHECK_MSG(strstr(err, cases[i][1]) && nl && !nl[1], "%s: not the one line expected:\n%s", cases[i][0], err);
    }
    return BN_PASS;
}
