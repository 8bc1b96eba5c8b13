/* fuzz_npz.c - libFuzzer target for the NumPy reader (datasets/npz.c, npy.c and zip.c).
 * An input is the .npz file itself. Its training split is loaded whole with no keys, so the
 * layout is judged from the shape, and its test split with layout = nchw and a limit of 2. A set
 * that loads is walked with the shuffle and the gather, as the trainer does. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "fuzz_dataset.h"
#include "npz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[128], key[] = "layout", value[] = "nchw";
    fuzz_write(fuzz_path(path, sizeof path, "input.npz"), data, size);
    bn_option nchw = {key, value, 1, 0};
    bn_options none = {0}, keys = {.items = &nchw, .count = 1};
    bn_data_request rq[2] = {{.format = "npz", .path = path, .opts = &none, .train = 1},
                             {.format = "npz", .path = path, .opts = &keys, .train = 0, .limit = 2}};
    for (int i = 0; i < 2; i++) {
        bn_dataset d;
        if (bn_npz_load(&rq[i], &d) != BN_OK) continue;
        fuzz_walk_dataset(&d);
        bn_dataset_free(&d);
    }
    return 0;
}
