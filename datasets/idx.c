/* idx.c - reads IDX files, the MNIST container: a big-endian magic whose low bytes give the
 * element type and number of dimensions, the dimensions as big-endian 32-bit counts, then the
 * elements. Files may be gzip-compressed. Every header field is validated before it sizes an
 * allocation, and the whole file is read so truncation and trailing bytes are both caught. */
#include "idx.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>
#include <zlib.h>

#include "core/regular_file.h"

#define IDX_IMAGES_MAGIC 0x00000803u /* unsigned bytes, 3 dimensions: count, rows, columns */
#define IDX_LABELS_MAGIC 0x00000801u /* unsigned bytes, 1 dimension: count */
#define IDX_IMAGES4_MAGIC 0x00000804u /* unsigned bytes, 4 dimensions: count, rows, columns, channels */

/* Bounding a file's data by INT_MAX keeps every count, offset and example index an int. */
#define IDX_MAX_BYTES ((uint64_t)INT_MAX)

/* deflate cannot expand data more than 1032 times: a gzip file of n bytes holds at most this
 * many, which bounds what a header may promise before anything is allocated for it. */
#define GZIP_MAX_RATIO 1032u

/* gzread takes an unsigned length and returns an int, so large reads go in pieces. */
#define IDX_READ_CHUNK (1u << 24)

#define IDX_PATH_MAX 4096

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static const char *magic_name(uint32_t magic)
{
    if (magic == IDX_IMAGES_MAGIC) return "IDX images";
    if (magic == IDX_LABELS_MAGIC) return "IDX labels";
    if (magic == IDX_IMAGES4_MAGIC) return "IDX images with channels";
    return "unrecognized";
}

/* The folder part of path, for the hint that tells how to fetch missing data. */
static void folder_of(const char *path, char *buf, size_t cap)
{
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(buf, cap, ".");
        return;
    }
    int len = slash == path ? 1 : (int)(slash - path);
    snprintf(buf, cap, "%.*s", len, path);
}

static void format_dims(const uint32_t *dims, int ndims, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < ndims && used < cap; i++) {
        int n = snprintf(buf + used, cap - used, "%s%lu", i ? " x " : "", (unsigned long)dims[i]);
        if (n < 0) return;
        used += (size_t)n;
    }
}

/* Opens path for gzread, which reads raw files unchanged. *is_gzip tells whether the file starts
 * with the gzip magic, so messages can say whether a size is of the file or of its decompressed data. */
static bn_status idx_open(const char *path, gzFile *out, int *is_gzip, uint64_t *file_size)
{
    *out = NULL;
    BN_TRY(bn_check_regular_file(path, BN_ERR_DATA));
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        char folder[IDX_PATH_MAX];
        folder_of(path, folder, sizeof folder);
        return bn_error(BN_ERR_DATA, "%s: cannot open (%s); run tools/fetch_mnist.sh %s or pass --data DIR",
                        path, strerror(errno), folder);
    }
    /* A regular file (bn_check_regular_file): its size bounds what a header may promise. A size
     * fstat cannot give leaves no early bound; reading still finds the end. */
    struct stat st;
    *file_size = fstat(fd, &st) == 0 ? (uint64_t)st.st_size : UINT64_MAX;
    unsigned char head[2];
    ssize_t got = read(fd, head, sizeof head);
    if (got < 0) {
        int e = errno;
        close(fd);
        return bn_error(BN_ERR_DATA, "%s: cannot read (%s)", path, strerror(e));
    }
    if (got == 0) {
        close(fd);
        return bn_error(BN_ERR_DATA, "%s: empty file", path);
    }
    if (lseek(fd, 0, SEEK_SET) != 0) {
        int e = errno;
        close(fd);
        return bn_error(BN_ERR_DATA, "%s: cannot rewind (%s)", path, strerror(e));
    }
    *is_gzip = got == 2 && head[0] == 0x1f && head[1] == 0x8b;
    gzFile gz = gzdopen(fd, "rb");
    if (!gz) {
        close(fd);
        return bn_error(BN_ERR_NOMEM, "%s: out of memory opening the file", path);
    }
    gzbuffer(gz, 1u << 17);
    *out = gz;
    return BN_OK;
}

