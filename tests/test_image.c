/* test_image.c - PNG of every colour type and depth, PGM P5/P2 and PPM P6/P3 at 8 and 16 bits,
 * JPEG (gray, colour, progressive, CMYK), each read as gray, as RGB and as it is, the PNG
 * writers, and the one-line errors for files that are not images or are damaged. */
#include "testing.h"

#include <png.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "image_testing.h"
#include "io/image.h"

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

/* A PNG written with libpng itself in any format: rows holds height rows of packed samples
 * as libpng expects them (16-bit samples big-endian). palette/trans may be NULL. */
typedef struct png_spec {
    int width, height, color, depth, interlace;
    const unsigned char *rows;
    const png_color *palette;
    int palette_size;
    const unsigned char *trans;
    int trans_size;
} png_spec;

static int write_png_spec(const char *path, const png_spec *s)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        fclose(f);
        return -1;
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)s->width, (png_uint_32)s->height, s->depth, s->color, s->interlace,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    if (s->palette) png_set_PLTE(png, info, s->palette, s->palette_size);
    if (s->trans) png_set_tRNS(png, info, s->trans, s->trans_size, NULL);
    png_write_info(png, info);
    int channels = s->color == PNG_COLOR_TYPE_RGB ? 3 : s->color == PNG_COLOR_TYPE_RGBA ? 4
                 : s->color == PNG_COLOR_TYPE_GRAY_ALPHA ? 2 : 1;
    size_t row_bytes = ((size_t)s->width * channels * s->depth + 7) / 8;
    int passes = png_set_interlace_handling(png);
    for (int pass = 0; pass < passes; pass++)
        for (int y = 0; y < s->height; y++) png_write_row(png, s->rows + y * row_bytes);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    return fclose(f);
}

/* Reads path with background bg and checks it is width x height with the given pixels. */
static int check_read(const char *path, int bg, int width, int height, const unsigned char *want)
{
    bn_image img;
    CHECK_OK(bn_image_read(path, bg, &img));
    CHECK_MSG(img.width == width && img.height == height, "%s: %dx%d, expected %dx%d", path, img.width, img.height,
              width, height);
    for (int i = 0; i < width * height; i++)
        CHECK_MSG(img.pixels[i] == want[i], "%s: pixel %d is %d, expected %d", path, i, img.pixels[i], want[i]);
    bn_image_free(&img);
    CHECK(img.pixels == NULL && img.width == 0);
    return BN_PASS;
}

BN_TEST(image_png_writer_round_trips_and_interlaced_png_reads)
{
    unsigned char px[7 * 5];
    for (int i = 0; i < 35; i++) px[i] = (unsigned char)(i * 7);
    char path[512];
    CHECK_OK(bn_image_write_png(tmp_path(path, sizeof path, "gray.png"), px, 7, 5));
    if (check_read(path, 0, 7, 5, px) != BN_PASS) return BN_FAIL;
    png_spec s = {.width = 7, .height = 5, .color = PNG_COLOR_TYPE_GRAY, .depth = 8,
                  .interlace = PNG_INTERLACE_ADAM7, .rows = px};
    CHECK(write_png_spec(tmp_path(path, sizeof path, "adam7.png"), &s) == 0);
    return check_read(path, 0, 7, 5, px);
}

/* A write that fails part way (here: a file-size limit of 200 bytes, in a child process, for a
 * 64x64 image of noise) is an error naming the file, and leaves no truncated PNG behind. */
BN_TEST(image_png_writer_leaves_no_partial_file)
{
    char path[512];
    tmp_path(path, sizeof path, "truncated.png");
    pid_t child = fork();
    if (child == 0) {
        struct rlimit lim = {200, 200};
        signal(SIGXFSZ, SIG_IGN);
        if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(3);
        unsigned char px[64 * 64];
        for (int i = 0; i < 64 * 64; i++) px[i] = (unsigned char)((i * 2654435761u) >> 13);
        bn_status s = bn_image_write_png(path, px, 64, 64);
        _exit(s == BN_ERR_IO && strstr(bn_last_error(), "truncated.png: cannot") ? 0 : 4);
    }
    int status = 0;
    CHECK(child > 0 && waitpid(child, &status, 0) == child);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    struct stat st;
    CHECK_MSG(stat(path, &st) != 0, "a %lld-byte partial PNG was left", (long long)st.st_size);
    return BN_PASS;
}

