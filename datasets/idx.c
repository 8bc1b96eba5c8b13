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
#include <zlib.h>

#include "core/regular_file.h"

#define IDX_IMAGES_MAGIC 0x00000803u /* unsigned bytes, 3 dimensions: count, rows, columns */
#define IDX_LABELS_MAGIC 0x00000801u /* unsigned bytes, 1 dimension: count */

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

/* Parses an open IDX file whose magic must be `magic`. Keeps the first `keep` items (all when
 * keep <= 0 or beyond the count) in a caller-owned *data and reads past the rest, so the whole
 * file is checked whatever is kept. dims receives the header's dimensions. */
static bn_status idx_parse(gzFile gz, int is_gzip, uint64_t file_size, const char *path, uint32_t magic,
                           int keep, uint32_t dims[3], unsigned char **data)
{
    *data = NULL;
    const int ndims = (int)(magic & 0xff);
    unsigned char head[4 * 3];
    uint64_t got;

    /* The magic is read on its own so a file of the wrong kind is named as such rather than
     * reported as a header too short for the dimensions this kind would have. */
    BN_TRY(read_bytes(gz, path, head, 4, &got));
    if (got < 4) return bn_error(BN_ERR_DATA, "%s: truncated header (%llu bytes)", path, (unsigned long long)got);
    uint32_t found = be32(head);
    if (found != magic)
        return bn_error(BN_ERR_DATA, "%s: wrong magic 0x%08X (%s), expected 0x%08X (%s)", path,
                        (unsigned)found, magic_name(found), (unsigned)magic, magic_name(magic));

    BN_TRY(read_bytes(gz, path, head, 4 * (uint64_t)ndims, &got));
    if (got < 4 * (uint64_t)ndims)
        return bn_error(BN_ERR_DATA, "%s: truncated header (%llu bytes)", path, (unsigned long long)(4 + got));
    /* Each step stays below 2^31 * 2^32, so the product cannot wrap before it is compared. */
    uint64_t total = 1;
    int too_big = 0, has_zero = 0;
    for (int i = 0; i < ndims; i++) {
        dims[i] = be32(head + 4 * i);
        if (dims[i] == 0) has_zero = 1;
        if (!too_big) total *= dims[i];
        if (total > IDX_MAX_BYTES) too_big = 1;
    }
    char shape[80];
    format_dims(dims, ndims, shape, sizeof shape);
    if (has_zero) return bn_error(BN_ERR_DATA, "%s: zero dimension in %s", path, shape);
    if (too_big)
        return bn_error(BN_ERR_DATA, "%s: dimensions %s exceed the limit of %llu bytes", path, shape,
                        (unsigned long long)IDX_MAX_BYTES);

    /* A header that promises more than the file can hold is caught before the allocation. */
    if (file_size != UINT64_MAX && !is_gzip && total > file_size - (4 + 4 * (uint64_t)ndims))
        return bn_error(BN_ERR_DATA, "%s: truncated: the header (%s) promises %llu data bytes, the file has %llu", path,
                        shape, (unsigned long long)total, (unsigned long long)(file_size - 4 - 4 * (uint64_t)ndims));
    if (file_size != UINT64_MAX && is_gzip && total > file_size * GZIP_MAX_RATIO)
        return bn_error(BN_ERR_DATA, "%s: truncated: the header (%s) promises %llu data bytes, more than a %llu-byte "
                        "gzip file can hold", path, shape, (unsigned long long)total, (unsigned long long)file_size);

    const uint64_t item = total / dims[0];
    const uint64_t kept = keep > 0 && (uint64_t)keep < dims[0] ? (uint64_t)keep : dims[0];
    unsigned char *buf = malloc(kept * item);
    if (!buf)
        return bn_error(BN_ERR_NOMEM, "%s: out of memory for %llu bytes", path,
                        (unsigned long long)(kept * item));

    uint64_t done;
    bn_status s = read_bytes(gz, path, buf, kept * item, &done);
    /* Items past `keep` are read and dropped, so truncation and trailing bytes are still found. */
    unsigned char scratch[1 << 14];
    while (s == BN_OK && done < total) {
        uint64_t want = total - done < sizeof scratch ? total - done : sizeof scratch;
        s = read_bytes(gz, path, scratch, want, &got);
        done += got;
        if (got < want) break;
    }
    if (s == BN_OK && done < total)
        s = bn_error(BN_ERR_DATA, "%s: truncated: the header (%s) promises %llu data bytes, the %s has %llu",
                     path, shape, (unsigned long long)total, is_gzip ? "decompressed data" : "file",
                     (unsigned long long)done);
    if (s == BN_OK) {
        /* Reading one byte more also makes zlib reach the end of the gzip stream and check its CRC. */
        s = read_bytes(gz, path, scratch, 1, &got);
        if (s == BN_OK && got)
            s = bn_error(BN_ERR_DATA, "%s: trailing data after the %llu bytes the header (%s) promises", path,
                         (unsigned long long)total, shape);
    }
    if (s != BN_OK) {
        free(buf);
        return s;
    }
    *data = buf;
    return BN_OK;
}

