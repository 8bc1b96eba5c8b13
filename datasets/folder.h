/* folder.h - the `folder` dataset format: a folder of images per class, one tree per split.
 *
 *     ROOT/train/airplane/0001.png      ROOT/test/airplane/batch1-17.jpg
 *     ROOT/train/automobile/a.ppm       ROOT/test/automobile/...
 *
 * The classes are train/'s subfolders in strcmp order (class 0 first), for either split; test/
 * must hold the same ones. A class folder's images are its *.png, *.pgm, *.ppm, *.jpg and
 * *.jpeg files (any case), in strcmp order; other files are skipped with a note, names that
 * start with '.' ignored. */
#ifndef BN_FOLDER_H
#define BN_FOLDER_H

#include "dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads rq->path/train/ or rq->path/test/: lists and counts every class folder first (an
 * empty one, a class missing from or extra to test/, and no class folders at all are errors
 * naming the folder), checks the memory the kept images need, then decodes each kept image
 * once (a few threads) with bn_image_read_color and fits it into rq->fit with bn_image_fit.
 * With rq->fit all zero (no model) the shape is the first training image's: its size, gray
 * when it holds gray, else RGB. rq->limit keeps the first `limit` images of the list, class
 * by class; the rest are listed but not decoded. An image that does not decode is an error
 * naming the file and the decoder's reason. Unless rq->quiet, a progress line on stderr
 * (rewritten in place on a terminal) and a closing line with the counts and the classes.
 * class_names are the folders' names. */
bn_status bn_folder_load(const bn_data_request *rq, bn_dataset *out);

/* Writes every example of d (8-bit pixels, 1 or 3 channels) as root/split/CLASS/NNNNN.png,
 * NNNNN its index (5 digits or as many as the largest index needs); CLASS is its class name,
 * or its index with as many digits as the largest, so that strcmp keeps the order. Every
 * class gets its folder, empty or not. root is made when missing; root/split must not
 * exist: the tree is written into a hidden folder beside it and renamed at the end, so a
 * failed write leaves nothing behind. Class names out of strcmp order come back from
 * bn_folder_load numbered in that order. */
bn_status bn_folder_write(const bn_dataset *d, const char *root, const char *split);

/* The table's writer: path/train and path/test by bn_folder_write, in a new or empty folder. */
bn_status bn_folder_save(const bn_dataset *train, const bn_dataset *test, const char *path);

#ifdef __cplusplus
}
#endif
#endif
