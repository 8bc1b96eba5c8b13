/* cifar.c - reads and writes CIFAR's binary records. A split is one file, or several read in
 * order; every file's size must be a whole number of records, so the set's memory is checked
 * from the sizes before a byte of data is read. Every record's label is checked, kept or not. */
#include "cifar.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/regular_file.h"

#define CIFAR_CHANNELS 3
#define CIFAR_SIDE 32
#define CIFAR_PIXELS (CIFAR_CHANNELS * CIFAR_SIDE * CIFAR_SIDE)
#define CIFAR_MAX_LABEL_BYTES 2
#define CIFAR10_BATCHES 5
#define CIFAR100_FINE 100
#define CIFAR100_COARSE 20
#define CIFAR_PATH_MAX 4096

/* CIFAR's names files are a few hundred bytes; a larger one is not a list of class names, and
 * the bound keeps its whole read small. */
#define CIFAR_NAMES_MAX_BYTES (1 << 16)

/* One split: its files in reading order and where a record keeps the label. */
typedef struct cifar_split {
    const char *dir;
    const char *archive;     /* what the folder is unpacked from, for the hint on a missing file */
    char files[CIFAR10_BATCHES][CIFAR_PATH_MAX];
    int nfiles;
    int label_bytes;         /* before the pixels: 1 (CIFAR-10) or 2 (CIFAR-100: coarse, fine) */
    int label_at;            /* which of them is the label */
    const char *label_name;  /* "label", "fine label" or "coarse label", for messages */
    int num_classes;
    const char *names_file;  /* the class names' file in dir, read when present */
} cifar_split;

static bn_status join(const char *dir, const char *name, char *buf)
{
    int n = snprintf(buf, CIFAR_PATH_MAX, "%s/%s", dir, name);
    if (n < 0 || n >= CIFAR_PATH_MAX) return bn_error(BN_ERR_USAGE, "%s: data folder path too long", dir);
    return BN_OK;
}

/* Anything but "absent" (say, no permission) counts as there, for the open to report precisely. */
static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 || errno != ENOENT;
}

static bn_status check_folder(const char *dir, const char *archive)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return bn_error(BN_ERR_DATA, "%s: data folder not found (%s); it should hold the files of %s", dir,
                        strerror(errno), archive);
    if (!S_ISDIR(st.st_mode))
        return bn_error(BN_ERR_DATA, "%s: not a folder; --data names the folder of the files of %s", dir, archive);
    return BN_OK;
}

static const char *plural(uint64_t n)
{
    return n == 1 ? "" : "s";
}

/* Opens path and counts its records from its size. */
static bn_status open_records(const cifar_split *sp, const char *path, FILE **out, uint64_t *records)
{
    BN_TRY(bn_check_regular_file(path, BN_ERR_DATA));
    FILE *f = fopen(path, "rb");
    if (!f && errno == ENOENT)
        return bn_error(BN_ERR_DATA, "%s: not found; the folder should hold the files of %s", path, sp->archive);
    if (!f) return bn_error(BN_ERR_DATA, "%s: cannot open (%s)", path, strerror(errno));
    *out = f;
    struct stat st;
    if (fstat(fileno(f), &st) != 0) return bn_error(BN_ERR_IO, "%s: cannot read its size (%s)", path, strerror(errno));
    const uint64_t size = (uint64_t)st.st_size, rec = (uint64_t)(sp->label_bytes + CIFAR_PIXELS);
    if (size == 0) return bn_error(BN_ERR_DATA, "%s: empty file (no %llu-byte records)", path, (unsigned long long)rec);
    if (size % rec != 0)
        return bn_error(BN_ERR_DATA, "%s: %llu bytes is not a whole number of %llu-byte records (%llu record%s and %llu "
                        "byte%s over)", path, (unsigned long long)size, (unsigned long long)rec,
                        (unsigned long long)(size / rec), plural(size / rec), (unsigned long long)(size % rec),
                        plural(size % rec));
    *records = size / rec;
    return BN_OK;
}

/* Reads the split's files, opened into fp[] (the caller closes them), keeping the first `limit`
 * records (all when limit <= 0). */
