/* test_cifar.c - the CIFAR-10 and CIFAR-100 readers and the writer on folders written here:
 * records of known pixels read back exactly, the splits' files, the limit, the label key and
 * the class names, and every malformed folder the readers must refuse with a message naming the
 * file and what is wrong. */
#include "file_testing.h"
#include "testing.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cifar.h"
#include "core/status.h"

enum { PIXELS = 3 * 32 * 32, REC10 = 1 + PIXELS, REC100 = 2 + PIXELS };

/* The pixel pattern: distinct per example, with 0 and 255 present. */
static unsigned char pixel_at(int example, int offset)
{
    if (example == 0 && offset == 1) return 255;
    return (unsigned char)((example * 37 + offset * 11) % 251);
}

/* "<test directory>/name", made as a fresh folder; returns buf. */
static const char *make_dir(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", bn_test_tmpdir(), name);
    mkdir(buf, 0700);
    return buf;
}

/* "dir/name" into buf; returns buf. */
static const char *in_dir(char *buf, size_t cap, const char *dir, const char *name)
{
    snprintf(buf, cap, "%s/%s", dir, name);
    return buf;
}

static int label_of(int example)
{
    return (example * 3) % 10;
}

/* Writes dir/name through the writer: `count` records of the examples from `first` (pixel_at,
 * label_of); 0 on success. */
static int write_batch(const char *dir, const char *name, int first, int count, int cifar100)
{
    bn_dataset d;
    if (bn_dataset_alloc(&d, "test", count, 3, 32, 32, 256, 0) != BN_OK) return -1;
    for (int i = 0; i < count; i++) {
        d.labels[i] = (uint16_t)label_of(first + i);
        for (int j = 0; j < PIXELS; j++) d.pixels[(size_t)i * PIXELS + j] = pixel_at(first + i, j);
    }
    char path[600];
    bn_status s = bn_cifar_write(&d, in_dir(path, sizeof path, dir, name), cifar100);
    bn_dataset_free(&d);
    return s == BN_OK ? 0 : -1;
}

/* Checks that d holds `count` examples from `first` of write_batch's pattern. */
static int check_examples(const bn_dataset *d, int first, int count)
{
    CHECK_MSG(d->count == count, "%d examples, expected %d", d->count, count);
    CHECK(d->channels == 3 && d->height == 32 && d->width == 32);
    CHECK(d->pixels != NULL && d->values == NULL && d->labels != NULL);
    for (int i = 0; i < count; i++) {
        CHECK_MSG(d->labels[i] == label_of(first + i), "label %d is %d", i, d->labels[i]);
        for (int j = 0; j < PIXELS; j++)
            CHECK_MSG(d->pixels[(size_t)i * PIXELS + j] == pixel_at(first + i, j), "pixel %d of example %d", j, i);
    }
    return BN_PASS;
}

static bn_data_request request(const char *format, const char *dir, int train, int limit, bn_options *opts)
{
    return (bn_data_request){.format = format, .path = dir, .opts = opts, .train = train, .limit = limit, .quiet = 1};
}

/* Loads the split with the format's reader, the options parsed from `keys`, which must all be read. */
static bn_status load(const char *format, const char *dir, int train, int limit, const char *keys, bn_dataset *d)
{
    bn_options opts = {.file = "<test>", .section = strdup("data")};
    bn_status s = bn_options_parse_inline(&opts, keys);
    bn_data_request rq = request(format, dir, train, limit, &opts);
    if (s == BN_OK) s = strcmp(format, "cifar10") == 0 ? bn_cifar10_load(&rq, d) : bn_cifar100_load(&rq, d);
    if (s == BN_OK) s = bn_options_check_unused(&opts);
    bn_options_clear(&opts);
    return s;
}

/* Checks that loading fails with BN_ERR_DATA, a one-line message naming `named` and holding
 * needle, and leaves the dataset zeroed. */
