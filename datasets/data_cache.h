/* data_cache.h - decoded datasets kept between runs, so that a set read many times (gzip IDX
 * files, a folder of PNGs, CIFAR records, NumPy archives) is decoded once: later loads of the
 * same request read the decoded pixels or values back in one pass.
 *
 * An entry is one file in the cache folder:
 *
 *   $BLOBNET_DATA_CACHE                    when set; "off" keeps nothing
 *   $XDG_CACHE_HOME/blobnet/data/          else, when XDG_CACHE_HOME is set
 *   $HOME/.cache/blobnet/data/             else
 *
 * Its name is the hex of two hashes: the request's identity (BN_DATA_CACHE_VERSION, the
 * format, the absolute path, the split, the limit, the model's input shape, every option in
 * sorted order) and that identity with the signature of the source (size, modification time in
 * nanoseconds and inode of the file, or of every regular file below the folder, by sorted
 * relative name), so a changed, added or removed source file finds no entry. An entry replaces
 * the older ones of its identity when it is written. Its content: a magic line naming the
 * version, the key, the set's shape, kind and class names, the labels, the data, and a CRC-32 of
 * everything before it.
 *
 * A bad entry (truncated, another magic or key, a checksum that does not match) is a warning
 * on stderr, is deleted, and the set is decoded again; a folder or file that cannot be written
 * is a warning once and the run goes on. Entries are written to a temporary file renamed over
 * the final name, so no reader sees half of one. Not kept: sets whose decoded size passes
 * $BLOBNET_DATA_CACHE_MAX (bytes, or with a K, M or G suffix; default 4G), requests whose
 * format says decoding costs nothing (raw IDX files), and sources changed in the last two
 * seconds, whose modification time could not yet tell a later change apart. */
#ifndef BN_DATA_CACHE_H
#define BN_DATA_CACHE_H

#include <stdint.h>

#include "dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Part of every key and of the magic line: raise it whenever what a reader decodes or the
 * entry's layout changes, so that entries of an older build are not taken. */
#define BN_DATA_CACHE_VERSION 1

/* One request's place in the cache, found by bn_data_cache_find. */
typedef struct bn_data_cache_entry {
    char path[4096];      /* the entry's file; "" when nothing is kept for the request */
    uint64_t key[3];      /* the identity's hash, then the two of the full key (identity and source) */
    int recent;           /* a source file changed in the last seconds: read, never written */
} bn_data_cache_entry;

/* The cache folder (owned by the library), or NULL when the cache is off or there is no home. */
const char *bn_data_cache_dir(void);

/* Looks rq up for format f: returns 1 with *out filled (owned by the caller, every option of rq
 * marked used) when a sound entry is there, else 0 with *out zeroed and *e saying where the
 * decoded set is to be kept (bn_data_cache_keep). Never an error: a bad entry is a warning. */
int bn_data_cache_find(const bn_data_format *f, const bn_data_request *rq, bn_data_cache_entry *e, bn_dataset *out);

/* The size limit of a set to be kept: $BLOBNET_DATA_CACHE_MAX, or 4G where it is unset or empty;
 * a usage error naming the variable where it is not a size (core/options.h, bn_parse_bytes). */
bn_status bn_data_cache_max_bytes(uint64_t *out);

/* Writes d, the set decoded for rq, as e's entry, unless e keeps nothing, an option of rq is
 * unused or d is past the size limit. A failed write, or a limit that is not a size (which the
 * CLI refuses before it loads anything), is a warning once; nothing is returned. */
void bn_data_cache_keep(const bn_data_cache_entry *e, const bn_data_request *rq, const bn_dataset *d);

/* Reads the entry file at path, kept under key, into *out: 1 when it is sound, 0 when there is
 * no such file, -1 with why (cap bytes) saying what is wrong; *out is zeroed unless 1. The
 * reader bn_data_cache_find uses, alone, for the fuzz target (tests/fuzz/fuzz_datacache.c). */
int bn_data_cache_read(const char *path, const uint64_t key[3], bn_dataset *out, char *why, size_t cap);

/* Forgets the folder and the warnings given, so that the next call reads the environment
 * again (for tests). */
void bn_data_cache_reset(void);

#ifdef __cplusplus
}
#endif
#endif
