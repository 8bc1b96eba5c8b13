/* folder.c - the `folder` dataset format (folder.h): the listing of a split's class folders,
 * the decoding of its images on a few threads, and the writer that makes such a tree. */
#include "folder.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/image.h"
#include "io/image_fit.h"

#define FOLDER_PATH_MAX 4096
#define IMAGE_KINDS "*.png, *.pgm, *.ppm, *.jpg, *.jpeg"

/* Decoding is mostly inflate and IDCT, which scale with cores; past a few threads the disk
 * and the memory bus are the limit. */
#define FOLDER_MAX_THREADS 8

/* ---- listing ---- */

typedef struct name_list {
    char **names;
    int count, cap;
} name_list;

static void list_free(name_list *l)
{
    for (int i = 0; i < l->count; i++) free(l->names[i]);
    free(l->names);
    memset(l, 0, sizeof *l);
}

static bn_status list_add(name_list *l, const char *name)
{
    if (l->count == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        char **bigger = realloc(l->names, (size_t)cap * sizeof *bigger);
        if (!bigger) return bn_error(BN_ERR_NOMEM, "out of memory listing %d files", l->count);
        l->names = bigger;
        l->cap = cap;
    }
    if (!(l->names[l->count] = strdup(name))) return bn_error(BN_ERR_NOMEM, "out of memory listing %d files", l->count);
    l->count++;
    return BN_OK;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bn_status join(char *buf, const char *dir, const char *name)
{
    if (snprintf(buf, FOLDER_PATH_MAX, "%s/%s", dir, name) >= FOLDER_PATH_MAX)
        return bn_error(BN_ERR_DATA, "%s/%s: the path is too long", dir, name);
    return BN_OK;
}

static int is_image_name(const char *name)
{
    static const char *const kinds[] = {".png", ".pgm", ".ppm", ".jpg", ".jpeg"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        size_t k = strlen(kinds[i]);
        if (n > k && strcasecmp(name + n - k, kinds[i]) == 0) return 1;
    }
    return 0;
}

/* What was passed over, for the one note that reports it. */
typedef struct skipped_files {
    int count;
    char first[FOLDER_PATH_MAX];
} skipped_files;

/* The entries of dir that are folders (folders = 1) or image files (0), sorted by name; names
 * starting with '.' are ignored and everything else is counted in *skipped. */
static bn_status list_folder(const char *dir, int folders, name_list *out, skipped_files *skipped)
{
    DIR *d = opendir(dir);
    if (!d)
        return bn_error(BN_ERR_DATA, "%s: %s", dir,
                        errno == ENOENT ? "no such folder" : errno == ENOTDIR ? "not a folder" : strerror(errno));
    bn_status s = BN_OK;
    for (struct dirent *e; s == BN_OK && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[FOLDER_PATH_MAX];
        struct stat st;
        if ((s = join(path, dir, e->d_name)) != BN_OK) break;
        int found = stat(path, &st) == 0;
        int keep = folders ? found && S_ISDIR(st.st_mode) : found && S_ISREG(st.st_mode) && is_image_name(e->d_name);
        if (keep) {
            s = list_add(out, e->d_name);
        } else if (skipped->count++ == 0) {
            snprintf(skipped->first, sizeof skipped->first, "%s", path);
        }
    }
    closedir(d);
    if (s == BN_OK) qsort(out->names, (size_t)out->count, sizeof *out->names, by_name);
    return s;
}

/* A split's images: their paths class by class, each with its class. */
typedef struct listing {
    char split_dir[FOLDER_PATH_MAX];
    name_list classes;   /* train/'s subfolders */
    name_list paths;     /* the split's images */
    uint16_t *labels;    /* one a path */
    skipped_files skipped;
} listing;

static void listing_free(listing *ls)
{
    list_free(&ls->classes);
    list_free(&ls->paths);
    free(ls->labels);
}

/* The folder sets of train/ and test/ (both sorted) must be the same: the first difference. */
static bn_status same_classes(const listing *ls, const name_list *tested, const char *train_dir)
{
    const name_list *trained = &ls->classes;
    for (int i = 0, j = 0; i < trained->count || j < tested->count;) {
        int order = i == trained->count ? 1 : j == tested->count ? -1 : strcmp(trained->names[i], tested->names[j]);
        if (order < 0)
            return bn_error(BN_ERR_DATA, "%s: no folder for class '%s' of %s", ls->split_dir, trained->names[i],
                            train_dir);
        if (order > 0)
            return bn_error(BN_ERR_DATA, "%s/%s: a class folder that %s does not have", ls->split_dir, tested->names[j],
                            train_dir);
        i++, j++;
    }
    return BN_OK;
}

/* A split folder's subfolders; a missing split folder says what the format wants. */
static bn_status list_classes(const char *root, const char *dir, name_list *out, skipped_files *skipped)
{
    bn_status s = list_folder(dir, 1, out, skipped);
    if (s != BN_ERR_DATA) return s;
    char why[FOLDER_PATH_MAX + 64];
    snprintf(why, sizeof why, "%s", bn_last_error());
    return bn_error(s, "%s; the folder format reads %s/train/ and %s/test/, a subfolder of images per class", why,
                    root, root);
}

static bn_status list_split(const char *root, int train, listing *ls)
{
    char train_dir[FOLDER_PATH_MAX];
    BN_TRY(join(train_dir, root, "train"));
    BN_TRY(join(ls->split_dir, root, train ? "train" : "test"));
    skipped_files ignored = {0};
    BN_TRY(list_classes(root, train_dir, &ls->classes, train ? &ls->skipped : &ignored));
    if (ls->classes.count == 0)
        return bn_error(BN_ERR_DATA, "%s: no class folders; the folder format wants a subfolder of images per class",
                        train_dir);
    if (ls->classes.count > BN_DATASET_MAX_CLASSES)
        return bn_error(BN_ERR_DATA, "%s: %d class folders, more than %d", train_dir, ls->classes.count,
                        BN_DATASET_MAX_CLASSES);
    bn_status s = BN_OK;
    if (!train) {
        name_list tested = {0};
        s = list_classes(root, ls->split_dir, &tested, &ls->skipped);
        if (s == BN_OK) s = same_classes(ls, &tested, train_dir);
        list_free(&tested);
        BN_TRY(s);
    }
    for (int c = 0; c < ls->classes.count; c++) {
        char dir[FOLDER_PATH_MAX], path[FOLDER_PATH_MAX];
        name_list files = {0};
        s = join(dir, ls->split_dir, ls->classes.names[c]);
        if (s == BN_OK) s = list_folder(dir, 0, &files, &ls->skipped);
        if (s == BN_OK && files.count == 0) s = bn_error(BN_ERR_DATA, "%s: no images (%s)", dir, IMAGE_KINDS);
        size_t listed = (size_t)ls->paths.count + (size_t)files.count;
        uint16_t *labels = s == BN_OK ? realloc(ls->labels, listed * sizeof *labels) : NULL;
        if (s == BN_OK && !labels) s = bn_error(BN_ERR_NOMEM, "out of memory listing %s", dir);
        if (labels) ls->labels = labels;
        for (int i = 0; s == BN_OK && i < files.count; i++) {
            ls->labels[ls->paths.count] = (uint16_t)c;
            s = join(path, dir, files.names[i]);
            if (s == BN_OK) s = list_add(&ls->paths, path);
        }
        list_free(&files);
        BN_TRY(s);
    }
    return BN_OK;
}

/* ---- decoding ---- */

typedef struct decode_job {
    const listing *ls;
    int count, channels, height, width;
    unsigned char *pixels;    /* count examples, NCHW */
    const bn_image *first;    /* example 0 when it was decoded already, else NULL */
    pthread_mutex_t lock;     /* guards what follows */
    int next, done, stop;
    int failed_at;            /* the lowest index that failed, or count */
    bn_status status;
    char message[FOLDER_PATH_MAX + 512];
    int tty, shown;           /* progress: on a terminal, and whether a line is up */
    struct timespec last;
} decode_job;

static bn_status decode_one(decode_job *j, int i)
{
    const char *path = j->ls->paths.names[i];
    bn_image img = {0};
    if (!(i == 0 && j->first)) BN_TRY(bn_image_read_color(path, j->channels, &img));
    size_t size = (size_t)j->channels * j->height * j->width;
    bn_status s = bn_image_fit_from(path, img.pixels ? &img : j->first, j->channels, j->height, j->width,
                                    j->pixels + i * size);
    bn_image_free(&img);
    return s;
}

/* Called with the lock held: the line rewritten on a terminal at most ten times a second. */
static void show_progress(decode_job *j)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double since = (double)(now.tv_sec - j->last.tv_sec) + (now.tv_nsec - j->last.tv_nsec) / 1e9;
    if (!j->tty || (since < 0.1 && j->done < j->count)) return;
    j->last = now;
    fprintf(stderr, "\rblobnet: decoding %s: %d/%d images", j->ls->split_dir, j->done, j->count);
    j->shown = 1;
}

