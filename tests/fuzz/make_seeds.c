/* make_seeds.c - writes the binary seeds of the fuzz corpora into DIR/idx and DIR/checkpoint
 * (tools/fuzz.sh seeds): small IDX pairs in fuzz_idx's input format, raw and gzip, and
 * checkpoints of FUZZ_CHECKPOINT_MODEL as a fresh run, a mid-epoch run and weights alone. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "fuzz_common.h"
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

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds DIR\n");
        return 2;
    }
    write_pair(argv[1], "raw-pair", 0, 0);
    write_pair(argv[1], "raw-pair-limit2", 2, 0);
    write_pair(argv[1], "gzip-pair", 0, 1);
    write_checkpoints(argv[1]);
    return 0;
}
