/* test_bad_input.c - every kind of malformed input the CLI reads (data sets, model files,
 * checkpoints, flags, images) in one table. Each case starts from a directory of small valid
 * inputs, breaks one of them, runs blobnet and requires: the expected exit code, stderr of
 * exactly one line starting "blobnet: error:" that contains the expected words, no crash or
 * hang, and no file left behind (no half-written checkpoint). On a GPU, an allocation that the
 * device cannot hold is reported with what it has free. */
#include "testing.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "core/device.h"
#include "train/checkpoint.h"

/* 1x4x4 inputs, ip.weight [10,16] and ip.bias [10]: 170 floats, then as many of momentum. */
static const char MODEL[] = "[input]\nchannels=1\nheight=4\nwidth=4\n[dense]\nname=ip\noutputs=10\n[softmax_ce]\n";
#define TRAIN_COUNT 20
#define TEST_COUNT 10

typedef enum change_kind {
    KEEP,       /* the valid inputs as they are: the arguments are what is wrong */
    RAW,        /* file gets exactly the bytes of content */
    REMOVE,     /* file is deleted */
    FIFO,       /* file is replaced by a named pipe that nothing writes to */
    CKPT_EDIT   /* the valid checkpoint's header with "old|new" applied (once), data kept;
                 * "NAN" puts a NaN in the first weight, "CUT" drops the last 100 bytes */
} change_kind;

typedef struct bad_case {
    const char *what;
    change_kind kind;
    const char *file;       /* relative to the case directory */
    const char *content;
    size_t len;             /* bytes of a RAW content (string literals may hold NULs) */
    const char *args;       /* after 'blobnet'; '@' stands for the case directory */
    int code;
    const char *message;    /* must appear in the error line */
} bad_case;

#define BIN(s) s, sizeof(s) - 1
#define NONE NULL, 0

/* The common tails of the command lines. */
#define TRAIN "train @/m.cfg --device cpu --data @/data --epochs 1 --quiet --save @/out.safetensors"
#define RESUME TRAIN " --resume @/ck.safetensors"
#define PREDICT "predict @/m.cfg @/ck.safetensors @/img --device cpu"

/* An IDX header: magic (0x803 images, 0x801 labels) and big-endian dimensions. */
#define IMG_MAGIC "\0\0\x08\x03"
#define LAB_MAGIC "\0\0\x08\x01"
#define BE_20 "\0\0\0\x14"
#define BE_4 "\0\0\0\x04"

