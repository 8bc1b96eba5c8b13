/* test_npz.c - the NumPy reader and writer (datasets/npz.c, npy.c, zip.c): sets written with
 * bn_npz_write and read back exactly; hand-built archives (a deflated member, the old 32-bit
 * records) and folders of .npy files; files NumPy itself wrote, when python3 has numpy; and
 * every kind of broken file the reader must refuse, each with its message. */
#include "testing.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/status.h"
#include "dataset.h"
#include "file_testing.h"
#include "npz.h"

/* Reads path whole into a malloc'd buffer; its size in *n, NULL when it cannot. */
static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = size >= 0 ? malloc((size_t)size + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)size, f) != (size_t)size) free(buf), buf = NULL;
    fclose(f);
    *n = (size_t)size;
    return buf;
}

/* Loads one split of path with the format's keys in opts ("layout=nchw classes=10", or NULL). */
static bn_status load(const char *path, int train, int limit, const char *opts, bn_dataset *d)
{
    bn_options o;
    memset(&o, 0, sizeof o);
    o.file = "test";
    bn_status s = opts ? bn_options_parse_inline(&o, opts) : BN_OK;
    bn_data_request rq = {.format = "npz", .path = path, .opts = &o, .train = train, .limit = limit, .quiet = 1};
    if (s == BN_OK) s = bn_npz_load(&rq, d);
    bn_options_clear(&o);
    return s;
}

/* Checks that loading fails with BN_ERR_DATA and a one-line message that starts with path and
 * holds needle, leaving the dataset zeroed. */
static int load_fails(const char *path, int train, const char *opts, const char *needle)
{
    bn_dataset d;
    memset(&d, 0xab, sizeof d);
    CHECK_ERR(load(path, train, 0, opts, &d), BN_ERR_DATA, needle);
    CHECK_MSG(strncmp(bn_last_error(), path, strlen(path)) == 0, "\"%s\" does not start with %s", bn_last_error(),
              path);
    CHECK(strchr(bn_last_error(), '\n') == NULL);
    CHECK(d.count == 0 && d.pixels == NULL && d.values == NULL && d.labels == NULL);
    return BN_PASS;
}

/* ---- sets written with bn_npz_write ----------------------------------------------------- */

/* A set of count examples of c x h x w, pixels or (is_float) values in a pattern distinct per
 * example and channel, labels (i * 3 + seed) % classes. */
static int make_set(bn_dataset *d, int count, int c, int h, int w, int is_float, int classes, int seed)
{
    if (bn_dataset_alloc(d, "test", count, c, h, w, classes, is_float) != BN_OK) return -1;
    size_t n = (size_t)count * c * h * w;
    for (size_t i = 0; i < n; i++) {
        if (is_float) d->values[i] = (float)((double)(i * 7 % 23) - 11.5) * (seed + 1) * 1e-3f;
        else d->pixels[i] = (unsigned char)((i * 37 + (size_t)seed) % 256);
    }
    for (int i = 0; i < count; i++) d->labels[i] = (uint16_t)((i * 3 + seed) % classes);
    return 0;
}

/* Checks that b holds a's first count examples, shape, data and labels exactly. */
static int same_set(const bn_dataset *a, const bn_dataset *b, int count)
{
    CHECK_MSG(b->count == count, "count %d, want %d", b->count, count);
    CHECK_MSG(b->channels == a->channels && b->height == a->height && b->width == a->width, "%dx%dx%d, want %dx%dx%d",
              b->channels, b->height, b->width, a->channels, a->height, a->width);
    CHECK(!a->pixels == !b->pixels && !a->values == !b->values);
    size_t n = (size_t)count * bn_dataset_example_size(a);
    if (a->pixels) CHECK(memcmp(a->pixels, b->pixels, n) == 0);
    else CHECK(memcmp(a->values, b->values, n * sizeof *a->values) == 0);
    CHECK(memcmp(a->labels, b->labels, (size_t)count * sizeof *a->labels) == 0);
    return BN_PASS;
}

/* Writes train and test to name with bn_npz_write and checks that both splits read back equal,
 * with the class count from the labels; opts as for load. */
