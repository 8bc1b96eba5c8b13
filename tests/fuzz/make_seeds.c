/* make_seeds.c - writes the binary seeds of the fuzz corpora into DIR/idx, DIR/npz,
 * DIR/checkpoint, DIR/image and DIR/cifar (tools/fuzz.sh seeds): small IDX pairs in fuzz_idx's
 * input format, raw and gzip; small .npz archives from bn_npz_write (gray, NHWC colour and NCHW
 * float sets, one with a bad CRC and one cut short; the numpy-*.npz seeds beside them came from
 * NumPy itself, np.savez_compressed among them, and are kept as they are); checkpoints of
 * FUZZ_CHECKPOINT_MODEL as a fresh run, a mid-epoch run and weights alone; a small digit in every
 * PNG colour type and depth libpng writes (interlaced, with tRNS), in PGM (P5 at 8 and 16 bits,
 * P2 with comments), PPM (P6 at 8 and 16 bits, P3) and JPEG (gray, colour, progressive, CMYK), in
 * fuzz_image's input format, on its digit and picture paths; CIFAR folders, valid and not, in
 * fuzz_cifar's; and data cache entries written by the cache itself (bytes and floats, with and
 * without class names), in fuzz_datacache's. */
#include <png.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "data_cache.h"
#include "fuzz_common.h"
#include "image_testing.h"
#include "npz.h"
#include "train/checkpoint.h"

static _Noreturn void die(const char *what)
{
    fprintf(stderr, "make_seeds: %s: %s\n", what, bn_last_error());
    exit(1);
}

/* An IDX file: big-endian magic and dimensions, then the data. */
static size_t idx_bytes(unsigned char *out, uint32_t magic, const uint32_t *dims, int ndims,
                        const unsigned char *data, size_t n)
{
    uint32_t words[4] = {magic};
    for (int i = 0; i < ndims; i++) words[i + 1] = dims[i];
    size_t len = 0;
    for (int i = 0; i <= ndims; i++)
        for (int b = 3; b >= 0; b--) out[len++] = (unsigned char)(words[i] >> (8 * b));
    memcpy(out + len, data, n);
    return len + n;
}

/* The gzip form of in[0..n) in out; its length. */
static size_t gzip_bytes(unsigned char *out, size_t cap, const unsigned char *in, size_t n)
{
    z_stream z = {0};
    if (deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) exit(1);
    z.next_in = (unsigned char *)in, z.avail_in = (unsigned)n;
    z.next_out = out, z.avail_out = (unsigned)cap;
    if (deflate(&z, Z_FINISH) != Z_STREAM_END) exit(1);
    size_t len = z.total_out;
    deflateEnd(&z);
    return len;
}

/* fuzz_idx's input: limit byte, images length (little-endian), images, labels. */
static void write_pair(const char *dir, const char *name, int limit, int gz)
{
    enum { COUNT = 3, SIDE = 4 };
    unsigned char pixels[COUNT * SIDE * SIDE], labels[COUNT] = {7, 0, 9};
    for (size_t i = 0; i < sizeof pixels; i++) pixels[i] = (unsigned char)(i * 37 % 256);
    const uint32_t idims[3] = {COUNT, SIDE, SIDE}, ldims[1] = {COUNT};
    unsigned char img[256], lab[64], zimg[512], zlab[256], out[1024];
    size_t ni = idx_bytes(img, 0x803, idims, 3, pixels, sizeof pixels);
    size_t nl = idx_bytes(lab, 0x801, ldims, 1, labels, sizeof labels);
    const unsigned char *pi = img, *pl = lab;
    if (gz) {
        ni = gzip_bytes(zimg, sizeof zimg, img, ni), pi = zimg;
        nl = gzip_bytes(zlab, sizeof zlab, lab, nl), pl = zlab;
    }
    size_t len = 0;
    out[len++] = (unsigned char)limit;
    for (int b = 0; b < 4; b++) out[len++] = (unsigned char)(ni >> (8 * b));
    memcpy(out + len, pi, ni), len += ni;
    memcpy(out + len, pl, nl), len += nl;
    char path[1024];
    snprintf(path, sizeof path, "%s/idx/%s", dir, name);
    fuzz_write(path, out, len);
}

