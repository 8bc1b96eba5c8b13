#include "safetensors.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/regular_file.h"

/* The safetensors reference refuses headers over 100 MB; a larger one is not safetensors. */
#define MAX_HEADER_BYTES 100000000ULL

/* ---- write ------------------------------------------------------------------------ */

/* A growing text buffer for the header; `failed` latches an allocation failure. */
typedef struct text_buf {
    char *s;
    size_t len, cap;
    int failed;
} text_buf;

static int reserve_text(text_buf *b, size_t more)
{
    if (b->failed) return 0;
    if (b->len + more + 1 <= b->cap) return 1;
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + more + 1) cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) {
        b->failed = 1;
        return 0;
    }
    b->s = s;
    b->cap = cap;
    return 1;
}

static void append_fmt(text_buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void append_fmt(text_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !reserve_text(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static void append_quoted(text_buf *b, const char *s)
{
    size_t n = bn_json_quote(NULL, 0, s);
    if (!reserve_text(b, n)) return;
    bn_json_quote(b->s + b->len, n + 1, s);
    b->len += n;
}

static uint64_t element_count(const bn_safetensors_tensor *t)
{
    uint64_t n = 1;
    for (int i = 0; i < t->rank; i++) n *= t->dims[i];
    return n;
}

static void append_tensor(text_buf *b, const bn_safetensors_tensor *t, uint64_t *data_end)
{
    append_fmt(b, ",");
    append_quoted(b, t->name);
    append_fmt(b, ":{\"dtype\":\"F32\",\"shape\":[");
    for (int i = 0; i < t->rank; i++) append_fmt(b, "%s%llu", i ? "," : "", (unsigned long long)t->dims[i]);
    uint64_t begin = *data_end, end = begin + 4 * element_count(t);
    append_fmt(b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)begin, (unsigned long long)end);
    *data_end = end;
}

/* The JSON header, padded with spaces so that the data starts 8-byte aligned. */
static bn_status build_header(const bn_safetensors_field *meta, size_t num_meta,
                              const bn_safetensors_tensor *tensors, size_t n, text_buf *b)
{
    append_fmt(b, "{\"__metadata__\":{");
    for (size_t i = 0; i < num_meta; i++) {
        append_fmt(b, "%s", i ? "," : "");
        append_quoted(b, meta[i].key);
        append_fmt(b, ":");
        append_quoted(b, meta[i].value);
    }
    append_fmt(b, "}");
    uint64_t data_end = 0;
    for (size_t i = 0; i < n; i++) append_tensor(b, &tensors[i], &data_end);
    append_fmt(b, "}");
    while (!b->failed && (8 + b->len) % 8 != 0) append_fmt(b, " ");
    if (b->failed) return bn_error(BN_ERR_NOMEM, "out of host memory building a checkpoint header");
    return BN_OK;
}

/* Writes count floats as little-endian bytes whatever the host's order; 0 or -1 (errno). */
static int write_floats(FILE *f, const float *v, size_t count)
{
    unsigned char buf[4096];
    size_t per = sizeof buf / 4;
    for (size_t i = 0; i < count; i += per) {
        size_t m = count - i < per ? count - i : per;
        for (size_t k = 0; k < m; k++) {
            uint32_t u;
            memcpy(&u, &v[i + k], 4);
            buf[4 * k] = (unsigned char)u;
            buf[4 * k + 1] = (unsigned char)(u >> 8);
            buf[4 * k + 2] = (unsigned char)(u >> 16);
            buf[4 * k + 3] = (unsigned char)(u >> 24);
        }
        if (fwrite(buf, 4, m, f) != m) return -1;
    }
    return 0;
}

/* The length prefix, the header, then the tensors in header order; 0 or -1 (errno). */
static int write_contents(FILE *f, const text_buf *header, const bn_safetensors_tensor *tensors, size_t n)
{
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)header->len >> (8 * i));
    if (fwrite(len, 1, 8, f) != 8 || fwrite(header->s, 1, header->len, f) != header->len) return -1;
    for (size_t i = 0; i < n; i++)
        if (write_floats(f, tensors[i].data, (size_t)element_count(&tensors[i])) != 0) return -1;
    return 0;
}

/* The mode a new file at path would get from open(): the old file's when there is one. The
 * umask can only be read by setting it, which briefly affects other threads' new files;
 * blobnet creates files from one thread only. */