static int roundtrip(const char *name, int c, int h, int w, int is_float, int nhwc, const char *opts)
{
    char path[512], tmp[600];
    ft_path(path, sizeof path, "%s", name);
    bn_dataset train, test, back;
    CHECK(make_set(&train, 7, c, h, w, is_float, 5, 0) == 0);
    CHECK(make_set(&test, 4, c, h, w, is_float, 10, 1) == 0);
    bn_status s = bn_npz_write(&train, &test, path, nhwc);
    int r = s == BN_OK ? BN_PASS : BN_FAIL;
    if (r != BN_PASS) fprintf(stderr, "    bn_npz_write: %s\n", bn_last_error());
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (r == BN_PASS && access(tmp, F_OK) == 0) r = BN_FAIL;
    for (int split = 1; r == BN_PASS && split >= 0; split--) {
        const bn_dataset *want = split ? &train : &test;
        s = load(path, split, 0, opts, &back);
        if (s != BN_OK) fprintf(stderr, "    load: %s\n", bn_last_error());
        r = s == BN_OK ? same_set(want, &back, want->count) : BN_FAIL;
        /* 7 training labels (i * 3) % 5 reach 4; 4 test labels (i * 3 + 1) % 10 reach 7. */
        if (r == BN_PASS && back.num_classes != (split ? 5 : 8)) r = BN_FAIL;
        bn_dataset_free(&back);
    }
    bn_dataset_free(&train);
    bn_dataset_free(&test);
    return r;
}

BN_TEST(npz_roundtrip_gray_uint8)
{
    return roundtrip("gray.npz", 1, 3, 4, 0, 1, NULL);
}

BN_TEST(npz_roundtrip_rgb_nhwc)
{
    return roundtrip("rgb-nhwc.npz", 3, 5, 6, 0, 1, NULL);
}

BN_TEST(npz_roundtrip_rgb_nchw)
{
    return roundtrip("rgb-nchw.npz", 3, 5, 6, 0, 0, NULL);
}

BN_TEST(npz_roundtrip_float32)
{
    return roundtrip("float.npz", 4, 2, 6, 1, 1, NULL);
}

BN_TEST(npz_roundtrip_layout_key_settles_ambiguous_shape)
{
    /* (N, 3, 4, 3) could be either layout: the key says which */
    int r = roundtrip("ambiguous-nhwc.npz", 3, 3, 4, 0, 1, "layout=nhwc");
    return r == BN_PASS ? roundtrip("ambiguous-nchw.npz", 3, 4, 3, 0, 0, "layout=nchw") : r;
}

BN_TEST(npz_limit_and_classes_key)
{
    char path[512];
    ft_path(path, sizeof path, "limit.npz");
    bn_dataset train, test, back;
    CHECK(make_set(&train, 6, 1, 2, 2, 0, 4, 0) == 0);
    CHECK(make_set(&test, 2, 1, 2, 2, 0, 4, 0) == 0);
    CHECK_OK(bn_npz_write(&train, &test, path, 1));
    CHECK_OK(load(path, 1, 2, "classes=20", &back));
    int r = same_set(&train, &back, 2);
    int classes = back.num_classes;
    bn_dataset_free(&back);
    CHECK(r == BN_PASS && classes == 20);
    /* a label past the classes beyond the limit is still found: every label is read */
    train.labels[5] = 9;
    CHECK_OK(bn_npz_write(&train, &test, path, 1));
    CHECK_ERR(load(path, 1, 2, "classes=9", &back), BN_ERR_DATA, "label 9 at index 5 is out of range (classes are 0..8)");
    CHECK_OK(load(path, 1, 2, NULL, &back));
    classes = back.num_classes;
    bn_dataset_free(&back);
    CHECK_MSG(classes == 10, "%d classes: the largest label of the whole split sets them", classes);
    bn_dataset_free(&train);
    bn_dataset_free(&test);
    return BN_PASS;
}

BN_TEST(npz_through_the_format_table)
{
    char path[512];
    ft_path(path, sizeof path, "table.npz");
    bn_dataset train, test, back;
    CHECK(make_set(&train, 3, 1, 2, 3, 0, 3, 0) == 0);
    CHECK(make_set(&test, 3, 1, 2, 3, 0, 3, 0) == 0);
    CHECK_OK(bn_npz_write(&train, &test, path, 1));
    const bn_data_format *f;
    CHECK_OK(bn_data_format_find("npz", "--dataset", &f));
    bn_options o;
    memset(&o, 0, sizeof o);
    bn_data_request rq = {.format = "npz", .path = path, .opts = &o, .train = 0, .quiet = 1};
    CHECK_OK(bn_data_load(f, &rq, &back));
    int r = same_set(&test, &back, 3);
    bn_dataset_free(&back);
    bn_dataset_free(&train);
    bn_dataset_free(&test);
    return r;
}

BN_TEST(npz_write_failure_leaves_no_file)
{
    char path[512], tmp[600];
    ft_path(path, sizeof path, "no-such-dir/out.npz");
    bn_dataset set;
    CHECK(make_set(&set, 2, 1, 2, 2, 0, 2, 0) == 0);
    CHECK_ERR(bn_npz_write(&set, &set, path, 1), BN_ERR_IO, "cannot create");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(access(path, F_OK) != 0 && access(tmp, F_OK) != 0);
    bn_dataset_free(&set);
    return BN_PASS;
}

/* ---- hand-built archives and .npy files -------------------------------------------------- */