BN_TEST(image_png_colour_becomes_luminance)
{
    /* white, black, mid gray, pure red, pure green, pure blue */
    const unsigned char rgb[] = {255, 255, 255, 0, 0, 0, 100, 100, 100, 255, 0, 0, 0, 255, 0, 0, 0, 255};
    png_spec s = {.width = 6, .height = 1, .color = PNG_COLOR_TYPE_RGB, .depth = 8, .rows = rgb};
    char path[512];
    CHECK(write_png_spec(tmp_path(path, sizeof path, "rgb.png"), &s) == 0);
    bn_image img;
    CHECK_OK(bn_image_read(path, 0, &img));
    CHECK(img.width == 6 && img.height == 1);
    CHECK(img.pixels[0] == 255 && img.pixels[1] == 0 && img.pixels[2] == 100);
    /* ITU-R BT.709 weights, libpng's default: 0.2126, 0.7152, 0.0722 of 255. */
    CHECK_NEAR(img.pixels[3], 54, 1);
    CHECK_NEAR(img.pixels[4], 182, 1);
    CHECK_NEAR(img.pixels[5], 18, 1);
    bn_image_free(&img);
    return BN_PASS;
}

BN_TEST(image_png_alpha_is_composited_over_the_background)
{
    /* RGBA: opaque white, transparent white, half-transparent white, opaque black */
    const unsigned char rgba[] = {255, 255, 255, 255, 255, 255, 255, 0, 255, 255, 255, 128, 0, 0, 0, 255};
    png_spec s = {.width = 4, .height = 1, .color = PNG_COLOR_TYPE_RGBA, .depth = 8, .rows = rgba};
    char path[512];
    CHECK(write_png_spec(tmp_path(path, sizeof path, "rgba.png"), &s) == 0);
    const unsigned char over_black[] = {255, 0, 128, 0}, over_white[] = {255, 255, 255, 0};
    if (check_read(path, 0, 4, 1, over_black) != BN_PASS) return BN_FAIL;
    if (check_read(path, 255, 4, 1, over_white) != BN_PASS) return BN_FAIL;
    /* 16-bit gray + alpha: samples big-endian; 0x8080 is 128 of 255 at 8 bits. */
    const unsigned char ga16[] = {0xff, 0xff, 0xff, 0xff, 0x80, 0x80, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00};
    s = (png_spec){.width = 3, .height = 1, .color = PNG_COLOR_TYPE_GRAY_ALPHA, .depth = 16, .rows = ga16};
    CHECK(write_png_spec(tmp_path(path, sizeof path, "ga16.png"), &s) == 0);
    const unsigned char ga_want[] = {255, 128, 0};
    return check_read(path, 0, 3, 1, ga_want);
}

BN_TEST(image_png_low_and_high_bit_depths_and_palettes)
{
    char path[512];
    /* 1-bit gray: 10110000 -> white, black, white, white, then black. */
    const unsigned char bits[] = {0xb0};
    png_spec s = {.width = 5, .height = 1, .color = PNG_COLOR_TYPE_GRAY, .depth = 1, .rows = bits};
    CHECK(write_png_spec(tmp_path(path, sizeof path, "g1.png"), &s) == 0);
    const unsigned char g1_want[] = {255, 0, 255, 255, 0};
    if (check_read(path, 0, 5, 1, g1_want) != BN_PASS) return BN_FAIL;
    /* 16-bit gray, scaled to 8 bits with rounding. */
    const unsigned char g16[] = {0xff, 0xff, 0x80, 0x80, 0x01, 0x01, 0x00, 0x00};
    s = (png_spec){.width = 4, .height = 1, .color = PNG_COLOR_TYPE_GRAY, .depth = 16, .rows = g16};
    CHECK(write_png_spec(tmp_path(path, sizeof path, "g16.png"), &s) == 0);
    const unsigned char g16_want[] = {255, 128, 1, 0};
    if (check_read(path, 0, 4, 1, g16_want) != BN_PASS) return BN_FAIL;
    /* 4-bit palette with a transparent entry 2: indices 0, 1, 2, 3 packed two per byte. */
    const png_color pal[] = {{0, 0, 0}, {255, 255, 255}, {255, 255, 255}, {90, 90, 90}};
    const unsigned char trans[] = {255, 255, 0, 255};
    const unsigned char idx[] = {0x01, 0x23};
    s = (png_spec){.width = 4, .height = 1, .color = PNG_COLOR_TYPE_PALETTE, .depth = 4, .rows = idx,
                   .palette = pal, .palette_size = 4, .trans = trans, .trans_size = 4};
    CHECK(write_png_spec(tmp_path(path, sizeof path, "pal4.png"), &s) == 0);
    const unsigned char pal_black[] = {0, 255, 0, 90}, pal_white[] = {0, 255, 255, 90};
    if (check_read(path, 0, 4, 1, pal_black) != BN_PASS) return BN_FAIL;
    return check_read(path, 255, 4, 1, pal_white);
}

