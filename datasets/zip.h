/* zip.h - the part of the ZIP format that NumPy's .npz files use: an archive's central
 * directory (ZIP64 included), its members read as streams, stored or deflated, with their CRC-32
 * checked, and a writer of stored members. A stream also reads a whole plain file, so a reader
 * takes its bytes the same way from an archive's member or from a file of its own. */
#ifndef BN_ZIP_H
#define BN_ZIP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Room for "PATH: MEMBER", the start of every message about a stream. */
#define BN_ZIP_WHAT_MAX 4400

/* One member as the central directory gives it. */
typedef struct bn_zip_entry {
    const char *name;          /* points into the archive's directory; not NUL-terminated */
    int name_len;
    int method;                /* 0 stored, 8 deflated */
    int flags;
    uint32_t crc;
    uint64_t comp_size, size;  /* bytes in the file, bytes once inflated */
    uint64_t local_offset;     /* of the member's local header */
} bn_zip_entry;

/* An open archive: its file and its directory. */
typedef struct bn_zip {
    const char *path;
    int fd;
    uint64_t file_size;
    unsigned char *dir;        /* the central directory's bytes, which the names point into */
    bn_zip_entry *entries;
    int count;
} bn_zip;

/* Opens path and reads its central directory, every field checked against the file's size; *z
 * is the caller's to close (bn_zip_close) on success and left closed on error. */
bn_status bn_zip_open(const char *path, bn_zip *z);

/* Closes the file and frees the directory; safe on a zeroed or closed archive. */
void bn_zip_close(bn_zip *z);

/* The bytes of one member, or of a whole plain file, read from the start to the end. */
typedef struct bn_zip_stream {
    char what[BN_ZIP_WHAT_MAX];  /* "PATH: MEMBER", or the plain file's path */
    int fd, own_fd;
    uint64_t pos, end;           /* what is still to be read of the file: [pos, end) */
    uint64_t size, done;         /* bytes the stream holds, bytes given so far */
    int method;
    int check_crc;               /* a plain file carries no CRC */
    int ended;                   /* the deflate stream reached its end mark */
    uint32_t want_crc, crc;
    void *inflate;               /* zlib's state for a deflated member, else NULL */
    unsigned char *in;           /* compressed bytes read and not yet inflated */
} bn_zip_stream;

/* Opens the member called name; a missing member is an error naming the archive and the member
 * and listing the members present. The stream reads through z's file: z outlives it. */
bn_status bn_zip_stream_member(bn_zip *z, const char *name, bn_zip_stream *s);

/* Opens a plain file as a stream of all its bytes. */
bn_status bn_zip_stream_file(const char *path, bn_zip_stream *s);

/* Bytes still to be read. */
static inline uint64_t bn_zip_stream_left(const bn_zip_stream *s)
{
    return s->size - s->done;
}

/* Reads exactly n bytes (at most bn_zip_stream_left) into buf; data that ends first is an error. */
bn_status bn_zip_stream_read(bn_zip_stream *s, void *buf, size_t n);

/* Reads and drops what is left, so the CRC covers every byte, then checks that a deflated
 * member ends where the directory says and that the CRC-32 matches. */
bn_status bn_zip_stream_finish(bn_zip_stream *s);

/* Frees the stream (and closes a plain file); safe on a zeroed or closed stream. */
void bn_zip_stream_close(bn_zip_stream *s);

/* An archive being written: PATH.tmp, renamed to PATH by bn_zip_writer_close. Every record is
 * ZIP64, as np.savez writes its local headers, so no size or offset needs a second form. */
typedef struct bn_zip_writer {
    char *path, *tmp;
    FILE *f;
    uint64_t pos;                /* bytes written so far */
    struct bn_zip_written *members;  /* what the central directory will list */
    int count, cap;
} bn_zip_writer;

/* Creates PATH.tmp; the writer is the caller's to close or abort. */
bn_status bn_zip_writer_open(bn_zip_writer *w, const char *path);

/* Starts a stored member called name. */
bn_status bn_zip_writer_begin(bn_zip_writer *w, const char *name);

/* Appends n bytes to the member. */
bn_status bn_zip_writer_write(bn_zip_writer *w, const void *data, size_t n);

/* Ends the member, its header given the CRC and size. */
bn_status bn_zip_writer_end(bn_zip_writer *w);

/* Writes the central directory, syncs and renames PATH.tmp to PATH; on error PATH.tmp is removed
 * and PATH left as it was. The writer is freed either way. */
bn_status bn_zip_writer_close(bn_zip_writer *w);

/* Removes PATH.tmp and frees the writer: the way out after an error. */
void bn_zip_writer_abort(bn_zip_writer *w);

#ifdef __cplusplus
}
#endif
#endif