/* A .npy file: a version `version`.0 preamble around the header dict as given, then n data
 * bytes; malloc'd, its length in *len. */
static unsigned char *npy_bytes(int version, const char *dict, const void *data, size_t n, size_t *len)
{
    size_t fixed = version == 1 ? 10 : 12, text = strlen(dict);
    size_t head = (fixed + text + 1 + 63) / 64 * 64;
    unsigned char *p = malloc(head + n + 1);
    if (!p) return NULL;
    memcpy(p, "\x93NUMPY", 6);
    p[6] = (unsigned char)version, p[7] = 0;
    size_t hl = head - fixed;
    for (size_t i = 0; i < fixed - 8; i++) p[8 + i] = (unsigned char)(hl >> (8 * i));
    memcpy(p + fixed, dict, text);
    memset(p + fixed + text, ' ', head - fixed - text - 1);
    p[head - 1] = '\n';
    if (n) memcpy(p + head, data, n);
    *len = head + n;
    return p;
}

/* One member of a hand-built archive. */
typedef struct member {
    const char *name;
    unsigned char *data;
    size_t len;
    int deflate;       /* 1: method 8, through zlib */
    size_t cut;        /* compressed bytes dropped from the end: a truncated member */
    uint32_t claim;    /* bytes added to the sizes both headers give: a member past the file's end */
} member;

static void le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Writes a ZIP archive of the members with 32-bit records only, as zip tools write small files;
 * returns 0 on success. */
static int write_zip(const char *path, const member *m, int n)
{
    size_t cap = 1024;
    for (int i = 0; i < n; i++) cap += 2 * m[i].len + 200;
    unsigned char *out = malloc(cap), *cd = malloc(cap);
    if (!out || !cd) return free(out), free(cd), -1;
    size_t pos = 0, cdn = 0;
    int r = 0;
    for (int i = 0; i < n && r == 0; i++) {
        size_t nl = strlen(m[i].name), comp = m[i].len;
        unsigned char *body = m[i].data;
        unsigned char *packed = NULL;
        if (m[i].deflate) {
            z_stream z;
            memset(&z, 0, sizeof z);
            packed = malloc(m[i].len + 64);
            if (!packed || deflateInit2(&z, 9, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
                free(packed);
                r = -1;
                break;
            }
            z.next_in = m[i].data, z.avail_in = (uInt)m[i].len;
            z.next_out = packed, z.avail_out = (uInt)m[i].len + 64;
            if (deflate(&z, Z_FINISH) != Z_STREAM_END) r = -1;
            comp = z.total_out - m[i].cut;
            deflateEnd(&z);
            body = packed;
        }
        uint32_t crc = (uint32_t)crc32(0, m[i].data, (uInt)m[i].len);
        unsigned char h[46] = {0};
        le(h, 0x04034b50, 4), le(h + 4, 20, 2), le(h + 8, m[i].deflate ? 8 : 0, 2), le(h + 14, crc, 4);
        le(h + 18, comp + m[i].claim, 4), le(h + 22, m[i].len + m[i].claim, 4), le(h + 26, nl, 2);
        memcpy(out + pos, h, 30), memcpy(out + pos + 30, m[i].name, nl), memcpy(out + pos + 30 + nl, body, comp);
        memset(h, 0, sizeof h);
        le(h, 0x02014b50, 4), le(h + 4, 20, 2), le(h + 6, 20, 2), le(h + 10, m[i].deflate ? 8 : 0, 2);
        le(h + 16, crc, 4), le(h + 20, comp + m[i].claim, 4), le(h + 24, m[i].len + m[i].claim, 4), le(h + 28, nl, 2);
        le(h + 42, pos, 4);
        memcpy(cd + cdn, h, 46), memcpy(cd + cdn + 46, m[i].name, nl);
        cdn += 46 + nl, pos += 30 + nl + comp;
        free(packed);
    }
    unsigned char e[22] = {0};
    le(e, 0x06054b50, 4), le(e + 8, (uint64_t)n, 2), le(e + 10, (uint64_t)n, 2), le(e + 12, cdn, 4), le(e + 16, pos, 4);
    memcpy(out + pos, cd, cdn), memcpy(out + pos + cdn, e, 22);
    if (r == 0) r = ft_write_bytes(path, out, pos + cdn + 22);
    free(out);
    free(cd);
    return r;
}

/* The four arrays of a small gray set, x (4, 2, 3) |u1 and y |u1 labels 0..3, as members;
 * m[i].data malloc'd (free_members). */
static int small_members(member m[4])
{
    static const char *const names[4] = {"x_train.npy", "y_train.npy", "x_test.npy", "y_test.npy"};
    unsigned char pix[24], lab[4] = {0, 3, 1, 2};
    for (int i = 0; i < 24; i++) pix[i] = (unsigned char)(i * 11);
    memset(m, 0, 4 * sizeof *m);
    for (int i = 0; i < 4; i++) {
        m[i].name = names[i];
        m[i].data = i % 2 ? npy_bytes(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (4,), }", lab, 4, &m[i].len)
                          : npy_bytes(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (4, 2, 3), }", pix, 24,
                                      &m[i].len);
        if (!m[i].data) return -1;
    }
    return 0;
}