/* A set of count examples of c x h x w with pixels (or values) and labels in a fixed pattern. */
static void make_set(bn_dataset *d, int count, int c, int h, int w, int is_float)
{
    if (bn_dataset_alloc(d, "seed", count, c, h, w, 3, is_float) != BN_OK) die("set");
    size_t n = (size_t)count * c * h * w;
    for (size_t i = 0; i < n; i++) {
        if (is_float) d->values[i] = (float)i * 0.125f - 1.0f;
        else d->pixels[i] = (unsigned char)(i * 37 % 256);
    }
    for (int i = 0; i < count; i++) d->labels[i] = (uint16_t)(i * 2 % 3);
}

/* dir/npz/name from bn_npz_write, then (cut > 0) its first `cut` bytes only, or (flip > 0) byte
 * `flip` of x_train's data changed: a pixel only the CRC can tell from the right one. */
static void write_npz(const char *dir, const char *name, int c, int is_float, int nhwc, long cut, long flip)
{
    bn_dataset train, test;
    make_set(&train, 3, c, 5, 6, is_float);
    make_set(&test, 2, c, 5, 6, is_float);
    char path[1024];
    snprintf(path, sizeof path, "%s/npz/%s", dir, name);
    if (bn_npz_write(&train, &test, path, nhwc) != BN_OK) die(path);
    bn_dataset_free(&train);
    bn_dataset_free(&test);
    if (cut <= 0 && flip <= 0) return;
    static unsigned char bytes[1 << 16];
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(bytes, 1, sizeof bytes, f) : 0;
    if (!f || fclose(f) != 0 || n == sizeof bytes) die(path);
    if (flip > 0) {
        /* x_train is the first member: its data follows the first .npy preamble */
        size_t at = 0;
        while (at + 10 < n && memcmp(bytes + at, "\x93NUMPY", 6) != 0) at++;
        at += 10 + (size_t)(bytes[at + 8] | bytes[at + 9] << 8) + (size_t)flip;
        if (at >= n) die(path);
        bytes[at] ^= 0x20;
    }
    fuzz_write(path, bytes, cut > 0 && (size_t)cut < n ? (size_t)cut : n);
}

static void write_npz_seeds(const char *dir)
{
    write_npz(dir, "gray.npz", 1, 0, 1, 0, 0);
    write_npz(dir, "rgb-nhwc.npz", 3, 0, 1, 0, 0);
    write_npz(dir, "float-nchw.npz", 3, 1, 0, 0, 0);
    write_npz(dir, "bad-crc.npz", 1, 0, 1, 0, 5);
    write_npz(dir, "cut.npz", 1, 0, 1, 300, 0);
}

static void write_checkpoints(const char *dir)
{
    bn_net *net;
    bn_optimizer *opt;
    if (bn_net_from_text(FUZZ_CHECKPOINT_MODEL, "fuzz.cfg", &net) != BN_OK) die("model");
    if (bn_net_setup(net, 2, NULL, 0, 1) != BN_OK || bn_optimizer_create(net, &net->train, &opt) != BN_OK)
        die("setup");
    char path[1024];
    bn_train_state st = {.seed = 1};
    snprintf(path, sizeof path, "%s/checkpoint/fresh.safetensors", dir);
    if (bn_checkpoint_save(path, net, opt, &st)) die(path);
    st = (bn_train_state){.seed = 5, .epoch = 2, .batch_in_epoch = 3, .step = 40, .epoch_loss_sum = 4.25,
                          .epoch_correct = 3, .epoch_seen = 6};
    opt->iter = 40;
    snprintf(path, sizeof path, "%s/checkpoint/midrun.safetensors", dir);
    if (bn_checkpoint_save(path, net, opt, &st)) die(path);
    snprintf(path, sizeof path, "%s/checkpoint/weights.safetensors", dir);
    if (bn_checkpoint_save(path, net, NULL, NULL)) die(path);
    bn_optimizer_free(opt);
    bn_net_free(net);
}