/* Reads up to len bytes into buf and sets *got; a short count with BN_OK means the data ended. */
static bn_status read_bytes(gzFile gz, const char *path, unsigned char *buf, uint64_t len, uint64_t *got)
{
    *got = 0;
    while (*got < len) {
        uint64_t want = len - *got;
        if (want > IDX_READ_CHUNK) want = IDX_READ_CHUNK;
        int n = gzread(gz, buf + *got, (unsigned)want);
        if (n <= 0) break;
        *got += (uint64_t)n;
    }
    int err;
    const char *msg = gzerror(gz, &err);
    /* zlib prefixes its message with the name it was opened under, here "<fd:N>": drop it. */
    if (strncmp(msg, "<fd:", 4) == 0 && strstr(msg, ": ")) msg = strstr(msg, ": ") + 2;
    if (err == Z_ERRNO) return bn_error(BN_ERR_IO, "%s: read failed (%s)", path, msg);
    if (err == Z_BUF_ERROR) return bn_error(BN_ERR_DATA, "%s: truncated gzip data (zlib: %s)", path, msg);
    if (err == Z_MEM_ERROR) return bn_error(BN_ERR_NOMEM, "%s: out of memory decompressing", path);
    if (err != Z_OK) return bn_error(BN_ERR_DATA, "%s: corrupt gzip data (zlib: %s)", path, msg);
    return BN_OK;
}

/* An open IDX file between its header and its data. */
typedef struct idx_file {
    const char *path;
    gzFile gz;
    int is_gzip;
    uint64_t file_size;
    int ndims;
    uint32_t dims[4];
    uint64_t total;      /* data bytes the header promises */
    char shape[80];      /* the dimensions, for messages */
} idx_file;

/* Opens f->path and reads its header, whose magic must be one of magics[0..n). Everything the
 * header says is checked against the file's size before anything is allocated for it. */
static bn_status idx_head(const uint32_t *magics, int n, idx_file *f)
{
    const char *path = f->path;
    BN_TRY(idx_open(path, &f->gz, &f->is_gzip, &f->file_size));
    unsigned char head[4 * 4];
    uint64_t got;
    /* The magic is read on its own so a file of the wrong kind is named as such rather than
     * reported as a header too short for the dimensions this kind would have. */
    BN_TRY(read_bytes(f->gz, path, head, 4, &got));
    if (got < 4) return bn_error(BN_ERR_DATA, "%s: truncated header (%llu bytes)", path, (unsigned long long)got);
    uint32_t found = be32(head);
    int ok = 0;
    for (int i = 0; i < n; i++) ok |= found == magics[i];
    if (!ok)
        return bn_error(BN_ERR_DATA, "%s: wrong magic 0x%08X (%s), expected 0x%08X (%s)", path, (unsigned)found,
                        magic_name(found), (unsigned)magics[0], magic_name(magics[0]));
    f->ndims = (int)(found & 0xff);
    BN_TRY(read_bytes(f->gz, path, head, 4 * (uint64_t)f->ndims, &got));
    if (got < 4 * (uint64_t)f->ndims)
        return bn_error(BN_ERR_DATA, "%s: truncated header (%llu bytes)", path, (unsigned long long)(4 + got));
    /* Each step stays below 2^31 * 2^32, so the product cannot wrap before it is compared. */
    uint64_t total = 1;
    int too_big = 0, has_zero = 0;
    for (int i = 0; i < f->ndims; i++) {
        f->dims[i] = be32(head + 4 * i);
        if (f->dims[i] == 0) has_zero = 1;
        if (!too_big) total *= f->dims[i];
        if (total > IDX_MAX_BYTES) too_big = 1;
    }
    format_dims(f->dims, f->ndims, f->shape, sizeof f->shape);
    if (has_zero) return bn_error(BN_ERR_DATA, "%s: zero dimension in %s", path, f->shape);
    if (too_big)
        return bn_error(BN_ERR_DATA, "%s: dimensions %s exceed the limit of %llu bytes", path, f->shape,
                        (unsigned long long)IDX_MAX_BYTES);
    uint64_t head_bytes = 4 + 4 * (uint64_t)f->ndims;
    /* A header that promises more than the file can hold is caught before the allocation. */
    if (f->file_size != UINT64_MAX && !f->is_gzip && total > f->file_size - head_bytes)
        return bn_error(BN_ERR_DATA, "%s: truncated: the header (%s) promises %llu data bytes, the file has %llu", path,
                        f->shape, (unsigned long long)total, (unsigned long long)(f->file_size - head_bytes));
    if (f->file_size != UINT64_MAX && f->is_gzip && total > f->file_size * GZIP_MAX_RATIO)
        return bn_error(BN_ERR_DATA, "%s: truncated: the header (%s) promises %llu data bytes, more than a %llu-byte "
                        "gzip file can hold", path, f->shape, (unsigned long long)total,
                        (unsigned long long)f->file_size);
    f->total = total;
    return BN_OK;
}