static mode_t target_mode(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) == 0) return sb.st_mode & 07777;
    mode_t mask = umask(0);
    umask(mask);
    return 0666 & ~mask;
}

/* The directory path is in ("." for a bare name) into dir, and where its last part starts. */
static const char *split_path(const char *path, char dir[4096])
{
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, 4096, ".");
    else if (slash == path) snprintf(dir, 4096, "/");
    else snprintf(dir, 4096, "%.*s", (int)(slash - path), path);
    return slash ? slash + 1 : path;
}

/* Makes the rename durable. Filesystems that cannot sync a directory say EINVAL: nothing
 * more can be done there, so that is not an error. */
static bn_status sync_directory(const char *path)
{
    char dir[4096];
    split_path(path, dir);
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    int err = 0;
    if (fd < 0) err = errno;
    else if (fsync(fd) != 0 && errno != EINVAL) err = errno;
    if (fd >= 0) close(fd);
    if (err)
        return bn_error(BN_ERR_IO, "checkpoint %s was written but its directory %s could not be synced: %s",
                        path, dir, strerror(err));
    return BN_OK;
}

/* A test hook: with BLOBNET_TEST_SAVE_PAUSE_MS set, a save waits that long between writing
 * the temporary file and renaming it, so that a test can kill the process inside a save. */
static void pause_before_rename(void)
{
    const char *ms = getenv("BLOBNET_TEST_SAVE_PAUSE_MS");
    long v = ms ? strtol(ms, NULL, 10) : 0;
    if (v > 0) nanosleep(&(struct timespec){.tv_sec = v / 1000, .tv_nsec = v % 1000 * 1000000L}, NULL);
}

#define TEMP_SUFFIX ".tmp."
#define PROBE_SUFFIX ".probe."
#define TEMP_RANDOM 6 /* mkstemp's XXXXXX */

/* A new file beside path, "<path><suffix>XXXXXX", open in *fd and named in *tmp (the caller frees
 * it); -1 in *fd, with errno, when it cannot be made. */
static bn_status create_beside(const char *path, const char *suffix, char **tmp, int *fd)
{
    size_t len = strlen(path) + strlen(suffix) + TEMP_RANDOM + 1;
    *fd = -1;
    if (!(*tmp = malloc(len))) return bn_error(BN_ERR_NOMEM, "out of host memory saving %s", path);
    snprintf(*tmp, len, "%s%sXXXXXX", path, suffix);
    *fd = mkstemp(*tmp);
    return BN_OK;
}

/* Whether name is that of a temporary file of a save to base (write_atomically's name). */
static int is_temp_of(const char *name, const char *base)
{
    size_t n = strlen(base), s = strlen(TEMP_SUFFIX);
    if (strncmp(name, base, n) != 0 || strncmp(name + n, TEMP_SUFFIX, s) != 0) return 0;
    const char *x = name + n + s;
    if (strlen(x) != TEMP_RANDOM) return 0;
    for (; *x; x++)
        if (!isalnum((unsigned char)*x)) return 0;
    return 1;
}

/* Removes the temporary files that saves to path left behind when they were killed: regular
 * files of this user, named as write_atomically names them, that no save in progress holds locked
 * (write_atomically locks its own until it is gone). Best effort: a file it cannot remove is
 * left for the next save. */
static void remove_stale_temps(const char *path)
{
    char dir[4096], full[8192];
    const char *base = split_path(path, dir);
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        if (!is_temp_of(e->d_name, base)) continue;
        snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
        int fd = open(full, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        struct stat sb;
        if (fd < 0) continue;
        if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == geteuid() && flock(fd, LOCK_EX | LOCK_NB) == 0)
            unlink(full);
        close(fd);
    }
    closedir(d);
}

bn_status bn_safetensors_check_target(const char *path)
{
    struct stat sb;
    if (!path[0]) return bn_error(BN_ERR_USAGE, "an empty path names no file");
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return bn_error(BN_ERR_USAGE, "%s is %s, not a file that can be replaced", path,
                        S_ISDIR(sb.st_mode) ? "a directory" : "not a regular file");
    char dir[4096];
    split_path(path, dir);
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return bn_error(BN_ERR_USAGE, "directory %s does not exist", dir);
    /* A name of its own, which no one watching for a save's temporary file takes for one. */
    char *tmp;
    int fd;
    BN_TRY(create_beside(path, PROBE_SUFFIX, &tmp, &fd));
    bn_status s = BN_OK;
    if (fd < 0) s = bn_error(BN_ERR_USAGE, "cannot create a file in directory %s: %s", dir, strerror(errno));
    else close(fd), unlink(tmp);
    free(tmp);
    return s;
}

