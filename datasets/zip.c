/* zip.c - reads and writes the ZIP archives NumPy's .npz files are. The central directory at
 * the end of the file is the index; each member's local header only says where its data starts.
 * Every offset and size the file gives is checked against the file's size before it is used, so
 * a damaged archive is an error rather than a read past the end or a huge allocation. */
#include "zip.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/regular_file.h"

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_EOCD 0x06054b50u
#define SIG_EOCD64 0x06064b50u
#define SIG_LOCATOR64 0x07064b50u

#define LOCAL_SIZE 30
#define CENTRAL_SIZE 46
#define EOCD_SIZE 22
#define EOCD64_SIZE 56
#define LOCATOR64_SIZE 20
#define MAX_COMMENT 65535u
#define ZIP64_EXTRA 0x0001u
#define FLAG_ENCRYPTED 0x0001u
#define FLAG_DESCRIPTOR 0x0008u  /* CRC and sizes follow the data; the local header has zeros */
#define MAX16 0xFFFFu
#define MAX32 0xFFFFFFFFu
#define VERSION_ZIP64 45         /* "version needed to extract" for ZIP64 records */

/* deflate cannot expand data more than 1032 times, which bounds the size a member may claim. */
#define DEFLATE_MAX_RATIO 1032u

#define CHUNK (1u << 16)