static const bad_case cases[] = {
    /* ---- IDX data sets ---- */
    {"images: empty file", RAW, "data/train-images-idx3-ubyte", BIN(""), TRAIN, 1, "empty file"},
    {"images: header cut inside the dimensions", RAW, "data/train-images-idx3-ubyte", BIN(IMG_MAGIC "\0\0"), TRAIN, 1,
     "truncated header"},
    {"images: labels magic", RAW, "data/train-images-idx3-ubyte", BIN(LAB_MAGIC BE_20), TRAIN, 1,
     "wrong magic 0x00000801"},
    {"images: dimensions whose product overflows", RAW, "data/train-images-idx3-ubyte",
     BIN(IMG_MAGIC "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"), TRAIN, 1, "exceed the limit"},
    {"images: header promises 1e9 bytes in a tiny file", RAW, "data/train-images-idx3-ubyte",
     BIN(IMG_MAGIC "\0\0\x03\xe8\0\0\x03\xe8\0\0\x03\xe8" "abc"), TRAIN, 1, "promises 1000000000 data bytes, the file has 3"},
    {"images: a zero dimension", RAW, "data/train-images-idx3-ubyte", BIN(IMG_MAGIC BE_20 "\0\0\0\0" BE_4), TRAIN, 1,
     "zero dimension"},
    {"images: data shorter than the header says", RAW, "data/train-images-idx3-ubyte",
     BIN(IMG_MAGIC BE_20 BE_4 BE_4 "0123456789"), TRAIN, 1, "promises 320 data bytes, the file has 10"},
    {"labels: trailing bytes after the data", RAW, "data/train-labels-idx1-ubyte",
     BIN(LAB_MAGIC BE_20 "\0\1\2\3\4\5\6\7\x08\x09\0\1\2\3\4\5\6\7\x08\x09" "extra"), TRAIN, 1, "trailing data"},
    {"labels: a label out of range", RAW, "data/train-labels-idx1-ubyte",
     BIN(LAB_MAGIC BE_20 "\0\1\2\3\4\5\6\7\x08\x09\0\1\2\3\4\5\6\x0c\x08\x09"), TRAIN, 1,
     "label 12 at index 17 is out of range"},
    {"labels: fewer labels than images", RAW, "data/train-labels-idx1-ubyte",
     BIN(LAB_MAGIC "\0\0\0\x13" "\0\1\2\3\4\5\6\7\x08\x09\0\1\2\3\4\5\6\7\x08"), TRAIN, 1,
     "19 labels do not match the 20 images"},
    {"images: gzip garbage", RAW, "data/train-images-idx3-ubyte.gz", BIN("\x1f\x8b\x08\0garbage, not deflate"), TRAIN, 1,
     "gzip data"},
    {"labels: gzip stream cut short", RAW, "data/t10k-labels-idx1-ubyte.gz",
     BIN("\x1f\x8b\x08\0\0\0\0\0\0\x03\x63\x60\x60"), TRAIN, 1, "truncated gzip data"},
    {"test images: another size than the training images", RAW, "data/t10k-images-idx3-ubyte",
     BIN(IMG_MAGIC "\0\0\0\x0a\0\0\0\x02\0\0\0\x02" "0123456789012345678901234567890123456789"), TRAIN, 2,
     "holds 1x2x2 images"},
    {"data directory is a file", KEEP, NULL, NONE, "train @/m.cfg --device cpu --data @/m.cfg --epochs 1", 1,
     "not a directory"},
    {"data directory missing", KEEP, NULL, NONE, "train @/m.cfg --device cpu --data @/nodata --epochs 1", 1,
     "data directory not found"},
    {"images: a FIFO", FIFO, "data/train-images-idx3-ubyte", NONE, TRAIN, 1,
     "train-images-idx3-ubyte: is not a regular file but a FIFO (named pipe)"},
    {"data directory lacks a file", REMOVE, "data/t10k-labels-idx1-ubyte", NONE, TRAIN, 1,
     "neither t10k-labels-idx1-ubyte.gz nor t10k-labels-idx1-ubyte found"},

    /* ---- the other formats, through --dataset and [data] ---- */
    {"idx: a label past `classes`", KEEP, NULL, NONE, TRAIN " --dataset idx --data-option classes=5", 1,
     "label 5 at index 5 is out of range (classes are 0..4)"},
    {"idx: a key the format does not read", KEEP, NULL, NONE, TRAIN " --dataset idx --data-option colour=red", 2,
     "unknown key 'colour' (the idx format's keys: classes = N"},
    {"cifar10: a batch that is not whole records", RAW, "data/data_batch_1.bin", BIN("\x01" "0123"), TRAIN
     " --dataset cifar10", 1, "data_batch_1.bin: 5 bytes is not a whole number of 3073-byte records"},
    {"cifar10: no batches in the folder", KEEP, NULL, NONE, TRAIN " --dataset cifar10", 1,
     "data_batch_1.bin: not found"},
    {"npz: not a ZIP archive", RAW, "data/d.npz", BIN("PK\x03\x04 but nothing after"),
     "train @/m.cfg --device cpu --dataset npz --data @/data/d.npz --epochs 1 --quiet", 1, "d.npz: "},
    {"folder: no train/ folder", KEEP, NULL, NONE, TRAIN " --dataset folder", 1,
     "the folder format reads"},
    {"flag: --dataset unknown format", KEEP, NULL, NONE, TRAIN " --dataset tiff", 2,
     "--dataset: 'tiff' is not a dataset format; formats are: mnist, fashion-mnist, idx, cifar10, cifar100, folder, npz"},
    {"flag: --holdout as large as the training set", KEEP, NULL, NONE, TRAIN " --holdout 20", 2,
     "holdout = 20: keep 1..19 of the 20 training examples"},
    {"model: fewer outputs than the data has classes", RAW, "m.cfg",
     BIN("[input]\nchannels=1\nheight=4\nwidth=4\n[dense]\noutputs=5\n[softmax_ce]\n"), TRAIN, 2,
     "ends in 5 outputs but the training set of"},
    {"model: [data] names an unknown format", RAW, "m.cfg",
     BIN("[input]\nchannels=1\nheight=4\nwidth=4\n[data]\nformat=tiff\n[dense]\noutputs=10\n[softmax_ce]\n"),
     "train @/m.cfg --device cpu --epochs 1 --quiet", 2, "m.cfg:6: [data] format: 'tiff' is not a dataset format"},
    {"model: two means for one channel", RAW, "m.cfg",
     BIN("[input]\nchannels=1\nheight=4\nwidth=4\nmean=0.1,0.2\n[dense]\noutputs=10\n[softmax_ce]\n"), TRAIN, 2,
     "m.cfg:5: [input] mean = 0.1,0.2: more values than the 1 channel"},

    /* ---- model files ---- */
    {"model: empty file", RAW, "m.cfg", BIN(""), TRAIN, 2, "no [input] section"},
    {"model: zero height", RAW, "m.cfg", BIN("[input]\nchannels=1\nheight=0\nwidth=4\n[dense]\noutputs=10\n"), TRAIN, 2,
     "m.cfg:3: [input] height = 0 is out of range"},
    {"model: negative width", RAW, "m.cfg", BIN("[input]\nchannels=1\nheight=4\nwidth=-4\n[dense]\noutputs=10\n"), TRAIN,
     2, "m.cfg:4: [input] width = -4 is out of range"},
    {"model: zero outputs", RAW, "m.cfg", BIN("[input]\nchannels=1\nheight=4\nwidth=4\n[dense]\noutputs=0\n"), TRAIN, 2,
     "outputs = 0 is out of range"},
    {"model: kernel larger than its input", RAW, "m.cfg",
     BIN("[input]\nchannels=1\nheight=4\nwidth=4\n[conv2d]\nfilters=2\nsize=5\n[softmax_ce]\n"), TRAIN, 2,
     "kernel 5x5 is larger than the padded input 4x4"},
    {"model: pool window larger than its input", RAW, "m.cfg",
     BIN("[input]\nchannels=1\nheight=4\nwidth=4\n[maxpool]\nsize=6\n[dense]\noutputs=10\n[softmax_ce]\n"), TRAIN, 2,
     "window 6x6 is larger"},
    {"model: unknown key", RAW, "m.cfg", BIN("[input]\nchannels=1\nheight=4\nwidth=4\n[dense]\noutputs=10\ncolour=red\n"),
     TRAIN, 2, "m.cfg:7: [dense] unknown key 'colour'"},
    {"model: unknown section", RAW, "m.cfg", BIN("[input]\nchannels=1\nheight=4\nwidth=4\n[transformer]\nheads=8\n"),
     TRAIN, 2, "m.cfg:5: unknown section [transformer]"},
    {"model: non-numeric value", RAW, "m.cfg", BIN("[input]\nchannels=1\nheight=4\nwidth=4\n[dense]\noutputs=ten\n"),
     TRAIN, 2, "outputs = 'ten' is not an integer"},
    {"model: non-numeric float", RAW, "m.cfg", BIN("[input]\nchannels=1\nheight=4\nwidth=4\nmean=half\n[dense]\noutputs=10\n"),
     TRAIN, 2, "mean = half: expected auto, one number, or one per channel"},
    {"model: missing required key", RAW, "m.cfg", BIN("[input]\nchannels=1\nheight=4\nwidth=4\n[dense]\ninit=he\n"), TRAIN,
     2, "missing required key 'outputs'"},
    {"model: line without '='", RAW, "m.cfg", BIN("[input]\nchannels 1\n"), TRAIN, 2, "m.cfg:2: expected 'key = value'"},
    {"model: NUL bytes", RAW, "m.cfg", BIN("[input]\nchannels=1\0\n"), TRAIN, 2, "contains NUL bytes"},
    {"model: loss layer not last", RAW, "m.cfg",
     BIN("[input]\nchannels=1\nheight=4\nwidth=4\n[softmax_ce]\n[dense]\noutputs=10\n"), TRAIN, 2, "must be the last layer"},
    {"model: pad not smaller than size", RAW, "m.cfg",
     BIN("[input]\nchannels=1\nheight=4\nwidth=4\n[conv2d]\nfilters=2\nsize=3\npad=3\n"), TRAIN, 2,
     "pad = 3 must be smaller than size = 3"},
    {"model: terabytes of parameters", RAW, "m.cfg",
     BIN("[input]\nchannels=1\nheight=4\nwidth=4\n[dense]\noutputs=16000000\n[dense]\noutputs=16000000\n[softmax_ce]\n"),
     TRAIN, 2, "GB of host memory (at dense"},
    {"model: a FIFO", FIFO, "m.cfg", NONE, TRAIN, 2, "m.cfg: is not a regular file but a FIFO (named pipe)"},
    {"model: a directory", KEEP, NULL, NONE, "train @/data --device cpu --data @/data", 2,
     "data: is not a regular file but a directory"},
    {"model: a key given twice", RAW, "m.cfg",
     BIN("[input]\nchannels=1\nheight=4\nwidth=4\n[dense]\noutputs=10\ninit=he\noutputs=12\n[softmax_ce]\n"), TRAIN, 2,
     "m.cfg:8: [dense] key 'outputs' is given twice: also at @/m.cfg:6"},
    {"model: missing file", KEEP, NULL, NONE, "train @/none.cfg --device cpu --data @/data", 2, "none.cfg: cannot open"},
    {"model: unknown optimizer", RAW, "m.cfg",
     BIN("[input]\nchannels=1\nheight=4\nwidth=4\n[train]\noptimizer=lion\n[dense]\noutputs=10\n"), TRAIN, 2,
     "m.cfg:6: [train] optimizer = 'lion' is not one of: sgd, adam, adamw"},
    {"model: beta2 of 1", RAW, "m.cfg",
     BIN("[input]\nchannels=1\nheight=4\nwidth=4\n[train]\noptimizer=adam\nbeta2=1\n[dense]\noutputs=10\n"), TRAIN,
     2, "m.cfg:7: [train] beta2 = 1 is out of range [0, 1)"},

    /* ---- checkpoints ---- */
    {"checkpoint: missing file (--resume)", KEEP, NULL, NONE, TRAIN " --resume @/nope.safetensors", 1,
     "cannot open checkpoint"},
    {"checkpoint: empty file", RAW, "ck.safetensors", BIN(""), RESUME, 1, "too short for a safetensors header length"},
    {"checkpoint: header length past the end", RAW, "ck.safetensors", BIN("\xff\0\0\0\0\0\0\0{}"), RESUME, 1,
     "header length 255 runs past the end of the file"},
    {"checkpoint: bad JSON", CKPT_EDIT, "ck.safetensors", "\"__metadata__\":{|\"__metadata__\":{{", 0, RESUME, 1,
     "header is not valid JSON"},
    {"checkpoint: header not an object", RAW, "ck.safetensors", BIN("\x02\0\0\0\0\0\0\0[]"), RESUME, 1,
     "header is a JSON array, not an object"},
    {"checkpoint: wrong dtype", CKPT_EDIT, "ck.safetensors", "\"F32\"|\"F16\"", 0, RESUME, 1,
     "tensor ip.weight has dtype F16"},
    {"checkpoint: wrong shape", CKPT_EDIT, "ck.safetensors", "[10,16]|[16,10]", 0, RESUME, 1,
     "ip.weight has shape [16,10] but the model expects [10,16]"},
    {"checkpoint: offsets disagree with the shape", CKPT_EDIT, "ck.safetensors", "[0,640]|[0,636]", 0, RESUME, 1,
     "hold 636 bytes but shape [10,16] needs 640"},
    {"checkpoint: missing tensor", CKPT_EDIT, "ck.safetensors",
     ",\"momentum.ip.bias\":{\"dtype\":\"F32\",\"shape\":[10],\"data_offsets\":[1320,1360]}|", 0, RESUME, 1,
     "momentum of ip.bias (tensor momentum.ip.bias) is missing"},
    {"checkpoint: tensor the model lacks", CKPT_EDIT, "ck.safetensors", "\"ip.bias\"|\"ip.bias2\"", 0, RESUME, 1,
     "tensor ip.bias2 is not in the model"},
    {"checkpoint: data cut short", CKPT_EDIT, "ck.safetensors", "CUT", 0, RESUME, 1, "past the data section"},
    {"checkpoint: NaN in the weights", CKPT_EDIT, "ck.safetensors", "NAN", 0, RESUME, 1,
     "tensor ip.weight holds NaN at element 0"},
    {"checkpoint: non-numeric epoch", CKPT_EDIT, "ck.safetensors", "\"epoch\":\"0\"|\"epoch\":\"zero\"", 0, RESUME, 1,
     "metadata epoch = \"zero\" is not an integer"},
    {"checkpoint: bad model", CKPT_EDIT, "ck.safetensors", "\"model\":\"|\"model\":\"x", 0, RESUME, 1,
     "the checkpoint has `xinput 1x4x4 mean=0 std=1` where the model has `input 1x4x4 mean=0 std=1`"},
    {"checkpoint: another model's", RAW, "m.cfg", BIN("[input]\nchannels=1\nheight=4\nwidth=4\n[dense]\nname=ip\noutputs=10\n"
                                                     "init=he\n[softmax_ce]\n"),
     RESUME, 1, "was saved from a different model than"},
    {"checkpoint: no momentum to resume", CKPT_EDIT, "ck.safetensors", "\"has_momentum\":\"1\"|\"has_momentum\":\"0\"", 0,
     RESUME, 1, "holds no optimizer state"},
    {"checkpoint: another optimizer's state", KEEP, NULL, NONE, RESUME " --optimizer adamw", 1,
     "ck.safetensors holds the state of optimizer sgd, but this run's optimizer is adamw"},
    {"checkpoint: a directory (test)", KEEP, NULL, NONE, "test @/m.cfg @/data --device cpu --data @/data", 1,
     "is not a regular file"},
    {"checkpoint: a FIFO (--resume)", FIFO, "ck.safetensors", NONE, RESUME, 1,
     "ck.safetensors: is not a regular file but a FIFO (named pipe)"},
    {"checkpoint: wrong shape (test)", CKPT_EDIT, "ck.safetensors", "[10,16]|[10,15]", 0,
     "test @/m.cfg @/ck.safetensors --device cpu --data @/data", 1, "hold 640 bytes but shape [10,15] needs 600"},

    /* ---- command-line arguments ---- */
    {"flag: missing value", KEEP, NULL, NONE, TRAIN " --epochs", 2, "option --epochs needs a value"},
    {"flag: non-numeric --lr", KEEP, NULL, NONE, TRAIN " --lr fast", 2, "--lr: 'fast' is not a finite number"},
    {"flag: non-numeric --batch", KEEP, NULL, NONE, TRAIN " --batch 8x", 2, "--batch: '8x' is not an integer"},
    {"flag: negative --batch", KEEP, NULL, NONE, TRAIN " --batch -3", 2, "--batch: -3 is outside 1..65536"},
    {"flag: --momentum above 1", KEEP, NULL, NONE, TRAIN " --momentum 2", 2, "--momentum: 2 is outside 0..1"},
    {"flag: unknown --optimizer", KEEP, NULL, NONE, TRAIN " --optimizer lion", 2,
     "--optimizer: 'lion' is not one of sgd, adam, adamw"},
    {"flag: negative --warmup", KEEP, NULL, NONE, TRAIN " --warmup -1", 2, "--warmup: -1 is outside 0.."},
    {"flag: unknown flag", KEEP, NULL, NONE, TRAIN " --colour red", 2, "unknown option '--colour'"},
    {"flag: stray argument", KEEP, NULL, NONE, TRAIN " extra", 2, "unexpected argument 'extra'"},
    {"flag: bad --device", KEEP, NULL, NONE, TRAIN " --device tpu", 2, "--device: 'tpu' is not one of cpu, gpu, gpu:N, auto"},
    {"flag: bad --device ordinal", KEEP, NULL, NONE, TRAIN " --device gpu:x", 2, "--device: 'x' is not an integer"},
    {"flag: --device of a GPU that is not there", KEEP, NULL, NONE, TRAIN " --device gpu:99", 1, "gpu:99"},
    {"flag: --profile-steps backwards", KEEP, NULL, NONE, TRAIN " --profile-steps 5:2", 2,
     "--profile-steps: 5:2 ends before it starts"},
    {"flag: --profile-steps not a number", KEEP, NULL, NONE, TRAIN " --profile-steps x:3", 2,
     "--profile-steps: 'x' is not an integer"},
    {"flag: --profile-steps zero", KEEP, NULL, NONE, TRAIN " --profile-steps 0", 2, "--profile-steps: 0 is outside 1.."},
    {"flag: --log-every without --log", KEEP, NULL, NONE, TRAIN " --log-every 5", 2, "--log-every needs --log FILE"},
    {"flag: --save into a missing directory", KEEP, NULL, NONE,
     "train @/m.cfg --device cpu --data @/data --epochs 1 --save @/nodir/out.safetensors", 2,
     "--save: directory @/nodir does not exist"},
    {"flag: --log into a missing directory", KEEP, NULL, NONE, TRAIN " --log @/nodir/log.csv", 2,
     "--log: directory @/nodir does not exist"},
    {"flag: --checkpoint-every without --save", KEEP, NULL, NONE,
     "train @/m.cfg --device cpu --data @/data --checkpoint-every 5", 2, "--checkpoint-every needs --save FILE"},
    {"flag: --checkpoint-every zero", KEEP, NULL, NONE, TRAIN " --checkpoint-every 0", 2,
     "--checkpoint-every: 0 is outside 1.."},
    {"flag: non-numeric --debug-numerics", KEEP, NULL, NONE, TRAIN " --debug-numerics often", 2,
     "--debug-numerics: 'often' is not an integer"},
    {"flag: --dataset unknown", KEEP, NULL, NONE, TRAIN " --dataset cifar", 2, "--dataset: 'cifar' is not a dataset format; formats are: mnist"},
    {"flag: --misclassified names a file", KEEP, NULL, NONE,
     "test @/m.cfg @/ck.safetensors --device cpu --data @/data --misclassified @/m.cfg", 2,
     "--misclassified: @/m.cfg exists and is not a directory"},
    {"flag: --misclassified in a missing directory", KEEP, NULL, NONE,
     "test @/m.cfg @/ck.safetensors --device cpu --data @/data --misclassified @/nodir/wrong", 2,
     "--misclassified: cannot create @/nodir/wrong: directory @/nodir does not exist"},
    {"flag: test without WEIGHTS", KEEP, NULL, NONE, "test @/m.cfg --device cpu", 2, "test: expected MODEL and WEIGHTS"},

    /* ---- images for predict ---- */
    {"image: empty file", RAW, "img", BIN(""), PREDICT, 1, "img: the file is empty"},
    {"image: not an image", RAW, "img", BIN("hello, world\n"), PREDICT, 1,
     "not a PNG or PGM/PPM (P2, P3, P5, P6) or JPEG image"},
    {"image: PNG signature then garbage", RAW, "img", BIN("\x89PNG\r\n\x1a\n" "garbage garbage garbage"), PREDICT, 1,
     "bad PNG"},
    {"image: PGM with maxval 0", RAW, "img", BIN("P5\n4 4\n0\n0123456789abcdef"), PREDICT, 1, "bad PGM header"},
    {"image: PGM cut short", RAW, "img", BIN("P5\n4 4\n255\n\1\2\3"), PREDICT, 1,
     "truncated PGM: 3 bytes of pixels, expected 16"},
    {"image: PGM of absurd size", RAW, "img", BIN("P5\n1000000 1000000\n255\n"), PREDICT, 1, "is too large"},
    {"image: ASCII PGM pixel above maxval", RAW, "img", BIN("P2\n2 2\n15\n0 3 99 1\n"), PREDICT, 1,
     "PGM pixel 2 is 99, above maxval 15"},
    {"image: PPM cut short", RAW, "img", BIN("P6\n2 2\n255\n\1\2\3"), PREDICT, 1,
     "truncated PPM: 3 bytes of pixels, expected 12"},
    /* "bad JPEG", or in a build without libjpeg, that it is a JPEG all the same. */
    {"image: JPEG markers then garbage", RAW, "img", BIN("\xff\xd8\xff\xe0 garbage garbage"), PREDICT, 1, "JPEG"},
    {"image: a FIFO", FIFO, "img", NONE, PREDICT, 1, "img: is not a regular file but a FIFO (named pipe)"},
    {"image: missing file", KEEP, NULL, NONE, "predict @/m.cfg @/ck.safetensors @/nope.png --device cpu", 1,
     "nope.png: cannot open"},
};