static bn_status read_split(const cifar_split *sp, int limit, FILE **fp, bn_dataset *out)
{
    uint64_t records[CIFAR10_BATCHES], total = 0;
    for (int i = 0; i < sp->nfiles; i++) {
        BN_TRY(open_records(sp, sp->files[i], &fp[i], &records[i]));
        total += records[i];
    }
    const uint64_t kept = limit > 0 && (uint64_t)limit < total ? (uint64_t)limit : total;
    /* Checked on its own first, as it bounds kept below INT_MAX for the allocation's int count. */
    BN_TRY(bn_dataset_check_size(sp->dir, kept, CIFAR_CHANNELS, CIFAR_SIDE, CIFAR_SIDE, 1));
    BN_TRY(bn_dataset_alloc(out, sp->dir, (int)kept, CIFAR_CHANNELS, CIFAR_SIDE, CIFAR_SIDE, sp->num_classes, 0));
    const size_t rec = (size_t)sp->label_bytes + CIFAR_PIXELS;
    unsigned char buf[CIFAR_MAX_LABEL_BYTES + CIFAR_PIXELS];
    uint64_t e = 0;
    for (int i = 0; i < sp->nfiles; i++)
        for (uint64_t r = 0; r < records[i]; r++, e++) {
            const char *path = sp->files[i];
            if (fread(buf, 1, rec, fp[i]) != rec) {
                if (ferror(fp[i])) return bn_error(BN_ERR_IO, "%s: read failed at record %llu", path, (unsigned long long)r);
                return bn_error(BN_ERR_DATA, "%s: ended at record %llu of the %llu its size promised (the file shrank "
                                "while read)", path, (unsigned long long)r, (unsigned long long)records[i]);
            }
            const unsigned label = buf[sp->label_at];
            if (label >= (unsigned)sp->num_classes)
                return bn_error(BN_ERR_DATA, "%s: record %llu has %s %u, past the %d classes (0..%d)", path,
                                (unsigned long long)r, sp->label_name, label, sp->num_classes, sp->num_classes - 1);
            if (e >= kept) continue;
            out->labels[e] = (uint16_t)label;
            memcpy(out->pixels + e * CIFAR_PIXELS, buf + sp->label_bytes, CIFAR_PIXELS);
        }
    return BN_OK;
}

/* Reads path whole into a NUL-terminated malloc'd *text (the caller frees it). */
static bn_status read_text(const char *path, char **text)
{
    *text = NULL;
    BN_TRY(bn_check_regular_file(path, BN_ERR_DATA));
    FILE *f = fopen(path, "rb");
    if (!f) return bn_error(BN_ERR_DATA, "%s: cannot open (%s)", path, strerror(errno));
    char *buf = malloc(CIFAR_NAMES_MAX_BYTES + 1);
    if (!buf) {
        fclose(f);
        return bn_error(BN_ERR_NOMEM, "%s: out of memory for the class names", path);
    }
    size_t n = fread(buf, 1, CIFAR_NAMES_MAX_BYTES + 1, f);
    int failed = ferror(f);
    fclose(f);
    bn_status s = BN_OK;
    if (failed) s = bn_error(BN_ERR_IO, "%s: read failed", path);
    else if (n > CIFAR_NAMES_MAX_BYTES)
        s = bn_error(BN_ERR_DATA, "%s: more than %d bytes, too large for a list of class names", path,
                     CIFAR_NAMES_MAX_BYTES);
    else if (memchr(buf, '\0', n)) s = bn_error(BN_ERR_DATA, "%s: holds a NUL byte; expected one class name a line", path);
    if (s != BN_OK) {
        free(buf);
        return s;
    }
    buf[n] = '\0';
    *text = buf;
    return BN_OK;
}

/* Splits text into lines in place, their ends trimmed of '\r' and blanks; names[] gets the first
 * `cap` and *count the number up to the last non-empty one (CIFAR's own files end in a blank line). */
static void split_lines(char *text, char **names, int cap, int *count)
{
    int lines = 0;
    *count = 0;
    for (char *p = text; *p;) {
        char *end = strchr(p, '\n');
        char *next = end ? end + 1 : p + strlen(p);
        if (end) *end = '\0';
        for (size_t len = strlen(p); len && (p[len - 1] == '\r' || p[len - 1] == ' ' || p[len - 1] == '\t'); len--)
            p[len - 1] = '\0';
        if (lines < cap) names[lines] = p;
        lines++;
        if (*p) *count = lines;
        p = next;
    }
}

