/* test_folder.c - the `folder` dataset format: known pixels read back exactly at the model's
 * size, resizing and cropping to known values, gray and colour converted both ways, the shape
 * taken from the first image when there is no model, class order, limits, the notes and
 * progress lines, every malformed tree as a one-line error naming its path, and the writer's
 * round trip. */
#include "testing.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "folder.h"
#include "image_testing.h"
#include "io/image.h"

static char err[1 << 14];

/* "<test directory>/folder-NAME", made afresh (the test runner removes the directory). */
static const char *root_path(const char *name)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/folder-%s", bn_test_tmpdir(), name);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", path, path);
    return system(cmd) == 0 ? path : NULL;
}

/* Makes ROOT/REL and its parents. */
static int make_dirs(const char *root, const char *rel)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/%s'", root, rel);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *file_path(const char *root, const char *rel)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    return path;
}

/* w x h pixels of `channels` from a seed, as a PNG at ROOT/REL. */
static int noise_png(const char *root, const char *rel, int channels, int w, int h, unsigned seed, unsigned char *px)
{
    for (int i = 0; i < w * h * channels; i++) px[i] = (unsigned char)((seed = seed * 1103515245u + 12345u) >> 16);
    return bn_image_write_png_color(file_path(root, rel), px, channels, w, h) == BN_OK ? 0 : -1;
}

/* Loads ROOT's split into d with the model shape fit (c, h, w; zeros: none), quietly unless
 * asked, stderr captured in err. */
static bn_status load_split(const char *root, int train, int c, int h, int w, int limit, int quiet, bn_dataset *d)
{
    bn_data_request rq = {.format = "folder", .path = root, .fit = {.c = c, .h = h, .w = w}, .train = train,
                          .limit = limit, .quiet = quiet};
    /* What the load writes on stderr: the runner keeps it aside (bn_test_stderr). */
    size_t mark = strlen(bn_test_stderr());
    bn_status s = bn_folder_load(&rq, d);
    snprintf(err, sizeof err, "%s", bn_test_stderr() + mark);
    return s;
}

BN_TEST(folder_reads_png_pixels_exactly_at_the_model_size)
{
    const char *root = root_path("exact");
    CHECK(root && make_dirs(root, "train/cat") == 0 && make_dirs(root, "train/dog") == 0 &&
          make_dirs(root, "test/cat") == 0 && make_dirs(root, "test/dog") == 0);
    static unsigned char px[5][4 * 3 * 3];
    CHECK(noise_png(root, "train/cat/a.png", 3, 4, 3, 1, px[0]) == 0);
    CHECK(noise_png(root, "train/cat/b.png", 3, 4, 3, 2, px[1]) == 0);
    CHECK(noise_png(root, "train/dog/c.png", 3, 4, 3, 3, px[2]) == 0);
    CHECK(noise_png(root, "test/dog/d.png", 3, 4, 3, 4, px[3]) == 0);
    CHECK(noise_png(root, "test/cat/e.png", 3, 4, 3, 5, px[4]) == 0);
    bn_dataset d;
    CHECK_OK(load_split(root, 1, 3, 3, 4, 0, 1, &d));
    CHECK(d.count == 3 && d.channels == 3 && d.height == 3 && d.width == 4 && d.num_classes == 2);
    CHECK(d.pixels && !d.values && d.labels[0] == 0 && d.labels[1] == 0 && d.labels[2] == 1);
    CHECK(strcmp(d.class_names[0], "cat") == 0 && strcmp(d.class_names[1], "dog") == 0);
    for (int e = 0; e < 3; e++)
        for (int c = 0; c < 3; c++)
            for (int p = 0; p < 12; p++)
                CHECK_MSG(d.pixels[e * 36 + c * 12 + p] == px[e][3 * p + c], "example %d channel %d pixel %d", e, c, p);
    CHECK_MSG(err[0] == '\0', "quiet, yet: %s", err);
    bn_dataset_free(&d);
    /* The test split: its own images, the training split's classes. */
    CHECK_OK(load_split(root, 0, 3, 3, 4, 0, 1, &d));
    CHECK(d.count == 2 && d.labels[0] == 0 && d.labels[1] == 1 && strcmp(d.class_names[1], "dog") == 0);
    CHECK(d.pixels[0] == px[4][0] && d.pixels[36] == px[3][0] && d.pixels[36 + 12] == px[3][1]);
    bn_dataset_free(&d);
    return BN_PASS;
}

