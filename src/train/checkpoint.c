#include "checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/json.h"

/* The safetensors reference refuses headers over 100 MB; a larger one is not a checkpoint. */
#define MAX_HEADER_BYTES 100000000ULL
#define FORMAT_NAME "blobnet"
#define FORMAT_VERSION "1"
#define MOMENTUM_PREFIX "momentum."
#define PREFIX_LEN (sizeof MOMENTUM_PREFIX - 1)

/* ---- the net's tensors ------------------------------------------------------------ */

/* One parameter as the checkpoint names and shapes it, and where it lives in the slab. */
typedef struct tensor_spec {
    char name[128];      /* "<layer>.<param>" */
    int rank;
    uint64_t dims[4];
    size_t offset;       /* elements into net->params (and into the momentum slab) */
    size_t count;
} tensor_spec;

/* The shape written for a parameter blob. Rule: c = h = w = 1 (biases and other per-output
 * vectors) is 1-d [n]; h = w = 1 (dense weights) is 2-d [n, c]; anything else (convolution
 * kernels) is 4-d [n, c, h, w]. These are the shapes PyTorch's Linear and Conv2d use, except
 * a 1x1 convolution's kernel, which comes out [n, c] and needs a reshape there. */
static int param_shape(const bn_blob *b, uint64_t dims[4])
{
    dims[0] = (uint64_t)b->n, dims[1] = (uint64_t)b->c, dims[2] = (uint64_t)b->h, dims[3] = (uint64_t)b->w;
    if (b->h == 1 && b->w == 1) return b->c == 1 ? 1 : 2;
    return 4;
}

/* Every parameter of the net in slab order; *out is the caller's to free. */
static bn_status list_params(bn_net *net, tensor_spec **out, size_t *count)
{
    *out = NULL;
    *count = 0;
    if (net->capacity == 0)
        return bn_error(BN_ERR_INTERNAL, "%s: checkpoints need a network that is set up", net->source);
    size_t total = 0;
    for (int i = 0; i < net->num_layers; i++) total += (size_t)net->layers[i]->num_params;
    tensor_spec *specs = calloc(total ? total : 1, sizeof *specs);
    if (!specs) return bn_error(BN_ERR_NOMEM, "out of host memory listing %s's parameters", net->source);
    size_t k = 0;
    for (int i = 0; i < net->num_layers; i++) {
        const bn_layer *l = net->layers[i];
        for (int j = 0; j < l->num_params; j++, k++) {
            const bn_param *p = &l->params[j];
            tensor_spec *t = &specs[k];
            snprintf(t->name, sizeof t->name, "%s.%s", l->name, p->name);
            t->rank = param_shape(p->value, t->dims);
            t->offset = p->value->offset;
            t->count = bn_blob_count(p->value);
        }
    }
    *out = specs;
    *count = total;
    return BN_OK;
}

static bn_status check_optimizer(const bn_net *net, const bn_sgd *opt)
{
    size_t have = opt->momentum ? bn_blob_count(opt->momentum) : 0;
    if (have != net->num_params)
        return bn_error(BN_ERR_INTERNAL, "%s: the optimizer holds %zu momentum values for %zu parameters",
                        net->source, have, net->num_params);
    return BN_OK;
}

/* "[500,784]" */
static void format_dims(const uint64_t *dims, int rank, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < rank && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%llu", i ? "," : "", (unsigned long long)dims[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* ---- save ------------------------------------------------------------------------- */

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

/* `"key":"value"` in the metadata object, comma first unless it opens the object. */
static void append_meta(text_buf *b, const char *key, const char *value)
{
    append_fmt(b, "%s", b->s && b->s[b->len - 1] == '{' ? "" : ",");
    append_quoted(b, key);
    append_fmt(b, ":");
    append_quoted(b, value);
}

static void append_tensor(text_buf *b, const char *prefix, const tensor_spec *t, uint64_t *data_end)
{
    char name[sizeof t->name + PREFIX_LEN];
    snprintf(name, sizeof name, "%s%s", prefix, t->name);
    append_fmt(b, ",");
    append_quoted(b, name);
    append_fmt(b, ":{\"dtype\":\"F32\",\"shape\":[");
    for (int i = 0; i < t->rank; i++) append_fmt(b, "%s%llu", i ? "," : "", (unsigned long long)t->dims[i]);
    uint64_t begin = *data_end, end = begin + 4 * (uint64_t)t->count;
    append_fmt(b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)begin, (unsigned long long)end);
    *data_end = end;
}

