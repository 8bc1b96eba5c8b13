/* npz.c - a dataset from NumPy arrays: x (the examples) and y (the labels) of one split, from an
 * .npz archive or from a folder of .npy files, and the writer of such an archive. Both arrays'
 * headers are read, and their shapes compared and the memory checked, before any data is
 * inflated; the elements then stream through a small buffer, channels moving to planes as they
 * land, so nothing but the dataset itself is held in memory. */
#include "npz.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "npy.h"
#include "zip.h"

#define NPZ_PATH_MAX 4096
#define CHUNK (1u << 16)

/* A 16-bit label below BN_DATASET_MAX_CLASSES classes. */
#define MAX_LABEL (BN_DATASET_MAX_CLASSES - 1)

static const char *const folder_hint =
    "a folder of arrays holds x_train.npy, y_train.npy, x_test.npy and y_test.npy";

/* One array of the split: where its bytes come from and what its header says. */
typedef struct npz_array {
    bn_zip_stream s;
    bn_npy_header h;
} npz_array;

/* Opens name from the archive (zip) or from the folder dir, and reads its header. */
static bn_status open_array(bn_zip *zip, const char *dir, const char *name, npz_array *a)
{
    if (zip) {
        BN_TRY(bn_zip_stream_member(zip, name, &a->s));
    } else {
        char path[NPZ_PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
            return bn_error(BN_ERR_USAGE, "%s: path too long", dir);
        if (access(path, F_OK) != 0 && errno == ENOENT)
            return bn_error(BN_ERR_DATA, "%s: no such file; %s", path, folder_hint);
        BN_TRY(bn_zip_stream_file(path, &a->s));
    }
    BN_TRY(bn_npy_read_header(&a->s, &a->h));
    if (a->h.fortran_order)
        return bn_error(BN_ERR_DATA, "%s: fortran_order is True; save the array with np.ascontiguousarray", a->s.what);
    return BN_OK;
}

/* An unsigned integer of size bytes, most significant first when big. */
static uint64_t load_uint(const unsigned char *p, int size, int big)
{
    uint64_t v = 0;
    for (int i = 0; i < size; i++) v = v << 8 | p[big ? i : size - 1 - i];
    return v;
}

/* A float32 or float64 element. */
static double load_float(const unsigned char *p, const bn_npy_type *t)
{
    uint64_t bits = load_uint(p, t->size, t->big_endian);
    if (t->size == 4) {
        uint32_t b = (uint32_t)bits;
        float f;
        memcpy(&f, &b, sizeof f);
        return f;
    }
    double v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* y: integers, (N,) or (N, 1). */
static bn_status check_labels(const npz_array *y)
{
    const bn_npy_header *h = &y->h;
    const bn_npy_type *t = &h->type;
    if (!(t->kind == 'u' || t->kind == 'i') || !(t->size == 1 || t->size == 2 || t->size == 4 || t->size == 8))
        return bn_error(BN_ERR_DATA, "%s: dtype '%s' is not read; labels are integers (save y.astype(np.int64))",
                        y->s.what, t->descr);
    if (h->ndim == 1 || (h->ndim == 2 && h->shape[1] == 1)) return BN_OK;
    return bn_error(BN_ERR_DATA, "%s: shape %s; labels are (N,) or (N, 1) (one-hot labels: save y.argmax(axis=1))",
                    y->s.what, h->shape_text);
}

static int is_channel_count(uint64_t d)
{
    return d == 1 || d == 3 || d == 4;
}

/* x: uint8, float32 or float64 of (N, H, W), (N, H, W, C) or (N, C, H, W). Sets dims to C, H, W
 * and *nhwc when channels are interleaved. layout: -1 when the key is absent, 0 nhwc, 1 nchw. */
static bn_status check_examples(const npz_array *x, int layout, int dims[3], int *nhwc)
{
    const bn_npy_header *h = &x->h;
    const bn_npy_type *t = &h->type;
    const uint64_t *d = h->shape;
    if (!(t->kind == 'u' && t->size == 1) && !(t->kind == 'f' && (t->size == 4 || t->size == 8)))
        return bn_error(BN_ERR_DATA, "%s: dtype '%s' is not read; x is uint8 (|u1), float32 (<f4) or float64 (<f8)",
                        x->s.what, t->descr);
    if (h->ndim != 3 && h->ndim != 4)
        return bn_error(BN_ERR_DATA, "%s: shape %s is not (N, H, W), (N, H, W, C) or (N, C, H, W)", x->s.what,
                        h->shape_text);
    for (int i = 0; i < h->ndim; i++) {
        if (d[i] == 0)
            return bn_error(BN_ERR_DATA, "%s: shape %s %s", x->s.what, h->shape_text,
                            i ? "has a zero dimension" : "holds no examples");
        if (d[i] > INT_MAX)
            return bn_error(BN_ERR_DATA, "%s: shape %s has a dimension past %d", x->s.what, h->shape_text, INT_MAX);
    }
    *nhwc = 0;
    if (h->ndim == 3) {
        dims[0] = 1, dims[1] = (int)d[1], dims[2] = (int)d[2];
        return BN_OK;
    }
    if (layout < 0) {
        if (is_channel_count(d[3]) == is_channel_count(d[1]))
            return bn_error(BN_ERR_DATA, "%s: shape %s could be NHWC or NCHW; set layout = nhwc or layout = nchw",
                            x->s.what, h->shape_text);
        layout = is_channel_count(d[3]) ? 0 : 1;
    }
    *nhwc = layout == 0;
    if (*nhwc) dims[0] = (int)d[3], dims[1] = (int)d[1], dims[2] = (int)d[2];
    else dims[0] = (int)d[1], dims[1] = (int)d[2], dims[2] = (int)d[3];
    return BN_OK;
}

/* Reads every label, keeps the first d->count and sets *top to the largest. A bad label is
 * reported only after the CRC check, so a corrupt file reads as corrupt. */
static bn_status read_labels(npz_array *y, int classes, bn_dataset *d, int *top)
{
    const bn_npy_type *t = &y->h.type;
    const uint64_t n = y->h.shape[0], sign = t->kind == 'i' ? 1ull << (8 * t->size - 1) : 0;
    const uint64_t max = classes > 0 ? (uint64_t)classes - 1 : MAX_LABEL;
    const uint64_t high = t->size == 8 ? 0 : ~0ull << (8 * t->size);  /* sign-extends a negative */
    unsigned char *buf = malloc(CHUNK);
    if (!buf) return bn_error(BN_ERR_NOMEM, "%s: out of memory", y->s.what);
    uint64_t bad_at = UINT64_MAX, bad = 0;
    bn_status s = BN_OK;
    for (uint64_t i = 0; s == BN_OK && i < n;) {
        size_t m = n - i < CHUNK / (size_t)t->size ? (size_t)(n - i) : CHUNK / (size_t)t->size;
        s = bn_zip_stream_read(&y->s, buf, m * (size_t)t->size);
        for (size_t j = 0; s == BN_OK && j < m; j++, i++) {
            uint64_t v = load_uint(buf + j * (size_t)t->size, t->size, t->big_endian);
            if ((v & sign) || v > max) {
                if (bad_at == UINT64_MAX) bad_at = i, bad = v & sign ? v | high : v;
                continue;
            }
            if (i < (uint64_t)d->count) d->labels[i] = (uint16_t)v;
            if ((int)v > *top) *top = (int)v;
        }
    }
    free(buf);
    if (s == BN_OK) s = bn_zip_stream_finish(&y->s);
    if (s != BN_OK || bad_at == UINT64_MAX) return s;
    if (sign && (int64_t)bad < 0)
        return bn_error(BN_ERR_DATA, "%s: label %lld at index %llu is negative", y->s.what, (long long)bad,
                        (unsigned long long)bad_at);
    if (classes > 0)
        return bn_error(BN_ERR_DATA, "%s: label %llu at index %llu is out of range (classes are 0..%d)", y->s.what,
                        (unsigned long long)bad, (unsigned long long)bad_at, classes - 1);
    return bn_error(BN_ERR_DATA, "%s: label %llu at index %llu is past the largest class, %d", y->s.what,
                    (unsigned long long)bad, (unsigned long long)bad_at, MAX_LABEL);
}

/* Reads the first d->count examples into d, interleaved channels (nhwc) moved to planes as they
 * land, then the rest of the array, dropped. A value float32 cannot hold is reported after the
 * CRC check. */
static bn_status read_examples(npz_array *x, int nhwc, bn_dataset *d)
{
    const bn_npy_type *t = &x->h.type;
    const size_t example = bn_dataset_example_size(d), plane = (size_t)d->height * (size_t)d->width;
    const size_t channels = (size_t)d->channels, size = (size_t)t->size;
    const uint64_t total = (uint64_t)d->count * example;
    unsigned char *buf = malloc(CHUNK);
    if (!buf) return bn_error(BN_ERR_NOMEM, "%s: out of memory", x->s.what);
    uint64_t bad_at = UINT64_MAX;
    double bad = 0;
    /* Where element k of the current example lands: plane c, position p. */
    size_t base = 0, k = 0, c = 0, p = 0;
    bn_status s = BN_OK;
    for (uint64_t i = 0; s == BN_OK && i < total;) {
        size_t m = total - i < CHUNK / size ? (size_t)(total - i) : CHUNK / size;
        s = bn_zip_stream_read(&x->s, buf, m * size);
        for (size_t j = 0; s == BN_OK && j < m; j++, i++) {
            size_t at = base + (nhwc ? c * plane + p : k);
            if (d->pixels) {
                d->pixels[at] = buf[j];
            } else {
                double v = load_float(buf + j * size, t);
                if (!(fabs(v) <= FLT_MAX)) {
                    if (bad_at == UINT64_MAX) bad_at = i, bad = v;
                    v = 0;
                }
                d->values[at] = (float)v;
            }
            if (++k == example) k = 0, c = 0, p = 0, base += example;
            else if (nhwc && ++c == channels) c = 0, p++;
        }
    }
    free(buf);
    if (s == BN_OK) s = bn_zip_stream_finish(&x->s);
    if (s == BN_OK && bad_at != UINT64_MAX)
        s = bn_error(BN_ERR_DATA, "%s: value %g of example %llu is not a finite float32", x->s.what, bad,
                     (unsigned long long)(bad_at / example));
    return s;
}

static bn_status load_split(bn_zip *zip, const bn_data_request *rq, int layout, int classes, npz_array *x,
                            npz_array *y, bn_dataset *out)
{
    BN_TRY(open_array(zip, rq->path, rq->train ? "x_train.npy" : "x_test.npy", x));
    BN_TRY(open_array(zip, rq->path, rq->train ? "y_train.npy" : "y_test.npy", y));
    int dims[3] = {0}, nhwc = 0;
    BN_TRY(check_labels(y));
    BN_TRY(check_examples(x, layout, dims, &nhwc));
    const uint64_t n = x->h.shape[0];
    if (y->h.shape[0] != n)
        return bn_error(BN_ERR_DATA, "%s: %llu labels do not match the %llu examples of %s", y->s.what,
                        (unsigned long long)y->h.shape[0], (unsigned long long)n, x->s.what);
    const int count = rq->limit > 0 && (uint64_t)rq->limit < n ? rq->limit : (int)n;
    /* Both headers agree: the memory is checked before a byte of data is inflated. */
    BN_TRY(bn_dataset_alloc(out, x->s.what, count, dims[0], dims[1], dims[2], classes > 0 ? classes : 1,
                            x->h.type.kind == 'f'));
    int top = 0;
    BN_TRY(read_labels(y, classes, out, &top));
    BN_TRY(read_examples(x, nhwc, out));
    if (classes <= 0) out->num_classes = top + 1;
    return BN_OK;
}

bn_status bn_npz_load(const bn_data_request *rq, bn_dataset *out)
{
    static const char *const layouts[] = {"nhwc", "nchw", NULL};
    memset(out, 0, sizeof *out);
    int layout, classes;
    BN_TRY(bn_opt_choice(rq->opts, "layout", layouts, -1, &layout));
    BN_TRY(bn_opt_int(rq->opts, "classes", 0, 0, BN_DATASET_MAX_CLASSES, &classes));
    struct stat st;
    if (stat(rq->path, &st) != 0) return bn_error(BN_ERR_DATA, "%s: not found (%s)", rq->path, strerror(errno));
    const int folder = S_ISDIR(st.st_mode);
    size_t len = strlen(rq->path);
    if (!folder && len >= 4 && strcmp(rq->path + len - 4, ".npy") == 0)
        return bn_error(BN_ERR_DATA, "%s: one .npy array; the npz format reads an .npz archive or %s", rq->path,
                        folder_hint);
    bn_zip zip;
    if (!folder) BN_TRY(bn_zip_open(rq->path, &zip));
    npz_array x, y;
    memset(&x, 0, sizeof x);
    memset(&y, 0, sizeof y);
    bn_status s = load_split(folder ? NULL : &zip, rq, layout, classes, &x, &y, out);
    bn_zip_stream_close(&x.s);
    bn_zip_stream_close(&y.s);
    if (!folder) bn_zip_close(&zip);
    if (s != BN_OK) bn_dataset_free(out);
    return s;
}

/* ---- writing ------------------------------------------------------------------------ */

static void put_le(unsigned char *p, uint64_t v, size_t size)
{
    for (size_t i = 0; i < size; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Writes d's examples (is_x) or labels as one member. */
static bn_status write_array(bn_zip_writer *w, const char *name, const bn_dataset *d, int is_x, int nhwc)
{
    const size_t channels = (size_t)d->channels, plane = (size_t)d->height * (size_t)d->width;
    const size_t per = is_x ? bn_dataset_example_size(d) : 1, size = !is_x ? 8 : d->values ? 4 : 1;
    const int interleave = is_x && nhwc && channels > 1;
    uint64_t shape[4] = {(uint64_t)d->count, (uint64_t)d->height, (uint64_t)d->width, channels};
    int ndim = 1;
    if (is_x && channels == 1) ndim = 3;
    else if (is_x && !nhwc) ndim = 4, shape[1] = channels, shape[2] = (uint64_t)d->height, shape[3] = (uint64_t)d->width;
    else if (is_x) ndim = 4;
    char pre[BN_NPY_PREAMBLE_MAX];
    size_t n = bn_npy_preamble(pre, !is_x ? "<i8" : d->values ? "<f4" : "|u1", shape, ndim);
    BN_TRY(bn_zip_writer_begin(w, name));
    BN_TRY(bn_zip_writer_write(w, pre, n));
    unsigned char *buf = malloc(CHUNK);
    if (!buf) return bn_error(BN_ERR_NOMEM, "%s: out of memory", w->path);
    size_t fill = 0;
    bn_status s = BN_OK;
    for (uint64_t i = 0; s == BN_OK && i < (uint64_t)d->count * per; i++) {
        uint64_t v = 0;
        if (!is_x) {
            v = d->labels[i];
        } else {
            size_t e = (size_t)(i / per), k = (size_t)(i % per);
            size_t at = e * per + (interleave ? k % channels * plane + k / channels : k);
            if (d->pixels) v = d->pixels[at];
            else {
                uint32_t bits;
                memcpy(&bits, &d->values[at], sizeof bits);
                v = bits;
            }
        }
        put_le(buf + fill, v, size);
        fill += size;
        if (fill == CHUNK) s = bn_zip_writer_write(w, buf, fill), fill = 0;
    }
    if (s == BN_OK) s = bn_zip_writer_write(w, buf, fill);
    free(buf);
    return s == BN_OK ? bn_zip_writer_end(w) : s;
}

bn_status bn_npz_write(const bn_dataset *train, const bn_dataset *test, const char *path, int nhwc)
{
    static const char *const names[4] = {"x_train.npy", "y_train.npy", "x_test.npy", "y_test.npy"};
    const bn_dataset *sets[2] = {train, test};
    for (int i = 0; i < 2; i++) {
        const bn_dataset *d = sets[i];
        if (!d || d->count < 0 || (d->count > 0 && (!d->labels || !d->pixels == !d->values)))
            return bn_error(BN_ERR_INTERNAL, "%s: the %s set has no examples, labels or data to write", path,
                            i ? "test" : "training");
    }
    bn_zip_writer w;
    BN_TRY(bn_zip_writer_open(&w, path));
    bn_status s = BN_OK;
    for (int i = 0; s == BN_OK && i < 4; i++) s = write_array(&w, names[i], sets[i / 2], i % 2 == 0, nhwc);
    if (s != BN_OK) {
        bn_zip_writer_abort(&w);
        return s;
    }
    return bn_zip_writer_close(&w);
}

bn_status bn_npz_save(const bn_dataset *train, const bn_dataset *test, const char *path)
{
    return bn_npz_write(train, test, path, 1);
}
