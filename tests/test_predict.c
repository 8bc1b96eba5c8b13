/* test_predict.c - `blobnet predict`: the output formats, one-line errors for files that are
 * not images while the others are still predicted, agreement with `blobnet test` on MNIST
 * test digits exported as PNG and PGM, and for models of other shapes (colour, any size) the
 * same inputs as the folder dataset format makes of the same files. */
#include "testing.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/net.h"
#include "folder.h"
#include "idx.h"
#include "image_testing.h"
#include "io/digit.h"
#include "io/image.h"
#include "io/json.h"
#include "train/checkpoint.h"
#include "train/evaluate.h"

static char out[1 << 16], err[1 << 14];

static const char *tmp_path(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", bn_test_tmpdir(), name);
    return buf;
}

static int write_file(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(bytes, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Runs `blobnet predict ARGS` with stdout into out and stderr into err; returns the exit code. */
static int predict(const char *args)
{
    char errpath[512], cmd[8192];
    tmp_path(errpath, sizeof errpath, "predict.err");
    snprintf(cmd, sizeof cmd, "(%s predict %s --device cpu 2>%s)", bn_test_cli(), args, errpath);
    int rc = bn_test_run(cmd, out, sizeof out);
    FILE *f = fopen(errpath, "r");
    size_t n = f ? fread(err, 1, sizeof err - 1, f) : 0;
    err[n] = '\0';
    if (f) fclose(f);
    return rc;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* LeNet's initial weights, saved without any data: enough for the format and error tests. */
static int save_initial_weights(const char *path)
{
    bn_net *net;
    CHECK_OK(bn_net_from_file("models/lenet.cfg", &net));
    CHECK_OK(bn_net_setup(net, 1, NULL, 0, 1));
    CHECK_OK(bn_checkpoint_save(path, net, NULL, NULL));
    bn_net_free(net);
    return BN_PASS;
}

/* A bright upright bar on black, 60x90: something like a 1. */
static void bar_digit(unsigned char *px)
{
    for (int y = 0; y < 90; y++)
        for (int x = 0; x < 60; x++) px[y * 60 + x] = (unsigned char)(x >= 25 && x < 35 && y >= 10 && y < 80 ? 255 : 0);
}

BN_TEST(predict_reports_bad_files_and_predicts_the_rest)
{
    char w[512], png[512], pgm[512], text[512], missing[512], empty[512], blank[512], args[4096];
    if (save_initial_weights(tmp_path(w, sizeof w, "initial.safetensors")) != BN_PASS) return BN_FAIL;
    static unsigned char px[60 * 90];
    bar_digit(px);
    CHECK_OK(bn_image_write_png(tmp_path(png, sizeof png, "bar.png"), px, 60, 90));
    char header[32];
    int h = snprintf(header, sizeof header, "P5\n60 90\n255\n");
    static unsigned char pgm_bytes[32 + sizeof px];
    memcpy(pgm_bytes, header, (size_t)h);
    memcpy(pgm_bytes + h, px, sizeof px);
    CHECK(write_file(tmp_path(pgm, sizeof pgm, "bar.pgm"), pgm_bytes, h + sizeof px) == 0);
    CHECK(write_file(tmp_path(text, sizeof text, "notes.png"), "not an image\n", 13) == 0);
    CHECK(write_file(tmp_path(empty, sizeof empty, "empty.pgm"), "", 0) == 0);
    static const unsigned char black[16 * 16];
    CHECK_OK(bn_image_write_png(tmp_path(blank, sizeof blank, "blank.png"), black, 16, 16));
    tmp_path(missing, sizeof missing, "missing.png");

    snprintf(args, sizeof args, "models/lenet.cfg %s %s %s %s %s %s %s", w, png, text, missing, pgm, empty, blank);
    int rc = predict(args);
    CHECK_MSG(rc == 1, "exit %d\nstdout:\n%s\nstderr:\n%s", rc, out, err);
    /* Two predictions, in the order given, each with three classes and probabilities. */
    CHECK_MSG(count_lines(out) == 2, "%s", out);
    char want[1600];
    snprintf(want, sizeof want, "%s: ", png);
    CHECK_MSG(strncmp(out, want, strlen(want)) == 0, "%s", out);
    snprintf(want, sizeof want, "\n%s: ", pgm);
    CHECK_MSG(strstr(out, want), "%s", out);
    const char *line2 = strchr(out, '\n') + 1;
    int c1, c2, c3;
    double p1, p2, p3;
    CHECK_MSG(sscanf(out + strlen(png) + 1, " %d (%lf%%), %d (%lf%%), %d (%lf%%)", &c1, &p1, &c2, &p2, &c3, &p3) == 6,
              "%s", out);
    CHECK(c1 != c2 && c2 != c3 && c1 != c3 && p1 >= p2 && p2 >= p3 && p1 + p2 + p3 <= 100.01);
    /* The PNG and the PGM hold the same digit: the same answer. */
    char first[256], second[256];
    snprintf(first, sizeof first, "%.*s", (int)(strchr(out, '\n') - strchr(out, ':')), strchr(out, ':'));
    snprintf(second, sizeof second, "%.*s", (int)(strchr(line2, '\n') - strchr(line2, ':')), strchr(line2, ':'));
    CHECK_MSG(strcmp(first, second) == 0, "%s vs %s", first, second);
    /* One error line per bad file, naming it and the problem. */
    CHECK_MSG(count_lines(err) == 4, "%s", err);
    const char *const reasons[][2] = {{text, "not a PNG or PGM"}, {missing, "cannot open: No such file"},
                                      {empty, "the file is empty"},
                                      {blank, "no digit: the image is blank (every pixel is 0)\n"}};
    for (int i = 0; i < 4; i++) {
        snprintf(want, sizeof want, "blobnet: error: %s: ", reasons[i][0]);
        const char *at = strstr(err, want);
        CHECK_MSG(at && strstr(at, reasons[i][1]) && strstr(at, reasons[i][1]) < strchr(at, '\n'), "no '%s%s' in:\n%s",
                  want, reasons[i][1], err);
    }
    /* A blank image draws no --invert hint: inverting it would leave it blank. */
    CHECK_MSG(!strstr(err, "--invert"), "%s", err);
    /* All good: exit 0 and nothing on stderr. */
    snprintf(args, sizeof args, "models/lenet.cfg %s %s", w, png);
    CHECK_MSG(predict(args) == 0 && err[0] == '\0', "%s", err);
    /* The same digit dark on light: a warning and no digit without --invert, the same answer with it. */
    char light[512];
    for (size_t i = 0; i < sizeof px; i++) px[i] = (unsigned char)(255 - px[i]);
    CHECK_OK(bn_image_write_png(tmp_path(light, sizeof light, "light.png"), px, 60, 90));
    snprintf(args, sizeof args, "models/lenet.cfg %s %s", w, light);
    CHECK(predict(args) == 1 && out[0] == '\0');
    snprintf(want, sizeof want, "blobnet: warning: %s: the background is light: dark-on-light images need --invert\n"
             "blobnet: error: %s: no digit", light, light);
    CHECK_MSG(strncmp(err, want, strlen(want)) == 0, "%s", err);
    snprintf(args, sizeof args, "models/lenet.cfg %s %s --invert", w, light);
    CHECK_MSG(predict(args) == 0 && err[0] == '\0', "%s", err);
    CHECK_MSG(strncmp(strchr(out, ':'), first, strlen(first)) == 0, "%s vs %s", out, first);
    return BN_PASS;
}

/* A 3x3 image is predicted with a warning that it cannot hold a digit; a blank white one is
 * refused as blank, with neither the light-background warning nor an --invert hint. */
BN_TEST(predict_warns_about_tiny_images_and_gives_blank_ones_no_hint)
{
    char w[512], tiny[512], white[512], args[2048];
    if (save_initial_weights(tmp_path(w, sizeof w, "initial.safetensors")) != BN_PASS) return BN_FAIL;
    static const unsigned char dot[9] = {0, 255, 0, 0, 255, 0, 0, 255, 0};
    CHECK_OK(bn_image_write_png(tmp_path(tiny, sizeof tiny, "tiny.png"), dot, 3, 3));
    snprintf(args, sizeof args, "models/lenet.cfg %s %s", w, tiny);
    CHECK_MSG(predict(args) == 0 && count_lines(out) == 1, "stdout:\n%s\nstderr:\n%s", out, err);
    char want[1024];
    snprintf(want, sizeof want, "blobnet: warning: %s: the image is 3x3 pixels, too small to hold a digit (7 at "
             "least); the prediction is a guess\n", tiny);
    CHECK_MSG(strcmp(err, want) == 0, "%s", err);
    static unsigned char paper[20 * 20];
    memset(paper, 255, sizeof paper);
    CHECK_OK(bn_image_write_png(tmp_path(white, sizeof white, "white.png"), paper, 20, 20));
    snprintf(args, sizeof args, "models/lenet.cfg %s %s", w, white);
    CHECK(predict(args) == 1);
    snprintf(want, sizeof want, "blobnet: error: %s: no digit: the image is blank (every pixel is 255)\n", white);
    CHECK_MSG(strcmp(err, want) == 0, "%s", err);
    return BN_PASS;
}

BN_TEST(predict_json_is_one_object_per_line)
{
    char w[512], png[512], odd[512], args[4096];
    if (save_initial_weights(tmp_path(w, sizeof w, "initial.safetensors")) != BN_PASS) return BN_FAIL;
    static unsigned char px[60 * 90];
    bar_digit(px);
    CHECK_OK(bn_image_write_png(tmp_path(png, sizeof png, "bar.png"), px, 60, 90));
    /* A name JSON must escape. */
    CHECK_OK(bn_image_write_png(tmp_path(odd, sizeof odd, "a \"quoted\" name.png"), px, 60, 90));
    snprintf(args, sizeof args, "models/lenet.cfg %s %s '%s' --json", w, png, odd);
    CHECK_MSG(predict(args) == 0, "%s%s", out, err);
    CHECK_MSG(count_lines(out) == 2, "%s", out);
    const char *line = out;
    for (int i = 0; i < 2; i++) {
        const char *end = strchr(line, '\n');
        bn_json *v;
        CHECK_OK(bn_json_parse(line, (size_t)(end - line), &v));
        const bn_json *file = bn_json_get(v, "file"), *top = bn_json_get(v, "top");
        CHECK(v->count == 2 && file && file->type == BN_JSON_STRING && top && top->type == BN_JSON_ARRAY);
        CHECK_MSG(strcmp(file->text, i ? odd : png) == 0, "%s", file->text);
        CHECK(top->count == 3);
        double sum = 0, last = 2;
        for (size_t k = 0; k < 3; k++) {
            const bn_json *cls = bn_json_get(top->items[k], "class"), *p = bn_json_get(top->items[k], "p");
            uint64_t c;
            CHECK(cls && bn_json_u64(cls, &c) && c < 10 && p && p->type == BN_JSON_NUMBER);
            CHECK(p->number <= last && p->number >= 0);
            last = p->number;
            sum += p->number;
        }
        CHECK(sum <= 1.0 + 1e-5);
        bn_json_free(v);
        line = end + 1;
    }
    return BN_PASS;
}

/* A file name holding a newline and an escape byte is printed with them as \xNN, its UTF-8 kept:
 * one line an image, and nothing that drives the terminal. */
BN_TEST(predict_escapes_control_bytes_in_file_names)
{
    char w[512], dir[512], odd[600], args[2048];
    if (save_initial_weights(tmp_path(w, sizeof w, "initial.safetensors")) != BN_PASS) return BN_FAIL;
    static unsigned char px[60 * 90];
    bar_digit(px);
    CHECK(mkdir(tmp_path(dir, sizeof dir, "control-names"), 0755) == 0);
    snprintf(odd, sizeof odd, "%s/two\nlines\x1b[31m na\xc3\xafve.png", dir);
    CHECK_OK(bn_image_write_png(odd, px, 60, 90));
    /* The shell's glob passes the name, which quoting could not. */
    snprintf(args, sizeof args, "models/lenet.cfg %s '%s'/*.png", w, dir);
    CHECK_MSG(predict(args) == 0 && err[0] == '\0', "stdout:\n%s\nstderr:\n%s", out, err);
    CHECK_MSG(count_lines(out) == 1, "%s", out);
    char want[700];
    snprintf(want, sizeof want, "%s/two\\x0alines\\x1b[31m na\xc3\xafve.png: ", dir);
    CHECK_MSG(strncmp(out, want, strlen(want)) == 0, "%s lacks %s", out, want);
    CHECK(strchr(out, '\x1b') == NULL);
    return BN_PASS;
}

/* ---- models of other shapes ---- */

/* TMP/NAME.cfg: an input of c x h x w, a dense layer and softmax; its initial weights saved
 * beside it as NAME.safetensors. */
static int save_small_model(const char *name, int c, int h, int w, char *cfg, char *weights, size_t cap)
{
    char text[256], file[64];
    snprintf(text, sizeof text, "[input]\nchannels = %d\nheight = %d\nwidth = %d\n[dense]\noutputs = 5\n"
             "[softmax_ce]\n", c, h, w);
    snprintf(file, sizeof file, "%s.cfg", name);
    CHECK(it_write_bytes(tmp_path(cfg, cap, file), text, strlen(text)) == 0);
    snprintf(file, sizeof file, "%s.safetensors", name);
    tmp_path(weights, cap, file);
    bn_net *net;
    CHECK_OK(bn_net_from_file(cfg, &net));
    CHECK_OK(bn_net_setup(net, 1, NULL, 0, 3));
    CHECK_OK(bn_checkpoint_save(weights, net, NULL, NULL));
    bn_net_free(net);
    return BN_PASS;
}

/* For each of a model's shape: the images of ROOT/train/a/ loaded by the folder format and
 * evaluated, against predict's probabilities for the same files, which must match to the
 * printed digits and differ between images. */
BN_TEST(predict_fits_images_for_other_models_as_the_folder_format_does)
{
    static const int shapes[][3] = {{3, 8, 8}, {1, 12, 10}, {3, 5, 9}};
    char root[512], dir[700];
    tmp_path(root, sizeof root, "predict-folder");
    snprintf(dir, sizeof dir, "%s/train/a", root);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    CHECK(system(cmd) == 0);
    /* A wide RGB PNG, a tall gray PGM, a tiny RGB PNG and a JPEG of a gradient. */
    static unsigned char px[40 * 30 * 4];
    char paths[4][800];
    unsigned state = 17;
    for (size_t i = 0; i < sizeof px; i++) px[i] = (unsigned char)((state = state * 1103515245u + 12345u) >> 16);
    snprintf(paths[0], sizeof paths[0], "%s/0-wide.png", dir);
    CHECK_OK(bn_image_write_png_color(paths[0], px, 3, 40, 30));
    snprintf(paths[1], sizeof paths[1], "%s/1-tall.pgm", dir);
    char header[32];
    int n = snprintf(header, sizeof header, "P5 13 29 255\n");
    static unsigned char pgm[32 + 13 * 29];
    memcpy(pgm, header, (size_t)n);
    memcpy(pgm + n, px, 13 * 29);
    CHECK(it_write_bytes(paths[1], pgm, (size_t)n + 13 * 29) == 0);
    snprintf(paths[2], sizeof paths[2], "%s/2-small.png", dir);
    CHECK_OK(bn_image_write_png_color(paths[2], px + 100, 3, 3, 4));
    int images = 3;
    for (int y = 0; y < 30; y++)
        for (int x = 0; x < 40; x++) {
            px[(y * 40 + x) * 3] = (unsigned char)(6 * x);
            px[(y * 40 + x) * 3 + 1] = (unsigned char)(8 * y);
        }
    snprintf(paths[3], sizeof paths[3], "%s/3-photo.jpg", dir);
    if (it_write_jpeg(paths[3], px, 3, 40, 30, 90, 0) == 0) images = 4;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int c = shapes[s][0], h = shapes[s][1], w = shapes[s][2];
        char cfg[512], weights[512], name[32], args[4096];
        snprintf(name, sizeof name, "small%zu", s);
        if (save_small_model(name, c, h, w, cfg, weights, sizeof cfg) != BN_PASS) return BN_FAIL;
        bn_data_request rq = {.format = "folder", .path = root, .fit = {.c = c, .h = h, .w = w}, .train = 1,
                              .quiet = 1};
        bn_dataset d;
        CHECK_OK(bn_folder_load(&rq, &d));
        CHECK(d.count == images);
        bn_net *net;
        CHECK_OK(bn_net_from_file(cfg, &net));
        CHECK_OK(bn_net_setup(net, images, NULL, 0, 1));
        CHECK_OK(bn_checkpoint_load_weights(weights, net));
        float probs[4 * 5];
        CHECK_OK(bn_evaluate_each(net, &d, probs, NULL, NULL, NULL));
        bn_net_free(net);
        bn_dataset_free(&d);
        int len = snprintf(args, sizeof args, "%s %s --json", cfg, weights);
        for (int i = 0; i < images; i++) len += snprintf(args + len, sizeof args - (size_t)len, " %s", paths[i]);
        CHECK_MSG(predict(args) == 0 && err[0] == '\0', "%s%s", out, err);
        CHECK_MSG(count_lines(out) == images, "%s", out);
        const char *line = out;
        double first_p[4];
        for (int i = 0; i < images; i++) {
            const char *end = strchr(line, '\n');
            bn_json *v;
            CHECK_OK(bn_json_parse(line, (size_t)(end - line), &v));
            const bn_json *top = bn_json_get(v, "top");
            CHECK(top && top->count == 3);
            for (size_t t = 0; t < 3; t++) {
                uint64_t k;
                CHECK(bn_json_u64(bn_json_get(top->items[t], "class"), &k) && k < 5);
                double p = bn_json_get(top->items[t], "p")->number;
                /* predict prints 6 significant digits: within half of the sixth. */
                CHECK_MSG(fabs(p - probs[i * 5 + k]) <= 1e-5 * probs[i * 5 + k], "%dx%dx%d, %s: class %d: %.7g vs %.7g",
                          c, h, w, paths[i], (int)k, p, probs[i * 5 + k]);
                if (t == 0) first_p[i] = p;
            }
            bn_json_free(v);
            line = end + 1;
        }
        for (int i = 1; i < images; i++) CHECK_MSG(first_p[i] != first_p[0], "image %d: the same output as image 0", i);
    }
    return BN_PASS;
}

BN_TEST(predict_refuses_models_of_other_channel_counts)
{
    char cfg[512], weights[512], png[512], args[2048];
    if (save_small_model("two", 2, 4, 4, cfg, weights, sizeof cfg) != BN_PASS) return BN_FAIL;
    static const unsigned char px[16];
    CHECK_OK(bn_image_write_png(tmp_path(png, sizeof png, "four.png"), px, 4, 4));
    snprintf(args, sizeof args, "%s %s %s", cfg, weights, png);
    CHECK(predict(args) == 2);
    CHECK_MSG(strstr(err, "predict reads images into 1 or 3 channels, not an input of 2x4x4"), "%s", err);
    return BN_PASS;
}

BN_TEST(predict_usage_errors)
{
    CHECK(predict("models/lenet.cfg w.safetensors") == 2);
    CHECK_MSG(strstr(err, "predict: expected MODEL, WEIGHTS and at least one IMAGE"), "%s", err);
    CHECK(predict("models/lenet.cfg w.safetensors x.png --colour") == 2);
    CHECK_MSG(strstr(err, "unknown option '--colour'"), "%s", err);
    CHECK(predict("--help") == 0 && strstr(out, "--invert") && strstr(out, "--json"));
    return BN_PASS;
}

/* ---- agreement with `blobnet test` on real digits ---- */

static int write_be32(FILE *f, unsigned v)
{
    unsigned char b[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16), (unsigned char)(v >> 8), (unsigned char)v};
    return fwrite(b, 1, 4, f) == 4 ? 0 : -1;
}

/* A test split of n images as raw IDX files in dir, for `blobnet test --data dir`. */
static int write_test_split(const char *dir, const bn_dataset *d, int n)
{
    char path[600];
    snprintf(path, sizeof path, "%s/t10k-images-idx3-ubyte", dir);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(write_be32(f, 0x803) == 0 && write_be32(f, (unsigned)n) == 0 && write_be32(f, 28) == 0 &&
          write_be32(f, 28) == 0);
    CHECK(fwrite(d->pixels, 784, (size_t)n, f) == (size_t)n);
    CHECK(fclose(f) == 0);
    snprintf(path, sizeof path, "%s/t10k-labels-idx1-ubyte", dir);
    f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(write_be32(f, 0x801) == 0 && write_be32(f, (unsigned)n) == 0);
    for (int i = 0; i < n; i++) CHECK(fputc(d->labels[i], f) == d->labels[i]);
    CHECK(fclose(f) == 0);
    return BN_PASS;
}

/* Image i as PNG (even i), binary 8-bit PGM (i % 4 == 1) or ASCII 16-bit PGM (i % 4 == 3). */
static int export_digit(const unsigned char *px, int i, char *path, size_t cap)
{
    static const char *const ext[] = {"png", "pgm", "png", "pgm"};
    char name[64];
    snprintf(name, sizeof name, "digit%02d.%s", i, ext[i % 4]);
    tmp_path(path, cap, name);
    if (i % 2 == 0) {
        CHECK_OK(bn_image_write_png(path, px, 28, 28));
        return BN_PASS;
    }
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (i % 4 == 1) {
        fprintf(f, "P5\n28 28\n255\n");
        CHECK(fwrite(px, 1, 784, f) == 784);
    } else {
        fprintf(f, "P2\n# 16-bit\n28 28\n65535\n");
        for (int k = 0; k < 784; k++) fprintf(f, "%d%c", px[k] * 257, k % 28 == 27 ? '\n' : ' ');
    }
    CHECK(fclose(f) == 0);
    return BN_PASS;
}

/* The top class predict printed for path, or -1. */
static int top1(const char *path)
{
    char key[600];
    if (snprintf(key, sizeof key, "%s: ", path) >= (int)sizeof key) return -1;
    const char *at = strstr(out, key);
    return at ? atoi(at + strlen(key)) : -1;
}

#define N_DIGITS 20

BN_TEST(predict_agrees_with_test_on_exported_mnist_digits)
{
    const char *data = bn_test_data_dir();
    if (!data) BN_SKIP_TEST("BLOBNET_TEST_DATA not set");
    char w[512], dir[512], mis[512], cmd[4096];
    tmp_path(w, sizeof w, "lenet2000.safetensors");
    snprintf(cmd, sizeof cmd, "%s train models/lenet.cfg --device cpu --data %s --epochs 1 --train-limit 2000 "
             "--quiet --save %s", bn_test_cli(), data, w);
    CHECK_MSG(bn_test_run(cmd, out, sizeof out) == 0, "%s", out);

    /* What `blobnet test` predicts for the first 20 test digits: the label, unless
     * --misclassified wrote the image under another class. */
    bn_dataset d;
    CHECK_OK(bn_dataset_load(data, 0, N_DIGITS, &d));
    CHECK(d.count == N_DIGITS);
    tmp_path(dir, sizeof dir, "first20");
    tmp_path(mis, sizeof mis, "first20-misclassified");
    CHECK(mkdir(dir, 0777) == 0);
    if (write_test_split(dir, &d, N_DIGITS) != BN_PASS) return BN_FAIL;
    snprintf(cmd, sizeof cmd, "%s test models/lenet.cfg %s --device cpu --data %s --misclassified %s", bn_test_cli(),
             w, dir, mis);
    CHECK_MSG(bn_test_run(cmd, out, sizeof out) == 0, "%s", out);
    int tested[N_DIGITS];
    for (int i = 0; i < N_DIGITS; i++) {
        tested[i] = d.labels[i];
        for (int c = 0; c < 10; c++) {
            char path[700];
            snprintf(path, sizeof path, "%s/%05d-true%d-pred%d.png", mis, i, d.labels[i], c);
            if (access(path, F_OK) == 0) tested[i] = c;
        }
    }

    /* The same digits as PNG and PGM files, and inverted (dark on light) as PNG. */
    static char paths[N_DIGITS][512], inverted[N_DIGITS][512];
    char args[N_DIGITS * 520 + 512], inv_args[N_DIGITS * 520 + 512];
    int len = snprintf(args, sizeof args, "models/lenet.cfg %s", w);
    int inv_len = snprintf(inv_args, sizeof inv_args, "models/lenet.cfg %s --invert", w);
    int identity[N_DIGITS], identities = 0;
    for (int i = 0; i < N_DIGITS; i++) {
        const unsigned char *px = d.pixels + (size_t)i * 784;
        if (export_digit(px, i, paths[i], sizeof paths[i]) != BN_PASS) return BN_FAIL;
        unsigned char neg[784], fitted[784];
        for (int k = 0; k < 784; k++) neg[k] = (unsigned char)(255 - px[k]);
        snprintf(inverted[i], sizeof inverted[i], "%s/inverted%02d.png", bn_test_tmpdir(), i);
        CHECK_OK(bn_image_write_png(inverted[i], neg, 28, 28));
        len += snprintf(args + len, sizeof args - (size_t)len, " %s", paths[i]);
        inv_len += snprintf(inv_args + inv_len, sizeof inv_args - (size_t)inv_len, " %s", inverted[i]);
        /* Where the fitting gives back the very bytes, predict sees exactly what test saw. */
        bn_image img = {.width = 28, .height = 28, .pixels = (unsigned char *)px};
        CHECK_OK(bn_digit_fit(&img, 28, fitted));
        identity[i] = memcmp(fitted, px, 784) == 0;
        identities += identity[i];
    }
    CHECK_MSG(predict(args) == 0, "%s%s", out, err);
    int predicted[N_DIGITS], agree = 0;
    for (int i = 0; i < N_DIGITS; i++) {
        predicted[i] = top1(paths[i]);
        CHECK_MSG(predicted[i] >= 0, "no prediction for %s in:\n%s", paths[i], out);
        agree += predicted[i] == tested[i];
        if (identity[i])
            CHECK_MSG(predicted[i] == tested[i], "digit %d: predict says %d, test says %d", i, predicted[i], tested[i]);
    }
    printf("    predict agrees with test on %d of %d digits (%d fitted unchanged)\n", agree, N_DIGITS, identities);
    CHECK(agree >= 18);
    CHECK(identities >= 18);
    /* --invert on the dark-on-light copies gives back the same bytes, so the same answers. */
    CHECK_MSG(predict(inv_args) == 0, "%s%s", out, err);
    for (int i = 0; i < N_DIGITS; i++)
        CHECK_MSG(top1(inverted[i]) == predicted[i], "inverted digit %d: %d vs %d", i, top1(inverted[i]), predicted[i]);
    bn_dataset_free(&d);
    return BN_PASS;
}
