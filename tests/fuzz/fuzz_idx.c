/* fuzz_idx.c - libFuzzer target for the IDX reader (datasets/idx.c).
 * An input is one IDX pair: byte 0 picks the example limit (0 keeps all), bytes 1-4 give
 * the length of the image file (little-endian, cut to what is there), the image file
 * follows, and the label file is the rest. Either file may be raw or gzip. A pair that
 * loads is walked with the shuffle and the gather, as the trainer does. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "fuzz_dataset.h"
#include "idx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5) return 0;
    int limit = data[0] % 8;
    size_t images_len = (size_t)data[1] | (size_t)data[2] << 8 | (size_t)data[3] << 16 | (size_t)data[4] << 24;
    data += 5, size -= 5;
    if (images_len > size) images_len = size;
    char images[128], labels[128];
    fuzz_write(fuzz_path(images, sizeof images, "images"), data, images_len);
    fuzz_write(fuzz_path(labels, sizeof labels, "labels"), data + images_len, size - images_len);
    bn_dataset d;
    if (bn_idx_load_pair(images, labels, limit, &d) != BN_OK) return 0;
    fuzz_walk_dataset(&d);
    bn_dataset_free(&d);
    return 0;
}