static int load_fails(const char *format, const char *dir, int train, const char *named, const char *needle)
{
    bn_dataset d;
    memset(&d, 0xab, sizeof d);
    CHECK_ERR(load(format, dir, train, 0, "", &d), BN_ERR_DATA, needle);
    CHECK_MSG(strstr(bn_last_error(), named) != NULL, "message \"%s\" does not name %s", bn_last_error(), named);
    CHECK(strchr(bn_last_error(), '\n') == NULL);
    CHECK(d.count == 0 && d.pixels == NULL && d.labels == NULL && d.class_names == NULL);
    return BN_PASS;
}

BN_TEST(cifar10_test_batch_reads_back_exactly)
{
    char dir[512];
    make_dir(dir, sizeof dir, "c10-test");
    CHECK(write_batch(dir, "test_batch.bin", 0, 5, 0) == 0);
    bn_dataset d;
    CHECK_OK(load("cifar10", dir, 0, 0, "", &d));
    int r = check_examples(&d, 0, 5);
    CHECK(d.num_classes == 10 && d.class_names == NULL);
    bn_dataset_free(&d);
    return r;
}

/* A record written byte by byte, not by the writer: the planes are red, green, blue, rows first. */
BN_TEST(cifar10_record_layout_is_label_then_rgb_planes)
{
    char dir[512], path[600];
    make_dir(dir, sizeof dir, "c10-layout");
    unsigned char rec[2 * REC10];
    for (int e = 0; e < 2; e++) {
        unsigned char *r = rec + e * REC10;
        r[0] = (unsigned char)(7 + e);
        for (int c = 0; c < 3; c++) memset(r + 1 + c * 1024, 10 * (c + 1) + e, 1024);
        r[1 + 0 * 1024 + 1 * 32 + 2] = 200; /* red, row 1, column 2 */
        r[1 + 2 * 1024 + 31 * 32 + 31] = 250; /* blue, last row, last column */
    }
    CHECK(ft_write_bytes(in_dir(path, sizeof path, dir, "test_batch.bin"), rec, sizeof rec) == 0);
    bn_dataset d;
    CHECK_OK(load("cifar10", dir, 0, 0, "", &d));
    int ok = d.count == 2 && d.labels[0] == 7 && d.labels[1] == 8;
    for (int e = 0; ok && e < 2; e++) {
        const unsigned char *p = d.pixels + e * PIXELS;
        ok = p[0] == 10 + e && p[1024] == 20 + e && p[2048] == 30 + e && p[1 * 32 + 2] == 200 &&
             p[1 * 32 + 3] == 10 + e && p[2048 + 31 * 32 + 31] == 250 && p[1024 + 31 * 32 + 31] == 20 + e;
    }
    bn_dataset_free(&d);
    CHECK(ok);
    return BN_PASS;
}

BN_TEST(cifar_writer_bytes)
{
    char dir[512], path[600];
    make_dir(dir, sizeof dir, "c-writer");
    CHECK(write_batch(dir, "ten.bin", 4, 3, 0) == 0);
    CHECK(write_batch(dir, "hundred.bin", 4, 3, 1) == 0);
    static unsigned char buf[4 * REC100];
    FILE *f = fopen(in_dir(path, sizeof path, dir, "ten.bin"), "rb");
    CHECK(f != NULL);
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    CHECK(n == 3 * REC10);
    CHECK(buf[0] == label_of(4) && buf[1] == pixel_at(4, 0) && buf[REC10] == label_of(5));
    CHECK(buf[2 * REC10 + 1 + PIXELS - 1] == pixel_at(6, PIXELS - 1));
    f = fopen(in_dir(path, sizeof path, dir, "hundred.bin"), "rb");
    CHECK(f != NULL);
    n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    CHECK(n == 3 * REC100);
    CHECK(buf[0] == label_of(4) && buf[1] == label_of(4) && buf[2] == pixel_at(4, 0));
    CHECK(buf[REC100] == label_of(5) && buf[REC100 + 1] == label_of(5));
    CHECK(access(in_dir(path, sizeof path, dir, "ten.bin.tmp"), F_OK) != 0);
    return BN_PASS;
}

