/* data_cache.c - decoded datasets kept between runs (data_cache.h): the key, the entry's
 * reading and checking, and its writing through a temporary file. */
#define _XOPEN_SOURCE 700 /* realpath */
#include "data_cache.h"

#include "core/options.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

/* The first bytes of every entry; the version is part of it. */
#define MAGIC_TEXT(v) "blobnet data cache " #v "\n"
#define MAGIC_OF(v) MAGIC_TEXT(v)
static const char magic[] = MAGIC_OF(BN_DATA_CACHE_VERSION);
#define MAGIC_LEN (sizeof magic - 1)

/* Written in the host's order; an entry of the other order is refused, not misread. */
#define BYTE_ORDER_MARK 0x0102030405060708ull

/* The header's fields, each a uint64_t after the magic line. */
enum { H_ORDER, H_ID, H_KEY0, H_KEY1, H_COUNT, H_CHANNELS, H_HEIGHT, H_WIDTH, H_CLASSES, H_VALUE_BYTES,
       H_NAME_BYTES, H_COUNT_OF };
#define HEADER_BYTES (MAGIC_LEN + H_COUNT_OF * sizeof(uint64_t))

/* A source file changed this recently could change again without its modification time
 * moving (timestamps advance by the kernel's tick): such a set is read, never kept. */
#define RECENT_NS 2000000000ll

/* read and write move at most this much a call. */
#define IO_CHUNK ((size_t)1 << 26)

/* 4G as $BLOBNET_DATA_CACHE_MAX reads it (core/options.h). */
#define DEFAULT_MAX_BYTES ((uint64_t)4000000000)

static struct {
    int resolved;
    char *dir; /* NULL: off */
    int warned_write;
    int warned_limit;
} cache;

static char *joined(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 1;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s%s", a, b);
    return p;
}

const char *bn_data_cache_dir(void)
{
    if (cache.resolved) return cache.dir;
    cache.resolved = 1;
    const char *env = getenv("BLOBNET_DATA_CACHE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (env) cache.dir = *env && strcmp(env, "off") != 0 ? strdup(env) : NULL;
    else if (xdg && *xdg) cache.dir = joined(xdg, "/blobnet/data");
    else if (home && *home) cache.dir = joined(home, "/.cache/blobnet/data");
    return cache.dir;
}

void bn_data_cache_reset(void)
{
    free(cache.dir);
    memset(&cache, 0, sizeof cache);
}

bn_status bn_data_cache_max_bytes(uint64_t *out)
{
    const char *env = getenv("BLOBNET_DATA_CACHE_MAX");
    *out = DEFAULT_MAX_BYTES;
    if (!env || !*env) return BN_OK;
    const char *why = bn_parse_bytes(env, out);
    return why ? bn_error(BN_ERR_USAGE, "BLOBNET_DATA_CACHE_MAX: '%s' %s", env, why) : BN_OK;
}

/* ---- the key: two independent 64-bit hashes over the same bytes ---- */

typedef struct hash2 {
    uint64_t a, b;
} hash2;

static void feed(hash2 *h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h->a = (h->a ^ p[i]) * 0x100000001b3ull; /* FNV-1a */
        h->b = (h->b + p[i] + 1) * 0x9e3779b97f4a7c15ull;
        h->b ^= h->b >> 29;
    }
}

static void feed_u64(hash2 *h, uint64_t v)
{
    feed(h, &v, sizeof v);
}

/* Length first, so that no two lists of strings feed the same bytes. */
static void feed_str(hash2 *h, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    feed_u64(h, n);
    feed(h, s, n);
}

typedef struct source_file {
    char *name; /* relative to the source's root */
    uint64_t size, inode;
    int64_t mtime_ns;
} source_file;

typedef struct source_list {
    source_file *files;
    int count, cap;
    dev_t skip_dev; /* the cache folder, never part of a source */
    ino_t skip_ino;
    int have_skip;
} source_list;