static void *decode_worker(void *arg)
{
    decode_job *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->lock);
        int i = j->stop ? j->count : j->next++;
        pthread_mutex_unlock(&j->lock);
        if (i >= j->count) return NULL;
        bn_status s = decode_one(j, i);
        pthread_mutex_lock(&j->lock);
        /* Indices are handed out in order and every one taken is finished, so the lowest failure
         * is found whatever the threads' timing: the error is the same on every run. */
        if (s != BN_OK && i < j->failed_at) {
            j->failed_at = i;
            j->status = s;
            snprintf(j->message, sizeof j->message, "%s", bn_last_error());
        }
        j->stop |= s != BN_OK;
        j->done += s == BN_OK;
        if (s == BN_OK) show_progress(j);
        pthread_mutex_unlock(&j->lock);
    }
}

static bn_status decode_all(decode_job *j, int quiet)
{
    j->failed_at = j->count;
    j->tty = !quiet && isatty(fileno(stderr));
    if (!quiet && !j->tty) fprintf(stderr, "blobnet: decoding %s: %d images\n", j->ls->split_dir, j->count);
    if (pthread_mutex_init(&j->lock, NULL) != 0) return bn_error(BN_ERR_INTERNAL, "cannot make a mutex");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n = cores < 1 ? 1 : cores < FOLDER_MAX_THREADS ? (int)cores : FOLDER_MAX_THREADS;
    if (n > j->count) n = j->count;
    pthread_t threads[FOLDER_MAX_THREADS];
    int started = 0;
    /* This thread decodes too; a thread that cannot start leaves its share to the others. */
    while (started < n - 1 && pthread_create(&threads[started], NULL, decode_worker, j) == 0) started++;
    decode_worker(j);
    for (int t = 0; t < started; t++) pthread_join(threads[t], NULL);
    pthread_mutex_destroy(&j->lock);
    if (j->shown && j->failed_at < j->count) fputc('\n', stderr);
    return j->failed_at < j->count ? bn_error(j->status, "%s", j->message) : BN_OK;
}