/* The JSON header, padded with spaces so that the data starts 8-byte aligned. */
static bn_status build_header(bn_net *net, const bn_sgd *opt, const bn_train_state *st,
                              const tensor_spec *specs, size_t n, text_buf *b)
{
    bn_train_state zero = {0};
    if (!st) st = &zero;
    char v[64];
    append_fmt(b, "{\"__metadata__\":{");
    append_meta(b, "format", FORMAT_NAME);
    append_meta(b, "version", FORMAT_VERSION);
    snprintf(v, sizeof v, "%016llx", (unsigned long long)net->model_hash);
    append_meta(b, "model_hash", v);
    append_meta(b, "model_file", net->source);
    snprintf(v, sizeof v, "%llu", st->seed);
    append_meta(b, "seed", v);
    snprintf(v, sizeof v, "%d", st->epoch);
    append_meta(b, "epoch", v);
    snprintf(v, sizeof v, "%d", st->batch_in_epoch);
    append_meta(b, "batch_in_epoch", v);
    snprintf(v, sizeof v, "%ld", st->step);
    append_meta(b, "step", v);
    snprintf(v, sizeof v, "%ld", opt ? opt->iter : 0L);
    append_meta(b, "iter", v);
    /* 17 significant digits print every double so that strtod gives back the same bits. */
    snprintf(v, sizeof v, "%.17g", st->epoch_loss_sum);
    append_meta(b, "epoch_loss_sum", v);
    snprintf(v, sizeof v, "%.17g", st->epoch_correct);
    append_meta(b, "epoch_correct", v);
    snprintf(v, sizeof v, "%ld", st->epoch_seen);
    append_meta(b, "epoch_seen", v);
    append_meta(b, "has_momentum", opt ? "1" : "0");
    append_fmt(b, "}");
    uint64_t data_end = 0;
    for (size_t i = 0; i < n; i++) append_tensor(b, "", &specs[i], &data_end);
    for (size_t i = 0; opt && i < n; i++) append_tensor(b, MOMENTUM_PREFIX, &specs[i], &data_end);
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
static int write_contents(FILE *f, const text_buf *header, const tensor_spec *specs, size_t n,
                          const float *weights, const float *momentum)
{
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)header->len >> (8 * i));
    if (fwrite(len, 1, 8, f) != 8 || fwrite(header->s, 1, header->len, f) != header->len) return -1;
    for (size_t i = 0; i < n; i++)
        if (write_floats(f, weights + specs[i].offset, specs[i].count) != 0) return -1;
    for (size_t i = 0; momentum && i < n; i++)
        if (write_floats(f, momentum + specs[i].offset, specs[i].count) != 0) return -1;
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

/* Makes the rename durable. Filesystems that cannot sync a directory say EINVAL: nothing
 * more can be done there, so that is not an error. */
static bn_status sync_directory(const char *path)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
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

/* Writes the file next to path under a temporary name and renames it over path only when
 * it is complete and on disk; on any failure the temporary file is removed. */