BN_TEST(folder_resizes_and_crops_a_non_square_image_to_known_values)
{
    const char *root = root_path("resize");
    CHECK(root && make_dirs(root, "train/a") == 0);
    /* 4 wide, 2 high into 1x2x2: scaled by 1 (2 high stays), the middle 2 columns kept. */
    const unsigned char wide[] = {10, 20, 30, 40, 50, 60, 70, 80};
    CHECK_OK(bn_image_write_png_color(file_path(root, "train/a/1.png"), wide, 1, 4, 2));
    /* 2 wide, 1 high into 1x2x2 by 2: bilinear, centres 1/4 and 3/4 of the way across:
     * 0 and 200 become 50 and 150 on both rows. */
    const unsigned char pair[] = {0, 200};
    CHECK_OK(bn_image_write_png_color(file_path(root, "train/a/2.png"), pair, 1, 2, 1));
    /* 2 wide, 4 high into 1x2x2: no resampling, rows 1 and 2 kept. */
    const unsigned char tall[] = {0, 4, 8, 12, 100, 100, 100, 100};
    CHECK_OK(bn_image_write_png_color(file_path(root, "train/a/3.png"), tall, 1, 2, 4));
    bn_dataset d;
    CHECK_OK(load_split(root, 1, 1, 2, 2, 0, 1, &d));
    CHECK(d.count == 3);
    const unsigned char want[] = {20, 30, 60, 70, 50, 150, 50, 150};
    for (int i = 0; i < 8; i++)
        CHECK_MSG(d.pixels[i] == want[i], "pixel %d is %d, expected %d", i, d.pixels[i], want[i]);
    CHECK(d.pixels[8] == 8 && d.pixels[9] == 12 && d.pixels[10] == 100 && d.pixels[11] == 100);
    bn_dataset_free(&d);
    CHECK_OK(load_split(root, 1, 1, 1, 1, 0, 1, &d));
    /* Into 1x1x1, the odd column or row of margin at the end: 4x2 halved to 2x1 keeps its left
     * half, (10 + 20 + 50 + 60) / 4 = 35; 2x1 keeps its left pixel; 2x4 halved to 1x2 keeps
     * its top, (0 + 4 + 8 + 12) / 4 = 6. */
    CHECK_MSG(d.pixels[0] == 35 && d.pixels[1] == 0 && d.pixels[2] == 6, "%d %d %d", d.pixels[0], d.pixels[1],
              d.pixels[2]);
    bn_dataset_free(&d);
    return BN_PASS;
}

BN_TEST(folder_converts_gray_to_rgb_and_rgb_to_gray)
{
    const char *root = root_path("convert");
    CHECK(root && make_dirs(root, "train/x") == 0);
    const unsigned char pgm[] = "P5 2 1 255\n\x05\xfa";
    CHECK(it_write_bytes(file_path(root, "train/x/gray.pgm"), pgm, sizeof pgm - 1) == 0);
    const unsigned char ppm[] = "P6 2 1 255\n\xff\x00\x00\x10\x80\xf0";
    CHECK(it_write_bytes(file_path(root, "train/x/rgb.ppm"), ppm, sizeof ppm - 1) == 0);
    bn_dataset d;
    CHECK_OK(load_split(root, 1, 3, 1, 2, 0, 1, &d));
    /* gray.pgm sorts first: its two values in each of three planes; then rgb.ppm as planes. */
    const unsigned char rgb_want[] = {5, 250, 5, 250, 5, 250, 255, 16, 0, 128, 0, 240};
    CHECK(memcmp(d.pixels, rgb_want, sizeof rgb_want) == 0);
    bn_dataset_free(&d);
    CHECK_OK(load_split(root, 1, 1, 1, 2, 0, 1, &d));
    CHECK(d.pixels[0] == 5 && d.pixels[1] == 250);
    CHECK(d.pixels[2] == bn_image_luminance(255, 0, 0) && d.pixels[3] == bn_image_luminance(16, 128, 240));
    bn_dataset_free(&d);
    return BN_PASS;
}