static void free_members(member *m, int n)
{
    for (int i = 0; i < n; i++) free(m[i].data);
}

/* Checks that d is small_members' set. */
static int is_small_set(const bn_dataset *d)
{
    CHECK(d->count == 4 && d->channels == 1 && d->height == 2 && d->width == 3 && d->num_classes == 4);
    for (int i = 0; i < 24; i++) CHECK_MSG(d->pixels[i] == (unsigned char)(i * 11), "pixel %d", i);
    CHECK(d->labels[0] == 0 && d->labels[1] == 3 && d->labels[2] == 1 && d->labels[3] == 2);
    return BN_PASS;
}

BN_TEST(npz_deflated_members)
{
    char path[512];
    ft_path(path, sizeof path, "deflated.npz");
    member m[4];
    CHECK(small_members(m) == 0);
    m[0].deflate = m[1].deflate = 1;
    int wrote = write_zip(path, m, 4);
    free_members(m, 4);
    CHECK(wrote == 0);
    bn_dataset d;
    CHECK_OK(load(path, 1, 0, NULL, &d));
    int r = is_small_set(&d);
    bn_dataset_free(&d);
    return r;
}

/* Writes small_members' archive with member `which` deflated and cut short by `cut` bytes, or
 * with `claim` bytes more in both its headers' sizes than the file holds. */
static int write_truncated(const char *path, int which, size_t cut, uint32_t claim)
{
    member m[4];
    if (small_members(m) != 0) return -1;
    m[which].deflate = cut > 0, m[which].cut = cut, m[which].claim = claim;
    int r = write_zip(path, m, 4);
    free_members(m, 4);
    return r;
}

BN_TEST(npz_truncated_members)
{
    char path[512];
    ft_path(path, sizeof path, "truncated.npz");
    CHECK(write_truncated(path, 0, 8, 0) == 0);
    int r = load_fails(path, 1, NULL, "x_train.npy: truncated deflate data");
    if (r == BN_PASS && write_truncated(path, 2, 0, 1000) != 0) r = BN_FAIL;
    if (r == BN_PASS) r = load_fails(path, 0, NULL, "x_test.npy: truncated: its 1");
    return r;
}

BN_TEST(npz_missing_member_lists_the_others)
{
    char path[512];
    ft_path(path, sizeof path, "three.npz");
    member m[4];
    CHECK(small_members(m) == 0);
    int wrote = write_zip(path, m, 3);
    free_members(m, 4);
    CHECK(wrote == 0);
    bn_dataset d;
    CHECK_OK(load(path, 1, 0, NULL, &d));
    bn_dataset_free(&d);
    return load_fails(path, 0, NULL, "no member y_test.npy; the archive holds x_train.npy, y_train.npy, x_test.npy");
}

/* Writes small_members' archive with member `which` replaced by a .npy of dict and data. */
static int write_with(const char *path, int which, const char *dict, const void *data, size_t n)
{
    member m[4];
    if (small_members(m) != 0) return -1;
    free(m[which].data);
    m[which].data = npy_bytes(1, dict, data, n, &m[which].len);
    int r = m[which].data ? write_zip(path, m, 4) : -1;
    free_members(m, 4);
    return r;
}