/* ---- loading ---- */

/* "airplane, automobile, ..." into buf, the names that fit and a count of the rest. */
static void class_list(const name_list *classes, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int c = 0; c < classes->count; c++) {
        size_t need = strlen(classes->names[c]) + 2;
        if (used + need + 16 > cap) {
            snprintf(buf + used, cap - used, "%s... (%d more)", c ? ", " : "", classes->count - c);
            return;
        }
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", c ? ", " : "", classes->names[c]);
    }
}

/* The shape to fit to: the model's, else the first training image's, which *first keeps when
 * it is also this split's first image. */
static bn_status choose_shape(const bn_data_request *rq, const listing *ls, bn_image *first, bn_shape *shape)
{
    const bn_shape fit = rq->fit;
    if (fit.c || fit.h || fit.w) {
        if ((fit.c != 1 && fit.c != 3) || fit.h <= 0 || fit.w <= 0)
            return bn_error(BN_ERR_USAGE, "%s: the folder format fits images into 1 or 3 channels, not %dx%dx%d",
                            rq->path, fit.c, fit.h, fit.w);
        *shape = fit;
        return BN_OK;
    }
    listing train = {0};
    bn_status s = rq->train ? BN_OK : list_split(rq->path, 1, &train);
    const char *path = rq->train ? ls->paths.names[0] : s == BN_OK ? train.paths.names[0] : NULL;
    if (s == BN_OK) s = bn_image_read_color(path, 0, first);
    listing_free(&train);
    BN_TRY(s);
    *shape = (bn_shape){.c = first->channels, .h = first->height, .w = first->width};
    if (!rq->train) bn_image_free(first);
    return BN_OK;
}