BN_TEST(image_pgm_binary_and_ascii_at_8_and_16_bits)
{
    char path[512];
    const unsigned char p5[] = "P5\n# a comment\n3 2\n255\n\x00\x10\x20\x80\xfe\xff";
    CHECK(write_file(tmp_path(path, sizeof path, "a.pgm"), p5, sizeof p5 - 1) == 0);
    const unsigned char p5_want[] = {0, 16, 32, 128, 254, 255};
    if (check_read(path, 0, 3, 2, p5_want) != BN_PASS) return BN_FAIL;
    /* maxval 65535: two bytes per sample, big-endian. */
    const unsigned char p5_16[] = "P5 2 2 65535\n\xff\xff\x80\x80\x00\x00\x01\x01";
    CHECK(write_file(tmp_path(path, sizeof path, "b.pgm"), p5_16, sizeof p5_16 - 1) == 0);
    const unsigned char p5_16_want[] = {255, 128, 0, 1};
    if (check_read(path, 0, 2, 2, p5_16_want) != BN_PASS) return BN_FAIL;
    /* ASCII with maxval 15: v becomes round(v * 255 / 15). */
    const char p2[] = "P2\n# made by hand\n4 1\n15\n0 7\n15  1\n";
    CHECK(write_file(tmp_path(path, sizeof path, "c.pgm"), p2, sizeof p2 - 1) == 0);
    const unsigned char p2_want[] = {0, 119, 255, 17};
    if (check_read(path, 0, 4, 1, p2_want) != BN_PASS) return BN_FAIL;
    const char p2_16[] = "P2 2 1 65535 65535 257\n";
    CHECK(write_file(tmp_path(path, sizeof path, "d.pgm"), p2_16, sizeof p2_16 - 1) == 0);
    const unsigned char p2_16_want[] = {255, 1};
    return check_read(path, 0, 2, 1, p2_16_want);
}

/* bn_image_read fails with code and a message that starts with path and contains needle. */
static int read_fails(const char *name, const void *bytes, size_t n, bn_status code, const char *needle)
{
    char path[512];
    tmp_path(path, sizeof path, name);
    if (bytes) CHECK(write_file(path, bytes, n) == 0);
    bn_image img = {.width = 99};
    CHECK_ERR(bn_image_read(path, 0, &img), code, needle);
    CHECK_MSG(strncmp(bn_last_error(), path, strlen(path)) == 0, "message does not start with the path: %s",
              bn_last_error());
    CHECK(img.pixels == NULL && img.width == 0);
    return BN_PASS;
}