static int add_file(source_list *l, const char *name, const struct stat *st)
{
    if (l->count == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        source_file *grown = realloc(l->files, (size_t)cap * sizeof *grown);
        if (!grown) return -1;
        l->files = grown;
        l->cap = cap;
    }
    char *copy = strdup(name);
    if (!copy) return -1;
    source_file *f = &l->files[l->count++];
    *f = (source_file){copy, 0, 0, 0};
    /* A name that is no regular file (a dangling link, a pipe) still counts, so that fixing it
     * changes the key; the reader refuses it anyway. */
    if (st && S_ISREG(st->st_mode))
        *f = (source_file){copy, (uint64_t)st->st_size, (uint64_t)st->st_ino,
                           (int64_t)st->st_mtim.tv_sec * 1000000000ll + st->st_mtim.tv_nsec};
    return 0;
}

/* The folders from the root to the one being listed: a link back to one of them is not
 * followed again. */
typedef struct walk_frame {
    dev_t dev;
    ino_t ino;
    const struct walk_frame *up;
} walk_frame;

/* Adds every file below the folder open as fd (named rel from the root) to l, and closes fd;
 * 0, or -1 when a folder cannot be listed. Names are looked up relative to their folder, which
 * keeps a walk over tens of thousands of images to one stat each. */
static int walk(source_list *l, int fd, const char *rel, const walk_frame *up)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -1;
    }
    size_t rel_len = strlen(rel);
    int bad = 0;
    for (struct dirent *e; !bad && (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char sub[PATH_MAX];
        size_t name_len = strlen(e->d_name);
        if (rel_len + name_len + 2 > sizeof sub) {
            bad = 1;
            break;
        }
        memcpy(sub, rel, rel_len);
        size_t at = rel_len;
        if (rel_len) sub[at++] = '/';
        memcpy(sub + at, e->d_name, name_len + 1);
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, 0) != 0) {
            bad = add_file(l, sub, NULL);
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            bad = add_file(l, sub, &st);
            continue;
        }
        if (l->have_skip && st.st_dev == l->skip_dev && st.st_ino == l->skip_ino) continue;
        int loop = 0;
        for (const walk_frame *w = up; w && !loop; w = w->up) loop = w->dev == st.st_dev && w->ino == st.st_ino;
        if (loop) continue;
        walk_frame here = {st.st_dev, st.st_ino, up};
        int sub_fd = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        bad = sub_fd < 0 || walk(l, sub_fd, sub, &here) != 0;
    }
    closedir(d);
    return bad ? -1 : 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const source_file *)a)->name, ((const source_file *)b)->name);
}

static void free_list(source_list *l)
{
    for (int i = 0; i < l->count; i++) free(l->files[i].name);
    free(l->files);
}

/* Feeds the signature of the file or folder at path into h and says whether any file of it
 * changed in the last RECENT_NS; 0, or -1 when it cannot be listed (then nothing is kept). */
static int feed_source(hash2 *h, const char *path, const char *cache_dir, int *recent)
{
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    source_list l = {0};
    struct stat cs;
    if (cache_dir && stat(cache_dir, &cs) == 0) l.skip_dev = cs.st_dev, l.skip_ino = cs.st_ino, l.have_skip = 1;
    int bad = 0;
    if (S_ISDIR(st.st_mode)) {
        walk_frame root = {st.st_dev, st.st_ino, NULL};
        int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        bad = fd < 0 || walk(&l, fd, "", &root) != 0;
    } else {
        bad = add_file(&l, "", &st);
    }
    if (!bad) qsort(l.files, (size_t)l.count, sizeof *l.files, by_name);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t now_ns = (int64_t)now.tv_sec * 1000000000ll + now.tv_nsec;
    feed_u64(h, (uint64_t)l.count);
    for (int i = 0; !bad && i < l.count; i++) {
        const source_file *f = &l.files[i];
        feed_str(h, f->name);
        feed_u64(h, f->size);
        feed_u64(h, (uint64_t)f->mtime_ns);
        feed_u64(h, f->inode);
        if (f->mtime_ns > now_ns - RECENT_NS) *recent = 1;
    }
    free_list(&l);
    return bad ? -1 : 0;
}