BN_TEST(npz_malformed_arrays)
{
    char path[512];
    ft_path(path, sizeof path, "bad-array.npz");
    static const struct {
        int which;
        const char *dict;
        size_t n;
        const char *needle;
    } cases[] = {
        {0, "{'descr': '<i4', 'fortran_order': False, 'shape': (4, 2, 3), }", 96, "dtype '<i4' is not read"},
        {0, "{'descr': '<U3', 'fortran_order': False, 'shape': (4, 2), }", 24, "dtype '<U3' is not read"},
        {0, "{'descr': '|O', 'fortran_order': False, 'shape': (4,), }", 0, "dtype '|O' is not a plain element type"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", 16, "labels are integers"},
        {0, "{'descr': '|u1', 'fortran_order': True, 'shape': (4, 2, 3), }", 24, "np.ascontiguousarray"},
        {1, "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", 3, "3 labels do not match the 4 examples of"},
        {1, "{'descr': '|u1', 'fortran_order': False, 'shape': (4, 2), }", 8, "y.argmax(axis=1)"},
        {0, "{'descr': '|u1', 'fortran_order': False, 'shape': (4, 6), }", 24, "is not (N, H, W)"},
        {0, "{'descr': '|u1', 'fortran_order': False, 'shape': (4, 3, 2, 3), }", 72, "set layout = nhwc or layout = nchw"},
        {0, "{'descr': '|u1', 'fortran_order': False, 'shape': (4, 5, 2, 7), }", 280, "set layout = nhwc or layout = nchw"},
        {0, "{'descr': '|u1', 'fortran_order': False, 'shape': (4, 2, 0), }", 0, "has a zero dimension"},
        {0, "{'descr': '|u1', 'fortran_order': False, 'shape': (0, 2, 3), }", 0, "holds no examples"},
        {0, "{'descr': '|u1', 'fortran_order': False, 'shape': (4, 2, 3), }", 23, "truncated: shape (4, 2, 3) of |u1 needs 24"},
        {0, "{'descr': '|u1', 'fortran_order': False, 'shape': (4, 2, 3), }", 25, "1 bytes past the 24 data bytes"},
        {0, "{'descr': '|u1', 'fortran_order': False, 'shape': (4, 2, 3 }", 24, "malformed .npy header: expected ',' or ')'"},
        {0, "{'descr': '|u1', 'shape': (4, 2, 3), }", 24, "lacks 'fortran_order'"},
        {0, "{'descr': '|u1', 'fortran_order': False, 'shape': (4, 2, 3), 'x': 1}", 24, "unexpected or repeated key 'x'"},
        {0, "{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (4,), }", 16, "structured dtype"},
        {0, "{'descr': '|u1', 'fortran_order': False, 'shape': (99999999999, 99999999999, 99999999999), }", 24,
         "is past any file's size"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned char data[320] = {0};
        CHECK(write_with(path, cases[i].which, cases[i].dict, data, cases[i].n) == 0);
        int r = load_fails(path, 1, NULL, cases[i].needle);
        if (r != BN_PASS) return r;
    }
    /* a bad magic */
    member m[4];
    CHECK(small_members(m) == 0);
    m[1].data[1] = 'X';
    int wrote = write_zip(path, m, 4);
    free_members(m, 4);
    CHECK(wrote == 0);
    return load_fails(path, 1, NULL, "y_train.npy: not a .npy array (bad magic");
}

/* Writes dir/name as a .npy of the given version, header dict and data; 0 on success. */
static int write_npy(const char *dir, const char *name, int version, const char *dict, const void *data, size_t n)
{
    char path[600];
    size_t len;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unsigned char *bytes = npy_bytes(version, dict, data, n, &len);
    int r = bytes ? ft_write_bytes(path, bytes, len) : -1;
    free(bytes);
    return r;
}

BN_TEST(npz_folder_of_npy_files)
{
    char dir[512];
    ft_path(dir, sizeof dir, "npy-folder");
    CHECK(mkdir(dir, 0700) == 0);
    /* float64 x in a version 2.0 file, big-endian int16 labels */
    unsigned char x8[12 * 8], y2[6] = {0, 2, 0, 0, 0, 1}, pix[24], y8[16] = {1, 0, 0, 0, 0, 0, 0, 0, 4};
    for (int i = 0; i < 12; i++) {
        double v = (i - 5) * 0.25;
        memcpy(x8 + 8 * i, &v, 8);
    }
    for (int i = 0; i < 24; i++) pix[i] = (unsigned char)i;
    CHECK(write_npy(dir, "x_train.npy", 2, "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 2, 2), }", x8, 96) == 0);
    CHECK(write_npy(dir, "y_train.npy", 1, "{\"descr\":\">i2\",\"shape\":(3L,),\"fortran_order\":False}", y2, 6) == 0);
    CHECK(write_npy(dir, "x_test.npy", 3, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2, 2, 3), }", pix, 24) == 0);
    CHECK(write_npy(dir, "y_test.npy", 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 1), }", y8, 16) == 0);
    bn_dataset d;
    CHECK_OK(load(dir, 1, 0, NULL, &d));
    int ok = d.count == 3 && d.channels == 1 && d.height == 2 && d.width == 2 && d.values && d.num_classes == 3;
    for (int i = 0; ok && i < 12; i++) ok = d.values[i] == (float)((i - 5) * 0.25);
    ok = ok && d.labels[0] == 2 && d.labels[1] == 0 && d.labels[2] == 1;
    bn_dataset_free(&d);
    CHECK_MSG(ok, "the training split of float64 and big-endian int16 read wrong");
    CHECK_OK(load(dir, 0, 0, NULL, &d));
    ok = d.count == 2 && d.channels == 3 && d.height == 2 && d.width == 2 && d.pixels && d.num_classes == 5;
    /* interleaved channels became planes: plane c, position p of example e was byte e*12 + p*3 + c */
    for (int e = 0; ok && e < 2; e++)
        for (int c = 0; c < 3; c++)
            for (int p = 0; p < 4; p++) ok = ok && d.pixels[e * 12 + c * 4 + p] == e * 12 + p * 3 + c;
    ok = ok && d.labels[0] == 1 && d.labels[1] == 4;
    bn_dataset_free(&d);
    CHECK_MSG(ok, "the NHWC test split read wrong");
    char missing[600];
    snprintf(missing, sizeof missing, "%s/y_test.npy", dir);
    CHECK(unlink(missing) == 0);
    bn_clear_error();
    CHECK(load(dir, 0, 0, NULL, &d) == BN_ERR_DATA);
    CHECK(strncmp(bn_last_error(), missing, strlen(missing)) == 0);
    CHECK(strstr(bn_last_error(), "no such file; a folder of arrays holds x_train.npy") != NULL);
    return BN_PASS;
}

BN_TEST(npz_every_integer_label_type)
{
    char path[512];
    ft_path(path, sizeof path, "label-types.npz");
    static const char *const types[] = {"|u1", "|i1", "<u2", ">u2", "<i2", "<u4", ">i4", "<i4", "<u8", "<i8", ">i8", "u1"};
    static const uint64_t labels[4] = {0, 100, 2, 7};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const char *ty = types[t];
        int big = ty[0] == '>', size = ty[strlen(ty) - 1] - '0';
        unsigned char data[32] = {0};
        for (int i = 0; i < 4; i++)
            for (int b = 0; b < size; b++) data[i * size + (big ? size - 1 - b : b)] = (unsigned char)(labels[i] >> (8 * b));
        char dict[128];
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (4,), }", ty);
        CHECK(write_with(path, 1, dict, data, 4 * (size_t)size) == 0);
        bn_dataset d;
        CHECK_OK(load(path, 1, 0, NULL, &d));
        int ok = d.num_classes == 101;
        for (int i = 0; i < 4; i++) ok = ok && d.labels[i] == labels[i];
        bn_dataset_free(&d);
        CHECK_MSG(ok, "labels of dtype %s read wrong", ty);
    }
    return BN_PASS;
}