static bn_status write_atomically(const char *path, const text_buf *header, const tensor_spec *specs,
                                  size_t n, const float *weights, const float *momentum)
{
    size_t tmp_len = strlen(path) + sizeof ".tmp.XXXXXX";
    char *tmp = malloc(tmp_len);
    if (!tmp) return bn_error(BN_ERR_NOMEM, "out of host memory saving checkpoint %s", path);
    snprintf(tmp, tmp_len, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        int err = errno;
        free(tmp);
        return bn_error(BN_ERR_IO, "cannot save checkpoint %s: cannot create a temporary file beside it: %s",
                        path, strerror(err));
    }
    const char *failed = NULL;
    int err = 0;
    FILE *f = NULL;
    /* Best effort: where modes cannot be set the file keeps mkstemp's owner-only 0600. */
    (void)fchmod(fd, target_mode(path));
    if (!(f = fdopen(fd, "wb"))) failed = "opening";
    else if (write_contents(f, header, specs, n, weights, momentum) != 0 || fflush(f) != 0)
        failed = "writing";
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

static bn_status refuse_non_finite(const char *path, const char *prefix, const tensor_spec *t, const float *slab)
{
    for (size_t i = 0; i < t->count; i++) {
        float v = slab[t->offset + i];
        if (!isfinite(v))
            return bn_error(BN_ERR_NUMERIC, "not saving checkpoint %s: %s%s holds %s at element %zu (the file "
                            "already there, if any, is left as it was)", path, prefix, t->name,
                            isnan(v) ? "NaN" : "infinity", i);
    }
    return BN_OK;
}

bn_status bn_checkpoint_save(const char *path, bn_net *net, const bn_sgd *opt, const bn_train_state *st)
{
    tensor_spec *specs;
    size_t n;
    BN_TRY(list_params(net, &specs, &n));
    const float *weights = NULL, *momentum = NULL;
    bn_status s = opt ? check_optimizer(net, opt) : BN_OK;
    if (s == BN_OK && net->num_params) {
        if (!(weights = bn_blob_host_rd(net->params))) s = bn_last_status();
        else if (opt && !(momentum = bn_blob_host_rd(opt->momentum))) s = bn_last_status();
    }
    /* The loader refuses NaN and infinity, so a file holding them could never be resumed:
     * refusing it here keeps the last good checkpoint in place instead. */
    for (size_t i = 0; s == BN_OK && i < n; i++) {
        s = refuse_non_finite(path, "", &specs[i], weights);
        if (s == BN_OK && momentum) s = refuse_non_finite(path, MOMENTUM_PREFIX, &specs[i], momentum);
    }
    text_buf header = {0};
    if (s == BN_OK) s = build_header(net, opt, st, specs, n, &header);
    if (s == BN_OK) s = write_atomically(path, &header, specs, n, weights, momentum);
    free(header.s);
    free(specs);
    return s;
}

/* ---- load ------------------------------------------------------------------------- */

/* An open checkpoint whose header has been parsed and checked as safetensors. */
typedef struct ckpt_file {
    const char *path;
    int fd;
    uint64_t size;          /* bytes in the file */
    uint64_t data_start;    /* 8 + header length */
    uint64_t data_len;      /* bytes after the header */
    bn_json *header;
    const bn_json *meta;    /* the "__metadata__" object, NULL when absent */
} ckpt_file;

/* One tensor entry of the header, checked for form and bounds. */
typedef struct ckpt_tensor {
    const char *name;       /* the header's key; owned by the parsed header */
    size_t name_len;
    const bn_json *shape;   /* array of integers */
    uint64_t begin;         /* byte offsets into the data section */
    uint64_t count;         /* elements */
} ckpt_tensor;

/* Copies a string from the file into buf for a message: control characters become '?'
 * so the message stays one line, and long strings are cut. */
static const char *printable(const char *s, size_t len, char *buf, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < len && n + 4 < cap; i++) buf[n++] = (unsigned char)s[i] < 0x20 ? '?' : s[i];
    if (len > n && n + 4 <= cap) buf[n++] = '.', buf[n++] = '.', buf[n++] = '.';
    buf[n] = '\0';
    return buf;
}