BN_TEST(cifar_writer_refuses_what_records_cannot_hold)
{
    char dir[512], path[600], tmp[700];
    make_dir(dir, sizeof dir, "c-writer-bad");
    in_dir(path, sizeof path, dir, "out.bin");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    bn_dataset d;
    CHECK_OK(bn_dataset_alloc(&d, "test", 2, 1, 28, 28, 10, 0));
    CHECK_ERR(bn_cifar_write(&d, path, 0), BN_ERR_USAGE, "hold bytes of 3x32x32; the set holds bytes of 1x28x28");
    bn_dataset_free(&d);
    CHECK_OK(bn_dataset_alloc(&d, "test", 2, 3, 32, 32, 10, 1));
    CHECK_ERR(bn_cifar_write(&d, path, 0), BN_ERR_USAGE, "the set holds floats");
    bn_dataset_free(&d);
    CHECK_OK(bn_dataset_alloc(&d, "test", 3, 3, 32, 32, 1000, 0));
    d.labels[2] = 300;
    CHECK_ERR(bn_cifar_write(&d, path, 1), BN_ERR_USAGE, "label 300 of example 2 does not fit");
    CHECK(strstr(bn_last_error(), path) != NULL);
    CHECK(access(path, F_OK) != 0 && access(tmp, F_OK) != 0);
    /* A folder where the file goes: the rename fails after the write, which must leave nothing. */
    d.labels[2] = 255;
    CHECK(mkdir(path, 0700) == 0);
    bn_status s = bn_cifar_write(&d, path, 1);
    bn_dataset_free(&d);
    CHECK_MSG(s == BN_ERR_IO && strstr(bn_last_error(), "cannot replace"), "%s", bn_last_error());
    CHECK(access(tmp, F_OK) != 0);
    return BN_PASS;
}

BN_TEST(cifar10_train_reads_batches_in_order_of_any_size)
{
    char dir[512];
    make_dir(dir, sizeof dir, "c10-train3");
    CHECK(write_batch(dir, "data_batch_1.bin", 0, 2, 0) == 0);
    CHECK(write_batch(dir, "data_batch_2.bin", 2, 1, 0) == 0);
    CHECK(write_batch(dir, "data_batch_3.bin", 3, 4, 0) == 0);
    CHECK(write_batch(dir, "test_batch.bin", 50, 3, 0) == 0);
    bn_dataset d;
    CHECK_OK(load("cifar10", dir, 1, 0, "", &d));
    int r = check_examples(&d, 0, 7);
    bn_dataset_free(&d);
    if (r != BN_PASS) return r;
    CHECK_OK(load("cifar10", dir, 0, 0, "", &d));
    r = check_examples(&d, 50, 3);
    bn_dataset_free(&d);
    return r;
}

BN_TEST(cifar10_limit_keeps_the_first_and_checks_all)
{
    char dir[512], path[600];
    make_dir(dir, sizeof dir, "c10-limit");
    CHECK(write_batch(dir, "data_batch_1.bin", 0, 2, 0) == 0);
    CHECK(write_batch(dir, "data_batch_2.bin", 2, 3, 0) == 0);
    bn_dataset d;
    CHECK_OK(load("cifar10", dir, 1, 3, "", &d)); /* across the two files */
    int r = check_examples(&d, 0, 3);
    bn_dataset_free(&d);
    if (r != BN_PASS) return r;
    CHECK_OK(load("cifar10", dir, 1, 100, "", &d));
    r = check_examples(&d, 0, 5);
    bn_dataset_free(&d);
    if (r != BN_PASS) return r;
    /* a bad label past the limit is still found */
    static unsigned char rec[REC10];
    rec[0] = 10;
    CHECK(ft_write_bytes(in_dir(path, sizeof path, dir, "data_batch_2.bin"), rec, sizeof rec) == 0);
    CHECK_ERR(load("cifar10", dir, 1, 1, "", &d), BN_ERR_DATA, "data_batch_2.bin: record 0 has label 10, past the 10 classes");
    CHECK(d.pixels == NULL);
    return BN_PASS;
}