static uint32_t le16(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static uint32_t le32(const unsigned char *p)
{
    return le16(p) | (uint32_t)le16(p + 2) << 16;
}

static uint64_t le64(const unsigned char *p)
{
    return le32(p) | (uint64_t)le32(p + 4) << 32;
}

/* Reads exactly n bytes at off; a file that ends first is `what` truncated. */
static bn_status read_at(int fd, const char *what, uint64_t off, void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n) {
        ssize_t got = pread(fd, p, n, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return bn_error(BN_ERR_IO, "%s: read failed (%s)", what, strerror(errno));
        if (got == 0) return bn_error(BN_ERR_DATA, "%s: truncated: the file ends at offset %llu", what,
                                      (unsigned long long)off);
        p += got, off += (uint64_t)got, n -= (size_t)got;
    }
    return BN_OK;
}

/* Takes each 64-bit value of the ZIP64 extra field in extra[0..len) for the fields that hold
 * their 32-bit maximum, in the order the format fixes: size, compressed size, offset (NULL
 * where the record has none). */
static bn_status zip64_fields(const char *what, const unsigned char *extra, size_t len, uint64_t *size,
                              uint64_t *comp, uint64_t *offset)
{
    uint64_t *fields[3] = {size, comp, offset};
    int wanted = 0;
    for (int i = 0; i < 3; i++) wanted |= fields[i] && *fields[i] == MAX32;
    if (!wanted) return BN_OK;
    for (size_t at = 0; at + 4 <= len;) {
        uint32_t id = le16(extra + at), n = le16(extra + at + 2);
        if (n > len - at - 4) break;
        if (id == ZIP64_EXTRA) {
            const unsigned char *p = extra + at + 4;
            for (int i = 0; i < 3; i++) {
                if (!fields[i] || *fields[i] != MAX32) continue;
                if (p + 8 > extra + at + 4 + n)
                    return bn_error(BN_ERR_DATA, "%s: the ZIP64 extra field is too short for its sizes", what);
                *fields[i] = le64(p);
                p += 8;
            }
            return BN_OK;
        }
        at += 4 + n;
    }
    return bn_error(BN_ERR_DATA, "%s: sizes at their 32-bit maximum but no ZIP64 extra field", what);
}

/* The end-of-central-directory record: the last "PK\5\6" in the file's final 64 KiB + 22 bytes
 * (the record and the longest comment) whose comment fits in what follows it. */
static bn_status find_eocd(bn_zip *z, uint64_t *at)
{
    uint64_t tail = z->file_size < EOCD_SIZE + MAX_COMMENT ? z->file_size : EOCD_SIZE + MAX_COMMENT;
    unsigned char *buf = malloc(tail);
    if (!buf) return bn_error(BN_ERR_NOMEM, "%s: out of memory reading the archive's end", z->path);
    bn_status s = read_at(z->fd, z->path, z->file_size - tail, buf, tail);
    int found = 0;
    for (uint64_t i = tail >= EOCD_SIZE ? tail - EOCD_SIZE + 1 : 0; s == BN_OK && i-- > 0;)
        if (le32(buf + i) == SIG_EOCD && le16(buf + i + 20) <= tail - i - EOCD_SIZE) {
            *at = z->file_size - tail + i;
            found = 1;
            break;
        }
    free(buf);
    BN_TRY(s);
    if (found) return BN_OK;
    /* A file that starts as an archive but has no end record was cut short: the message says so. */
    unsigned char head[4];
    if (z->file_size >= 4) BN_TRY(read_at(z->fd, z->path, 0, head, 4));
    if (z->file_size >= 4 && le32(head) == SIG_LOCAL)
        return bn_error(BN_ERR_DATA, "%s: truncated ZIP archive: no end-of-central-directory record", z->path);
    return bn_error(BN_ERR_DATA, "%s: not a ZIP archive (no end-of-central-directory record)", z->path);
}

/* The directory's entry count, size and offset from the end record, or from the ZIP64 end
 * record when a locator stands right before it. */
static bn_status read_end(bn_zip *z, uint64_t eocd, uint64_t *count, uint64_t *size, uint64_t *offset,
                          uint64_t *limit)
{
    unsigned char e[EOCD64_SIZE];
    BN_TRY(read_at(z->fd, z->path, eocd, e, EOCD_SIZE));
    int spans = le16(e + 4) != 0 || le16(e + 6) != 0 || le16(e + 8) != le16(e + 10);
    *count = le16(e + 10), *size = le32(e + 12), *offset = le32(e + 16), *limit = eocd;
    unsigned char loc[LOCATOR64_SIZE];
    if (eocd >= LOCATOR64_SIZE) {
        BN_TRY(read_at(z->fd, z->path, eocd - LOCATOR64_SIZE, loc, LOCATOR64_SIZE));
        if (le32(loc) == SIG_LOCATOR64) {
            uint64_t at = le64(loc + 8);
            if (at > eocd - LOCATOR64_SIZE || eocd - LOCATOR64_SIZE - at < EOCD64_SIZE)
                return bn_error(BN_ERR_DATA, "%s: the ZIP64 end record's offset %llu is outside the file", z->path,
                                (unsigned long long)at);
            BN_TRY(read_at(z->fd, z->path, at, e, EOCD64_SIZE));
            if (le32(e) != SIG_EOCD64)
                return bn_error(BN_ERR_DATA, "%s: no ZIP64 end record at offset %llu", z->path,
                                (unsigned long long)at);
            spans = le32(loc + 4) != 0 || le32(loc + 16) > 1 || le32(e + 16) != 0 || le32(e + 20) != 0 ||
                    le64(e + 24) != le64(e + 32);
            *count = le64(e + 32), *size = le64(e + 40), *offset = le64(e + 48), *limit = at;
        }
    }
    if (spans) return bn_error(BN_ERR_DATA, "%s: the archive spans several disks, which is not read", z->path);
    return BN_OK;
}

/* Reads the central directory and fills z->entries. */
static bn_status read_directory(bn_zip *z, uint64_t count, uint64_t size, uint64_t offset, uint64_t limit)
{
    if (offset > limit || size > limit - offset)
        return bn_error(BN_ERR_DATA, "%s: the central directory (%llu bytes at offset %llu) runs past its end record",
                        z->path, (unsigned long long)size, (unsigned long long)offset);
    if (count > size / CENTRAL_SIZE || count > INT_MAX)
        return bn_error(BN_ERR_DATA, "%s: %llu entries cannot fit in a %llu-byte central directory", z->path,
                        (unsigned long long)count, (unsigned long long)size);
    /* Both are now below the file's size, so they fit a size_t and an int's worth of entries. */
    z->dir = malloc((size_t)size + 1);
    z->entries = calloc((size_t)count + 1, sizeof *z->entries);
    if (!z->dir || !z->entries) return bn_error(BN_ERR_NOMEM, "%s: out of memory for the central directory", z->path);
    BN_TRY(read_at(z->fd, z->path, offset, z->dir, (size_t)size));
    size_t at = 0;
    for (uint64_t i = 0; i < count; i++) {
        const unsigned char *p = z->dir + at;
        if (size - at < CENTRAL_SIZE || le32(p) != SIG_CENTRAL)
            return bn_error(BN_ERR_DATA, "%s: central directory entry %llu is damaged (no signature at offset %llu)",
                            z->path, (unsigned long long)i, (unsigned long long)(offset + at));
        size_t n = le16(p + 28), m = le16(p + 30), k = le16(p + 32);
        if (n + m + k > size - at - CENTRAL_SIZE)
            return bn_error(BN_ERR_DATA, "%s: central directory entry %llu runs past the directory's end", z->path,
                            (unsigned long long)i);
        bn_zip_entry *e = &z->entries[z->count];
        e->flags = (int)le16(p + 8), e->method = (int)le16(p + 10), e->crc = le32(p + 16);
        e->comp_size = le32(p + 20), e->size = le32(p + 24), e->local_offset = le32(p + 42);
        e->name = (const char *)p + CENTRAL_SIZE, e->name_len = (int)n;
        BN_TRY(zip64_fields(z->path, p + CENTRAL_SIZE + n, m, &e->size, &e->comp_size, &e->local_offset));
        z->count++;
        at += CENTRAL_SIZE + n + m + k;
    }
    return BN_OK;
}

static bn_status open_archive(bn_zip *z)
{
    BN_TRY(bn_check_regular_file(z->path, BN_ERR_DATA));
    z->fd = open(z->path, O_RDONLY | O_CLOEXEC);
    if (z->fd < 0) return bn_error(BN_ERR_DATA, "%s: cannot open (%s)", z->path, strerror(errno));
    struct stat st;
    if (fstat(z->fd, &st) != 0) return bn_error(BN_ERR_IO, "%s: cannot stat (%s)", z->path, strerror(errno));
    z->file_size = (uint64_t)st.st_size;
    if (z->file_size == 0) return bn_error(BN_ERR_DATA, "%s: empty file", z->path);
    uint64_t eocd = 0, count, size, offset, limit;
    BN_TRY(find_eocd(z, &eocd));
    BN_TRY(read_end(z, eocd, &count, &size, &offset, &limit));
    return read_directory(z, count, size, offset, limit);
}

bn_status bn_zip_open(const char *path, bn_zip *z)
{
    memset(z, 0, sizeof *z);
    z->fd = -1;
    z->path = path;
    bn_status s = open_archive(z);
    if (s != BN_OK) bn_zip_close(z);
    return s;
}

void bn_zip_close(bn_zip *z)
{
    if (z->fd >= 0) close(z->fd);
    free(z->dir);
    free(z->entries);
    const char *path = z->path;
    memset(z, 0, sizeof *z);
    z->fd = -1;
    z->path = path;
}

/* "PATH: no member NAME; the archive holds A, B, ..." as the error. */
static bn_status missing_member(const bn_zip *z, const char *name)
{
    char list[1024] = "";
    size_t used = 0;
    for (int i = 0; i < z->count && used < sizeof list; i++) {
        const bn_zip_entry *e = &z->entries[i];
        int w = snprintf(list + used, sizeof list - used, "%s%.*s", i ? ", " : "", e->name_len > 200 ? 200 : e->name_len,
                         e->name);
        if (w < 0) break;
        used += (size_t)w;
    }
    if (used >= sizeof list) strcpy(list + sizeof list - 5, " ...");
    if (!z->count) return bn_error(BN_ERR_DATA, "%s: no member %s; the archive is empty", z->path, name);
    return bn_error(BN_ERR_DATA, "%s: no member %s; the archive holds %s", z->path, name, list);
}

/* Checks the member's local header against its directory entry and sets *data to where its data
 * starts. */
static bn_status read_local(const bn_zip *z, const bn_zip_entry *e, const char *what, uint64_t *data)
{
    unsigned char h[LOCAL_SIZE];
    if (e->local_offset > z->file_size || z->file_size - e->local_offset < LOCAL_SIZE)
        return bn_error(BN_ERR_DATA, "%s: truncated: the local header at offset %llu is past the end of the %llu-byte file",
                        what, (unsigned long long)e->local_offset, (unsigned long long)z->file_size);
    BN_TRY(read_at(z->fd, what, e->local_offset, h, LOCAL_SIZE));
    if (le32(h) != SIG_LOCAL)
        return bn_error(BN_ERR_DATA, "%s: no local header at offset %llu", what, (unsigned long long)e->local_offset);
    uint64_t n = le16(h + 26), m = le16(h + 28), start = e->local_offset + LOCAL_SIZE;
    if (z->file_size - start < n + m)
        return bn_error(BN_ERR_DATA, "%s: truncated: the local header runs past the end of the file", what);
    unsigned char *names = malloc((size_t)(n + m) + 1);
    if (!names) return bn_error(BN_ERR_NOMEM, "%s: out of memory", what);
    bn_status s = read_at(z->fd, what, start, names, (size_t)(n + m));
    if (s == BN_OK && (n != (uint64_t)e->name_len || memcmp(names, e->name, (size_t)n) != 0))
        s = bn_error(BN_ERR_DATA, "%s: the local header names another member", what);
    if (s == BN_OK && (int)le16(h + 8) != e->method)
        s = bn_error(BN_ERR_DATA, "%s: the local header's method %u differs from the directory's %d", what,
                     (unsigned)le16(h + 8), e->method);
    uint64_t size = le32(h + 22), comp = le32(h + 18);
    if (s == BN_OK && !(le16(h + 6) & FLAG_DESCRIPTOR)) {
        s = zip64_fields(what, names + n, (size_t)m, &size, &comp, NULL);
        if (s == BN_OK && (le32(h + 14) != e->crc || size != e->size || comp != e->comp_size))
            s = bn_error(BN_ERR_DATA, "%s: the local header's CRC or sizes differ from the central directory's", what);
    }
    free(names);
    *data = start + n + m;
    return s;
}

static bn_status open_member(bn_zip *z, const char *name, bn_zip_stream *s)
{
    const bn_zip_entry *e = NULL;
    size_t len = strlen(name);
    for (int i = 0; i < z->count; i++) {
        const bn_zip_entry *it = &z->entries[i];
        if ((size_t)it->name_len != len || memcmp(it->name, name, len) != 0) continue;
        if (e) return bn_error(BN_ERR_DATA, "%s: holds more than one %s", z->path, name);
        e = it;
    }
    if (!e) return missing_member(z, name);
    if (e->flags & FLAG_ENCRYPTED) return bn_error(BN_ERR_DATA, "%s: encrypted, which is not read", s->what);
    if (e->method != 0 && e->method != Z_DEFLATED)
        return bn_error(BN_ERR_DATA, "%s: compression method %d; only stored (0) and deflated (8) are read", s->what,
                        e->method);
    uint64_t data = 0;
    BN_TRY(read_local(z, e, s->what, &data));
    if (e->comp_size > z->file_size - data)
        return bn_error(BN_ERR_DATA, "%s: truncated: its %llu bytes at offset %llu run past the end of the %llu-byte file",
                        s->what, (unsigned long long)e->comp_size, (unsigned long long)data,
                        (unsigned long long)z->file_size);
    if (e->method == 0 && e->comp_size != e->size)
        return bn_error(BN_ERR_DATA, "%s: stored, yet its sizes differ (%llu in the file, %llu said)", s->what,
                        (unsigned long long)e->comp_size, (unsigned long long)e->size);
    if (e->method == Z_DEFLATED && e->size / DEFLATE_MAX_RATIO > e->comp_size)
        return bn_error(BN_ERR_DATA, "%s: %llu bytes cannot inflate from %llu", s->what, (unsigned long long)e->size,
                        (unsigned long long)e->comp_size);
    s->fd = z->fd, s->pos = data, s->end = data + e->comp_size;
    s->size = e->size, s->method = e->method, s->check_crc = 1, s->want_crc = e->crc;
    if (e->method == Z_DEFLATED) {
        z_stream *zs = calloc(1, sizeof *zs);
        s->in = malloc(CHUNK);
        if (!zs || !s->in || inflateInit2(zs, -MAX_WBITS) != Z_OK) {
            free(zs);
            return bn_error(BN_ERR_NOMEM, "%s: out of memory for inflating", s->what);
        }
        s->inflate = zs;
    }
    return BN_OK;
}

bn_status bn_zip_stream_member(bn_zip *z, const char *name, bn_zip_stream *s)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    snprintf(s->what, sizeof s->what, "%s: %s", z->path, name);
    bn_status st = open_member(z, name, s);
    if (st != BN_OK) bn_zip_stream_close(s);
    return st;
}