BN_TEST(image_errors_name_the_file_and_the_problem)
{
    if (read_fails("missing.png", NULL, 0, BN_ERR_IO, "cannot open: No such file") != BN_PASS) return BN_FAIL;
    if (read_fails("empty.png", "", 0, BN_ERR_DATA, "the file is empty") != BN_PASS) return BN_FAIL;
    const char text[] = "hello, this is text\n";
    if (read_fails("text.png", text, sizeof text - 1, BN_ERR_DATA, "not a PNG or PGM") != BN_PASS) return BN_FAIL;
    const char short_p5[] = "P5 4 4 255\n\x01\x02";
    if (read_fails("short.pgm", short_p5, sizeof short_p5 - 1, BN_ERR_DATA, "truncated PGM: 2 bytes of pixels, expected 16") != BN_PASS)
        return BN_FAIL;
    const char short_p2[] = "P2 2 2 255 1 2 3";
    if (read_fails("short2.pgm", short_p2, sizeof short_p2 - 1, BN_ERR_DATA, "pixel 3 of 4 is not a number") != BN_PASS)
        return BN_FAIL;
    const char above[] = "P2 2 1 15 3 16";
    if (read_fails("above.pgm", above, sizeof above - 1, BN_ERR_DATA, "pixel 1 is 16, above maxval 15") != BN_PASS)
        return BN_FAIL;
    const char bad_header[] = "P5 4 x 255\n";
    if (read_fails("header.pgm", bad_header, sizeof bad_header - 1, BN_ERR_DATA, "bad PGM header") != BN_PASS)
        return BN_FAIL;
    const char zero_max[] = "P5 1 1 0\n\x00";
    if (read_fails("zero.pgm", zero_max, sizeof zero_max - 1, BN_ERR_DATA, "maxval 1..65535") != BN_PASS)
        return BN_FAIL;
    /* A real PNG cut short inside its image data. */
    unsigned char px[32 * 32];
    for (int i = 0; i < 32 * 32; i++) px[i] = (unsigned char)(i * 31);
    char whole[512];
    CHECK_OK(bn_image_write_png(tmp_path(whole, sizeof whole, "whole.png"), px, 32, 32));
    unsigned char buf[4096];
    FILE *f = fopen(whole, "rb");
    CHECK(f != NULL);
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    CHECK(n > 100);
    if (read_fails("cut.png", buf, n - 40, BN_ERR_DATA, "bad PNG") != BN_PASS) return BN_FAIL;
    /* The temporary directory, and a named pipe nothing writes to: refused, not waited on. */
    if (read_fails("", NULL, 0, BN_ERR_DATA, "is not a regular file but a directory") != BN_PASS) return BN_FAIL;
    char fifo[512];
    CHECK(mkfifo(tmp_path(fifo, sizeof fifo, "pipe.png"), 0644) == 0);
    bn_image img;
    CHECK_ERR(bn_image_read(fifo, 0, &img), BN_ERR_DATA, "pipe.png: is not a regular file but a FIFO (named pipe)");
    return BN_PASS;
}

BN_TEST(image_invert_turns_dark_on_light_into_light_on_dark)
{
    unsigned char px[] = {0, 1, 128, 255};
    bn_image img = {.width = 2, .height = 2, .pixels = px};
    bn_image_invert(&img);
    CHECK(px[0] == 255 && px[1] == 254 && px[2] == 127 && px[3] == 0);
    return BN_PASS;
}

/* ---- colour ---- */

/* Reads path with `channels` and checks the shape and every byte against want (interleaved). */
static int check_color(const char *path, int channels, int width, int height, int want_channels,
                       const unsigned char *want, int tolerance)
{
    bn_image img;
    CHECK_OK(bn_image_read_color(path, channels, &img));
    CHECK_MSG(img.width == width && img.height == height && img.channels == want_channels,
              "%s: %dx%d of %d channels, expected %dx%d of %d", path, img.width, img.height, img.channels, width,
              height, want_channels);
    for (int i = 0; i < width * height * want_channels; i++)
        CHECK_MSG(abs(img.pixels[i] - want[i]) <= tolerance, "%s: sample %d is %d, expected %d", path, i,
                  img.pixels[i], want[i]);
    bn_image_free(&img);
    return BN_PASS;
}