static void idx_close(idx_file *f)
{
    if (f->gz) gzclose(f->gz);
    f->gz = NULL;
}

/* Reads the data after the header: the first `kept` bytes into buf (caller-owned), the rest
 * read and dropped, so truncation and trailing bytes are found whatever is kept. */
static bn_status idx_body(idx_file *f, unsigned char *buf, uint64_t kept)
{
    uint64_t done, got;
    bn_status s = read_bytes(f->gz, f->path, buf, kept, &done);
    unsigned char scratch[1 << 14];
    while (s == BN_OK && done < f->total) {
        uint64_t want = f->total - done < sizeof scratch ? f->total - done : sizeof scratch;
        s = read_bytes(f->gz, f->path, scratch, want, &got);
        done += got;
        if (got < want) break;
    }
    if (s == BN_OK && done < f->total)
        s = bn_error(BN_ERR_DATA, "%s: truncated: the header (%s) promises %llu data bytes, the %s has %llu", f->path,
                     f->shape, (unsigned long long)f->total, f->is_gzip ? "decompressed data" : "file",
                     (unsigned long long)done);
    if (s == BN_OK) {
        /* Reading one byte more also makes zlib reach the end of the gzip stream and check its CRC. */
        s = read_bytes(f->gz, f->path, scratch, 1, &got);
        if (s == BN_OK && got)
            s = bn_error(BN_ERR_DATA, "%s: trailing data after the %llu bytes the header (%s) promises", f->path,
                         (unsigned long long)f->total, f->shape);
    }
    return s;
}

/* Channels interleaved (H x W x C per example) become planes (C x H x W), in place through tmp. */
static bn_status to_planes(unsigned char *pixels, int count, int c, int h, int w)
{
    if (c == 1) return BN_OK;
    size_t plane = (size_t)h * w, size = plane * c;
    unsigned char *tmp = malloc(size);
    if (!tmp) return bn_error(BN_ERR_NOMEM, "out of memory reordering channels");
    for (int e = 0; e < count; e++) {
        unsigned char *ex = pixels + (size_t)e * size;
        for (size_t p = 0; p < plane; p++)
            for (int k = 0; k < c; k++) tmp[(size_t)k * plane + p] = ex[p * c + k];
        memcpy(ex, tmp, size);
    }
    free(tmp);
    return BN_OK;
}

static const uint32_t image_magics[] = {IDX_IMAGES_MAGIC, IDX_IMAGES4_MAGIC};
static const uint32_t label_magics[] = {IDX_LABELS_MAGIC};