/* ---- images ---- */

enum { IMG_W = 12, IMG_H = 16 };

/* The digit: a bar like a 1, light on dark (ink = 0) or dark on light (ink = 1), 0..255. */
static unsigned gray_at(int x, int y, int ink)
{
    unsigned v = x >= 4 && x < 8 && y >= 2 && y < 14 ? 255u : 0u;
    return ink ? 255u - v : v;
}

/* fuzz_image's input: the flag byte (1: --invert; 2: the picture path; 4: as the file is),
 * then the file. */
enum { DIGIT = 0, INVERT = 1, PICTURE = 2, AS_IS = 4 };

static FILE *open_seed(const char *dir, const char *name, int flags)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/image/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fputc(flags, f) == EOF) die(path);
    return f;
}

/* One pixel of colour type `color` at `depth` bits into out (samples big-endian, one byte per
 * sample below 8 bits, which png_set_packing packs); the number of bytes written. */
static size_t put_pixel(unsigned char *out, int color, int depth, unsigned v)
{
    int samples = color == PNG_COLOR_TYPE_PALETTE || color == PNG_COLOR_TYPE_GRAY ? 1
                  : color == PNG_COLOR_TYPE_GRAY_ALPHA                            ? 2
                  : color == PNG_COLOR_TYPE_RGB                                   ? 3
                                                                                  : 4;
    size_t n = 0;
    for (int s = 0; s < samples; s++) {
        int alpha = (color & PNG_COLOR_MASK_ALPHA) && s == samples - 1;
        unsigned level = alpha ? (v ? 255u : 96u) : color == PNG_COLOR_TYPE_PALETTE ? v / 86 : v;
        if (depth == 16) {
            out[n++] = (unsigned char)level;
            out[n++] = (unsigned char)(level * 7);
        } else {
            out[n++] = (unsigned char)(depth < 8 && color != PNG_COLOR_TYPE_PALETTE ? level >> (8 - depth) : level);
        }
    }
    return n;
}

static void write_png_seed(const char *dir, const char *name, int color, int depth, int interlace, int trns,
                           int flags)
{
    FILE *f = open_seed(dir, name, flags);
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info || setjmp(png_jmpbuf(png))) die(name);
    png_init_io(png, f);
    png_set_IHDR(png, info, IMG_W, IMG_H, depth, color, interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    if (color == PNG_COLOR_TYPE_PALETTE) {
        png_color palette[4] = {{0, 0, 0}, {90, 40, 200}, {170, 250, 20}, {255, 255, 255}};
        png_set_PLTE(png, info, palette, 4);
        if (trns) {
            png_byte alpha[4] = {0, 128, 255, 255};
            png_set_tRNS(png, info, alpha, 4, NULL);
        }
    } else if (trns) {
        png_color_16 key = {0, 0, 0, 0, 0};
        png_set_tRNS(png, info, NULL, 0, &key);
    }
    png_write_info(png, info);
    if (depth < 8) png_set_packing(png);
    int passes = png_set_interlace_handling(png);
    unsigned char row[IMG_W * 8];
    for (int pass = 0; pass < passes; pass++)
        for (int y = 0; y < IMG_H; y++) {
            size_t n = 0;
            for (int x = 0; x < IMG_W; x++) n += put_pixel(row + n, color, depth, gray_at(x, y, flags & INVERT));
            png_write_row(png, row);
        }
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    if (fclose(f) != 0) die(name);
}

/* A PGM: P5 at maxval 255 or 65535, or P2 at maxval 15 with comments. */
static void write_pgm_seed(const char *dir, const char *name, int ascii, unsigned maxval, int flags)
{
    FILE *f = open_seed(dir, name, flags);
    fprintf(f, ascii ? "P2\n# a bar\n%d %d\n# maxval next\n%u\n" : "P5\n%d %d\n%u\n", IMG_W, IMG_H, maxval);
    for (int y = 0; y < IMG_H; y++)
        for (int x = 0; x < IMG_W; x++) {
            unsigned v = gray_at(x, y, flags & INVERT) * maxval / 255;
            if (ascii) fprintf(f, "%u%c", v, x == IMG_W - 1 ? '\n' : ' ');
            else if (maxval > 255) fputc((int)(v >> 8), f), fputc((int)(v & 0xff), f);
            else fputc((int)v, f);
        }
    if (fclose(f) != 0) die(name);
}