BN_TEST(npz_bad_labels)
{
    char path[512];
    ft_path(path, sizeof path, "bad-labels.npz");
    unsigned char i8[32] = {0};
    memset(i8 + 16, 0xff, 8); /* -1 at index 2 */
    CHECK(write_with(path, 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }", i8, 32) == 0);
    int r = load_fails(path, 1, NULL, "y_train.npy: label -1 at index 2 is negative");
    unsigned char i1[4] = {1, 2, 3, 0x80};
    if (r == BN_PASS) r = write_with(path, 1, "{'descr': '|i1', 'fortran_order': False, 'shape': (4,), }", i1, 4);
    if (r == BN_PASS) r = load_fails(path, 1, NULL, "label -128 at index 3 is negative");
    unsigned char i4[16] = {0, 0, 0, 0, 0x70, 0x11, 0x01, 0};
    if (r == BN_PASS) r = write_with(path, 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (4,), }", i4, 16);
    if (r == BN_PASS) r = load_fails(path, 1, NULL, "label 70000 at index 1 is past the largest class, 65534");
    unsigned char u8[32] = {0};
    memset(u8 + 24, 0xff, 8);
    if (r == BN_PASS) r = write_with(path, 1, "{'descr': '<u8', 'fortran_order': False, 'shape': (4,), }", u8, 32);
    if (r == BN_PASS) r = load_fails(path, 1, NULL, "label 18446744073709551615 at index 3");
    /* small_members' labels 0, 3, 1, 2 against 3 classes */
    member m[4];
    CHECK(small_members(m) == 0);
    int wrote = write_zip(path, m, 4);
    free_members(m, 4);
    CHECK(wrote == 0);
    if (r == BN_PASS) r = load_fails(path, 1, "classes=3", "label 3 at index 1 is out of range (classes are 0..2)");
    return r;
}

BN_TEST(npz_values_must_be_finite)
{
    char path[512];
    ft_path(path, sizeof path, "nan.npz");
    float f[24] = {0};
    f[13] = NAN;
    CHECK(write_with(path, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 2, 3), }", f, sizeof f) == 0);
    int r = load_fails(path, 1, NULL, "value nan of example 2 is not a finite float32");
    double big[24] = {0};
    big[23] = 1e300;
    if (r == BN_PASS) r = write_with(path, 0, "{'descr': '<f8', 'fortran_order': False, 'shape': (4, 2, 3), }", big, sizeof big);
    if (r == BN_PASS) r = load_fails(path, 1, NULL, "value 1e+300 of example 3 is not a finite float32");
    return r;
}

/* The offset of the n-th (from 0) .npy array's first data byte in a file's bytes. */
static size_t nth_array_data(const unsigned char *bytes, size_t len, int n)
{
    for (size_t i = 0; i + 10 <= len; i++)
        if (memcmp(bytes + i, "\x93NUMPY", 6) == 0 && n-- == 0) return i + 10 + (bytes[i + 8] | bytes[i + 9] << 8);
    return 0;
}

BN_TEST(npz_bad_crc_and_truncated_archive)
{
    char path[512];
    ft_path(path, sizeof path, "crc.npz");
    bn_dataset train, test;
    CHECK(make_set(&train, 5, 1, 4, 4, 0, 3, 0) == 0);
    CHECK(make_set(&test, 2, 1, 4, 4, 0, 3, 0) == 0);
    CHECK_OK(bn_npz_write(&train, &test, path, 1));
    bn_dataset_free(&train);
    bn_dataset_free(&test);
    size_t len;
    unsigned char *bytes = slurp(path, &len);
    CHECK(bytes != NULL);
    size_t x = nth_array_data(bytes, len, 0), y = nth_array_data(bytes, len, 1);
    CHECK(x > 0 && y > x);
    int r = BN_PASS;
    /* a pixel changed: only the CRC can tell */
    bytes[x + 3] ^= 0x40;
    if (ft_write_bytes(path, bytes, len) != 0) r = BN_FAIL;
    if (r == BN_PASS) r = load_fails(path, 1, NULL, "x_train.npy: CRC-32 mismatch");
    bytes[x + 3] ^= 0x40;
    /* a label's high byte changed: reported as the corruption it is, not as a bad label */
    bytes[y + 7] ^= 0x01;
    if (r == BN_PASS && ft_write_bytes(path, bytes, len) != 0) r = BN_FAIL;
    if (r == BN_PASS) r = load_fails(path, 1, NULL, "y_train.npy: CRC-32 mismatch");
    bytes[y + 7] ^= 0x01;
    /* the archive cut short: its end records are gone */
    if (r == BN_PASS && ft_write_bytes(path, bytes, len / 2) != 0) r = BN_FAIL;
    if (r == BN_PASS) r = load_fails(path, 1, NULL, "truncated ZIP archive");
    free(bytes);
    return r;
}

BN_TEST(npz_not_an_archive)
{
    char path[512];
    ft_path(path, sizeof path, "text.npz");
    const char text[] = "x_train, y_train: these are not arrays\n";
    CHECK(ft_write_bytes(path, text, sizeof text - 1) == 0);
    int r = load_fails(path, 1, NULL, "not a ZIP archive");
    ft_path(path, sizeof path, "empty.npz");
    if (r == BN_PASS && ft_write_bytes(path, "", 0) != 0) r = BN_FAIL;
    if (r == BN_PASS) r = load_fails(path, 1, NULL, "empty file");
    ft_path(path, sizeof path, "x_train.npy");
    if (r == BN_PASS && ft_write_bytes(path, "\x93NUMPY", 6) != 0) r = BN_FAIL;
    if (r == BN_PASS) r = load_fails(path, 1, NULL, "one .npy array; the npz format reads an .npz archive or a folder");
    ft_path(path, sizeof path, "no-such.npz");
    if (r == BN_PASS) r = load_fails(path, 1, NULL, "not found");
    return r;
}

/* ---- files NumPy wrote ---------------------------------------------------------------------- */

/* A python3 that has numpy: the one on PATH, else the system's, which distributions pair with
 * their numpy package; NULL when neither has it. */
static const char *python_with_numpy(void)
{
    static const char *const candidates[] = {"python3", "/usr/bin/python3"};
    char cmd[128], out[256];
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s -c 'import numpy' 2>/dev/null", candidates[i]);
        if (bn_test_run(cmd, out, sizeof out) == 0) return candidates[i];
    }
    return NULL;
}