BN_TEST(cifar10_gap_in_batches)
{
    char dir[512];
    make_dir(dir, sizeof dir, "c10-gap");
    CHECK(write_batch(dir, "data_batch_1.bin", 0, 1, 0) == 0);
    CHECK(write_batch(dir, "data_batch_2.bin", 1, 1, 0) == 0);
    CHECK(write_batch(dir, "data_batch_4.bin", 2, 1, 0) == 0);
    return load_fails("cifar10", dir, 1, "c10-gap/data_batch_3.bin", "not found, but data_batch_4.bin is there");
}

BN_TEST(cifar10_missing_files)
{
    char dir[512];
    make_dir(dir, sizeof dir, "c10-missing");
    int r = load_fails("cifar10", dir, 1, "c10-missing/data_batch_1.bin", "not found");
    if (r != BN_PASS) return r;
    CHECK(strstr(bn_last_error(), "cifar-10-binary.tar.gz") != NULL);
    CHECK(write_batch(dir, "data_batch_1.bin", 0, 1, 0) == 0);
    r = load_fails("cifar10", dir, 0, "c10-missing/test_batch.bin", "not found");
    if (r != BN_PASS) return r;
    char missing[512], file[600];
    snprintf(missing, sizeof missing, "%s/no-such-folder", bn_test_tmpdir());
    r = load_fails("cifar10", missing, 0, missing, "data folder not found");
    if (r != BN_PASS) return r;
    in_dir(file, sizeof file, dir, "data_batch_1.bin");
    return load_fails("cifar10", file, 1, file, "not a folder");
}

BN_TEST(cifar_size_not_a_whole_number_of_records)
{
    char dir[512], path[600];
    make_dir(dir, sizeof dir, "c-size");
    static unsigned char bytes[11 * REC100];
    in_dir(path, sizeof path, dir, "test_batch.bin");
    CHECK(ft_write_bytes(path, bytes, 10 * REC10 + 1) == 0);
    int r = load_fails("cifar10", dir, 0, path,
                       "30731 bytes is not a whole number of 3073-byte records (10 records and 1 byte over)");
    if (r != BN_PASS) return r;
    /* a last record cut short */
    CHECK(ft_write_bytes(path, bytes, 2 * REC10 - 100) == 0);
    r = load_fails("cifar10", dir, 0, path, "(1 record and 2973 bytes over)");
    if (r != BN_PASS) return r;
    CHECK(ft_write_bytes(path, bytes, 100) == 0);
    r = load_fails("cifar10", dir, 0, path, "(0 records and 100 bytes over)");
    if (r != BN_PASS) return r;
    /* CIFAR-100's records are a byte longer: ten of CIFAR-10's are not a whole number of them */
    in_dir(path, sizeof path, dir, "train.bin");
    CHECK(ft_write_bytes(path, bytes, 10 * REC10) == 0);
    return load_fails("cifar100", dir, 1, path, "30730 bytes is not a whole number of 3074-byte records (9 records and "
                      "3064 bytes over)");
}

BN_TEST(cifar_empty_file)
{
    char dir[512], path[600];
    make_dir(dir, sizeof dir, "c-empty");
    CHECK(write_batch(dir, "data_batch_1.bin", 0, 1, 0) == 0);
    in_dir(path, sizeof path, dir, "data_batch_2.bin");
    CHECK(ft_write_bytes(path, "", 0) == 0);
    int r = load_fails("cifar10", dir, 1, path, "empty file");
    if (r != BN_PASS) return r;
    in_dir(path, sizeof path, dir, "test.bin");
    CHECK(ft_write_bytes(path, "", 0) == 0);
    return load_fails("cifar100", dir, 0, path, "empty file (no 3074-byte records)");
}