/* A PPM of the digit in colour (ink red on blue, or the reverse): P6 at maxval 255 or 65535,
 * or P3 at 15. */
static void write_ppm_seed(const char *dir, const char *name, int ascii, unsigned maxval, int flags)
{
    FILE *f = open_seed(dir, name, flags);
    fprintf(f, ascii ? "P3\n# a bar\n%d %d\n%u\n" : "P6\n%d %d\n%u\n", IMG_W, IMG_H, maxval);
    for (int y = 0; y < IMG_H; y++)
        for (int x = 0; x < IMG_W; x++)
            for (int k = 0; k < 3; k++) {
                unsigned g = gray_at(x, y, flags & INVERT), v = (k == 0 ? g : k == 2 ? 255 - g : 40) * maxval / 255;
                if (ascii) fprintf(f, "%u%c", v, x == IMG_W - 1 && k == 2 ? '\n' : ' ');
                else if (maxval > 255) fputc((int)(v >> 8), f), fputc((int)(v & 0xff), f);
                else fputc((int)v, f);
            }
    if (fclose(f) != 0) die(name);
}

/* A JPEG of the digit (gray, RGB or Adobe CMYK), written by libjpeg to a scratch file and
 * copied behind the flag byte. A build without libjpeg writes none. */
static void write_jpeg_seed(const char *dir, const char *name, int channels, int progressive, int flags)
{
    static unsigned char px[IMG_W * IMG_H * 4];
    for (int i = 0; i < IMG_W * IMG_H; i++) {
        unsigned g = gray_at(i % IMG_W, i / IMG_W, flags & INVERT);
        for (int k = 0; k < channels; k++) px[i * channels + k] = (unsigned char)(k == 1 ? 255 - g : g);
    }
    char scratch[1024];
    snprintf(scratch, sizeof scratch, "%s/image/%s.tmp", dir, name);
    if (it_write_jpeg(scratch, px, channels, IMG_W, IMG_H, 85, progressive) != 0) {
        remove(scratch);
        return;
    }
    static unsigned char bytes[1 << 16];
    FILE *in = fopen(scratch, "rb");
    size_t n = in ? fread(bytes, 1, sizeof bytes, in) : 0;
    if (in) fclose(in);
    remove(scratch);
    FILE *f = open_seed(dir, name, flags);
    if (n == 0 || fwrite(bytes, 1, n, f) != n || fclose(f) != 0) die(name);
}