static bn_status load_pair(idx_file *im, idx_file *lb, int limit, int classes, int nchw, bn_dataset *out)
{
    BN_TRY(idx_head(image_magics, 2, im));
    BN_TRY(idx_head(label_magics, 1, lb));
    if (lb->ndims != 1 || lb->dims[0] != im->dims[0])
        return bn_error(BN_ERR_DATA, "%s: %lu labels do not match the %lu images of %s", lb->path,
                        (unsigned long)lb->dims[0], (unsigned long)im->dims[0], im->path);
    /* Rank 3 is N x H x W; rank 4 is N x H x W x C, or N x C x H x W with nchw. */
    const uint32_t *d = im->dims;
    int c = 1, h = (int)d[1], w = (int)d[2];
    if (im->ndims == 4 && nchw) c = (int)d[1], h = (int)d[2], w = (int)d[3];
    else if (im->ndims == 4) c = (int)d[3];
    const int count = limit > 0 && (uint32_t)limit < d[0] ? limit : (int)d[0];
    /* Both headers agree: the memory is checked before a byte of data is inflated. */
    BN_TRY(bn_dataset_alloc(out, im->path, count, c, h, w, classes > 0 ? classes : 1, 0));
    BN_TRY(idx_body(im, out->pixels, (uint64_t)count * (im->total / d[0])));
    unsigned char *labels = malloc(lb->total);
    if (!labels)
        return bn_error(BN_ERR_NOMEM, "%s: out of memory for %llu labels", lb->path, (unsigned long long)lb->total);
    /* Every label is read, not just the kept ones, so each one is range-checked. */
    bn_status s = idx_body(lb, labels, lb->total);
    int top = 0;
    for (uint32_t i = 0; s == BN_OK && i < lb->dims[0]; i++) {
        if (classes > 0 && labels[i] >= classes)
            s = bn_error(BN_ERR_DATA, "%s: label %u at index %lu is out of range (classes are 0..%d)", lb->path,
                         (unsigned)labels[i], (unsigned long)i, classes - 1);
        if (labels[i] > top) top = labels[i];
    }
    for (int i = 0; s == BN_OK && i < count; i++) out->labels[i] = labels[i];
    free(labels);
    BN_TRY(s);
    if (classes <= 0) out->num_classes = top + 1;
    return im->ndims == 4 && !nchw ? to_planes(out->pixels, count, c, h, w) : BN_OK;
}

bn_status bn_idx_load_pair_as(const char *images_path, const char *labels_path, int limit, int classes, int nchw,
                              bn_dataset *out)
{
    if (!out || !images_path || !labels_path)
        return bn_error(BN_ERR_INTERNAL, "bn_idx_load_pair: null argument");
    memset(out, 0, sizeof *out);
    idx_file im = {.path = images_path}, lb = {.path = labels_path};
    bn_status s = load_pair(&im, &lb, limit, classes, nchw, out);
    idx_close(&im);
    idx_close(&lb);
    if (s != BN_OK) bn_dataset_free(out);
    return s;
}

bn_status bn_idx_load_pair(const char *images_path, const char *labels_path, int limit, bn_dataset *out)
{
    return bn_idx_load_pair_as(images_path, labels_path, limit, BN_IDX_NUM_CLASSES, 0, out);
}

/* Sets path to DIR/SPLIT-KIND-ubyte.gz, or to the raw name when only that one exists. */
static bn_status find_split_file(const char *dir, const char *split, const char *kind, char *path, size_t cap)
{
    for (int gz = 1; gz >= 0; gz--) {
        int n = snprintf(path, cap, "%s/%s-%s-ubyte%s", dir, split, kind, gz ? ".gz" : "");
        if (n < 0 || (size_t)n >= cap) return bn_error(BN_ERR_USAGE, "%s: data directory path too long", dir);
        /* Anything but "absent" (say, no permission) is left for the open to report precisely. */
        if (access(path, F_OK) == 0 || errno != ENOENT) return BN_OK;
    }
    return bn_error(BN_ERR_DATA, "%s: neither %s-%s-ubyte.gz nor %s-%s-ubyte found; run tools/fetch_mnist.sh %s or pass --data DIR",
                    dir, split, kind, split, kind, dir);
}

bn_status bn_dataset_load(const char *dir, int train, int limit, bn_dataset *out)
{
    if (!out || !dir) return bn_error(BN_ERR_INTERNAL, "bn_dataset_load: null argument");
    memset(out, 0, sizeof *out);
    struct stat st;
    if (stat(dir, &st) != 0)
        return bn_error(BN_ERR_DATA, "%s: data directory not found (%s); run tools/fetch_mnist.sh %s or pass --data DIR",
                        dir, strerror(errno), dir);
    if (!S_ISDIR(st.st_mode))
        return bn_error(BN_ERR_DATA, "%s: not a directory; pass --data DIR naming the folder of the IDX files", dir);
    const char *split = train ? "train" : "t10k";
    char images[IDX_PATH_MAX], labels[IDX_PATH_MAX];
    BN_TRY(find_split_file(dir, split, "images-idx3", images, sizeof images));
    BN_TRY(find_split_file(dir, split, "labels-idx1", labels, sizeof labels));
    return bn_idx_load_pair(images, labels, limit, out);
}