/* ---- the valid inputs ---- */

static int write_file(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = n == 0 || fwrite(bytes, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static int write_idx(const char *path, uint32_t magic, const uint32_t *dims, int ndims, const unsigned char *data,
                     size_t n)
{
    unsigned char buf[1024];
    size_t len = 0;
    uint32_t words[4] = {magic, 0, 0, 0};
    for (int i = 0; i < ndims; i++) words[i + 1] = dims[i];
    for (int i = 0; i <= ndims; i++)
        for (int b = 3; b >= 0; b--) buf[len++] = (unsigned char)(words[i] >> (8 * b));
    if (len + n > sizeof buf) return -1;
    memcpy(buf + len, data, n);
    return write_file(path, buf, len + n);
}

/* DIR/data with train (20) and t10k (10) sets of 4x4 images, raw IDX. */
static int write_data(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/data", dir);
    if (mkdir(path, 0755) != 0) return -1;
    unsigned char pix[TRAIN_COUNT * 16], lab[TRAIN_COUNT];
    for (int i = 0; i < TRAIN_COUNT * 16; i++) pix[i] = (unsigned char)(i * 29 % 256);
    for (int i = 0; i < TRAIN_COUNT; i++) lab[i] = (unsigned char)(i % 10);
    static const char *const split[2] = {"train", "t10k"};
    for (int s = 0; s < 2; s++) {
        uint32_t count = s == 0 ? TRAIN_COUNT : TEST_COUNT, idims[3] = {count, 4, 4}, ldims[1] = {count};
        snprintf(path, sizeof path, "%s/data/%s-images-idx3-ubyte", dir, split[s]);
        if (write_idx(path, 0x803, idims, 3, pix, count * 16) != 0) return -1;
        snprintf(path, sizeof path, "%s/data/%s-labels-idx1-ubyte", dir, split[s]);
        if (write_idx(path, 0x801, ldims, 1, lab, count) != 0) return -1;
    }
    return 0;
}

/* DIR/ck.safetensors: a fresh run of MODEL, as `train --epochs 0 --save` writes it. */
static int write_checkpoint(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/ck.safetensors", dir);
    bn_net *net = NULL;
    bn_optimizer *opt = NULL;
    bn_train_state st = {.seed = 1};
    bn_status s = bn_net_from_text(MODEL, "m.cfg", &net);
    if (s == BN_OK) s = bn_net_setup(net, 1, NULL, 0, 1);
    if (s == BN_OK) s = bn_optimizer_create(net, &net->train, &opt);
    if (s == BN_OK) s = bn_checkpoint_save(path, net, opt, &st);
    bn_optimizer_free(opt);
    bn_net_free(net);
    return s == BN_OK ? 0 : -1;
}

/* A digit the model could classify: a bar in a 4x4 PGM. */
static const char DIGIT_PGM[] = "P2\n4 4\n255\n0 255 0 0  0 255 0 0  0 255 0 0  0 255 0 0\n";

static int write_base(const char *dir)
{
    char path[600];
    if (mkdir(dir, 0755) != 0) return -1;
    snprintf(path, sizeof path, "%s/m.cfg", dir);
    if (write_file(path, MODEL, strlen(MODEL)) != 0) return -1;
    snprintf(path, sizeof path, "%s/img", dir);
    if (write_file(path, DIGIT_PGM, strlen(DIGIT_PGM)) != 0) return -1;
    return write_data(dir) == 0 && write_checkpoint(dir) == 0 ? 0 : -1;
}

/* ---- breaking one input ---- */

static unsigned char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *buf = malloc(1 << 16);
    *n = buf ? fread(buf, 1, 1 << 16, f) : 0;
    fclose(f);
    return buf;
}

/* Rewrites the checkpoint at path as the edit says (see CKPT_EDIT). */
static int edit_checkpoint(const char *path, const char *edit)
{
    size_t n;
    unsigned char *bytes = read_file(path, &n);
    if (!bytes || n < 8) return -1;
    size_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | bytes[i];
    const unsigned char *data = bytes + 8 + hlen;
    size_t dlen = n - 8 - hlen;
    char header[8192], edited[8192];
    if (hlen >= sizeof header) return -1;
    memcpy(header, bytes + 8, hlen);
    header[hlen] = '\0';
    int r = -1;
    if (strcmp(edit, "NAN") == 0) {
        memcpy(bytes + 8 + hlen, "\x00\x00\xc0\x7f", 4); /* a quiet NaN, little-endian */
        r = write_file(path, bytes, n);
    } else if (strcmp(edit, "CUT") == 0) {
        r = write_file(path, bytes, n - 100);
    } else {
        const char *bar = strchr(edit, '|');
        char old[512];
        snprintf(old, sizeof old, "%.*s", (int)(bar - edit), edit);
        char *at = strstr(header, old);
        if (at) {
            snprintf(edited, sizeof edited, "%.*s%s%s", (int)(at - header), header, bar + 1, at + strlen(old));
            size_t elen = strlen(edited);
            unsigned char *out = malloc(8 + elen + dlen);
            for (int i = 0; out && i < 8; i++) out[i] = (unsigned char)((uint64_t)elen >> (8 * i));
            if (out) {
                memcpy(out + 8, edited, elen);
                memcpy(out + 8 + elen, data, dlen);
                r = write_file(path, out, 8 + elen + dlen);
            }
            free(out);
        }
    }
    free(bytes);
    return r;
}

static int apply_change(const bad_case *c, const char *dir)
{
    char path[700];
    if (c->kind == KEEP) return 0;
    snprintf(path, sizeof path, "%s/%s", dir, c->file);
    if (c->kind == RAW) return write_file(path, c->content, c->len);
    if (c->kind == REMOVE) return remove(path);
    if (c->kind == FIFO) return remove(path) == 0 && mkfifo(path, 0644) == 0 ? 0 : -1;
    return edit_checkpoint(path, c->content);
}

/* args with every '@' replaced by dir. */
static void expand(const char *args, const char *dir, char *out, size_t cap)
{
    size_t n = 0;
    for (const char *p = args; *p && n + 1 < cap; p++) {
        if (*p == '@') n += (size_t)snprintf(out + n, cap - n, "%s", dir);
        else out[n++] = *p;
        if (n >= cap) n = cap - 1;
    }
    out[n] = '\0';
}

/* Entries under dir, recursively: a failed command must not add any. */
static int count_entries(const char *dir)
{
    char cmd[700], out[64];
    snprintf(cmd, sizeof cmd, "find '%s' | wc -l", dir);
    return bn_test_run(cmd, out, sizeof out) == 0 ? atoi(out) : -1;
}

/* Runs one case; returns NULL when it behaved, else what went wrong (in why). */
static const char *run_case(int i, const bad_case *c, char *err, size_t cap, char *why, size_t why_cap)
{
    char dir[512], args[2048], expected[1024], cmd[4096];
    snprintf(dir, sizeof dir, "%s/bad-%02d", bn_test_tmpdir(), i);
    if (write_base(dir) != 0 || apply_change(c, dir) != 0) return "could not prepare the inputs";
    int before = count_entries(dir);
    expand(c->args, dir, args, sizeof args);
    expand(c->message, dir, expected, sizeof expected);
    /* stderr alone reaches the pipe; `timeout` turns a hang into exit 124. */
    snprintf(cmd, sizeof cmd, "{ timeout 60 %s %s 2>&1 >/dev/null; }", bn_test_cli(), args);
    int rc = bn_test_run(cmd, err, cap);
    size_t len = strlen(err);
    if (rc != c->code) return snprintf(why, why_cap, "exit %d, expected %d", rc, c->code), why;
    if (strncmp(err, "blobnet: error: ", 16) != 0) return "stderr does not start with 'blobnet: error: '";
    if (len == 0 || strchr(err, '\n') != err + len - 1) return "stderr is not exactly one line";
    if (!strstr(err, expected)) return snprintf(why, why_cap, "message lacks \"%s\"", expected), why;
    if (count_entries(dir) != before) return "a file was left behind";
    return NULL;
}

BN_TEST(bad_input_table)
{
    size_t n = sizeof cases / sizeof cases[0];
    CHECK_MSG(n >= 40, "only %zu cases", n);
    int failed = 0;
    printf("    %-3s %-52s %-4s %s\n", "#", "case", "exit", "result");
    for (size_t i = 0; i < n; i++) {
        char err[4096], why[1200];
        const char *problem = run_case((int)i, &cases[i], err, sizeof err, why, sizeof why);
        char *nl = strchr(err, '\n');
        if (nl && !problem) *nl = '\0';
        printf("    %-3zu %-52s %-4d %s\n", i, cases[i].what, cases[i].code, problem ? "FAIL" : "ok");
        if (problem) {
            failed++;
            printf("        %s; stderr: %s\n", problem, err);
        }
    }
    CHECK_MSG(failed == 0, "%d of %zu cases failed", failed, n);
    return BN_PASS;
}

/* Resource faults on the GPU: an allocation the device cannot hold says how much was asked,
 * how much is free, and what to do. */
BN_TEST(bad_input_gpu_out_of_memory_says_what_is_free)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    void *p = NULL;
    CHECK_ERR(bn_device_alloc(&p, (size_t)1 << 44), BN_ERR_DEVICE, "out of device memory on gpu:0");
    printf("    %s\n", bn_last_error());
    CHECK(p == NULL);
    CHECK(strstr(bn_last_error(), "needs 17592186044416 bytes") && strstr(bn_last_error(), " MiB are free") &&
          strstr(bn_last_error(), "use a smaller --batch"));
    /* The failure leaves the device usable. */
    CHECK_OK(bn_device_alloc(&p, 1 << 20));
    bn_device_free(p);
    bn_ctx_close();
    return BN_PASS;
}