/* Writes the file next to path under a temporary name and renames it over path only when
 * it is complete and on disk; on any failure the temporary file is removed. Temporary files
 * that earlier saves to path left behind are removed first. */
static bn_status write_atomically(const char *path, const text_buf *header,
                                  const bn_safetensors_tensor *tensors, size_t n)
{
    remove_stale_temps(path);
    char *tmp;
    int fd;
    BN_TRY(create_beside(path, TEMP_SUFFIX, &tmp, &fd));
    if (fd < 0) {
        int err = errno;
        free(tmp);
        return bn_error(BN_ERR_IO, "cannot save checkpoint %s: cannot create a temporary file beside it: %s",
                        path, strerror(err));
    }
    /* Held until the file is renamed or removed: the mark of a save in progress, which a save
     * from another process then leaves alone. */
    (void)flock(fd, LOCK_EX | LOCK_NB);
    const char *failed = NULL;
    int err = 0;
    FILE *f = NULL;
    /* Best effort: where modes cannot be set the file keeps mkstemp's owner-only 0600. */
    (void)fchmod(fd, target_mode(path));
    if (!(f = fdopen(fd, "wb"))) failed = "opening";
    else if (write_contents(f, header, tensors, n) != 0 || fflush(f) != 0) failed = "writing";
    else if (fsync(fd) != 0) failed = "syncing";
    if (failed) err = errno;
    if (f) {
        if (fclose(f) != 0 && !failed) failed = "closing", err = errno;
    } else {
        close(fd);
    }
    if (!failed) pause_before_rename();
    if (!failed && rename(tmp, path) != 0) failed = "renaming", err = errno;
    if (failed) {
        unlink(tmp);
        bn_status s = bn_error(BN_ERR_IO, "cannot save checkpoint %s: %s the temporary file %s failed: %s",
                               path, failed, tmp, strerror(err));
        free(tmp);
        return s;
    }
    free(tmp);
    return sync_directory(path);
}

bn_status bn_safetensors_save(const char *path, const bn_safetensors_field *meta, size_t num_meta,
                              const bn_safetensors_tensor *tensors, size_t num_tensors)
{
    text_buf header = {0};
    bn_status s = build_header(meta, num_meta, tensors, num_tensors, &header);
    if (s == BN_OK) s = write_atomically(path, &header, tensors, num_tensors);
    free(header.s);
    return s;
}

/* ---- read ------------------------------------------------------------------------- */

const char *bn_safetensors_printable(const char *s, size_t len, char *buf, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < len && n + 4 < cap; i++) buf[n++] = (unsigned char)s[i] < 0x20 ? '?' : s[i];
    if (len > n && n + 4 <= cap) buf[n++] = '.', buf[n++] = '.', buf[n++] = '.';
    buf[n] = '\0';
    return buf;
}

void bn_safetensors_shape_text(const bn_safetensors_entry *e, char *buf, size_t cap)
{
    /* The literals as written: a checked shape holds plain integers only. */
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (size_t i = 0; i < e->shape->count && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? "," : "", e->shape->items[i]->text);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

int bn_safetensors_shape_is(const bn_safetensors_entry *e, const uint64_t *dims, int rank)
{
    if (e->shape->count != (size_t)rank) return 0;
    for (int i = 0; i < rank; i++) {
        uint64_t d = 0;
        bn_json_u64(e->shape->items[i], &d);
        if (d != dims[i]) return 0;
    }
    return 1;
}

/* Reads exactly n bytes at offset; 0, or -1 with errno (0 when the file ended early). */
static int read_at(int fd, void *buf, size_t n, uint64_t offset)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t got = pread(fd, p, n, (off_t)offset);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            if (got == 0) errno = 0;
            return -1;
        }
        p += got;
        n -= (size_t)got;
        offset += (uint64_t)got;
    }
    return 0;
}

static bn_status read_error(const bn_safetensors *f, const char *what)
{
    if (errno == 0) return bn_error(BN_ERR_DATA, "%s: file ended while reading %s", f->path, what);
    return bn_error(BN_ERR_DATA, "%s: cannot read %s: %s", f->path, what, strerror(errno));
}