bn_status bn_zip_stream_file(const char *path, bn_zip_stream *s)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    snprintf(s->what, sizeof s->what, "%s", path);
    BN_TRY(bn_check_regular_file(path, BN_ERR_DATA));
    s->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (s->fd < 0) return bn_error(BN_ERR_DATA, "%s: cannot open (%s)", path, strerror(errno));
    s->own_fd = 1;
    struct stat st;
    if (fstat(s->fd, &st) != 0) {
        bn_status e = bn_error(BN_ERR_IO, "%s: cannot stat (%s)", path, strerror(errno));
        bn_zip_stream_close(s);
        return e;
    }
    s->end = s->size = (uint64_t)st.st_size;
    return BN_OK;
}

/* zlib counts in unsigned ints: larger spans go in pieces. */
static uint32_t crc_of(uint32_t crc, const unsigned char *p, size_t n)
{
    for (size_t step; n; p += step, n -= step) {
        step = n > (1u << 30) ? 1u << 30 : n;
        crc = (uint32_t)crc32(crc, p, (uInt)step);
    }
    return crc;
}

/* Refills the compressed bytes at hand from the member's data in the file. */
static bn_status refill(bn_zip_stream *s, z_stream *zs)
{
    size_t want = s->end - s->pos < CHUNK ? (size_t)(s->end - s->pos) : CHUNK;
    BN_TRY(read_at(s->fd, s->what, s->pos, s->in, want));
    s->pos += want;
    zs->next_in = s->in, zs->avail_in = (uInt)want;
    return BN_OK;
}