static void write_images(const char *dir)
{
    write_png_seed(dir, "gray1.png", PNG_COLOR_TYPE_GRAY, 1, 0, 0, 0);
    write_png_seed(dir, "gray4-interlaced.png", PNG_COLOR_TYPE_GRAY, 4, 1, 0, 0);
    write_png_seed(dir, "gray8-trns.png", PNG_COLOR_TYPE_GRAY, 8, 0, 1, 0);
    write_png_seed(dir, "gray16.png", PNG_COLOR_TYPE_GRAY, 16, 0, 0, 0);
    write_png_seed(dir, "gray-alpha8.png", PNG_COLOR_TYPE_GRAY_ALPHA, 8, 0, 0, 0);
    write_png_seed(dir, "rgb8-ink-invert.png", PNG_COLOR_TYPE_RGB, 8, 0, 0, 1);
    write_png_seed(dir, "rgb16-interlaced.png", PNG_COLOR_TYPE_RGB, 16, 1, 0, 0);
    write_png_seed(dir, "rgba8-ink-invert.png", PNG_COLOR_TYPE_RGB_ALPHA, 8, 0, 0, 1);
    write_png_seed(dir, "palette4-trns.png", PNG_COLOR_TYPE_PALETTE, 4, 0, 1, 0);
    write_pgm_seed(dir, "p5-8bit.pgm", 0, 255, 0);
    write_pgm_seed(dir, "p5-16bit-ink-invert.pgm", 0, 65535, 1);
    write_pgm_seed(dir, "p2-comments.pgm", 1, 15, 0);
    write_ppm_seed(dir, "p6-8bit.ppm", 0, 255, DIGIT);
    write_ppm_seed(dir, "p6-16bit-picture.ppm", 0, 65535, PICTURE);
    write_ppm_seed(dir, "p3-picture-as-is-invert.ppm", 1, 15, PICTURE | AS_IS | INVERT);
    write_png_seed(dir, "rgb8-picture.png", PNG_COLOR_TYPE_RGB, 8, 0, 0, PICTURE);
    write_png_seed(dir, "gray-alpha8-picture-as-is.png", PNG_COLOR_TYPE_GRAY_ALPHA, 8, 0, 0, PICTURE | AS_IS);
    write_pgm_seed(dir, "p5-8bit-picture.pgm", 0, 255, PICTURE);
    write_jpeg_seed(dir, "gray.jpg", 1, 0, DIGIT);
    write_jpeg_seed(dir, "gray-picture-as-is.jpg", 1, 0, PICTURE | AS_IS);
    write_jpeg_seed(dir, "rgb-ink-invert.jpg", 3, 0, INVERT);
    write_jpeg_seed(dir, "rgb-picture.jpg", 3, 0, PICTURE);
    write_jpeg_seed(dir, "rgb-progressive-picture.jpg", 3, 1, PICTURE);
    write_jpeg_seed(dir, "cmyk-picture-as-is.jpg", 4, 0, PICTURE | AS_IS);
}

/* ---- CIFAR ---- */

enum { CIFAR_PIXELS = 3 * 32 * 32 };

/* fuzz_cifar's input, built piece by piece. */
typedef struct cifar_seed {
    unsigned char bytes[4 * (2 + CIFAR_PIXELS) + 4096];
    size_t len;
} cifar_seed;

/* A file of n records: labels[i] as the label (as coarse and fine with two label bytes), then
 * the pixels; cut_by bytes fewer at the end. */
static void cifar_piece(cifar_seed *s, int label_bytes, const unsigned char *labels, int n, size_t cut_by)
{
    size_t len = (size_t)n * (label_bytes + CIFAR_PIXELS) - cut_by;
    for (int b = 0; b < 3; b++) s->bytes[s->len++] = (unsigned char)(len >> (8 * b));
    unsigned char *p = s->bytes + s->len;
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < label_bytes; k++) *p++ = labels[i];
        for (int j = 0; j < CIFAR_PIXELS; j++) *p++ = (unsigned char)((i * 37 + j * 11) % 256);
    }
    s->len += len;
}

/* n class names, one a line, ending in a blank line as CIFAR's own files do. */
static void cifar_names(cifar_seed *s, int n)
{
    for (int i = 0; i < n; i++) s->len += (size_t)sprintf((char *)s->bytes + s->len, "class_%d\n", i);
    s->bytes[s->len++] = '\n';
}

static void cifar_save(const char *dir, const char *name, const cifar_seed *s)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/cifar/%s", dir, name);
    fuzz_write(path, s->bytes, s->len);
}