/* Sets d's class names from sp's names file, one a line, when the folder has it. */
static bn_status read_names(const cifar_split *sp, bn_dataset *d)
{
    char path[CIFAR_PATH_MAX];
    BN_TRY(join(sp->dir, sp->names_file, path));
    if (!exists(path)) return BN_OK;
    char *text;
    BN_TRY(read_text(path, &text));
    char *names[CIFAR100_FINE];
    int count;
    split_lines(text, names, sp->num_classes, &count);
    bn_status s = BN_OK;
    if (count != sp->num_classes)
        s = bn_error(BN_ERR_DATA, "%s: %d line%s of class names, expected %d (one a line)", path, count,
                     plural((uint64_t)count), sp->num_classes);
    for (int i = 0; s == BN_OK && i < count; i++)
        if (!names[i][0]) s = bn_error(BN_ERR_DATA, "%s: line %d is empty; expected one class name a line", path, i + 1);
    if (s == BN_OK) s = bn_dataset_set_class_names(d, names);
    free(text);
    return s;
}

static bn_status load_split(const cifar_split *sp, int limit, bn_dataset *out)
{
    FILE *fp[CIFAR10_BATCHES] = {0};
    bn_status s = read_split(sp, limit, fp, out);
    for (int i = 0; i < sp->nfiles; i++)
        if (fp[i]) fclose(fp[i]);
    if (s == BN_OK) s = read_names(sp, out);
    if (s != BN_OK) bn_dataset_free(out);
    return s;
}

/* data_batch_1.bin .. data_batch_5.bin, those present. A batch after a missing one means a file
 * was lost, which would otherwise train on less without a word. */
static bn_status find_batches(cifar_split *sp)
{
    int missing = 0;
    for (int i = 1; i <= CIFAR10_BATCHES; i++) {
        char name[32], *path = sp->files[sp->nfiles];
        snprintf(name, sizeof name, "data_batch_%d.bin", i);
        BN_TRY(join(sp->dir, name, path));
        if (!exists(path)) {
            if (!missing) missing = i;
            continue;
        }
        if (missing)
            return bn_error(BN_ERR_DATA, "%s/data_batch_%d.bin: not found, but %s is there: a training batch is "
                            "missing", sp->dir, missing, name);
        sp->nfiles++;
    }
    if (sp->nfiles == 0)
        return bn_error(BN_ERR_DATA, "%s/data_batch_1.bin: not found (nor data_batch_2..%d.bin); the folder should "
                        "hold the files of %s", sp->dir, CIFAR10_BATCHES, sp->archive);
    return BN_OK;
}

bn_status bn_cifar10_load(const bn_data_request *rq, bn_dataset *out)
{
    memset(out, 0, sizeof *out);
    cifar_split sp = {.dir = rq->path, .archive = "cifar-10-binary.tar.gz", .label_bytes = 1, .label_at = 0,
                      .label_name = "label", .num_classes = 10, .names_file = "batches.meta.txt"};
    BN_TRY(check_folder(sp.dir, sp.archive));
    if (rq->train) {
        BN_TRY(find_batches(&sp));
    } else {
        BN_TRY(join(sp.dir, "test_batch.bin", sp.files[0]));
        sp.nfiles = 1;
    }
    return load_split(&sp, rq->limit, out);
}

bn_status bn_cifar100_load(const bn_data_request *rq, bn_dataset *out)
{
    memset(out, 0, sizeof *out);
    static const char *const labels[] = {"fine", "coarse", NULL};
    int coarse;
    BN_TRY(bn_opt_choice(rq->opts, "label", labels, 0, &coarse));
    cifar_split sp = {.dir = rq->path, .archive = "cifar-100-binary.tar.gz", .label_bytes = 2,
                      .label_at = coarse ? 0 : 1, .label_name = coarse ? "coarse label" : "fine label",
                      .num_classes = coarse ? CIFAR100_COARSE : CIFAR100_FINE,
                      .names_file = coarse ? "coarse_label_names.txt" : "fine_label_names.txt", .nfiles = 1};
    BN_TRY(check_folder(sp.dir, sp.archive));
    BN_TRY(join(sp.dir, rq->train ? "train.bin" : "test.bin", sp.files[0]));
    return load_split(&sp, rq->limit, out);
}