/* Inflates up to n bytes into out; *made says how many came (none when zlib only took input). */
static bn_status inflate_some(bn_zip_stream *s, unsigned char *out, size_t n, size_t *made)
{
    z_stream *zs = s->inflate;
    if (zs->avail_in == 0 && s->pos < s->end) BN_TRY(refill(s, zs));
    uInt step = n > (1u << 30) ? 1u << 30 : (uInt)n;
    zs->next_out = out, zs->avail_out = step;
    int r = inflate(zs, Z_NO_FLUSH);
    *made = step - zs->avail_out;
    if (r == Z_STREAM_END) s->ended = 1;
    if (r == Z_STREAM_END || r == Z_OK) return BN_OK;
    /* No progress without more input, and the member has none left. */
    if (r == Z_BUF_ERROR && zs->avail_in == 0)
        return bn_error(BN_ERR_DATA, "%s: truncated deflate data: it ends after %llu of the %llu bytes it should give",
                        s->what, (unsigned long long)(s->done + *made), (unsigned long long)s->size);
    if (r == Z_MEM_ERROR) return bn_error(BN_ERR_NOMEM, "%s: out of memory inflating", s->what);
    return bn_error(BN_ERR_DATA, "%s: corrupt deflate data (zlib: %s)", s->what, zs->msg ? zs->msg : "error");
}