/* Feeds rq's options as sorted key=value pairs (a key given twice keeps its order); 0, or -1
 * out of memory. */
static int feed_options(hash2 *h, const bn_options *o)
{
    int n = o ? o->count : 0;
    feed_u64(h, (uint64_t)n);
    char *done = calloc((size_t)n + 1, 1);
    if (!done) return -1;
    for (int k = 0; k < n; k++) {
        int next = -1;
        for (int i = 0; i < n; i++)
            if (!done[i] && (next < 0 || strcmp(o->items[i].key, o->items[next].key) < 0)) next = i;
        done[next] = 1;
        feed_str(h, o->items[next].key);
        feed_str(h, o->items[next].value);
    }
    free(done);
    return 0;
}

/* Sets e's key and file for rq; 0, or -1 when nothing is to be kept for it. */
static int make_key(const bn_data_format *f, const bn_data_request *rq, const char *dir, bn_data_cache_entry *e)
{
    char abs[PATH_MAX];
    if (!rq->path || !realpath(rq->path, abs)) return -1;
    hash2 h = {0xcbf29ce484222325ull, 0x243f6a8885a308d3ull};
    feed_str(&h, magic);
    feed_str(&h, f->name);
    feed_str(&h, abs);
    feed_u64(&h, (uint64_t)(rq->train != 0));
    feed_u64(&h, (uint64_t)(rq->limit > 0 ? rq->limit : 0));
    feed_u64(&h, (uint64_t)rq->fit.c);
    feed_u64(&h, (uint64_t)rq->fit.h);
    feed_u64(&h, (uint64_t)rq->fit.w);
    if (feed_options(&h, rq->opts) != 0) return -1;
    uint64_t id = h.a ^ h.b;
    if (feed_source(&h, abs, dir, &e->recent) != 0) return -1;
    e->key[0] = id;
    e->key[1] = h.a;
    e->key[2] = h.b;
    int n = snprintf(e->path, sizeof e->path, "%s/%016llx-%016llx%016llx", dir, (unsigned long long)id,
                     (unsigned long long)h.a, (unsigned long long)h.b);
    if (n < 0 || (size_t)n >= sizeof e->path) {
        e->path[0] = '\0';
        return -1;
    }
    return 0;
}

/* ---- reading an entry ---- */

/* Reads n bytes into buf, folding them into *crc; 0, or -1 at an error or the end. */
static int read_all(int fd, void *buf, size_t n, uLong *crc)
{
    unsigned char *p = buf;
    for (size_t done = 0; done < n;) {
        size_t want = n - done < IO_CHUNK ? n - done : IO_CHUNK;
        ssize_t got = read(fd, p + done, want);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        if (crc) *crc = crc32(*crc, p + done, (uInt)got);
        done += (size_t)got;
    }
    return 0;
}

/* The class names of an entry: num_classes strings, none empty, each ended by a zero byte,
 * filling the block exactly; -1 otherwise. */
static int take_names(bn_dataset *d, char *block, size_t bytes)
{
    char **names = malloc((size_t)d->num_classes * sizeof *names);
    if (!names) return -1;
    size_t at = 0;
    int ok = 1;
    for (int c = 0; ok && c < d->num_classes; c++) {
        char *end = at < bytes ? memchr(block + at, '\0', bytes - at) : NULL;
        if (!end || end == block + at) ok = 0;
        else {
            names[c] = block + at;
            at = (size_t)(end - block) + 1;
        }
    }
    ok = ok && at == bytes && bn_dataset_set_class_names(d, names) == BN_OK;
    free(names);
    return ok ? 0 : -1;
}

/* Reads the entry at path into *out: 1 when it is sound, 0 when there is none, -1 with why
 * saying what is wrong. */