bn_status bn_cifar_write(const bn_dataset *d, const char *path, int cifar100)
{
    if (!d || !path) return bn_error(BN_ERR_INTERNAL, "bn_cifar_write: null argument");
    if (!d->pixels || d->channels != CIFAR_CHANNELS || d->height != CIFAR_SIDE || d->width != CIFAR_SIDE)
        return bn_error(BN_ERR_USAGE, "%s: CIFAR records hold bytes of 3x32x32; the set holds %s of %dx%dx%d", path,
                        d->pixels ? "bytes" : "floats", d->channels, d->height, d->width);
    if (d->count <= 0) return bn_error(BN_ERR_USAGE, "%s: no examples to write (CIFAR's readers refuse an empty file)", path);
    for (int i = 0; i < d->count; i++)
        if (d->labels[i] > UINT8_MAX)
            return bn_error(BN_ERR_USAGE, "%s: label %u of example %d does not fit a CIFAR record's label byte", path,
                            (unsigned)d->labels[i], i);
    char tmp[CIFAR_PATH_MAX];
    int n = snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (n < 0 || n >= (int)sizeof tmp) return bn_error(BN_ERR_USAGE, "%s: path too long", path);
    BN_TRY(bn_check_regular_file(tmp, BN_ERR_IO));
    FILE *f = fopen(tmp, "wb");
    if (!f) return bn_error(BN_ERR_IO, "%s: cannot create (%s)", tmp, strerror(errno));
    int ok = 1, err = 0;
    for (int i = 0; ok && i < d->count; i++) {
        const unsigned char label[CIFAR_MAX_LABEL_BYTES] = {(unsigned char)d->labels[i], (unsigned char)d->labels[i]};
        const size_t label_bytes = cifar100 ? 2 : 1;
        ok = fwrite(label, 1, label_bytes, f) == label_bytes &&
             fwrite(d->pixels + (size_t)i * CIFAR_PIXELS, 1, CIFAR_PIXELS, f) == CIFAR_PIXELS;
    }
    if (!ok) err = errno;
    if (fclose(f) != 0 && ok) ok = 0, err = errno;
    if (!ok) {
        unlink(tmp);
        return bn_error(BN_ERR_IO, "%s: write failed (%s)", tmp, strerror(err));
    }
    if (rename(tmp, path) != 0) {
        err = errno;
        unlink(tmp);
        return bn_error(BN_ERR_IO, "%s: cannot replace it with %s (%s)", path, tmp, strerror(err));
    }
    return BN_OK;
}

/* One split to dir/name, padded to CIFAR's shape first where it is smaller. */
static bn_status save_split(const bn_dataset *d, const char *dir, const char *name, int cifar100)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return bn_error(BN_ERR_USAGE, "%s: path too long", dir);
    if (d->channels == CIFAR_CHANNELS && d->height == CIFAR_SIDE && d->width == CIFAR_SIDE)
        return bn_cifar_write(d, path, cifar100);
    bn_dataset padded;
    BN_TRY(bn_dataset_pad_to(d, CIFAR_CHANNELS, CIFAR_SIDE, CIFAR_SIDE, &padded));
    bn_status s = bn_cifar_write(&padded, path, cifar100);
    bn_dataset_free(&padded);
    return s;
}

static bn_status save_both(const bn_dataset *train, const bn_dataset *test, const char *path, int cifar100)
{
    BN_TRY(bn_data_save_folder(path));
    BN_TRY(save_split(train, path, cifar100 ? "train.bin" : "data_batch_1.bin", cifar100));
    return save_split(test, path, cifar100 ? "test.bin" : "test_batch.bin", cifar100);
}

bn_status bn_cifar10_save(const bn_dataset *train, const bn_dataset *test, const char *path)
{
    return save_both(train, test, path, 0);
}

bn_status bn_cifar100_save(const bn_dataset *train, const bn_dataset *test, const char *path)
{
    return save_both(train, test, path, 1);
}