bn_status bn_zip_stream_read(bn_zip_stream *s, void *buf, size_t n)
{
    if (n > bn_zip_stream_left(s))
        return bn_error(BN_ERR_INTERNAL, "%s: asked for %zu bytes past its end", s->what, n);
    unsigned char *out = buf;
    while (n) {
        size_t made;
        if (s->inflate) {
            if (s->ended)
                return bn_error(BN_ERR_DATA, "%s: the deflate data ends after %llu bytes, not the %llu it should give",
                                s->what, (unsigned long long)s->done, (unsigned long long)s->size);
            BN_TRY(inflate_some(s, out, n, &made));
        } else {
            made = n > (1u << 30) ? 1u << 30 : n;
            BN_TRY(read_at(s->fd, s->what, s->pos, out, made));
            s->pos += made;
        }
        if (s->check_crc) s->crc = crc_of(s->crc, out, made);
        out += made, n -= made, s->done += made;
    }
    return BN_OK;
}

bn_status bn_zip_stream_finish(bn_zip_stream *s)
{
    unsigned char scratch[1 << 14];
    while (bn_zip_stream_left(s)) {
        uint64_t left = bn_zip_stream_left(s);
        BN_TRY(bn_zip_stream_read(s, scratch, left < sizeof scratch ? (size_t)left : sizeof scratch));
    }
    while (s->inflate && !s->ended) {
        size_t made;
        BN_TRY(inflate_some(s, scratch, 1, &made));
        if (made)
            return bn_error(BN_ERR_DATA, "%s: the deflate data gives more than the %llu bytes it should", s->what,
                            (unsigned long long)s->size);
    }
    if (s->check_crc && s->crc != s->want_crc)
        return bn_error(BN_ERR_DATA, "%s: CRC-32 mismatch: the archive says %08x, the data gives %08x (a corrupt file)",
                        s->what, (unsigned)s->want_crc, (unsigned)s->crc);
    return BN_OK;
}