BN_TEST(cifar_label_past_the_classes)
{
    char dir[512], path[600];
    make_dir(dir, sizeof dir, "c-label");
    static unsigned char rec[3 * REC100];
    in_dir(path, sizeof path, dir, "test_batch.bin");
    rec[0] = 9, rec[REC10] = 3, rec[2 * REC10] = 10;
    CHECK(ft_write_bytes(path, rec, 3 * REC10) == 0);
    int r = load_fails("cifar10", dir, 0, path, "record 2 has label 10, past the 10 classes (0..9)");
    if (r != BN_PASS) return r;
    /* CIFAR-100: the fine byte 100 is refused; the same file read for coarse labels is fine */
    memset(rec, 0, sizeof rec);
    rec[REC100] = 19, rec[REC100 + 1] = 100;
    in_dir(path, sizeof path, dir, "test.bin");
    CHECK(ft_write_bytes(path, rec, 2 * REC100) == 0);
    r = load_fails("cifar100", dir, 0, path, "record 1 has fine label 100, past the 100 classes (0..99)");
    if (r != BN_PASS) return r;
    bn_dataset d;
    CHECK_OK(load("cifar100", dir, 0, 0, "label=coarse", &d));
    int ok = d.count == 2 && d.labels[1] == 19 && d.num_classes == 20;
    bn_dataset_free(&d);
    CHECK(ok);
    rec[REC100] = 20, rec[REC100 + 1] = 5;
    CHECK(ft_write_bytes(path, rec, 2 * REC100) == 0);
    CHECK_ERR(load("cifar100", dir, 0, 0, "label=coarse", &d), BN_ERR_DATA,
              "test.bin: record 1 has coarse label 20, past the 20 classes (0..19)");
    CHECK(d.pixels == NULL);
    return BN_PASS;
}

BN_TEST(cifar_directory_where_a_file_should_be)
{
    char dir[512], path[600];
    make_dir(dir, sizeof dir, "c-dir");
    CHECK(mkdir(in_dir(path, sizeof path, dir, "test_batch.bin"), 0700) == 0);
    int r = load_fails("cifar10", dir, 0, path, "test_batch.bin: is not a regular file but a directory");
    if (r != BN_PASS) return r;
    CHECK(write_batch(dir, "data_batch_1.bin", 0, 1, 0) == 0);
    CHECK(mkdir(in_dir(path, sizeof path, dir, "data_batch_2.bin"), 0700) == 0);
    r = load_fails("cifar10", dir, 1, path, "data_batch_2.bin: is not a regular file but a directory");
    if (r != BN_PASS) return r;
    CHECK(mkdir(in_dir(path, sizeof path, dir, "train.bin"), 0700) == 0);
    r = load_fails("cifar100", dir, 1, path, "train.bin: is not a regular file but a directory");
    if (r != BN_PASS) return r;
    CHECK(write_batch(dir, "test.bin", 0, 1, 1) == 0);
    CHECK(mkdir(in_dir(path, sizeof path, dir, "fine_label_names.txt"), 0700) == 0);
    return load_fails("cifar100", dir, 0, path, "fine_label_names.txt: is not a regular file but a directory");
}