BN_TEST(folder_without_a_model_takes_the_first_training_image_shape)
{
    const char *root = root_path("noshape");
    CHECK(root && make_dirs(root, "train/a") == 0 && make_dirs(root, "test/a") == 0);
    static unsigned char px[64 * 64 * 3];
    CHECK(noise_png(root, "train/a/1.png", 1, 5, 4, 1, px) == 0);
    CHECK(noise_png(root, "train/a/2.png", 3, 50, 40, 2, px) == 0);
    CHECK(noise_png(root, "test/a/3.png", 3, 9, 9, 3, px) == 0);
    bn_dataset d;
    CHECK_OK(load_split(root, 1, 0, 0, 0, 0, 1, &d));
    CHECK_MSG(d.count == 2 && d.channels == 1 && d.height == 4 && d.width == 5, "%d of %dx%dx%d", d.count, d.channels,
              d.height, d.width);
    bn_dataset_free(&d);
    /* The test split is fitted to the training split's first image too. */
    CHECK_OK(load_split(root, 0, 0, 0, 0, 0, 1, &d));
    CHECK(d.count == 1 && d.channels == 1 && d.height == 4 && d.width == 5);
    bn_dataset_free(&d);
    /* A colour first image makes an RGB set. */
    CHECK(noise_png(root, "train/a/0.png", 3, 6, 6, 4, px) == 0);
    CHECK_OK(load_split(root, 1, 0, 0, 0, 0, 1, &d));
    CHECK(d.count == 3 && d.channels == 3 && d.height == 6 && d.width == 6);
    CHECK(d.pixels[0] == px[0] && d.pixels[36] == px[1]);
    bn_dataset_free(&d);
    return BN_PASS;
}