void bn_zip_stream_close(bn_zip_stream *s)
{
    if (s->inflate) inflateEnd(s->inflate);
    free(s->inflate);
    free(s->in);
    if (s->own_fd && s->fd >= 0) close(s->fd);
    s->inflate = NULL, s->in = NULL, s->fd = -1, s->own_fd = 0;
}

/* ---- writing ------------------------------------------------------------------------ */

/* A member written, for the central directory. */
struct bn_zip_written {
    char *name;
    uint32_t crc;
    uint64_t size, offset;
};

/* Every member is dated 1980-01-01 00:00, the format's first day, so that the same arrays always
 * make the same file. */
#define DOS_DATE ((0 << 9) | (1 << 5) | 1)

static void put16(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char *p, uint32_t v)
{
    put16(p, v & 0xFFFF), put16(p + 2, v >> 16);
}

static void put64(unsigned char *p, uint64_t v)
{
    put32(p, (uint32_t)v), put32(p + 4, (uint32_t)(v >> 32));
}

static bn_status emit(bn_zip_writer *w, const void *data, size_t n)
{
    if (n && fwrite(data, 1, n, w->f) != n)
        return bn_error(BN_ERR_IO, "%s: write failed (%s)", w->tmp, strerror(errno));
    w->pos += n;
    return BN_OK;
}

bn_status bn_zip_writer_open(bn_zip_writer *w, const char *path)
{
    memset(w, 0, sizeof *w);
    size_t len = strlen(path) + 5;
    w->path = strdup(path);
    w->tmp = malloc(len);
    if (!w->path || !w->tmp) {
        bn_zip_writer_abort(w);
        return bn_error(BN_ERR_NOMEM, "%s: out of memory", path);
    }
    snprintf(w->tmp, len, "%s.tmp", path);
    w->f = fopen(w->tmp, "wb");
    if (!w->f) {
        bn_status s = bn_error(BN_ERR_IO, "%s: cannot create (%s)", w->tmp, strerror(errno));
        bn_zip_writer_abort(w);
        return s;
    }
    return BN_OK;
}

bn_status bn_zip_writer_begin(bn_zip_writer *w, const char *name)
{
    size_t n = strlen(name);
    if (n > MAX16 - 1) return bn_error(BN_ERR_INTERNAL, "%s: member name too long", w->path);
    if (w->count == w->cap) {
        int cap = w->cap ? 2 * w->cap : 8;
        struct bn_zip_written *m = realloc(w->members, (size_t)cap * sizeof *m);
        if (!m) return bn_error(BN_ERR_NOMEM, "%s: out of memory", w->path);
        w->members = m, w->cap = cap;
    }
    struct bn_zip_written *m = &w->members[w->count];
    if (!(m->name = strdup(name))) return bn_error(BN_ERR_NOMEM, "%s: out of memory", w->path);
    m->crc = 0, m->size = 0, m->offset = w->pos;
    w->count++;
    /* The CRC and sizes are zero until bn_zip_writer_end writes them in place. */
    unsigned char h[LOCAL_SIZE + 20] = {0};
    put32(h, SIG_LOCAL);
    put16(h + 4, VERSION_ZIP64);
    put16(h + 12, DOS_DATE);
    put32(h + 18, MAX32), put32(h + 22, MAX32);
    put16(h + 26, (uint32_t)n), put16(h + 28, 20);
    put16(h + LOCAL_SIZE, ZIP64_EXTRA), put16(h + LOCAL_SIZE + 2, 16);
    BN_TRY(emit(w, h, LOCAL_SIZE));
    BN_TRY(emit(w, name, n));
    return emit(w, h + LOCAL_SIZE, 20);
}

bn_status bn_zip_writer_write(bn_zip_writer *w, const void *data, size_t n)
{
    struct bn_zip_written *m = &w->members[w->count - 1];
    m->crc = crc_of(m->crc, data, n);
    m->size += n;
    return emit(w, data, n);
}

