/* cifar.h - CIFAR-10 and CIFAR-100 in their binary form: files of fixed-size records, each the
 * label byte(s) then 3072 pixel bytes (32x32 planes of red, green, blue, rows top to bottom).
 * CIFAR-10's record has one label (10 classes); CIFAR-100's has a coarse label (20 classes)
 * then a fine one (100 classes). */
#ifndef BN_CIFAR_H
#define BN_CIFAR_H

#include "dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The table's reader for a folder of CIFAR-10: data_batch_1.bin .. data_batch_5.bin (those
 * present, from 1 without a gap) for training, test_batch.bin for the test; class names from
 * batches.meta.txt when the folder has it. */
bn_status bn_cifar10_load(const bn_data_request *rq, bn_dataset *out);

/* The table's reader for a folder of CIFAR-100: train.bin, test.bin; key `label = fine|coarse`
 * (default fine) picks the labels, and fine_label_names.txt or coarse_label_names.txt gives
 * the class names when the folder has it. */
bn_status bn_cifar100_load(const bn_data_request *rq, bn_dataset *out);

/* Writes d's examples (bytes of 3x32x32, labels below 256) to path as CIFAR-10 records, or as
 * CIFAR-100 ones with the label as both the coarse and the fine byte; through path.tmp, so an
 * error leaves neither a half-written path nor the temporary file. */
bn_status bn_cifar_write(const bn_dataset *d, const char *path, int cifar100);

/* The table's writers: a folder of data_batch_1.bin (the whole training set) and test_batch.bin
 * (CIFAR-10), or train.bin and test.bin (CIFAR-100); examples that are not 3x32x32 are centred
 * on a zero 32x32 field and a gray channel repeated into all three. */
bn_status bn_cifar10_save(const bn_dataset *train, const bn_dataset *test, const char *path);
bn_status bn_cifar100_save(const bn_dataset *train, const bn_dataset *test, const char *path);

#ifdef __cplusplus
}
#endif
#endif