BN_TEST(folder_class_order_names_limit_and_skipped_files)
{
    const char *root = root_path("order");
    static const char *const classes[] = {"c9", "b", "c10", "a"};
    for (int i = 0; i < 4; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "train/%s", classes[i]);
        CHECK(root && make_dirs(root, rel) == 0);
    }
    static unsigned char px[16];
    /* Each image's one pixel says which it is: class a gets 1 and 2, b 3, c10 4, c9 5 and 6. */
    static const char *const files[] = {"a/y.PNG", "a/x.png", "b/z.Jpeg", "c10/q.pgm", "c9/p2.ppm", "c9/p1.png"};
    static const unsigned char values[] = {2, 1, 3, 4, 6, 5};
    for (int i = 0; i < 6; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "train/%s", files[i]);
        memset(px, values[i], 3);
        if (strstr(rel, "Jpeg")) {
#ifdef BN_NO_JPEG
            snprintf(rel, sizeof rel, "train/b/z.png");
#endif
            if (it_write_jpeg(file_path(root, rel), px, 1, 1, 1, 100, 0) == 0) continue;
        }
        if (strstr(rel, ".pgm") || strstr(rel, ".ppm")) {
            unsigned char pnm[16];
            memcpy(pnm, strstr(rel, ".pgm") ? "P5 1 1 255\n" : "P6 1 1 255\n", 11);
            memset(pnm + 11, values[i], 3);
            CHECK(it_write_bytes(file_path(root, rel), pnm, strstr(rel, ".pgm") ? 12 : 14) == 0);
        } else {
            CHECK_OK(bn_image_write_png_color(file_path(root, rel), px, 1, 1, 1));
        }
    }
    /* Skipped with a note: a text file, a folder in a class folder, a file beside the classes;
     * ignored: hidden files and folders. */
    CHECK(it_write_bytes(file_path(root, "train/a/notes.txt"), "hi\n", 3) == 0);
    CHECK(make_dirs(root, "train/b/more") == 0 && make_dirs(root, "train/.cache") == 0);
    CHECK(it_write_bytes(file_path(root, "train/README"), "hi\n", 3) == 0);
    CHECK(it_write_bytes(file_path(root, "train/a/.hidden.png"), "not an image", 12) == 0);
    bn_dataset d;
    CHECK_OK(load_split(root, 1, 1, 1, 1, 0, 1, &d));
    CHECK(d.count == 6 && d.num_classes == 4);
    static const char *const sorted[] = {"a", "b", "c10", "c9"};
    for (int c = 0; c < 4; c++)
        CHECK_MSG(strcmp(d.class_names[c], sorted[c]) == 0, "class %d: %s", c, d.class_names[c]);
    const int labels[] = {0, 0, 1, 2, 3, 3};
    for (int i = 0; i < 6; i++) {
        CHECK_MSG(d.labels[i] == labels[i], "example %d: label %d", i, d.labels[i]);
        CHECK_MSG(abs(d.pixels[i] - (i + 1)) <= 1, "example %d: pixel %d", i, d.pixels[i]);
    }
    char want[1400];
    snprintf(want, sizeof want, "blobnet: note: %s/train: skipped 3 entries that are not class folders or images "
             "(*.png, *.pgm, *.ppm, *.jpg, *.jpeg), such as ", root);
    CHECK_MSG(strncmp(err, want, strlen(want)) == 0 && strchr(err, '\n') == err + strlen(err) - 1, "%s", err);
    bn_dataset_free(&d);
    /* The first 3 of the list, class by class: both of a, then b's; the classes stay four. */
    CHECK_OK(load_split(root, 1, 1, 1, 1, 3, 0, &d));
    CHECK(d.count == 3 && d.num_classes == 4 && d.labels[2] == 1 && d.pixels[0] == 1 && d.pixels[1] == 2);
    snprintf(want, sizeof want, "blobnet: decoding %s/train: 3 images\nblobnet: %s/train: 3 images (the first of 6), "
             "1x1x1, 4 classes: a, b, c10, c9\n", root, root);
    CHECK_MSG(strstr(err, want) != NULL, "no\n%s\nin\n%s", want, err);
    bn_dataset_free(&d);
    return BN_PASS;
}

/* load_split fails with BN_ERR_DATA, a message starting with `starts` and holding needle,
 * on one line. */
static int load_fails(const char *root, int train, const char *starts, const char *needle)
{
    bn_dataset d = {.count = 7};
    bn_clear_error();
    bn_status s = load_split(root, train, 1, 2, 2, 0, 1, &d);
    CHECK_MSG(s == BN_ERR_DATA, "status %d: %s", (int)s, bn_last_error());
    const char *msg = bn_last_error();
    CHECK_MSG(strncmp(msg, starts, strlen(starts)) == 0 && strstr(msg, needle) && !strchr(msg, '\n'),
              "\"%s\" does not start with \"%s\" or lacks \"%s\"", msg, starts, needle);
    CHECK(d.count == 0 && d.pixels == NULL && d.labels == NULL);
    return BN_PASS;
}