static int read_entry(const bn_data_cache_entry *e, bn_dataset *out, char *why, size_t cap)
{
    /* O_NONBLOCK: a FIFO put where an entry belongs is refused below, not waited on. */
    int fd = open(e->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        /* None yet, or no folder it could be in. */
        if (errno == ENOENT || errno == ENOTDIR) return 0;
        snprintf(why, cap, "cannot open (%s)", strerror(errno));
        return -1;
    }
    struct stat st;
    unsigned char head[HEADER_BYTES];
    uint64_t h[H_COUNT_OF];
    uLong crc = crc32(0, Z_NULL, 0);
    int r = -1;
    char *names = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(why, cap, "not a regular file");
        goto done;
    }
    if ((uint64_t)st.st_size < HEADER_BYTES + sizeof(uint64_t) || read_all(fd, head, sizeof head, &crc) != 0) {
        snprintf(why, cap, "truncated (%lld bytes)", (long long)st.st_size);
        goto done;
    }
    memcpy(h, head + MAGIC_LEN, sizeof h);
    if (memcmp(head, magic, MAGIC_LEN) != 0 || h[H_ORDER] != BYTE_ORDER_MARK) {
        snprintf(why, cap, "not a data cache entry of version %d (bad magic)", BN_DATA_CACHE_VERSION);
        goto done;
    }
    if (h[H_ID] != e->key[0] || h[H_KEY0] != e->key[1] || h[H_KEY1] != e->key[2]) {
        snprintf(why, cap, "the entry of another key");
        goto done;
    }
    uint64_t count = h[H_COUNT], c = h[H_CHANNELS], hh = h[H_HEIGHT], w = h[H_WIDTH], vb = h[H_VALUE_BYTES];
    int sane = count >= 1 && count <= INT_MAX && c >= 1 && c <= INT_MAX && hh >= 1 && hh <= INT_MAX && w >= 1 &&
               w <= INT_MAX && h[H_CLASSES] >= 1 && h[H_CLASSES] <= BN_DATASET_MAX_CLASSES && (vb == 1 || vb == 4) &&
               h[H_NAME_BYTES] <= (uint64_t)st.st_size;
    /* Doubles hold the products without wrapping, whatever the header says. */
    double data = sane ? (double)count * (double)c * (double)hh * (double)w * (double)vb : 0;
    sane = sane && data <= (double)BN_DATASET_MAX_BYTES;
    uint64_t expected = sane ? HEADER_BYTES + h[H_NAME_BYTES] + count * 2 + (uint64_t)data + sizeof(uint64_t) : 0;
    if (!sane || expected != (uint64_t)st.st_size) {
        if (sane) snprintf(why, cap, "%lld bytes where its header says %llu (truncated?)", (long long)st.st_size,
                           (unsigned long long)expected);
        else snprintf(why, cap, "a header out of range");
        goto done;
    }
    if (bn_dataset_alloc(out, e->path, (int)count, (int)c, (int)hh, (int)w, (int)h[H_CLASSES], vb == 4) != BN_OK) {
        snprintf(why, cap, "%s", bn_last_error());
        goto done;
    }
    names = malloc(h[H_NAME_BYTES] ? h[H_NAME_BYTES] : 1);
    void *values = out->pixels ? (void *)out->pixels : (void *)out->values;
    uint64_t stored = 0;
    if (!names || read_all(fd, names, h[H_NAME_BYTES], &crc) != 0 ||
        read_all(fd, out->labels, count * sizeof *out->labels, &crc) != 0 ||
        read_all(fd, values, (size_t)data, &crc) != 0 || read_all(fd, &stored, sizeof stored, NULL) != 0) {
        snprintf(why, cap, "cannot be read to its end");
        goto done;
    }
    if (stored != (uint64_t)crc) {
        snprintf(why, cap, "checksum mismatch");
        goto done;
    }
    if (h[H_NAME_BYTES] && take_names(out, names, h[H_NAME_BYTES]) != 0) {
        snprintf(why, cap, "class names that do not match the class count");
        goto done;
    }
    for (int i = 0; i < out->count; i++)
        if (out->labels[i] >= out->num_classes) {
            snprintf(why, cap, "label %u past the %d classes", (unsigned)out->labels[i], out->num_classes);
            goto done;
        }
    r = 1;