BN_TEST(image_color_png_reads_as_rgb_gray_or_as_it_is)
{
    char path[512];
    unsigned char rgb[5 * 3 * 3], gray[5 * 3], replicated[5 * 3 * 3];
    for (int i = 0; i < 45; i++) rgb[i] = (unsigned char)(i * 37 + 11);
    for (int i = 0; i < 15; i++) {
        gray[i] = bn_image_luminance(rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2]);
        replicated[3 * i] = replicated[3 * i + 1] = replicated[3 * i + 2] = gray[i];
    }
    CHECK_OK(bn_image_write_png_color(tmp_path(path, sizeof path, "rgb53.png"), rgb, 3, 5, 3));
    if (check_color(path, 3, 5, 3, 3, rgb, 0) != BN_PASS) return BN_FAIL;
    if (check_color(path, 0, 5, 3, 3, rgb, 0) != BN_PASS) return BN_FAIL;
    /* Gray from colour: libpng's own conversion, which bn_image_luminance matches. */
    if (check_color(path, 1, 5, 3, 1, gray, 0) != BN_PASS) return BN_FAIL;
    if (check_read(path, 0, 5, 3, gray) != BN_PASS) return BN_FAIL;
    CHECK_OK(bn_image_write_png_color(tmp_path(path, sizeof path, "gray53.png"), gray, 1, 5, 3));
    if (check_color(path, 3, 5, 3, 3, replicated, 0) != BN_PASS) return BN_FAIL;
    if (check_color(path, 0, 5, 3, 1, gray, 0) != BN_PASS) return BN_FAIL;
    /* RGBA over black; a palette counts as colour. */
    const unsigned char rgba[] = {200, 100, 50, 255, 200, 100, 50, 0, 200, 100, 50, 128};
    png_spec s = {.width = 3, .height = 1, .color = PNG_COLOR_TYPE_RGBA, .depth = 8, .rows = rgba};
    CHECK(write_png_spec(tmp_path(path, sizeof path, "rgba3.png"), &s) == 0);
    const unsigned char over_black[] = {200, 100, 50, 0, 0, 0, 100, 50, 25};
    if (check_color(path, 0, 3, 1, 3, over_black, 0) != BN_PASS) return BN_FAIL;
    const png_color pal[] = {{10, 20, 30}, {40, 50, 60}};
    const unsigned char idx[] = {0x40};
    s = (png_spec){.width = 2, .height = 1, .color = PNG_COLOR_TYPE_PALETTE, .depth = 2, .rows = idx,
                   .palette = pal, .palette_size = 2};
    CHECK(write_png_spec(tmp_path(path, sizeof path, "pal2.png"), &s) == 0);
    const unsigned char pal_want[] = {40, 50, 60, 10, 20, 30};
    if (check_color(path, 0, 2, 1, 3, pal_want, 0) != BN_PASS) return BN_FAIL;
    bn_image img;
    CHECK_ERR(bn_image_read_color(path, 2, &img), BN_ERR_USAGE, "1 or 3 channels (or 0: as it is), not 2");
    CHECK_ERR(bn_image_write_png_color(path, rgb, 4, 2, 2), BN_ERR_USAGE, "4 channels");
    return BN_PASS;
}