static void write_cifar(const char *dir)
{
    const unsigned char labels[3] = {3, 9, 0}, bad[2] = {1, 10};
    cifar_seed s = {.bytes = {0}, .len = 1};
    cifar_piece(&s, 1, labels, 2, 0);
    cifar_save(dir, "cifar10-test", &s);
    s = (cifar_seed){.bytes = {16 | 64 | 2}, .len = 1};
    cifar_piece(&s, 1, labels, 1, 0);
    cifar_piece(&s, 1, labels + 1, 2, 0);
    cifar_names(&s, 10);
    cifar_save(dir, "cifar10-train-names-limit2", &s);
    s = (cifar_seed){.bytes = {16}, .len = 1};
    cifar_piece(&s, 1, labels, 0, 0);
    cifar_piece(&s, 1, labels, 1, 0);
    cifar_save(dir, "cifar10-train-gap", &s);
    s = (cifar_seed){.bytes = {0}, .len = 1};
    cifar_piece(&s, 1, bad, 2, 0);
    cifar_save(dir, "cifar10-test-bad-label", &s);
    s = (cifar_seed){.bytes = {8 | 16 | 32 | 64}, .len = 1};
    cifar_piece(&s, 2, labels, 3, 0);
    cifar_names(&s, 20);
    cifar_save(dir, "cifar100-train-coarse-names", &s);
    s = (cifar_seed){.bytes = {8}, .len = 1};
    cifar_piece(&s, 2, labels, 2, 100);
    cifar_save(dir, "cifar100-test-cut", &s);
}

/* One data cache entry of d, written by the cache under a fixed key, as fuzz_datacache's input:
 * the key, then the entry without its last eight bytes (the CRC the target appends). */
static void datacache_seed(const char *dir, const char *name, const bn_dataset *d)
{
    static const uint64_t key[3] = {0x1111, 0x2222, 0x3333};
    char cache[640], entry[700], seed[1024];
    snprintf(cache, sizeof cache, "%s/datacache-scratch", dir);
    setenv("BLOBNET_DATA_CACHE", cache, 1);
    bn_data_cache_reset();
    bn_data_cache_entry e = {.key = {key[0], key[1], key[2]}};
    snprintf(entry, sizeof entry, "%s/entry", cache);
    snprintf(e.path, sizeof e.path, "%s", entry);
    const bn_data_request rq = {.format = "seed"};
    bn_data_cache_keep(&e, &rq, d);
    FILE *f = fopen(entry, "rb");
    unsigned char bytes[1 << 14];
    size_t n = f ? fread(bytes, 1, sizeof bytes, f) : 0;
    if (!f || n < 8 || n == sizeof bytes) die("a data cache entry");
    fclose(f);
    remove(entry);
    rmdir(cache);
    unsigned char out[sizeof key + sizeof bytes];
    memcpy(out, key, sizeof key);
    memcpy(out + sizeof key, bytes, n - 8);
    snprintf(seed, sizeof seed, "%s/datacache/%s", dir, name);
    fuzz_write(seed, out, sizeof key + n - 8);
}

static void write_datacache(const char *dir)
{
    bn_dataset d;
    if (bn_dataset_alloc(&d, "seed", 3, 1, 2, 3, 4, 0) != BN_OK) die("a byte set");
    for (int i = 0; i < 3 * 6; i++) d.pixels[i] = (unsigned char)(i * 13);
    for (int i = 0; i < 3; i++) d.labels[i] = (uint16_t)(i + 1);
    datacache_seed(dir, "bytes", &d);
    const char *names[4] = {"cat", "dog", "emu", "fox"};
    if (bn_dataset_set_class_names(&d, (char **)names) != BN_OK) die("class names");
    datacache_seed(dir, "bytes-names", &d);
    bn_dataset_free(&d);
    if (bn_dataset_alloc(&d, "seed", 2, 2, 1, 2, 3, 1) != BN_OK) die("a float set");
    for (int i = 0; i < 2 * 4; i++) d.values[i] = 0.25f * (float)i - 1.0f;
    for (int i = 0; i < 2; i++) d.labels[i] = (uint16_t)(2 - i);
    datacache_seed(dir, "floats", &d);
    bn_dataset_free(&d);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds DIR\n");
        return 2;
    }
    write_pair(argv[1], "raw-pair", 0, 0);
    write_pair(argv[1], "raw-pair-limit2", 2, 0);
    write_pair(argv[1], "gzip-pair", 0, 1);
    write_npz_seeds(argv[1]);
    write_checkpoints(argv[1]);
    write_images(argv[1]);
    write_cifar(argv[1]);
    write_datacache(argv[1]);
    return 0;
}