done:
    free(names);
    close(fd);
    if (r != 1) bn_dataset_free(out);
    return r;
}

int bn_data_cache_read(const char *path, const uint64_t key[3], bn_dataset *out, char *why, size_t cap)
{
    bn_data_cache_entry e = {.key = {key[0], key[1], key[2]}};
    snprintf(e.path, sizeof e.path, "%s", path);
    memset(out, 0, sizeof *out);
    return read_entry(&e, out, why, cap);
}

int bn_data_cache_find(const bn_data_format *f, const bn_data_request *rq, bn_data_cache_entry *e, bn_dataset *out)
{
    memset(e, 0, sizeof *e);
    memset(out, 0, sizeof *out);
    const char *dir = bn_data_cache_dir();
    if (!dir || (f->cache_pays && !f->cache_pays(rq))) return 0;
    if (make_key(f, rq, dir, e) != 0) {
        memset(e, 0, sizeof *e);
        return 0;
    }
    char why[512];
    int r = read_entry(e, out, why, sizeof why);
    if (r < 0) {
        fprintf(stderr, "blobnet: warning: data cache %s: %s; decoding the data again\n", e->path, why);
        unlink(e->path);
        return 0;
    }
    if (r == 0) return 0;
    for (int i = 0; rq->opts && i < rq->opts->count; i++) rq->opts->items[i].used = 1;
    if (!rq->quiet && f->progress)
        fprintf(stderr, "blobnet: %s: %d %s examples, %dx%dx%d, %d classes (decoded copy from the data cache)\n",
                rq->path, out->count, rq->train ? "training" : "test", out->channels, out->height, out->width,
                out->num_classes);
    return 1;
}

/* ---- writing an entry ---- */

/* Writes n bytes of buf, folding them into *crc; 0, or errno's value. */
static int write_all(int fd, const void *buf, size_t n, uLong *crc)
{
    const unsigned char *p = buf;
    for (size_t done = 0; done < n;) {
        size_t want = n - done < IO_CHUNK ? n - done : IO_CHUNK;
        ssize_t put = write(fd, p + done, want);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) return put < 0 ? errno : EIO;
        if (crc) *crc = crc32(*crc, p + done, (uInt)put);
        done += (size_t)put;
    }
    return 0;
}

/* Makes dir and the folders above it that are missing; 0, or errno's value. */
static int make_dirs(const char *dir)
{
    char *p = strdup(dir);
    if (!p) return ENOMEM;
    int err = 0;
    for (char *s = strchr(p + 1, '/'); s && !err; s = strchr(s + 1, '/')) {
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) err = errno;
        *s = '/';
    }
    if (!err && mkdir(p, 0755) != 0 && errno != EEXIST) err = errno;
    free(p);
    return err;
}

/* The class names as one block of zero-ended strings (malloc'd; *bytes 0 and NULL without). */
static char *names_block(const bn_dataset *d, size_t *bytes)
{
    *bytes = 0;
    if (!d->class_names) return NULL;
    for (int c = 0; c < d->num_classes; c++) *bytes += strlen(d->class_names[c]) + 1;
    char *block = malloc(*bytes);
    if (!block) return NULL;
    size_t at = 0;
    for (int c = 0; c < d->num_classes; c++) {
        size_t n = strlen(d->class_names[c]) + 1;
        memcpy(block + at, d->class_names[c], n);
        at += n;
    }
    return block;
}

/* Writes d to a temporary file (tmp_pattern, for mkstemp, into tmp) and renames it to e's name;
 * 0, or errno's value. */