void bn_safetensors_close(bn_safetensors *f)
{
    if (f->fd >= 0) close(f->fd);
    bn_json_free(f->header);
    f->fd = -1;
    f->header = NULL;
}

/* Finds "__metadata__" and checks that it is an object of strings. */
static bn_status check_metadata(bn_safetensors *f)
{
    const bn_json *h = f->header;
    f->num_tensors = h->count;
    f->meta = bn_json_get(h, "__metadata__");
    if (!f->meta) return BN_OK;
    f->num_tensors--;
    while (h->items[f->meta_index] != f->meta) f->meta_index++;
    if (f->meta->type != BN_JSON_OBJECT)
        return bn_error(BN_ERR_DATA, "%s: __metadata__ is a %s, not an object", f->path,
                        bn_json_type_name(f->meta->type));
    for (size_t i = 0; i < f->meta->count; i++) {
        const bn_json *key = f->meta->keys[i], *v = f->meta->items[i];
        if (v->type == BN_JSON_STRING) continue;
        char buf[96];
        return bn_error(BN_ERR_DATA,
                        "%s: __metadata__ value of \"%s\" is a %s; metadata values must be strings", f->path,
                        bn_safetensors_printable(key->text, key->len, buf, sizeof buf),
                        bn_json_type_name(v->type));
    }
    return BN_OK;
}