static bn_status load(const bn_data_request *rq, listing *ls, bn_image *first, bn_dataset *out)
{
    struct stat st;
    if (stat(rq->path, &st) != 0)
        return bn_error(BN_ERR_DATA, "%s: data folder not found (%s)", rq->path, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return bn_error(BN_ERR_DATA, "%s: not a folder; the folder format reads %s/train/ and %s/test/", rq->path,
                        rq->path, rq->path);
    BN_TRY(list_split(rq->path, rq->train, ls));
    if (ls->skipped.count)
        fprintf(stderr, "blobnet: note: %s: skipped %d entr%s that %s not class folders or images (%s), such as %s\n",
                ls->split_dir, ls->skipped.count, ls->skipped.count == 1 ? "y" : "ies",
                ls->skipped.count == 1 ? "is" : "are", IMAGE_KINDS, ls->skipped.first);
    const int total = ls->paths.count, count = rq->limit > 0 && rq->limit < total ? rq->limit : total;
    bn_shape shape = {0};
    BN_TRY(choose_shape(rq, ls, first, &shape));
    BN_TRY(bn_dataset_alloc(out, ls->split_dir, count, shape.c, shape.h, shape.w, ls->classes.count, 0));
    memcpy(out->labels, ls->labels, (size_t)count * sizeof *out->labels);
    BN_TRY(bn_dataset_set_class_names(out, ls->classes.names));
    decode_job job = {.ls = ls, .count = count, .channels = shape.c, .height = shape.h, .width = shape.w,
                      .pixels = out->pixels, .first = first->pixels ? first : NULL};
    BN_TRY(decode_all(&job, rq->quiet));
    if (!rq->quiet) {
        char names[400], kept[64] = "";
        class_list(&ls->classes, names, sizeof names);
        if (count < total) snprintf(kept, sizeof kept, " (the first of %d)", total);
        fprintf(stderr, "%sblobnet: %s: %d images%s, %dx%dx%d, %d classes: %s\n", job.tty ? "\r\033[K" : "",
                ls->split_dir, count, kept, shape.c, shape.h, shape.w, ls->classes.count, names);
    }
    return BN_OK;
}

bn_status bn_folder_load(const bn_data_request *rq, bn_dataset *out)
{
    memset(out, 0, sizeof *out);
    listing ls = {0};
    bn_image first = {0};
    bn_status s = load(rq, &ls, &first, out);
    listing_free(&ls);
    bn_image_free(&first);
    if (s != BN_OK) bn_dataset_free(out);
    return s;
}

/* ---- writing ---- */

/* A name that bn_folder_load would list as it is: not empty, not hidden, no slash. */
static int plain_name(const char *name) { return name[0] && name[0] != '.' && !strchr(name, '/'); }

static int digits(int n)
{
    int d = 1;
    while (n >= 10) n /= 10, d++;
    return d;
}

/* Removes what a failed write made: the class folders' files, the folders, the top. */
static void remove_tree(const char *top)
{
    DIR *d = opendir(top);
    for (struct dirent *e; d && (e = readdir(d));) {
        char dir[FOLDER_PATH_MAX], path[FOLDER_PATH_MAX];
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 || join(dir, top, e->d_name) != BN_OK) continue;
        DIR *sub = opendir(dir);
        for (struct dirent *f; sub && (f = readdir(sub));)
            if (f->d_name[0] != '.' && join(path, dir, f->d_name) == BN_OK) unlink(path);
        if (sub) closedir(sub);
        rmdir(dir);
    }
    if (d) closedir(d);
    rmdir(top);
}