static int write_entry(const bn_data_cache_entry *e, const bn_dataset *d, const char *tmp_pattern, char *tmp,
                       size_t cap)
{
    size_t name_bytes;
    char *names = names_block(d, &name_bytes);
    if (d->class_names && !names) return ENOMEM;
    snprintf(tmp, cap, "%s", tmp_pattern);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        free(names);
        return errno;
    }
    size_t data = bn_dataset_example_size(d) * (size_t)d->count * (d->pixels ? 1 : sizeof(float));
    uint64_t h[H_COUNT_OF] = {
        [H_ORDER] = BYTE_ORDER_MARK, [H_ID] = e->key[0], [H_KEY0] = e->key[1], [H_KEY1] = e->key[2],
        [H_COUNT] = (uint64_t)d->count, [H_CHANNELS] = (uint64_t)d->channels, [H_HEIGHT] = (uint64_t)d->height,
        [H_WIDTH] = (uint64_t)d->width, [H_CLASSES] = (uint64_t)d->num_classes,
        [H_VALUE_BYTES] = d->pixels ? 1 : sizeof(float), [H_NAME_BYTES] = name_bytes};
    unsigned char head[HEADER_BYTES];
    memcpy(head, magic, MAGIC_LEN);
    memcpy(head + MAGIC_LEN, h, sizeof h);
    uLong crc = crc32(0, Z_NULL, 0);
    int err = write_all(fd, head, sizeof head, &crc);
    if (!err) err = write_all(fd, names, name_bytes, &crc);
    if (!err) err = write_all(fd, d->labels, (size_t)d->count * sizeof *d->labels, &crc);
    if (!err) err = write_all(fd, d->pixels ? (const void *)d->pixels : (const void *)d->values, data, &crc);
    uint64_t sum = (uint64_t)crc;
    if (!err) err = write_all(fd, &sum, sizeof sum, NULL);
    if (close(fd) != 0 && !err) err = errno;
    if (!err && rename(tmp, e->path) != 0) err = errno;
    if (err) unlink(tmp);
    free(names);
    return err;
}

/* Deletes the entries of e's identity other than e: those of the source as it was. */
static void drop_older(const bn_data_cache_entry *e, const char *dir)
{
    char prefix[32];
    snprintf(prefix, sizeof prefix, "%016llx-", (unsigned long long)e->key[0]);
    const char *mine = strrchr(e->path, '/') + 1;
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *x; (x = readdir(d));) {
        if (strncmp(x->d_name, prefix, strlen(prefix)) != 0 || strcmp(x->d_name, mine) == 0) continue;
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", dir, x->d_name) < (int)sizeof path) unlink(path);
    }
    closedir(d);
}

void bn_data_cache_keep(const bn_data_cache_entry *e, const bn_data_request *rq, const bn_dataset *d)
{
    const char *dir = bn_data_cache_dir();
    if (!dir || !e->path[0] || e->recent || d->count <= 0 || !(d->pixels || d->values)) return;
    for (int i = 0; rq->opts && i < rq->opts->count; i++)
        if (!rq->opts->items[i].used) return;
    double bytes = (double)bn_dataset_example_size(d) * d->count * (d->pixels ? 1 : sizeof(float)) + 2.0 * d->count;
    uint64_t limit;
    if (bn_data_cache_max_bytes(&limit) != BN_OK) {
        if (!cache.warned_limit)
            fprintf(stderr, "blobnet: warning: %s; no decoded data is kept for the next run\n", bn_last_error());
        cache.warned_limit = 1;
        return;
    }
    if (bytes > (double)limit) return;
    char tmp[PATH_MAX + 32], pattern[PATH_MAX + 32];
    snprintf(pattern, sizeof pattern, "%s/.partial-XXXXXX", dir);
    int err = make_dirs(dir);
    if (!err) err = write_entry(e, d, pattern, tmp, sizeof tmp);
    if (!err) {
        drop_older(e, dir);
        return;
    }
    if (!cache.warned_write)
        fprintf(stderr, "blobnet: warning: data cache %s: %s; the decoded data is not kept for the next run\n", dir,
                strerror(err));
    cache.warned_write = 1;
}