/* The arrays the script below makes: x_train (4, 5, 6, 3) uint8, y_train int64, x_test (2, 3,
 * 5, 6) float32 (NCHW), y_test (2, 1) uint8; the same again as .npy files of float64 x and int32
 * y in DIR/folder. */
static const char numpy_script[] =
    "import numpy as np, sys, os\n"
    "d = sys.argv[1]\n"
    "xa = (np.arange(4 * 5 * 6 * 3) * 7 % 256).astype(np.uint8).reshape(4, 5, 6, 3)\n"
    "ya = np.array([3, 1, 4, 1])\n"
    "xb = ((np.arange(2 * 3 * 5 * 6, dtype=np.float32) - 50) / 8).reshape(2, 3, 5, 6)\n"
    "yb = np.array([[2], [7]], dtype=np.uint8)\n"
    "np.savez(d + '/plain.npz', x_train=xa, y_train=ya, x_test=xb, y_test=yb)\n"
    "np.savez_compressed(d + '/packed.npz', x_train=xa, y_train=ya, x_test=xb, y_test=yb)\n"
    "os.mkdir(d + '/folder')\n"
    "for n, a in (('x_train', xa.astype(np.float64)), ('y_train', ya.astype(np.int32)), ('x_test', xb), ('y_test', yb)):\n"
    "    np.save(d + '/folder/' + n + '.npy', a)\n";