bn_status bn_idx_format_mnist(const bn_data_request *rq, bn_dataset *out)
{
    return bn_dataset_load(rq->path, rq->train, rq->limit, out);
}

/* Whether a file name is of the split (train: "train"; test: "t10k" or "test") and the kind
 * ("images" or "labels"). */
static int names_split_file(const char *name, int train, const char *kind)
{
    if (name[0] == '.' || !strstr(name, kind)) return 0;
    return train ? strstr(name, "train") != NULL : strstr(name, "t10k") != NULL || strstr(name, "test") != NULL;
}

/* The one file of dir that names the split and kind; an error when none or several do. */
static bn_status find_idx_file(const char *dir, int train, const char *kind, char *path, size_t cap)
{
    DIR *d = opendir(dir);
    if (!d) return bn_error(BN_ERR_DATA, "%s: cannot open the IDX folder (%s)", dir, strerror(errno));
    char first[256] = "", second[256] = "";
    int found = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!names_split_file(e->d_name, train, kind)) continue;
        snprintf(found ? second : first, sizeof first, "%s", e->d_name);
        found++;
    }
    closedir(d);
    const char *split = train ? "training" : "test";
    if (found == 0)
        return bn_error(BN_ERR_DATA, "%s: no %s %s file (a name holding '%s' and '%s')", dir, split, kind,
                        train ? "train" : "t10k' or 'test", kind);
    if (found > 1)
        return bn_error(BN_ERR_DATA, "%s: %d files could be the %s %s (%s, %s, ...); keep one in the folder", dir, found,
                        split, kind, first, second);
    if (snprintf(path, cap, "%s/%s", dir, first) >= (int)cap)
        return bn_error(BN_ERR_USAGE, "%s: data directory path too long", dir);
    return BN_OK;
}

bn_status bn_idx_format_any(const bn_data_request *rq, bn_dataset *out)
{
    static const char *const layouts[] = {"nhwc", "nchw", NULL};
    int classes, layout;
    BN_TRY(bn_opt_int(rq->opts, "classes", 0, 0, BN_DATASET_MAX_CLASSES, &classes));
    BN_TRY(bn_opt_choice(rq->opts, "layout", layouts, 0, &layout));
    struct stat st;
    if (stat(rq->path, &st) != 0)
        return bn_error(BN_ERR_DATA, "%s: data folder not found (%s)", rq->path, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return bn_error(BN_ERR_DATA, "%s: not a folder; --data names the folder of the IDX files", rq->path);
    char images[IDX_PATH_MAX], labels[IDX_PATH_MAX];
    BN_TRY(find_idx_file(rq->path, rq->train, "images", images, sizeof images));
    BN_TRY(find_idx_file(rq->path, rq->train, "labels", labels, sizeof labels));
    return bn_idx_load_pair_as(images, labels, rq->limit, classes, layout == 1, out);
}

/* Whether the file at path begins with gzip's two magic bytes. */
static int starts_gzip(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return 0;
    unsigned char head[2];
    int gz = read(fd, head, sizeof head) == 2 && head[0] == 0x1f && head[1] == 0x8b;
    close(fd);
    return gz;
}

int bn_idx_mnist_compressed(const bn_data_request *rq)
{
    char images[IDX_PATH_MAX];
    return find_split_file(rq->path, rq->train ? "train" : "t10k", "images-idx3", images, sizeof images) == BN_OK &&
           starts_gzip(images);
}

int bn_idx_any_compressed(const bn_data_request *rq)
{
    char images[IDX_PATH_MAX];
    return find_idx_file(rq->path, rq->train, "images", images, sizeof images) == BN_OK && starts_gzip(images);
}