/* Reads one IDX file; *data is caller-owned on success and NULL on error. */
static bn_status idx_read(const char *path, uint32_t magic, int keep, uint32_t dims[3], unsigned char **data)
{
    *data = NULL;
    gzFile gz;
    int is_gzip;
    uint64_t file_size;
    BN_TRY(idx_open(path, &gz, &is_gzip, &file_size));
    bn_status s = idx_parse(gz, is_gzip, file_size, path, magic, keep, dims, data);
    gzclose(gz);
    return s;
}

bn_status bn_idx_load_pair(const char *images_path, const char *labels_path, int limit, bn_dataset *out)
{
    if (!out || !images_path || !labels_path)
        return bn_error(BN_ERR_INTERNAL, "bn_idx_load_pair: null argument");
    memset(out, 0, sizeof *out);

    uint32_t idims[3], ldims[3];
    unsigned char *pixels, *labels;
    BN_TRY(idx_read(images_path, IDX_IMAGES_MAGIC, limit, idims, &pixels));
    /* Every label is loaded, not just the kept ones, so each one is range-checked. */
    bn_status s = idx_read(labels_path, IDX_LABELS_MAGIC, 0, ldims, &labels);
    if (s == BN_OK && ldims[0] != idims[0])
        s = bn_error(BN_ERR_DATA, "%s: %lu labels do not match the %lu images of %s", labels_path,
                     (unsigned long)ldims[0], (unsigned long)idims[0], images_path);
    for (uint32_t i = 0; s == BN_OK && i < ldims[0]; i++)
        if (labels[i] >= BN_IDX_NUM_CLASSES)
            s = bn_error(BN_ERR_DATA, "%s: label %u at index %lu is out of range (classes are 0..%d)",
                         labels_path, (unsigned)labels[i], (unsigned long)i, BN_IDX_NUM_CLASSES - 1);
    if (s != BN_OK) {
        free(pixels);
        free(labels);
        return s;
    }
    out->count = limit > 0 && (uint32_t)limit < idims[0] ? limit : (int)idims[0];
    out->channels = 1;
    out->height = (int)idims[1];
    out->width = (int)idims[2];
    out->num_classes = BN_IDX_NUM_CLASSES;
    out->pixels = pixels;
    out->labels = labels;
    return BN_OK;
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

void bn_dataset_free(bn_dataset *d)
{
    if (!d) return;
    free(d->pixels);
    free(d->labels);
    memset(d, 0, sizeof *d);
}

void bn_dataset_gather(const bn_dataset *d, const int *indices, int n, float *x, float *y)
{
    const size_t size = (size_t)d->channels * (size_t)d->height * (size_t)d->width;
    for (int i = 0; i < n; i++) {
        const unsigned char *src = d->pixels + (size_t)indices[i] * size;
        float *dst = x + (size_t)i * size;
        /* A true division keeps 255 at exactly 1.0f, which a multiply by 1/255 does not promise. */
        for (size_t j = 0; j < size; j++) dst[j] = (float)src[j] / 255.0f;
        y[i] = (float)d->labels[indices[i]];
    }
}

/* splitmix64 (Steele, Lea and Flood, 2014): small, full-period, and defined purely by 64-bit
 * integer arithmetic, so a seed yields the same stream on every machine and compiler. */
static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A uniform value in [0, bound): draws below 2^64 mod bound are rejected, since a plain modulo
 * would favour the small results. */
static uint64_t uniform_below(uint64_t *state, uint64_t bound)
{
    const uint64_t threshold = -bound % bound;
    uint64_t r;
    do r = splitmix64(state);
    while (r < threshold);
    return r % bound;
}

void bn_dataset_shuffle(int *order, int count, unsigned long long seed)
{
    uint64_t state = (uint64_t)seed;
    for (int i = 0; i < count; i++) order[i] = i;
    for (int i = count - 1; i > 0; i--) {
        int j = (int)uniform_below(&state, (uint64_t)i + 1);
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}
