/* npz.h - NumPy arrays as a dataset, the bridge from any Python pipeline: an .npz archive
 * (np.savez or np.savez_compressed) holding x_train, y_train, x_test and y_test, as Keras's
 * mnist.npz does, or a folder of those four .npy files; and the writer of such an archive. */
#ifndef BN_NPZ_H
#define BN_NPZ_H

#include "dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The table's reader (format `npz`): rq->path is the .npz file or the folder; rq->train picks
 * x_train/y_train or x_test/y_test. x is uint8 (pixels), float32 or float64 (values, as float32),
 * shaped (N, H, W), (N, H, W, C) or (N, C, H, W); key layout = nhwc|nchw settles a rank-4 shape
 * that could be either. y is integers, (N,) or (N, 1), in 0..65534; the class count is the
 * largest label + 1, or key classes = N, which then bounds the labels. Both headers are read
 * and the size checked before any data is inflated; every byte is read and its CRC checked even
 * when rq->limit keeps fewer examples. *out is overwritten (not freed) and owns its buffers on
 * success; it is left zeroed on error. */
bn_status bn_npz_load(const bn_data_request *rq, bn_dataset *out);

/* Writes train and test as a stored .npz at path: x_* uint8 (|u1) for pixels or float32 (<f4)
 * for values, shaped (N, H, W) with one channel, else (N, H, W, C) with nhwc or (N, C, H, W);
 * y_* as int64 (<i8), NumPy's default integer. The file is written as PATH.tmp and renamed, so
 * an error leaves no partial file at path. */
bn_status bn_npz_write(const bn_dataset *train, const bn_dataset *test, const char *path, int nhwc);

/* The table's writer: bn_npz_write with channels last, as images are kept in Python. */
bn_status bn_npz_save(const bn_dataset *train, const bn_dataset *test, const char *path);

#ifdef __cplusplus
}
#endif
#endif