/* CIFAR-100's two labels written apart: coarse = i % 20, fine = 99 - i. */
BN_TEST(cifar100_fine_or_coarse_labels)
{
    char dir[512], path[600];
    make_dir(dir, sizeof dir, "c100");
    enum { N = 4 };
    static unsigned char rec[N * REC100];
    for (int i = 0; i < N; i++) {
        rec[i * REC100] = (unsigned char)(i % 20);
        rec[i * REC100 + 1] = (unsigned char)(99 - i);
        for (int j = 0; j < PIXELS; j++) rec[i * REC100 + 2 + j] = pixel_at(i, j);
    }
    CHECK(ft_write_bytes(in_dir(path, sizeof path, dir, "train.bin"), rec, sizeof rec) == 0);
    CHECK(write_batch(dir, "test.bin", 0, 3, 1) == 0);
    bn_dataset d;
    CHECK_OK(load("cifar100", dir, 1, 0, "", &d));
    int ok = d.count == N && d.num_classes == 100 && d.class_names == NULL;
    for (int i = 0; ok && i < N; i++)
        ok = d.labels[i] == 99 - i && memcmp(d.pixels + i * PIXELS, rec + i * REC100 + 2, PIXELS) == 0;
    bn_dataset_free(&d);
    CHECK(ok);
    CHECK_OK(load("cifar100", dir, 1, 0, "label=fine", &d));
    ok = d.num_classes == 100 && d.labels[3] == 96;
    bn_dataset_free(&d);
    CHECK(ok);
    CHECK_OK(load("cifar100", dir, 1, 0, "label=coarse", &d));
    ok = d.count == N && d.num_classes == 20;
    for (int i = 0; ok && i < N; i++) ok = d.labels[i] == i % 20;
    bn_dataset_free(&d);
    CHECK(ok);
    CHECK_OK(load("cifar100", dir, 0, 2, "", &d));
    int r = check_examples(&d, 0, 2);
    bn_dataset_free(&d);
    return r;
}

BN_TEST(cifar100_bad_label_key)
{
    char dir[512];
    make_dir(dir, sizeof dir, "c100-key");
    CHECK(write_batch(dir, "test.bin", 0, 1, 1) == 0);
    bn_dataset d;
    CHECK_ERR(load("cifar100", dir, 0, 0, "label=medium", &d), BN_ERR_USAGE,
              "[data] label = 'medium' is not one of: fine, coarse");
    CHECK(d.pixels == NULL && d.count == 0);
    return BN_PASS;
}

/* Writes n lines "class<i>", then `tail` (a blank line, say). */
static int write_names(const char *dir, const char *name, int n, const char *tail)
{
    char path[600];
    FILE *f = fopen(in_dir(path, sizeof path, dir, name), "wb");
    if (!f) return -1;
    for (int i = 0; i < n; i++) fprintf(f, "class%d%s\n", i, i == 1 ? "\r" : "");
    fputs(tail, f);
    return fclose(f) == 0 ? 0 : -1;
}

BN_TEST(cifar_class_names)
{
    char dir[512], path[600];
    make_dir(dir, sizeof dir, "c-names");
    CHECK(write_batch(dir, "test_batch.bin", 0, 2, 0) == 0);
    CHECK(write_batch(dir, "test.bin", 0, 2, 1) == 0);
    /* CIFAR's own files end in a blank line; a line may end in \r\n */
    CHECK(write_names(dir, "batches.meta.txt", 10, "\n") == 0);
    CHECK(write_names(dir, "fine_label_names.txt", 100, "") == 0);
    CHECK(write_names(dir, "coarse_label_names.txt", 20, "\n\n") == 0);
    bn_dataset d;
    CHECK_OK(load("cifar10", dir, 0, 0, "", &d));
    int ok = d.class_names && strcmp(d.class_names[0], "class0") == 0 && strcmp(d.class_names[1], "class1") == 0 &&
             strcmp(d.class_names[9], "class9") == 0;
    bn_dataset_free(&d);
    CHECK(ok);
    CHECK_OK(load("cifar100", dir, 0, 0, "", &d));
    ok = d.num_classes == 100 && d.class_names && strcmp(d.class_names[99], "class99") == 0;
    bn_dataset_free(&d);
    CHECK(ok);
    CHECK_OK(load("cifar100", dir, 0, 0, "label=coarse", &d));
    ok = d.num_classes == 20 && d.class_names && strcmp(d.class_names[19], "class19") == 0;
    bn_dataset_free(&d);
    CHECK(ok);

    in_dir(path, sizeof path, dir, "batches.meta.txt");
    CHECK(write_names(dir, "batches.meta.txt", 9, "\n") == 0);
    int r = load_fails("cifar10", dir, 0, path, "9 lines of class names, expected 10");
    if (r != BN_PASS) return r;
    CHECK(write_names(dir, "batches.meta.txt", 11, "") == 0);
    r = load_fails("cifar10", dir, 0, path, "11 lines of class names, expected 10");
    if (r != BN_PASS) return r;
    CHECK(write_names(dir, "batches.meta.txt", 5, "\nclass6\nclass7\nclass8\nclass9\n") == 0);
    r = load_fails("cifar10", dir, 0, path, "line 6 is empty");
    if (r != BN_PASS) return r;
    CHECK(ft_write_bytes(path, "a\0b\nc\n", 6) == 0);
    r = load_fails("cifar10", dir, 0, path, "holds a NUL byte");
    if (r != BN_PASS) return r;
    CHECK(ft_write_bytes(path, "", 0) == 0);
    r = load_fails("cifar10", dir, 0, path, "0 lines of class names, expected 10");
    if (r != BN_PASS) return r;
    in_dir(path, sizeof path, dir, "coarse_label_names.txt");
    CHECK(write_names(dir, "coarse_label_names.txt", 100, "") == 0);
    CHECK_ERR(load("cifar100", dir, 0, 0, "label=coarse", &d), BN_ERR_DATA, "100 lines of class names, expected 20");
    CHECK(strstr(bn_last_error(), path) != NULL);
    return BN_PASS;
}