/* "[3,32]" from a shape array of the file (already checked to hold integers). */
static void format_json_dims(const bn_json *shape, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (size_t i = 0; i < shape->count && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? "," : "", shape->items[i]->text);
    if (n < cap) snprintf(buf + n, cap - n, "]");
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

static bn_status read_error(const ckpt_file *cf, const char *what)
{
    if (errno == 0) return bn_error(BN_ERR_DATA, "%s: file ended while reading %s", cf->path, what);
    return bn_error(BN_ERR_DATA, "%s: cannot read %s: %s", cf->path, what, strerror(errno));
}

static void close_file(ckpt_file *cf)
{
    if (cf->fd >= 0) close(cf->fd);
    bn_json_free(cf->header);
    cf->fd = -1;
    cf->header = NULL;
}

/* Opens path, reads the length prefix and parses the header JSON. */
static bn_status open_file(const char *path, ckpt_file *cf)
{
    *cf = (ckpt_file){.path = path, .fd = -1};
    cf->fd = open(path, O_RDONLY);
    if (cf->fd < 0) return bn_error(BN_ERR_DATA, "cannot open checkpoint %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(cf->fd, &sb) != 0)
        return bn_error(BN_ERR_DATA, "cannot stat checkpoint %s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return bn_error(BN_ERR_DATA, "checkpoint %s is not a regular file", path);
    cf->size = (uint64_t)sb.st_size;
    if (cf->size < 8)
        return bn_error(BN_ERR_DATA, "%s: file is %llu bytes, too short for a safetensors header length",
                        path, (unsigned long long)cf->size);
    unsigned char len8[8];
    if (read_at(cf->fd, len8, 8, 0) != 0) return read_error(cf, "the header length");
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | len8[i];
    if (n == 0) return bn_error(BN_ERR_DATA, "%s: header length is 0", path);
    if (n > MAX_HEADER_BYTES)
        return bn_error(BN_ERR_DATA,
                        "%s: header length %llu is absurd (over %llu bytes); not a safetensors file?", path,
                        (unsigned long long)n, MAX_HEADER_BYTES);
    if (n > cf->size - 8)
        return bn_error(BN_ERR_DATA, "%s: header length %llu runs past the end of the file (%llu bytes)",
                        path, (unsigned long long)n, (unsigned long long)cf->size);
    cf->data_start = 8 + n;
    cf->data_len = cf->size - cf->data_start;
    char *text = malloc((size_t)n);
    if (!text) return bn_error(BN_ERR_NOMEM, "out of host memory for the %llu-byte header of %s",
                               (unsigned long long)n, path);
    if (read_at(cf->fd, text, (size_t)n, 8) != 0) {
        free(text);
        return read_error(cf, "the header");
    }
    bn_status s = bn_json_parse(text, (size_t)n, &cf->header);
    free(text);
    if (s == BN_ERR_DATA) {
        char why[512];
        snprintf(why, sizeof why, "%s", bn_last_error());
        return bn_error(BN_ERR_DATA, "%s: header is not valid JSON at header %s", path, why);
    }
    BN_TRY(s);
    if (cf->header->type != BN_JSON_OBJECT)
        return bn_error(BN_ERR_DATA, "%s: header is a JSON %s, not an object", path,
                        bn_json_type_name(cf->header->type));
    cf->meta = bn_json_get(cf->header, "__metadata__");
    if (!cf->meta) return BN_OK;
    if (cf->meta->type != BN_JSON_OBJECT)
        return bn_error(BN_ERR_DATA, "%s: __metadata__ is a %s, not an object", path,
                        bn_json_type_name(cf->meta->type));
    for (size_t i = 0; i < cf->meta->count; i++) {
        if (cf->meta->items[i]->type == BN_JSON_STRING) continue;
        char key[96];
        return bn_error(BN_ERR_DATA,
                        "%s: __metadata__ value of \"%s\" is a %s; metadata values must be strings", path,
                        printable(cf->meta->keys[i]->text, cf->meta->keys[i]->len, key, sizeof key),
                        bn_json_type_name(cf->meta->items[i]->type));
    }
    return BN_OK;
}

/* Checks one tensor entry for form, dtype, size and bounds (safetensors' own rules). */
static bn_status check_entry(const ckpt_file *cf, const bn_json *key, const bn_json *v, ckpt_tensor *t)
{
    char name[96], buf[96];
    printable(key->text, key->len, name, sizeof name);
    *t = (ckpt_tensor){.name = key->text, .name_len = key->len};
    if (v->type != BN_JSON_OBJECT)
        return bn_error(BN_ERR_DATA, "%s: tensor %s is a %s, not an object", cf->path, name,
                        bn_json_type_name(v->type));
    static const char *const fields[] = {"dtype", "shape", "data_offsets"};
    for (size_t i = 0; i < 3; i++)
        if (!bn_json_get(v, fields[i]))
            return bn_error(BN_ERR_DATA, "%s: tensor %s lacks \"%s\"", cf->path, name, fields[i]);
    const bn_json *dtype = bn_json_get(v, "dtype");
    if (dtype->type != BN_JSON_STRING)
        return bn_error(BN_ERR_DATA, "%s: tensor %s has a dtype that is not a string", cf->path, name);
    if (strcmp(dtype->text, "F32") != 0 || dtype->len != 3)
        return bn_error(BN_ERR_DATA, "%s: tensor %s has dtype %s; blobnet checkpoints hold F32", cf->path,
                        name, printable(dtype->text, dtype->len, buf, sizeof buf));
    t->shape = bn_json_get(v, "shape");
    if (t->shape->type != BN_JSON_ARRAY)
        return bn_error(BN_ERR_DATA, "%s: tensor %s has a shape that is not an array", cf->path, name);
    uint64_t count = 1;
    for (size_t i = 0; i < t->shape->count; i++) {
        uint64_t d;
        if (!bn_json_u64(t->shape->items[i], &d))
            return bn_error(BN_ERR_DATA, "%s: tensor %s: shape entry %zu is not a non-negative integer",
                            cf->path, name, i);
        if (d != 0 && count > UINT64_MAX / 4 / d)
            return bn_error(BN_ERR_DATA, "%s: tensor %s: the shape's element count overflows 64 bits",
                            cf->path, name);
        count *= d;
    }
    t->count = count;
    const bn_json *off = bn_json_get(v, "data_offsets");
    uint64_t begin, end;
    if (off->type != BN_JSON_ARRAY || off->count != 2 || !bn_json_u64(off->items[0], &begin) ||
        !bn_json_u64(off->items[1], &end) || end < begin)
        return bn_error(BN_ERR_DATA, "%s: tensor %s: data_offsets must be [begin,end] with begin <= end",
                        cf->path, name);
    if (end - begin != 4 * count) {
        format_json_dims(t->shape, buf, sizeof buf);
        return bn_error(BN_ERR_DATA,
                        "%s: tensor %s: data_offsets [%llu,%llu] hold %llu bytes but shape %s needs %llu",
                        cf->path, name, (unsigned long long)begin, (unsigned long long)end,
                        (unsigned long long)(end - begin), buf, (unsigned long long)(4 * count));
    }
    if (end > cf->data_len)
        return bn_error(BN_ERR_DATA,
                        "%s: tensor %s: data_offsets end %llu is past the data section (%llu bytes)",
                        cf->path, name, (unsigned long long)end, (unsigned long long)cf->data_len);
    t->begin = begin;
    return BN_OK;
}

static int tensor_is(const ckpt_tensor *t, const char *prefix, const char *name)
{
    size_t p = strlen(prefix), n = strlen(name);
    return t->name_len == p + n && memcmp(t->name, prefix, p) == 0 && memcmp(t->name + p, name, n) == 0;
}

static bn_status check_shape(const ckpt_file *cf, const ckpt_tensor *t, const tensor_spec *spec)
{
    int same = t->shape->count == (size_t)spec->rank && t->count == spec->count;
    for (int i = 0; same && i < spec->rank; i++) {
        uint64_t d = 0;
        bn_json_u64(t->shape->items[i], &d);
        same = d == spec->dims[i];
    }
    if (same) return BN_OK;
    char name[160], got[96], want[96];
    format_json_dims(t->shape, got, sizeof got);
    format_dims(spec->dims, spec->rank, want, sizeof want);
    return bn_error(BN_ERR_DATA, "%s: tensor %s has shape %s but the model expects %s", cf->path,
                    printable(t->name, t->name_len, name, sizeof name), got, want);
}

/* Which of the file's tensors holds each parameter's weights (and momentum, when wanted).
 * A tensor the net does not have is an error, except momentum entries when they are not
 * wanted by a weights-only load. */
static bn_status match_tensors(const ckpt_file *cf, const tensor_spec *specs, size_t n, int weights_only,
                               int want_momentum, ckpt_tensor *weights, ckpt_tensor *momentum)
{
    int *seen_w = calloc(n ? n : 1, sizeof *seen_w), *seen_m = calloc(n ? n : 1, sizeof *seen_m);
    bn_status s = BN_OK;
    if (!seen_w || !seen_m) s = bn_error(BN_ERR_NOMEM, "out of host memory reading %s", cf->path);
    const bn_json *h = cf->header;
    for (size_t i = 0; i < h->count && s == BN_OK; i++) {
        if (h->items[i] == cf->meta) continue;
        ckpt_tensor t;
        if ((s = check_entry(cf, h->keys[i], h->items[i], &t)) != BN_OK) break;
        /* Weight names first: a layer may itself be called "momentum". */
        size_t j = 0;
        while (j < n && !tensor_is(&t, "", specs[j].name)) j++;
        int is_momentum = j == n && t.name_len > PREFIX_LEN &&
                          memcmp(t.name, MOMENTUM_PREFIX, PREFIX_LEN) == 0;
        if (is_momentum && weights_only) continue;
        if (is_momentum) {
            j = 0;
            while (j < n && !tensor_is(&t, MOMENTUM_PREFIX, specs[j].name)) j++;
        }
        if (j == n) {
            char name[160];
            s = bn_error(BN_ERR_DATA, "%s: tensor %s is not in the model", cf->path,
                         printable(t.name, t.name_len, name, sizeof name));
        } else if (is_momentum) {
            momentum[j] = t;
            seen_m[j] = 1;
        } else {
            weights[j] = t;
            seen_w[j] = 1;
        }
    }
    for (size_t j = 0; j < n && s == BN_OK; j++) {
        if (!seen_w[j])
            s = bn_error(BN_ERR_DATA, "%s: parameter %s of the model is missing from the file", cf->path,
                         specs[j].name);
        else if (want_momentum && !seen_m[j])
            s = bn_error(BN_ERR_DATA, "%s: momentum of %s (tensor %s%s) is missing from the file", cf->path,
                         specs[j].name, MOMENTUM_PREFIX, specs[j].name);
        else if ((s = check_shape(cf, &weights[j], &specs[j])) == BN_OK && want_momentum)
            s = check_shape(cf, &momentum[j], &specs[j]);
    }
    free(seen_w);
    free(seen_m);
    return s;
}

/* The metadata string under key, or NULL when absent. */
static const char *meta_value(const ckpt_file *cf, const char *key)
{
    const bn_json *v = bn_json_get(cf->meta, key);
    return v ? v->text : NULL;
}

static bn_status meta_required(const ckpt_file *cf, const char *key, const char **out)
{
    if (!(*out = meta_value(cf, key)))
        return bn_error(BN_ERR_DATA, "%s: __metadata__ lacks \"%s\"", cf->path, key);
    return BN_OK;
}

static bn_status bad_number(const ckpt_file *cf, const char *key, const char *text, const char *kind)
{
    char buf[64];
    return bn_error(BN_ERR_DATA, "%s: metadata %s = \"%s\" is not %s", cf->path, key,
                    printable(text, strlen(text), buf, sizeof buf), kind);
}

/* An integer in [min, max], written in full (no spaces, no trailing characters). */
static bn_status meta_integer(const ckpt_file *cf, const char *key, long long min, long long max,
                              long long *out)
{
    const char *text;
    BN_TRY(meta_required(cf, key, &text));
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (!(text[0] == '-' || (text[0] >= '0' && text[0] <= '9')) || *end || errno || v < min || v > max)
        return bad_number(cf, key, text, "an integer in range");
    *out = v;
    return BN_OK;
}

static bn_status meta_unsigned(const ckpt_file *cf, const char *key, unsigned long long *out)
{
    const char *text;
    BN_TRY(meta_required(cf, key, &text));
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (!(text[0] >= '0' && text[0] <= '9') || *end || errno)
        return bad_number(cf, key, text, "an unsigned 64-bit integer");
    *out = v;
    return BN_OK;
}

static bn_status meta_double(const ckpt_file *cf, const char *key, double *out)
{
    const char *text;
    BN_TRY(meta_required(cf, key, &text));
    char *end;
    double v = strtod(text, &end);
    /* strtod would skip leading white space; a number written by save has none. */
    if (!text[0] || text[0] == ' ' || (unsigned char)text[0] < 0x20 || *end)
        return bad_number(cf, key, text, "a number");
    *out = v;
    return BN_OK;
}

/* 1 and *out set when s is exactly 16 hex digits, as save writes a model hash. */
static int parse_hash(const char *s, uint64_t *out)
{
    if (strlen(s) != 16) return 0;
    uint64_t h = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return 0;
        h = h << 4 | (uint64_t)d;
    }
    *out = h;
    return 1;
}

static bn_status check_hash(const ckpt_file *cf, const bn_net *net, const char *text)
{
    char buf[64];
    uint64_t h;
    if (!parse_hash(text, &h))
        return bn_error(BN_ERR_DATA, "%s: model_hash \"%s\" is not 16 hex digits", cf->path,
                        printable(text, strlen(text), buf, sizeof buf));
    if (h != net->model_hash)
        return bn_error(BN_ERR_DATA,
                        "%s was saved from a different model file (hash %016llx, this model %016llx)",
                        cf->path, (unsigned long long)h, (unsigned long long)net->model_hash);
    return BN_OK;
}

/* Training progress as the metadata records it. */
typedef struct ckpt_state {
    bn_train_state st;
    long iter;
    int has_momentum;
} ckpt_state;

/* The full blobnet metadata that bn_checkpoint_load needs: format, version, hash, state. */
static bn_status read_blobnet_meta(const ckpt_file *cf, const bn_net *net, ckpt_state *cs)
{
    if (!cf->meta)
        return bn_error(BN_ERR_DATA, "%s: no __metadata__; not a blobnet checkpoint (only weights can be "
                        "loaded from plain safetensors)", cf->path);
    const char *text;
    char buf[64];
    BN_TRY(meta_required(cf, "format", &text));
    if (strcmp(text, FORMAT_NAME) != 0)
        return bn_error(BN_ERR_DATA, "%s: format is \"%s\", not \"" FORMAT_NAME "\"", cf->path,
                        printable(text, strlen(text), buf, sizeof buf));
    BN_TRY(meta_required(cf, "version", &text));
    if (strcmp(text, FORMAT_VERSION) != 0)
        return bn_error(BN_ERR_DATA, "%s: checkpoint version \"%s\" is not supported (this blobnet reads "
                        FORMAT_VERSION ")", cf->path, printable(text, strlen(text), buf, sizeof buf));
    BN_TRY(meta_required(cf, "model_hash", &text));
    BN_TRY(check_hash(cf, net, text));
    long long v;
    BN_TRY(meta_unsigned(cf, "seed", &cs->st.seed));
    BN_TRY(meta_integer(cf, "epoch", INT_MIN, INT_MAX, &v));
    cs->st.epoch = (int)v;
    BN_TRY(meta_integer(cf, "batch_in_epoch", INT_MIN, INT_MAX, &v));
    cs->st.batch_in_epoch = (int)v;
    BN_TRY(meta_integer(cf, "step", LONG_MIN, LONG_MAX, &v));
    cs->st.step = (long)v;
    BN_TRY(meta_integer(cf, "iter", LONG_MIN, LONG_MAX, &v));
    cs->iter = (long)v;
    BN_TRY(meta_double(cf, "epoch_loss_sum", &cs->st.epoch_loss_sum));
    BN_TRY(meta_double(cf, "epoch_correct", &cs->st.epoch_correct));
    BN_TRY(meta_integer(cf, "epoch_seen", LONG_MIN, LONG_MAX, &v));
    cs->st.epoch_seen = (long)v;
    BN_TRY(meta_required(cf, "has_momentum", &text));
    if (strcmp(text, "0") != 0 && strcmp(text, "1") != 0)
        return bn_error(BN_ERR_DATA, "%s: has_momentum is \"%s\", not \"0\" or \"1\"", cf->path,
                        printable(text, strlen(text), buf, sizeof buf));
    cs->has_momentum = text[0] == '1';
    return BN_OK;
}

/* Reads one tensor's little-endian floats into dst (slab layout) and refuses NaN and
 * infinity: a checkpoint that holds them cannot continue a run. */
static bn_status stage_tensor(const ckpt_file *cf, const ckpt_tensor *t, const char *prefix,
                              const tensor_spec *spec, float *dst)
{
    unsigned char *bytes = (unsigned char *)(dst + spec->offset);
    if (read_at(cf->fd, bytes, 4 * spec->count, cf->data_start + t->begin) != 0) {
        char what[160];
        snprintf(what, sizeof what, "tensor %s%s", prefix, spec->name);
        return read_error(cf, what);
    }
    /* In place: element i is rebuilt from exactly the four bytes it occupies. */
    for (size_t i = 0; i < spec->count; i++) {
        const unsigned char *b = bytes + 4 * i;
        uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        float f;
        memcpy(&f, &u, 4);
        if (!isfinite(f))
            return bn_error(BN_ERR_DATA, "%s: tensor %s%s holds %s at element %zu", cf->path, prefix,
                            spec->name, isnan(f) ? "NaN" : "infinity", i);
        dst[spec->offset + i] = f;
    }
    return BN_OK;
}

static bn_status stage_all(const ckpt_file *cf, const ckpt_tensor *found, const char *prefix,
                           const tensor_spec *specs, size_t n, float *dst)
{
    for (size_t j = 0; j < n; j++) BN_TRY(stage_tensor(cf, &found[j], prefix, &specs[j], dst));
    return BN_OK;
}

/* Everything a load does once the file is open: check, stage into temporary buffers, and
 * only then copy into net and opt, so that a bad file leaves them untouched. cs is NULL
 * for a weights-only load. */
static bn_status load_open(ckpt_file *cf, bn_net *net, bn_sgd *opt, const ckpt_state *cs)
{
    tensor_spec *specs;
    size_t n;
    BN_TRY(list_params(net, &specs, &n));
    int want_momentum = opt != NULL;
    ckpt_tensor *found = calloc(2 * (n ? n : 1), sizeof *found);
    size_t slab = net->num_params ? net->num_params : 1;
    float *weights = malloc(slab * sizeof *weights);
    float *momentum = want_momentum ? malloc(slab * sizeof *momentum) : NULL;
    bn_status s = BN_OK;
    if (!found || !weights || (want_momentum && !momentum))
        s = bn_error(BN_ERR_NOMEM, "out of host memory loading %s", cf->path);
    if (s == BN_OK) s = match_tensors(cf, specs, n, cs == NULL, want_momentum, found, found + n);
    if (s == BN_OK) s = stage_all(cf, found, "", specs, n, weights);
    if (s == BN_OK && want_momentum) s = stage_all(cf, found + n, MOMENTUM_PREFIX, specs, n, momentum);
    float *w = NULL, *m = NULL;
    if (s == BN_OK && net->num_params) {
        if (!(w = bn_blob_host_wr(net->params))) s = bn_last_status();
        else if (want_momentum && !(m = bn_blob_host_wr(opt->momentum))) s = bn_last_status();
    }
    if (s == BN_OK) {
        if (w) memcpy(w, weights, net->num_params * sizeof *w);
        if (m) memcpy(m, momentum, net->num_params * sizeof *m);
        if (opt) opt->iter = cs->iter;
    }
    free(found);
    free(weights);
    free(momentum);
    free(specs);
    return s;
}

bn_status bn_checkpoint_load(const char *path, bn_net *net, bn_sgd *opt, bn_train_state *st)
{
    if (opt) BN_TRY(check_optimizer(net, opt));
    ckpt_file cf;
    ckpt_state cs = {0};
    bn_status s = open_file(path, &cf);
    if (s == BN_OK) s = read_blobnet_meta(&cf, net, &cs);
    if (s == BN_OK && opt && !cs.has_momentum)
        s = bn_error(BN_ERR_DATA, "%s holds no optimizer momentum (has_momentum is 0), so training cannot "
                     "resume from it; load only its weights instead", path);
    if (s == BN_OK) s = load_open(&cf, net, opt, &cs);
    if (s == BN_OK && st) *st = cs.st;
    close_file(&cf);
    return s;
}

bn_status bn_checkpoint_load_weights(const char *path, bn_net *net)
{
    ckpt_file cf;
    bn_status s = open_file(path, &cf);
    const char *hash = s == BN_OK ? meta_value(&cf, "model_hash") : NULL;
    if (hash) s = check_hash(&cf, net, hash);
    if (s == BN_OK) s = load_open(&cf, net, NULL, NULL);
    close_file(&cf);
    return s;
}