BN_TEST(image_ppm_binary_and_ascii_at_8_and_16_bits)
{
    char path[512];
    const unsigned char p6[] = "P6\n# two pixels\n2 1\n255\n\x0a\x14\x1e\xff\x80\x00";
    CHECK(it_write_bytes(tmp_path(path, sizeof path, "a.ppm"), p6, sizeof p6 - 1) == 0);
    const unsigned char p6_want[] = {10, 20, 30, 255, 128, 0};
    if (check_color(path, 3, 2, 1, 3, p6_want, 0) != BN_PASS) return BN_FAIL;
    if (check_color(path, 0, 2, 1, 3, p6_want, 0) != BN_PASS) return BN_FAIL;
    const unsigned char p6_gray[] = {bn_image_luminance(10, 20, 30), bn_image_luminance(255, 128, 0)};
    if (check_read(path, 0, 2, 1, p6_gray) != BN_PASS) return BN_FAIL;
    const unsigned char p6_16[] = "P6 1 1 65535\n\xff\xff\x80\x80\x00\x00";
    CHECK(it_write_bytes(tmp_path(path, sizeof path, "b.ppm"), p6_16, sizeof p6_16 - 1) == 0);
    const unsigned char p6_16_want[] = {255, 128, 0};
    if (check_color(path, 3, 1, 1, 3, p6_16_want, 0) != BN_PASS) return BN_FAIL;
    const char p3[] = "P3\n# maxval 15\n1 2\n15\n15 0 7\n0 15 1\n";
    CHECK(it_write_bytes(tmp_path(path, sizeof path, "c.ppm"), p3, sizeof p3 - 1) == 0);
    const unsigned char p3_want[] = {255, 0, 119, 0, 255, 17};
    if (check_color(path, 3, 1, 2, 3, p3_want, 0) != BN_PASS) return BN_FAIL;
    /* A PGM read as RGB repeats its gray. */
    const unsigned char p5[] = "P5 2 1 255\n\x07\xf0";
    CHECK(it_write_bytes(tmp_path(path, sizeof path, "d.pgm"), p5, sizeof p5 - 1) == 0);
    const unsigned char p5_rgb[] = {7, 7, 7, 240, 240, 240};
    if (check_color(path, 3, 2, 1, 3, p5_rgb, 0) != BN_PASS) return BN_FAIL;
    const char short_p6[] = "P6 2 2 255\n\x01\x02\x03";
    if (read_fails("short.ppm", short_p6, sizeof short_p6 - 1, BN_ERR_DATA,
                   "truncated PPM: 3 bytes of pixels, expected 12") != BN_PASS)
        return BN_FAIL;
    return read_fails("bad.ppm", "P3 1 1 255 1 2 x", 16, BN_ERR_DATA, "bad PPM: sample 2 of 3 is not a number");
}

/* The gray of a colour is the same whichever file holds it: PPM and JPEG are made gray with
 * bn_image_luminance, PNG by libpng; 4096 colours, spread over the cube, in both. */
BN_TEST(image_gray_from_colour_agrees_between_png_and_ppm)
{
    enum { W = 64, H = 64 };
    static unsigned char rgb[W * H * 3];
    unsigned state = 12345;
    for (int i = 0; i < W * H * 3; i++) rgb[i] = (unsigned char)((state = state * 1103515245u + 12345u) >> 16);
    char png[512], ppm[512];
    CHECK_OK(bn_image_write_png_color(tmp_path(png, sizeof png, "cube.png"), rgb, 3, W, H));
    static unsigned char ppm_bytes[32 + sizeof rgb];
    int n = snprintf((char *)ppm_bytes, 32, "P6 %d %d 255\n", W, H);
    memcpy(ppm_bytes + n, rgb, sizeof rgb);
    CHECK(it_write_bytes(tmp_path(ppm, sizeof ppm, "cube.ppm"), ppm_bytes, (size_t)n + sizeof rgb) == 0);
    bn_image a, b;
    CHECK_OK(bn_image_read(png, 0, &a));
    CHECK_OK(bn_image_read(ppm, 0, &b));
    CHECK(a.channels == 1 && b.channels == 1);
    CHECK_MSG(memcmp(a.pixels, b.pixels, W * H) == 0, "PNG and PPM give different grays");
    bn_image_free(&a);
    bn_image_free(&b);
    return BN_PASS;
}

/* ---- JPEG ---- */