BN_TEST(folder_malformed_trees_are_one_line_errors_naming_the_path)
{
    const char *root = root_path("bad");
    char top[512], path[1024];
    CHECK(root);
    snprintf(top, sizeof top, "%s", root);
    snprintf(path, sizeof path, "%s/missing", top);
    if (load_fails(path, 1, path, "data folder not found") != BN_PASS) return BN_FAIL;
    CHECK(it_write_bytes(file_path(top, "file"), "x", 1) == 0);
    snprintf(path, sizeof path, "%s/file", top);
    if (load_fails(path, 1, path, "not a folder") != BN_PASS) return BN_FAIL;
    snprintf(path, sizeof path, "%s/train", top);
    if (load_fails(top, 1, path, "no such folder; the folder format reads") != BN_PASS) return BN_FAIL;
    CHECK(make_dirs(top, "train") == 0);
    if (load_fails(top, 1, path, "no class folders") != BN_PASS) return BN_FAIL;
    CHECK(make_dirs(top, "train/cat") == 0 && make_dirs(top, "train/dog") == 0);
    snprintf(path, sizeof path, "%s/train/cat", top);
    if (load_fails(top, 1, path, "no images (*.png, *.pgm, *.ppm, *.jpg, *.jpeg)") != BN_PASS) return BN_FAIL;
    static unsigned char px[16];
    CHECK(noise_png(top, "train/cat/1.png", 1, 2, 2, 1, px) == 0);
    CHECK(noise_png(top, "train/dog/1.png", 1, 2, 2, 2, px) == 0);
    /* An image that does not decode: the file and the decoder's reason. */
    CHECK(it_write_bytes(file_path(top, "train/dog/2.png"), "plain text\n", 11) == 0);
    snprintf(path, sizeof path, "%s/train/dog/2.png", top);
    if (load_fails(top, 1, path, "not a PNG or PGM") != BN_PASS) return BN_FAIL;
    CHECK(unlink(path) == 0);
    bn_dataset good;
    CHECK_OK(load_split(top, 1, 1, 2, 2, 0, 1, &good));
    bn_dataset_free(&good);
    /* test/: missing, a class short, a class too many. */
    snprintf(path, sizeof path, "%s/test", top);
    if (load_fails(top, 0, path, "no such folder") != BN_PASS) return BN_FAIL;
    CHECK(make_dirs(top, "test/cat") == 0 && noise_png(top, "test/cat/1.png", 1, 2, 2, 3, px) == 0);
    if (load_fails(top, 0, path, "no folder for class 'dog' of") != BN_PASS) return BN_FAIL;
    CHECK(make_dirs(top, "test/dog") == 0 && make_dirs(top, "test/eel") == 0);
    snprintf(path, sizeof path, "%s/test/eel", top);
    if (load_fails(top, 0, path, "a class folder that") != BN_PASS) return BN_FAIL;
    return BN_PASS;
}

/* With many images and two bad ones, the error is always the first bad one's, however the
 * threads share the work. */
BN_TEST(folder_reports_the_first_bad_image_whatever_the_threads_do)
{
    const char *root = root_path("threads");
    CHECK(root && make_dirs(root, "train/a") == 0);
    static unsigned char px[8 * 8];
    for (int i = 0; i < 60; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "train/a/%02d.png", i);
        if (i == 23 || i == 41) CHECK(it_write_bytes(file_path(root, rel), "\x89PNG\r\n\x1a\nbroken", 14) == 0);
        else CHECK(noise_png(root, rel, 1, 8, 8, (unsigned)i, px) == 0);
    }
    char want[700];
    snprintf(want, sizeof want, "%s/train/a/23.png: bad PNG", root);
    for (int run = 0; run < 5; run++) {
        bn_dataset d;
        CHECK(load_split(root, 1, 1, 4, 4, 0, 1, &d) == BN_ERR_DATA);
        CHECK_MSG(strncmp(bn_last_error(), want, strlen(want)) == 0, "run %d: %s", run, bn_last_error());
    }
    return BN_PASS;
}

