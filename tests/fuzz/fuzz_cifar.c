/* fuzz_cifar.c - libFuzzer target for the CIFAR readers (datasets/cifar.c).
 * An input is a folder: byte 0 picks the reader and its request (bits 0-2: the example limit,
 * 0 keeping all; bit 3: CIFAR-100; bit 4: the training split; bit 5: label = coarse; bit 6: a
 * class names file), then come the split's files, each a 3-byte length (little-endian, cut to
 * what is there) and its bytes: CIFAR-10's training split has two, data_batch_1.bin and
 * data_batch_2.bin, an empty first one standing for a missing file (a gap); every other split
 * has one. The names file, when bit 6 asks for it, is the rest. A set that loads is walked with
 * the shuffle and the gather, as the trainer does. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cifar.h"
#include "fuzz_common.h"
#include "fuzz_dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every name an input may write: each input starts from an empty folder. */
static const char *const all_names[] = {"data_batch_1.bin", "data_batch_2.bin", "test_batch.bin", "train.bin",
                                        "test.bin", "batches.meta.txt", "fine_label_names.txt",
                                        "coarse_label_names.txt"};

/* Writes the next piece of the input (3-byte length, then that many bytes, cut to what is there)
 * as name; an empty piece writes nothing when `skip_empty`. */
static void write_piece(const char *name, const uint8_t **data, size_t *size, int skip_empty)
{
    size_t len = 0;
    for (int b = 0; b < 3 && *size; b++, (*data)++, (*size)--) len |= (size_t)**data << (8 * b);
    if (len > *size) len = *size;
    char path[640];
    if (len || !skip_empty) fuzz_write(fuzz_path(path, sizeof path, name), *data, len);
    *data += len, *size -= len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const int flags = data[0], cifar100 = flags & 8, train = (flags & 16) != 0;
    data++, size--;
    char path[640];
    for (size_t i = 0; i < sizeof all_names / sizeof all_names[0]; i++)
        unlink(fuzz_path(path, sizeof path, all_names[i]));
    if (cifar100) {
        write_piece(train ? "train.bin" : "test.bin", &data, &size, 0);
    } else if (train) {
        write_piece("data_batch_1.bin", &data, &size, 1);
        write_piece("data_batch_2.bin", &data, &size, 1);
    } else {
        write_piece("test_batch.bin", &data, &size, 0);
    }
    if (flags & 64) {
        const char *names = !cifar100 ? "batches.meta.txt" : flags & 32 ? "coarse_label_names.txt"
                                                                        : "fine_label_names.txt";
        fuzz_write(fuzz_path(path, sizeof path, names), data, size);
    }
    bn_options opts = {0};
    if (flags & 32 && bn_options_add(&opts, "label", "coarse", 1) != BN_OK) abort();
    bn_data_request rq = {.format = cifar100 ? "cifar100" : "cifar10", .path = fuzz_dir, .opts = &opts,
                          .train = train, .limit = flags & 7, .quiet = 1};
    bn_dataset d;
    bn_status s = cifar100 ? bn_cifar100_load(&rq, &d) : bn_cifar10_load(&rq, &d);
    if (s == BN_OK) fuzz_walk_dataset(&d);
    else if (d.pixels || d.labels || d.class_names || d.count) abort();
    bn_dataset_free(&d);
    bn_options_clear(&opts);
    return 0;
}
