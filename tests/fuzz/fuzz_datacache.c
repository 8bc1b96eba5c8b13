/* fuzz_datacache.c - libFuzzer target for the data cache's entry reader (datasets/data_cache.c,
 * bn_data_cache_read). An input is the key the entry is looked up under (three 64-bit words,
 * little-endian, cut to what is there) and then the entry's bytes; the target appends the CRC-32
 * the entry's last eight bytes must hold, so that mutations reach the header, class names and
 * labels behind the checksum instead of stopping at it. A set that loads is walked with the
 * shuffle and the gather, as the trainer does; one that does not must come back empty. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "data_cache.h"
#include "fuzz_common.h"
#include "fuzz_dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t key[3] = {0, 0, 0};
    for (int i = 0; i < 3 && size >= 8; i++, data += 8, size -= 8) memcpy(&key[i], data, 8);
    uint8_t *entry = malloc(size + 8);
    if (!entry) abort();
    if (size) memcpy(entry, data, size);
    const uint64_t crc = crc32(crc32(0, Z_NULL, 0), data, (uInt)size);
    memcpy(entry + size, &crc, 8);
    char path[640];
    fuzz_write(fuzz_path(path, sizeof path, "entry"), entry, size + 8);
    free(entry);
    bn_dataset d;
    char why[256];
    const int r = bn_data_cache_read(path, key, &d, why, sizeof why);
    if (r == 1) fuzz_walk_dataset(&d);
    else if (d.pixels || d.values || d.labels || d.class_names || d.count) abort();
    bn_dataset_free(&d);
    return 0;
}