BN_TEST(folder_writer_round_trips_and_leaves_nothing_on_failure)
{
    const char *root = root_path("write");
    CHECK(root);
    char top[512], path[1024];
    CHECK(snprintf(top, sizeof top, "%s/set", root) < (int)sizeof top);
    bn_dataset d;
    CHECK_OK(bn_dataset_alloc(&d, "test", 5, 3, 3, 2, 3, 0));
    unsigned state = 5;
    for (size_t i = 0; i < 5 * 18; i++) d.pixels[i] = (unsigned char)((state = state * 1103515245u + 12345u) >> 16);
    const uint16_t labels[] = {0, 0, 1, 2, 2};
    memcpy(d.labels, labels, sizeof labels);
    char *names[] = {"bird", "cat", "deer"};
    CHECK_OK(bn_dataset_set_class_names(&d, names));
    CHECK_OK(bn_folder_write(&d, top, "train"));
    CHECK_OK(bn_folder_write(&d, top, "test"));
    struct stat st;
    CHECK(stat(file_path(top, "train/cat/00002.png"), &st) == 0);
    CHECK(stat(file_path(top, "test/deer/00004.png"), &st) == 0);
    bn_dataset back;
    CHECK_OK(load_split(top, 0, 3, 3, 2, 0, 1, &back));
    CHECK(back.count == 5 && back.num_classes == 3 && strcmp(back.class_names[2], "deer") == 0);
    CHECK(memcmp(back.labels, d.labels, sizeof labels) == 0 && memcmp(back.pixels, d.pixels, 5 * 18) == 0);
    bn_dataset_free(&back);
    /* Written twice: refused, the first left as it was. */
    snprintf(path, sizeof path, "%s/train: already exists", top);
    CHECK_ERR(bn_folder_write(&d, top, "train"), BN_ERR_USAGE, path);
    /* Two classes of one name: the second folder cannot be made, and nothing is left. */
    char *twins[] = {"bird", "bird", "deer"};
    CHECK_OK(bn_dataset_set_class_names(&d, twins));
    snprintf(path, sizeof path, "%s/val", root);
    CHECK_ERR(bn_folder_write(&d, path, "x"), BN_ERR_IO, "/bird: cannot make the folder: File exists");
    char cmd[1200], out[256];
    snprintf(cmd, sizeof cmd, "ls -A '%s'", path);
    CHECK_MSG(bn_test_run(cmd, out, sizeof out) == 0 && out[0] == '\0', "left: %s", out);
    char *slash[] = {"bird", "a/b", "deer"};
    CHECK_OK(bn_dataset_set_class_names(&d, slash));
    CHECK_ERR(bn_folder_write(&d, path, "x"), BN_ERR_USAGE, "class 1's name 'a/b' cannot name a folder");
    bn_dataset_free(&d);
    /* Without names, indices as wide as the largest: 00 .. 10 sort as 0 .. 10. */
    CHECK_OK(bn_dataset_alloc(&d, "test", 11, 1, 1, 1, 11, 0));
    for (int i = 0; i < 11; i++) d.labels[i] = (uint16_t)i, d.pixels[i] = (unsigned char)(i * 20);
    CHECK_OK(bn_folder_write(&d, root, "train"));
    CHECK(stat(file_path(root, "train/00/00000.png"), &st) == 0);
    CHECK(stat(file_path(root, "train/10/00010.png"), &st) == 0);
    CHECK_OK(load_split(root, 1, 1, 1, 1, 0, 1, &back));
    CHECK(back.count == 11 && back.labels[10] == 10 && back.pixels[10] == 200);
    bn_dataset_free(&back);
    bn_dataset_free(&d);
    CHECK_OK(bn_dataset_alloc(&d, "test", 1, 1, 1, 1, 1, 1));
    CHECK_ERR(bn_folder_write(&d, root, "floats"), BN_ERR_USAGE, "not float values");
    bn_dataset_free(&d);
    return BN_PASS;
}