/* Writes n bytes at off, then returns to the end. */
static bn_status patch(bn_zip_writer *w, uint64_t off, const unsigned char *p, size_t n)
{
    if (fseeko(w->f, (off_t)off, SEEK_SET) != 0 || fwrite(p, 1, n, w->f) != n || fseeko(w->f, 0, SEEK_END) != 0)
        return bn_error(BN_ERR_IO, "%s: write failed (%s)", w->tmp, strerror(errno));
    return BN_OK;
}

bn_status bn_zip_writer_end(bn_zip_writer *w)
{
    const struct bn_zip_written *m = &w->members[w->count - 1];
    unsigned char crc[4], sizes[16];
    put32(crc, m->crc);
    put64(sizes, m->size), put64(sizes + 8, m->size);
    BN_TRY(patch(w, m->offset + 14, crc, 4));
    return patch(w, m->offset + LOCAL_SIZE + strlen(m->name) + 4, sizes, 16);
}

/* The central directory, then the ZIP64 end record, its locator and the end record. */
static bn_status write_directory(bn_zip_writer *w)
{
    uint64_t start = w->pos;
    for (int i = 0; i < w->count; i++) {
        const struct bn_zip_written *m = &w->members[i];
        size_t n = strlen(m->name);
        unsigned char h[CENTRAL_SIZE + 28] = {0};
        put32(h, SIG_CENTRAL);
        put16(h + 4, VERSION_ZIP64), put16(h + 6, VERSION_ZIP64);
        put16(h + 14, DOS_DATE);
        put32(h + 16, m->crc);
        put32(h + 20, MAX32), put32(h + 24, MAX32), put32(h + 42, MAX32);
        put16(h + 28, (uint32_t)n), put16(h + 30, 28);
        unsigned char *x = h + CENTRAL_SIZE;
        put16(x, ZIP64_EXTRA), put16(x + 2, 24);
        put64(x + 4, m->size), put64(x + 12, m->size), put64(x + 20, m->offset);
        BN_TRY(emit(w, h, CENTRAL_SIZE));
        BN_TRY(emit(w, m->name, n));
        BN_TRY(emit(w, x, 28));
    }
    uint64_t size = w->pos - start, end64 = w->pos;
    unsigned char e[EOCD64_SIZE + LOCATOR64_SIZE + EOCD_SIZE] = {0};
    put32(e, SIG_EOCD64);
    put64(e + 4, EOCD64_SIZE - 12);
    put16(e + 12, VERSION_ZIP64), put16(e + 14, VERSION_ZIP64);
    put64(e + 24, (uint64_t)w->count), put64(e + 32, (uint64_t)w->count);
    put64(e + 40, size), put64(e + 48, start);
    unsigned char *loc = e + EOCD64_SIZE;
    put32(loc, SIG_LOCATOR64);
    put64(loc + 8, end64);
    put32(loc + 16, 1);
    unsigned char *eocd = loc + LOCATOR64_SIZE;
    put32(eocd, SIG_EOCD);
    put16(eocd + 8, MAX16), put16(eocd + 10, MAX16);
    put32(eocd + 12, MAX32), put32(eocd + 16, MAX32);
    return emit(w, e, sizeof e);
}

bn_status bn_zip_writer_close(bn_zip_writer *w)
{
    bn_status s = write_directory(w);
    if (s == BN_OK && (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0))
        s = bn_error(BN_ERR_IO, "%s: write failed (%s)", w->tmp, strerror(errno));
    int closed = fclose(w->f);
    w->f = NULL;
    if (s == BN_OK && closed != 0) s = bn_error(BN_ERR_IO, "%s: write failed (%s)", w->tmp, strerror(errno));
    if (s == BN_OK && rename(w->tmp, w->path) != 0)
        s = bn_error(BN_ERR_IO, "%s: cannot rename %s to it (%s)", w->path, w->tmp, strerror(errno));
    if (s == BN_OK) {
        /* Renamed: the name is no longer the writer's to remove. */
        free(w->tmp);
        w->tmp = NULL;
    }
    bn_zip_writer_abort(w);
    return s;
}

void bn_zip_writer_abort(bn_zip_writer *w)
{
    if (w->f) fclose(w->f);
    if (w->tmp) unlink(w->tmp);
    for (int i = 0; i < w->count; i++) free(w->members[i].name);
    free(w->members);
    free(w->path);
    free(w->tmp);
    memset(w, 0, sizeof *w);
}