BN_TEST(cifar_formats_in_the_table)
{
    char dir[512];
    make_dir(dir, sizeof dir, "c-table");
    CHECK(write_batch(dir, "data_batch_1.bin", 0, 3, 0) == 0);
    CHECK(write_batch(dir, "train.bin", 0, 2, 1) == 0);
    const bn_data_format *f10, *f100;
    CHECK_OK(bn_data_format_find("cifar10", "--dataset", &f10));
    CHECK_OK(bn_data_format_find("cifar100", "--dataset", &f100));
    CHECK(f10->keys == NULL && f100->keys && strstr(f100->keys, "fine|coarse"));
    char list[512];
    bn_data_format_list(list, sizeof list);
    CHECK(strstr(list, "idx, cifar10, cifar100") != NULL);
    bn_options opts = {.file = "<test>", .section = strdup("data")};
    bn_data_request rq = request("cifar10", dir, 1, 0, &opts);
    bn_dataset d;
    CHECK_OK(bn_data_load(f10, &rq, &d));
    int r = check_examples(&d, 0, 3);
    CHECK(d.num_classes == 10);
    bn_dataset_free(&d);
    if (r != BN_PASS) return r;
    CHECK_OK(bn_options_add(&opts, "label", "coarse", 3));
    rq = request("cifar100", dir, 1, 0, &opts);
    bn_status s = bn_data_load(f100, &rq, &d);
    int ok = s == BN_OK && d.count == 2 && d.num_classes == 20 && opts.items[0].used;
    bn_dataset_free(&d);
    bn_options_clear(&opts);
    CHECK_MSG(ok, "%s", bn_last_error());
    rq = request("cifar10", dir, 0, 0, &opts);
    CHECK_ERR(bn_data_load(f10, &rq, &d), BN_ERR_DATA, "c-table/test_batch.bin: not found");
    return BN_PASS;
}

/* A file of 700000 records (2.1 GB, sparse) is refused from its size before anything is read. */
BN_TEST(cifar_size_checked_before_reading)
{
    char dir[512], path[600];
    make_dir(dir, sizeof dir, "c-huge");
    FILE *f = fopen(in_dir(path, sizeof path, dir, "test_batch.bin"), "wb");
    CHECK(f != NULL);
    int cut = ftruncate(fileno(f), (off_t)700000 * REC10);
    fclose(f);
    if (cut != 0) BN_SKIP_TEST("cannot make a 2.1 GB sparse file in %s", dir);
    int r = load_fails("cifar10", dir, 0, dir, "700000 examples of 3x32x32 make 2150400000 bytes, past the limit");
    unlink(path);
    return r;
}
