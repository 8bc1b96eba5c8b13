/* idx.h - IDX files, the MNIST container: any image file of rank 3 (N x H x W, gray) or rank 4
 * (N x H x W x C, or N x C x H x W with layout = nchw) with its label file, raw or gzip. The
 * formats `idx` (any pair), `mnist` and `fashion-mnist` (presets with their folders, 10
 * classes) read through here. */
#ifndef BN_IDX_H
#define BN_IDX_H

#include "dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

/* MNIST's and Fashion-MNIST's class count: their presets keep it whatever labels a subset holds. */
#define BN_IDX_NUM_CLASSES 10

/* Loads an IDX image file (magic 0x00000803, or 0x00000804 with channels) and its label file
 * (0x00000801), each raw or gzip, keeping the first `limit` examples (all when limit <= 0).
 * Both headers are read and compared, and the size checked against the host's memory, before
 * any data is read; the whole of both files is still checked when a limit applies. The class
 * count is the largest label + 1, or `classes` when above 0 (then a label past it is an error).
 * nchw: a rank 4 file is N x C x H x W rather than N x H x W x C. *out is overwritten (not
 * freed) and owns the buffers on success; on error it is left zeroed. */
bn_status bn_idx_load_pair_as(const char *images_path, const char *labels_path, int limit, int classes, int nchw,
                              bn_dataset *out);

/* The same for MNIST-style files: 10 classes, rank 3 or 4 interleaved. */
bn_status bn_idx_load_pair(const char *images_path, const char *labels_path, int limit, bn_dataset *out);

/* Loads the train (train != 0) or test split from DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte,
 * preferring the .gz name over the raw one, with 10 classes; ownership as for bn_idx_load_pair. */
bn_status bn_dataset_load(const char *dir, int train, int limit, bn_dataset *out);

/* The table's readers: `mnist` and `fashion-mnist` (bn_dataset_load on PATH), and `idx` (PATH
 * a folder of {train,t10k}-{images,labels}-*-ubyte[.gz] or {train,test}-{images,labels}*.idx*
 * pairs; keys classes = N, layout = nhwc|nchw). */
bn_status bn_idx_format_mnist(const bn_data_request *rq, bn_dataset *out);
bn_status bn_idx_format_any(const bn_data_request *rq, bn_dataset *out);

/* Whether the training or test images those readers would read are gzip-compressed: a raw IDX
 * file is read as fast as a decoded copy, so only compressed ones go to the data cache. */
int bn_idx_mnist_compressed(const bn_data_request *rq);
int bn_idx_any_compressed(const bn_data_request *rq);

#ifdef __cplusplus
}
#endif
#endif
