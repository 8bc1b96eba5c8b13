/* formats.c - the table of dataset formats: one line a format. A new format is its reader
 * (datasets/NAME.{h,c}) and a line here; nothing else names formats. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cifar.h"
#include "data_cache.h"
#include "dataset.h"
#include "folder.h"
#include "idx.h"
#include "npz.h"

static const bn_data_format formats[] = {
    {"mnist", "a folder of MNIST's four IDX files", "data/mnist", NULL, bn_idx_format_mnist, NULL,
     bn_idx_mnist_compressed, 0},
    {"fashion-mnist", "a folder of Fashion-MNIST's four IDX files", "/usr/share/datasets/fashion-mnist", NULL,
     bn_idx_format_mnist, NULL, bn_idx_mnist_compressed, 0},
    {"idx", "a folder of IDX pairs: *train*images*, *train*labels*, *t10k* or *test* ones", NULL,
     "classes = N (default: largest label + 1), layout = nhwc|nchw (rank 4 images)", bn_idx_format_any, NULL,
     bn_idx_any_compressed, 0},
    {"cifar10", "a folder of CIFAR-10's binary batches (data_batch_1..5.bin, test_batch.bin)", NULL, NULL,
     bn_cifar10_load, bn_cifar10_save, NULL, 0},
    {"cifar100", "a folder of CIFAR-100's binary files (train.bin, test.bin)", NULL,
     "label = fine|coarse (default fine)", bn_cifar100_load, bn_cifar100_save, NULL, 0},
    {"folder", "a folder with train/ and test/, a subfolder of images per class (PNG, PGM, PPM, JPEG)", NULL, NULL,
     bn_folder_load, bn_folder_save, NULL, 1},
    {"npz", "a NumPy .npz with x_train, y_train, x_test, y_test, or a folder of those four .npy files", NULL,
     "layout = nhwc|nchw, classes = N", bn_npz_load, bn_npz_save, NULL, 0},
};

int bn_data_format_count(void)
{
    return (int)(sizeof formats / sizeof formats[0]);
}

const bn_data_format *bn_data_format_at(int i)
{
    return i >= 0 && i < bn_data_format_count() ? &formats[i] : NULL;
}

void bn_data_format_list(char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < bn_data_format_count() && used < cap; i++) {
        int n = snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", formats[i].name);
        if (n < 0) return;
        used += (size_t)n;
    }
}

bn_status bn_data_format_find(const char *name, const char *what, const bn_data_format **out)
{
    for (int i = 0; i < bn_data_format_count(); i++)
        if (strcmp(formats[i].name, name) == 0) {
            *out = &formats[i];
            return BN_OK;
        }
    char list[512];
    bn_data_format_list(list, sizeof list);
    return bn_error(BN_ERR_USAGE, "%s: '%s' is not a dataset format; formats are: %s", what, name, list);
}

bn_status bn_data_save_folder(const char *path)
{
    if (mkdir(path, 0777) == 0) return BN_OK;
    if (errno != EEXIST) return bn_error(BN_ERR_IO, "%s: cannot create the folder: %s", path, strerror(errno));
    DIR *d = opendir(path);
    if (!d) return bn_error(BN_ERR_IO, "%s: exists and is not a folder that can be read", path);
    int empty = 1;
    for (struct dirent *e; empty && (e = readdir(d));) empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
    closedir(d);
    return empty ? BN_OK : bn_error(BN_ERR_USAGE, "%s: the folder is not empty; name a new or empty one", path);
}

bn_status bn_data_load(const bn_data_format *f, const bn_data_request *rq, bn_dataset *out)
{
    bn_data_cache_entry entry;
    int cached = bn_data_cache_find(f, rq, &entry, out);
    bn_status s = cached ? BN_OK : f->load(rq, out);
    const char *split = rq->train ? "training" : "test";
    if (s == BN_OK && out->count <= 0) s = bn_error(BN_ERR_DATA, "%s: the %s set is empty", rq->path, split);
    if (s == BN_OK && (out->num_classes <= 0 || out->num_classes > BN_DATASET_MAX_CLASSES))
        s = bn_error(BN_ERR_DATA, "%s: %d classes, outside 1..%d", rq->path, out->num_classes, BN_DATASET_MAX_CLASSES);
    for (int i = 0; s == BN_OK && i < out->count; i++)
        if (out->labels[i] >= out->num_classes)
            s = bn_error(BN_ERR_DATA, "%s: label %u of %s example %d is past the %d classes", rq->path,
                         (unsigned)out->labels[i], split, i, out->num_classes);
    if (s != BN_OK) bn_dataset_free(out);
    else if (!cached) bn_data_cache_keep(&entry, rq, out);
    return s;
}