bn_status bn_safetensors_open(const char *path, bn_safetensors *f)
{
    *f = (bn_safetensors){.path = path, .fd = -1};
    BN_TRY(bn_check_regular_file(path, BN_ERR_DATA));
    f->fd = open(path, O_RDONLY);
    if (f->fd < 0) return bn_error(BN_ERR_DATA, "cannot open checkpoint %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(f->fd, &sb) != 0)
        return bn_error(BN_ERR_DATA, "cannot stat checkpoint %s: %s", path, strerror(errno));
    uint64_t size = (uint64_t)sb.st_size;
    if (size < 8)
        return bn_error(BN_ERR_DATA, "%s: file is %llu bytes, too short for a safetensors header length",
                        path, (unsigned long long)size);
    unsigned char len8[8];
    if (read_at(f->fd, len8, 8, 0) != 0) return read_error(f, "the header length");
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | len8[i];
    if (n == 0) return bn_error(BN_ERR_DATA, "%s: header length is 0", path);
    if (n > MAX_HEADER_BYTES)
        return bn_error(BN_ERR_DATA,
                        "%s: header length %llu is absurd (over %llu bytes); not a safetensors file?", path,
                        (unsigned long long)n, MAX_HEADER_BYTES);
    if (n > size - 8)
        return bn_error(BN_ERR_DATA, "%s: header length %llu runs past the end of the file (%llu bytes)",
                        path, (unsigned long long)n, (unsigned long long)size);
    f->data_start = 8 + n;
    f->data_len = size - f->data_start;
    char *text = malloc((size_t)n);
    if (!text) return bn_error(BN_ERR_NOMEM, "out of host memory for the %llu-byte header of %s",
                               (unsigned long long)n, path);
    if (read_at(f->fd, text, (size_t)n, 8) != 0) {
        free(text);
        return read_error(f, "the header");
    }
    bn_status s = bn_json_parse(text, (size_t)n, &f->header);
    free(text);
    if (s == BN_ERR_DATA) {
        char why[512];
        snprintf(why, sizeof why, "%s", bn_last_error());
        return bn_error(BN_ERR_DATA, "%s: header is not valid JSON at header %s", path, why);
    }
    BN_TRY(s);
    if (f->header->type != BN_JSON_OBJECT)
        return bn_error(BN_ERR_DATA, "%s: header is a JSON %s, not an object", path,
                        bn_json_type_name(f->header->type));
    return check_metadata(f);
}

const char *bn_safetensors_meta(const bn_safetensors *f, const char *key)
{
    const bn_json *v = bn_json_get(f->meta, key);
    return v ? v->text : NULL;
}

bn_status bn_safetensors_check_entry(const bn_safetensors *f, size_t i, bn_safetensors_entry *e)
{
    size_t member = f->meta && i >= f->meta_index ? i + 1 : i;
    const bn_json *key = f->header->keys[member], *v = f->header->items[member];
    char name[96], buf[96];
    bn_safetensors_printable(key->text, key->len, name, sizeof name);
    *e = (bn_safetensors_entry){.name = key->text, .name_len = key->len};
    if (v->type != BN_JSON_OBJECT)
        return bn_error(BN_ERR_DATA, "%s: tensor %s is a %s, not an object", f->path, name,
                        bn_json_type_name(v->type));
    static const char *const fields[] = {"dtype", "shape", "data_offsets"};
    for (size_t k = 0; k < 3; k++)
        if (!bn_json_get(v, fields[k]))
            return bn_error(BN_ERR_DATA, "%s: tensor %s lacks \"%s\"", f->path, name, fields[k]);
    const bn_json *dtype = bn_json_get(v, "dtype");
    if (dtype->type != BN_JSON_STRING)
        return bn_error(BN_ERR_DATA, "%s: tensor %s has a dtype that is not a string", f->path, name);
    if (strcmp(dtype->text, "F32") != 0 || dtype->len != 3)
        return bn_error(BN_ERR_DATA, "%s: tensor %s has dtype %s; blobnet checkpoints hold F32", f->path,
                        name, bn_safetensors_printable(dtype->text, dtype->len, buf, sizeof buf));
    e->shape = bn_json_get(v, "shape");
    if (e->shape->type != BN_JSON_ARRAY)
        return bn_error(BN_ERR_DATA, "%s: tensor %s has a shape that is not an array", f->path, name);
    uint64_t count = 1;
    for (size_t k = 0; k < e->shape->count; k++) {
        uint64_t d;
        if (!bn_json_u64(e->shape->items[k], &d))
            return bn_error(BN_ERR_DATA, "%s: tensor %s: shape entry %zu is not a non-negative integer",
                            f->path, name, k);
        if (d != 0 && count > UINT64_MAX / 4 / d)
            return bn_error(BN_ERR_DATA, "%s: tensor %s: the shape's element count overflows 64 bits",
                            f->path, name);
        count *= d;
    }
    e->count = count;
    const bn_json *off = bn_json_get(v, "data_offsets");
    uint64_t begin, end;
    if (off->type != BN_JSON_ARRAY || off->count != 2 || !bn_json_u64(off->items[0], &begin) ||
        !bn_json_u64(off->items[1], &end) || end < begin)
        return bn_error(BN_ERR_DATA, "%s: tensor %s: data_offsets must be [begin,end] with begin <= end",
                        f->path, name);
    if (end - begin != 4 * count) {
        bn_safetensors_shape_text(e, buf, sizeof buf);
        return bn_error(BN_ERR_DATA,
                        "%s: tensor %s: data_offsets [%llu,%llu] hold %llu bytes but shape %s needs %llu",
                        f->path, name, (unsigned long long)begin, (unsigned long long)end,
                        (unsigned long long)(end - begin), buf, (unsigned long long)(4 * count));
    }
    if (end > f->data_len)
        return bn_error(BN_ERR_DATA,
                        "%s: tensor %s: data_offsets end %llu is past the data section (%llu bytes)",
                        f->path, name, (unsigned long long)end, (unsigned long long)f->data_len);
    e->begin = begin;
    return BN_OK;
}

/* NaN and infinity are refused: weights that hold them cannot continue a run. */
bn_status bn_safetensors_read_f32(const bn_safetensors *f, const bn_safetensors_entry *e, float *dst)
{
    char name[160];
    bn_safetensors_printable(e->name, e->name_len, name, sizeof name);
    unsigned char *bytes = (unsigned char *)dst;
    if (read_at(f->fd, bytes, 4 * (size_t)e->count, f->data_start + e->begin) != 0) {
        char what[sizeof "tensor " + sizeof name];
        snprintf(what, sizeof what, "tensor %s", name);
        return read_error(f, what);
    }
    /* In place: element i is rebuilt from exactly the four bytes it occupies. */
    for (size_t i = 0; i < e->count; i++) {
        const unsigned char *b = bytes + 4 * i;
        uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        float v;
        memcpy(&v, &u, 4);
        if (!isfinite(v))
            return bn_error(BN_ERR_DATA, "%s: tensor %s holds %s at element %zu", f->path, name,
                            isnan(v) ? "NaN" : "infinity", i);
        dst[i] = v;
    }
    return BN_OK;
}