/* Checks that what NumPy wrote reads as numpy_script's arrays. */
static int check_numpy_split(const char *path, int train)
{
    bn_dataset d;
    CHECK_OK(load(path, train, 0, NULL, &d));
    int ok = 1;
    if (train) {
        ok = d.count == 4 && d.channels == 3 && d.height == 5 && d.width == 6 && d.num_classes == 5;
        for (int e = 0; ok && e < 4; e++)
            for (int c = 0; c < 3; c++)
                for (int p = 0; p < 30; p++) {
                    int want = (e * 90 + p * 3 + c) * 7 % 256;
                    float got = d.pixels ? d.pixels[e * 90 + c * 30 + p] : d.values[e * 90 + c * 30 + p];
                    ok = ok && got == (float)want;
                }
        ok = ok && d.labels[0] == 3 && d.labels[1] == 1 && d.labels[2] == 4 && d.labels[3] == 1;
    } else {
        ok = d.count == 2 && d.channels == 3 && d.height == 5 && d.width == 6 && d.values && d.num_classes == 8;
        for (int i = 0; ok && i < 180; i++) ok = d.values[i] == (float)(i - 50) / 8;
        ok = ok && d.labels[0] == 2 && d.labels[1] == 7;
    }
    bn_dataset_free(&d);
    CHECK_MSG(ok, "%s: the %s split differs from what NumPy saved", path, train ? "training" : "test");
    return BN_PASS;
}

BN_TEST(npz_reads_and_writes_numpy_files)
{
    const char *python = python_with_numpy();
    if (!python) BN_SKIP_TEST("no python3 with numpy");
    char dir[512], script[600], cmd[2048], out[4096], path[600];
    ft_path(dir, sizeof dir, "numpy");
    CHECK(mkdir(dir, 0700) == 0);
    snprintf(script, sizeof script, "%s/make.py", dir);
    CHECK(ft_write_bytes(script, numpy_script, sizeof numpy_script - 1) == 0);
    snprintf(cmd, sizeof cmd, "%s %s %s", python, script, dir);
    CHECK_MSG(bn_test_run(cmd, out, sizeof out) == 0, "%s:\n%s", cmd, out);
    static const char *const files[] = {"plain.npz", "packed.npz", "folder"};
    for (int f = 0; f < 3; f++)
        for (int split = 0; split < 2; split++) {
            snprintf(path, sizeof path, "%s/%s", dir, files[f]);
            int r = check_numpy_split(path, split);
            if (r != BN_PASS) return r;
        }
    /* and NumPy reads what bn_npz_write wrote: 2 examples of 3 x 1 x 2, channels last */
    bn_dataset train, test;
    CHECK(make_set(&train, 2, 3, 1, 2, 0, 4, 0) == 0);
    CHECK(make_set(&test, 1, 1, 1, 2, 1, 4, 0) == 0);
    snprintf(path, sizeof path, "%s/ours.npz", dir);
    bn_status s = bn_npz_write(&train, &test, path, 1);
    char want[512];
    int n = snprintf(want, sizeof want, "(2, 1, 2, 3) uint8 [");
    for (int e = 0; e < 2; e++)
        for (int p = 0; p < 2; p++)
            for (int c = 0; c < 3; c++)
                n += snprintf(want + n, sizeof want - (size_t)n, "%s%d", e + p + c ? ", " : "", train.pixels[e * 6 + c * 2 + p]);
    snprintf(want + n, sizeof want - (size_t)n, "] [0, 3] int64 (1, 1, 2) float32 [%.9g, %.9g] [0]", test.values[0],
             test.values[1]);
    bn_dataset_free(&train);
    bn_dataset_free(&test);
    CHECK_OK(s);
    snprintf(cmd, sizeof cmd,
             "%s -c \"import numpy as np; z = np.load('%s'); a, b = z['x_train'], z['x_test']; "
             "print(a.shape, a.dtype, a.ravel().tolist(), z['y_train'].tolist(), z['y_train'].dtype, b.shape, b.dtype, "
             "[float('%%.9g' %% v) for v in b.ravel()], z['y_test'].tolist())\"",
             python, path);
    CHECK_MSG(bn_test_run(cmd, out, sizeof out) == 0, "%s:\n%s", cmd, out);
    CHECK_MSG(strstr(out, want) != NULL, "NumPy read\n%s\nwant\n%s", out, want);
    return BN_PASS;
}