/* A flat image survives JPEG's loss all but unchanged: within 2 of each value. */
BN_TEST(image_jpeg_gray_colour_progressive_and_cmyk)
{
#ifdef BN_NO_JPEG
    BN_SKIP_TEST("built without libjpeg");
#else
    enum { W = 24, H = 16 };
    static unsigned char px[W * H * 4], want[W * H * 3];
    char path[512];
    for (int i = 0; i < W * H; i++) px[i] = 77;
    CHECK(it_write_jpeg(tmp_path(path, sizeof path, "gray.jpg"), px, 1, W, H, 95, 0) == 0);
    memset(want, 77, sizeof want);
    if (check_color(path, 0, W, H, 1, want, 2) != BN_PASS) return BN_FAIL;
    if (check_color(path, 3, W, H, 3, want, 2) != BN_PASS) return BN_FAIL;
    for (int i = 0; i < W * H; i++) px[3 * i] = 200, px[3 * i + 1] = 30, px[3 * i + 2] = 90;
    for (int progressive = 0; progressive < 2; progressive++) {
        CHECK(it_write_jpeg(tmp_path(path, sizeof path, progressive ? "rgb-p.jpeg" : "rgb.JPG"), px, 3, W, H, 95,
                            progressive) == 0);
        if (check_color(path, 3, W, H, 3, px, 2) != BN_PASS) return BN_FAIL;
        if (check_color(path, 0, W, H, 3, px, 2) != BN_PASS) return BN_FAIL;
        memset(want, bn_image_luminance(200, 30, 90), W * H);
        if (check_color(path, 1, W, H, 1, want, 2) != BN_PASS) return BN_FAIL;
    }
    /* CMYK as Adobe stores it (inverted): no cyan, full magenta, half yellow, no black. */
    for (int i = 0; i < W * H; i++) px[4 * i] = 255, px[4 * i + 1] = 0, px[4 * i + 2] = 128, px[4 * i + 3] = 255;
    CHECK(it_write_jpeg(tmp_path(path, sizeof path, "cmyk.jpg"), px, 4, W, H, 95, 0) == 0);
    for (int i = 0; i < W * H; i++) want[3 * i] = 255, want[3 * i + 1] = 0, want[3 * i + 2] = 128;
    return check_color(path, 0, W, H, 3, want, 2);
#endif
}

#ifndef BN_NO_JPEG
/* A JPEG's bytes into buf (cap); the count. */
static size_t jpeg_bytes(const char *name, unsigned char *buf, size_t cap)
{
    enum { W = 40, H = 40 };
    static unsigned char px[W * H * 3];
    for (int i = 0; i < W * H * 3; i++) px[i] = (unsigned char)(i * 7 + i / 120);
    char path[512];
    if (it_write_jpeg(tmp_path(path, sizeof path, name), px, 3, W, H, 90, 0) != 0) return 0;
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, cap, f) : 0;
    if (f) fclose(f);
    return n;
}

#endif

/* A build without libjpeg says so for any JPEG. */
BN_TEST(image_jpeg_errors_are_one_line_naming_the_file)
{
#ifdef BN_NO_JPEG
    return read_fails("any.jpg", "\xff\xd8\xff\xe0", 4, BN_ERR_DATA, "built without libjpeg");
#else
    static unsigned char buf[1 << 16];
    size_t n = jpeg_bytes("whole.jpg", buf, sizeof buf);
    CHECK(n > 600);
    /* Cut inside the entropy-coded data: libjpeg warns and would pad with gray. */
    if (read_fails("cut.jpg", buf, n / 2, BN_ERR_DATA, "bad JPEG: Premature end of JPEG file") != BN_PASS)
        return BN_FAIL;
    if (read_fails("head.jpg", buf, 40, BN_ERR_DATA, "bad JPEG") != BN_PASS) return BN_FAIL;
    if (read_fails("soi.jpg", "\xff\xd8\xff", 3, BN_ERR_DATA, "bad JPEG") != BN_PASS) return BN_FAIL;
    /* Entropy-coded data overwritten with noise. */
    static unsigned char noisy[1 << 16];
    memcpy(noisy, buf, n);
    for (size_t i = n / 2; i < n - 2; i++) noisy[i] = (unsigned char)(i * 2654435761u >> 24);
    bn_image img;
    char path[512];
    CHECK(it_write_bytes(tmp_path(path, sizeof path, "noise.jpg"), noisy, n) == 0);
    bn_status s = bn_image_read_color(path, 3, &img);
    CHECK_MSG(s == BN_ERR_DATA && strncmp(bn_last_error(), path, strlen(path)) == 0 && !strchr(bn_last_error(), '\n'),
              "status %d: %s", (int)s, bn_last_error());
    /* A frame header that promises 60000x60000 pixels is refused before any decoding. */
    size_t sof = 0;
    for (size_t i = 2; i + 9 < n && !sof; i++)
        if (buf[i] == 0xff && buf[i + 1] == 0xc0) sof = i;
    CHECK(sof);
    buf[sof + 5] = buf[sof + 7] = 0xea, buf[sof + 6] = buf[sof + 8] = 0x60;
    return read_fails("huge.jpg", buf, n, BN_ERR_DATA, "60000x60000 pixels is too large");
#endif
}