/* Each example as a PNG in tmp/CLASS/. */
static bn_status write_examples(const bn_dataset *d, const char *tmp, char **classes)
{
    for (int c = 0; c < d->num_classes; c++) {
        char dir[FOLDER_PATH_MAX];
        BN_TRY(join(dir, tmp, classes[c]));
        if (mkdir(dir, 0777) != 0) return bn_error(BN_ERR_IO, "%s: cannot make the folder: %s", dir, strerror(errno));
    }
    const size_t plane = (size_t)d->height * d->width;
    unsigned char *hwc = malloc(plane * d->channels);
    if (!hwc) return bn_error(BN_ERR_NOMEM, "out of memory for a %dx%d image", d->width, d->height);
    const int width = d->count > 1 && digits(d->count - 1) > 5 ? digits(d->count - 1) : 5;
    bn_status s = BN_OK;
    for (int i = 0; s == BN_OK && i < d->count; i++) {
        const unsigned char *ex = d->pixels + (size_t)i * plane * d->channels;
        for (size_t p = 0; p < plane; p++)
            for (int k = 0; k < d->channels; k++) hwc[p * d->channels + k] = ex[k * plane + p];
        char path[FOLDER_PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s/%0*d.png", tmp, classes[d->labels[i]], width, i) >= (int)sizeof path)
            s = bn_error(BN_ERR_USAGE, "%s: the path is too long", tmp);
        if (s == BN_OK) s = bn_image_write_png_color(path, hwc, d->channels, d->width, d->height);
    }
    free(hwc);
    return s;
}

/* The class folders' names: d's class names, or the indices at one width. */
static bn_status folder_names(const bn_dataset *d, const char *where, char ***out)
{
    char **names = calloc((size_t)d->num_classes, sizeof *names);
    if (!names) return bn_error(BN_ERR_NOMEM, "out of memory for %d class names", d->num_classes);
    *out = names;
    const int wide = digits(d->num_classes - 1);
    for (int c = 0; c < d->num_classes; c++) {
        /* Five digits hold any class index; the last `wide` of them are the name. */
        char index[16];
        snprintf(index, sizeof index, "%05d", c);
        const char *name = d->class_names ? d->class_names[c] : index + 5 - wide;
        if (!plain_name(name))
            return bn_error(BN_ERR_USAGE, "%s: class %d's name '%s' cannot name a folder (empty, hidden or with a '/')",
                            where, c, name);
        if (!(names[c] = strdup(name)))
            return bn_error(BN_ERR_NOMEM, "out of memory for %d class names", d->num_classes);
    }
    return BN_OK;
}

bn_status bn_folder_write(const bn_dataset *d, const char *root, const char *split)
{
    char final[FOLDER_PATH_MAX], tmp[FOLDER_PATH_MAX], hidden[256];
    BN_TRY(join(final, root, split));
    if (!plain_name(split)) return bn_error(BN_ERR_USAGE, "%s: '%s' cannot name a split's folder", final, split);
    if (!d->pixels || (d->channels != 1 && d->channels != 3))
        return bn_error(BN_ERR_USAGE, "%s: the folder format holds 8-bit gray or RGB images, not %s", final,
                        d->pixels ? "this many channels" : "float values");
    if (d->num_classes <= 0 || d->num_classes > BN_DATASET_MAX_CLASSES)
        return bn_error(BN_ERR_USAGE, "%s: %d classes, outside 1..%d", final, d->num_classes, BN_DATASET_MAX_CLASSES);
    for (int i = 0; i < d->count; i++)
        if (d->labels[i] >= d->num_classes)
            return bn_error(BN_ERR_USAGE, "%s: example %d's label %u is past the %d classes", final, i,
                            (unsigned)d->labels[i], d->num_classes);
    if (mkdir(root, 0777) != 0 && errno != EEXIST)
        return bn_error(BN_ERR_IO, "%s: cannot make the folder: %s", root, strerror(errno));
    struct stat st;
    if (lstat(final, &st) == 0) return bn_error(BN_ERR_USAGE, "%s: already exists; the writer makes it new", final);
    snprintf(hidden, sizeof hidden, ".%s.partial-%ld", split, (long)getpid());
    BN_TRY(join(tmp, root, hidden));
    char **names = NULL;
    bn_status s = folder_names(d, final, &names);
    int made = s == BN_OK && mkdir(tmp, 0777) == 0;
    if (s == BN_OK && !made) s = bn_error(BN_ERR_IO, "%s: cannot make the folder: %s", tmp, strerror(errno));
    if (s == BN_OK) s = write_examples(d, tmp, names);
    if (s == BN_OK && rename(tmp, final) != 0)
        s = bn_error(BN_ERR_IO, "%s: cannot rename %s to it: %s", final, tmp, strerror(errno));
    if (s != BN_OK && made) remove_tree(tmp);
    for (int c = 0; names && c < d->num_classes; c++) free(names[c]);
    free(names);
    return s;
}

bn_status bn_folder_save(const bn_dataset *train, const bn_dataset *test, const char *path)
{
    BN_TRY(bn_data_save_folder(path));
    BN_TRY(bn_folder_write(train, path, "train"));
    return bn_folder_write(test, path, "test");
}