/* Setup on a GPU refuses a network whose blobs need more than the device has free, with both
 * figures, before allocating any of them (the host's limit is set out of the way). */
BN_TEST(bad_input_gpu_setup_refuses_more_than_the_device_has_free)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    size_t free_bytes = 0, total_bytes = 0;
    CHECK_OK(bn_ctx_memory(ctx, &free_bytes, &total_bytes));
    CHECK_MSG(free_bytes > 0 && free_bytes <= total_bytes, "%zu of %zu bytes free", free_bytes, total_bytes);
    bn_net *net;
    CHECK_OK(bn_net_from_text("[input]\nchannels=1\nheight=1024\nwidth=1024\n[avgpool]\nglobal=1\n", "big.cfg", &net));
    net->max_bytes = (size_t)1 << 50;
    /* 4 MiB an example: 1 GiB more than is free. */
    int batch = (int)(free_bytes / (4 << 20)) + 256;
    bn_status s = bn_net_setup(net, batch, ctx, 0, 1);
    char want[160], message[1100];
    snprintf(message, sizeof message, "%s", bn_last_error());
    bn_net_free(net);
    bn_ctx_close();
    CHECK_MSG(s == BN_ERR_USAGE, "status %d: %s", (int)s, message);
    snprintf(want, sizeof want, "big.cfg: at batch %d the network needs ", batch);
    CHECK_MSG(strstr(message, want) && strstr(message, " GB of device memory, more than the ") &&
                  strstr(message, " GB free on gpu:0 ("),
              "%s", message);
    return BN_PASS;
}
