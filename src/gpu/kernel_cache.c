/* kernel_cache.c - the kernel choices of the process and their file (kernel_cache.h). */
#include "kernel_cache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct entry {
    char *key, *choice;
} entry;

static struct {
    int resolved; /* path decided from the environment */
    int loaded;   /* the file read (or there is none) */
    char *path;   /* NULL: the process only */
    entry *entries;
    int count, cap;
    int warned;   /* a failed write was reported */
} cache;

static const char header[] = "# blobnet kernel cache: the kernels timed fastest for each layer shape on this machine,\n"
                             "# one KEY<TAB>CHOICE per line (src/gpu/kernel_cache.h). Delete it to time them again.\n";

/* The value of environment variable env followed by rest, or NULL when env is unset or empty. */
static char *under(const char *env, const char *rest)
{
    const char *dir = getenv(env);
    if (!dir || !*dir) return NULL;
    size_t n = strlen(dir) + strlen(rest) + 1;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s%s", dir, rest);
    return p;
}

static void resolve(void)
{
    if (cache.resolved) return;
    cache.resolved = 1;
    const char *env = getenv("BLOBNET_KERNEL_CACHE");
    if (env) cache.path = *env && strcmp(env, "off") != 0 ? strdup(env) : NULL;
    else if (!(cache.path = under("XDG_CACHE_HOME", "/blobnet/kernels.txt")))
        cache.path = under("HOME", "/.cache/blobnet/kernels.txt");
}

const char *bn_kernel_cache_path(void)
{
    resolve();
    return cache.path;
}

static entry *find(const char *key)
{
    for (int i = 0; i < cache.count; i++)
        if (strcmp(cache.entries[i].key, key) == 0) return &cache.entries[i];
    return NULL;
}

/* Keeps choice under key in the process, replacing an earlier one. */
static bn_status keep(const char *key, const char *choice)
{
    char *c = strdup(choice);
    if (!c) return bn_error(BN_ERR_NOMEM, "kernel cache: out of host memory");
    entry *e = find(key);
    if (e) {
        free(e->choice);
        e->choice = c;
        return BN_OK;
    }
    if (cache.count == cache.cap) {
        int cap = cache.cap ? 2 * cache.cap : 16;
        entry *grown = realloc(cache.entries, (size_t)cap * sizeof *grown);
        if (!grown) {
            free(c);
            return bn_error(BN_ERR_NOMEM, "kernel cache: out of host memory");
        }
        cache.entries = grown;
        cache.cap = cap;
    }
    char *k = strdup(key);
    if (!k) {
        free(c);
        return bn_error(BN_ERR_NOMEM, "kernel cache: out of host memory");
    }
    cache.entries[cache.count++] = (entry){k, c};
    return BN_OK;
}

/* One line of the file (its line break removed): a comment, a blank line or KEY<TAB>CHOICE. */
static bn_status read_line(char *line, long number)
{
    if (!line[0] || line[0] == '#') return BN_OK;
    char *tab = strchr(line, '\t');
    if (!tab || tab == line || !tab[1] || strchr(tab + 1, '\t'))
        return bn_error(BN_ERR_DATA, "kernel cache %s:%ld: expected KEY<TAB>CHOICE; delete the file to time again",
                        cache.path, number);
    *tab = '\0';
    if (strlen(line) >= BN_KERNEL_KEY_MAX || strlen(tab + 1) >= BN_KERNEL_CHOICE_MAX)
        return bn_error(BN_ERR_DATA, "kernel cache %s:%ld: a key or choice longer than blobnet writes; delete the file "
                        "to time again", cache.path, number);
    return keep(line, tab + 1);
}

static bn_status load(void)
{
    resolve();
    if (cache.loaded) return BN_OK;
    if (!cache.path) {
        cache.loaded = 1;
        return BN_OK;
    }
    FILE *f = fopen(cache.path, "r");
    if (!f) {
        /* No file yet (or no folder it could be in): nothing timed yet. */
        if (errno != ENOENT && errno != ENOTDIR)
            return bn_error(BN_ERR_IO, "kernel cache %s: %s", cache.path, strerror(errno));
        cache.loaded = 1;
        return BN_OK;
    }
    /* A folder opens for reading, and fails only at its first read. */
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        return bn_error(BN_ERR_IO, "kernel cache %s is a folder: BLOBNET_KERNEL_CACHE names the cache's file (such as "
                        "%s/kernels.txt), or off", cache.path, cache.path);
    }
    char *line = NULL;
    size_t cap = 0;
    long number = 0;
    ssize_t got;
    bn_status s = BN_OK;
    errno = 0;
    while (s == BN_OK && (got = getline(&line, &cap, f)) >= 0) {
        number++;
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = '\0';
        if ((size_t)got != strlen(line))
            s = bn_error(BN_ERR_DATA, "kernel cache %s:%ld: a zero byte in the line; delete the file to time again",
                         cache.path, number);
        else s = read_line(line, number);
    }
    if (s == BN_OK && ferror(f))
        s = bn_error(BN_ERR_IO, "kernel cache %s: read failed (%s)", cache.path, errno ? strerror(errno) : "I/O error");
    free(line);
    fclose(f);
    if (s == BN_OK) cache.loaded = 1;
    return s;
}

bn_status bn_kernel_cache_get(const char *key, char *choice, size_t cap, int *found)
{
    *found = 0;
    BN_TRY(load());
    const entry *e = find(key);
    if (!e) return BN_OK;
    if (strlen(e->choice) >= cap) return bn_error(BN_ERR_INTERNAL, "kernel cache: no room for the choice of %s", key);
    strcpy(choice, e->choice);
    *found = 1;
    return BN_OK;
}

/* Creates the folders above path that are missing; 0 on success, else errno's value. */
static int make_parents(const char *path)
{
    char *p = strdup(path);
    if (!p) return ENOMEM;
    int err = 0;
    for (char *s = strchr(p + 1, '/'); s && !err; s = strchr(s + 1, '/')) {
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) err = errno;
        *s = '/';
    }
    free(p);
    return err;
}

/* Writes every choice of the process to a temporary file beside the cache file and renames it
 * over it; 0 on success, else errno's value. */
static int write_file(void)
{
    int err = make_parents(cache.path);
    if (err) return err;
    size_t n = strlen(cache.path) + 16;
    char *tmp = malloc(n);
    if (!tmp) return ENOMEM;
    snprintf(tmp, n, "%s.tmp.XXXXXX", cache.path);
    int fd = mkstemp(tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        err = errno;
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        free(tmp);
        return err;
    }
    int bad = fputs(header, f) < 0;
    for (int i = 0; i < cache.count && !bad; i++)
        bad = fprintf(f, "%s\t%s\n", cache.entries[i].key, cache.entries[i].choice) < 0;
    bad = fflush(f) != 0 || bad;
    bad = fsync(fileno(f)) != 0 || bad;
    err = bad ? (errno ? errno : EIO) : 0;
    if (fclose(f) != 0 && !err) err = errno;
    if (!err && rename(tmp, cache.path) != 0) err = errno;
    if (err) unlink(tmp);
    free(tmp);
    return err;
}

/* Whether text holds none of the characters the file's lines are split at. */
static int one_field(const char *text)
{
    return !strpbrk(text, "\t\r\n");
}

bn_status bn_kernel_cache_put(const char *key, const char *choice)
{
    if (!key[0] || !one_field(key) || !one_field(choice) || strlen(key) >= BN_KERNEL_KEY_MAX ||
        strlen(choice) >= BN_KERNEL_CHOICE_MAX)
        return bn_error(BN_ERR_INTERNAL, "kernel cache: cannot keep choice '%s' of key '%s'", choice, key);
    BN_TRY(load());
    BN_TRY(keep(key, choice));
    if (!cache.path) return BN_OK;
    int err = write_file();
    if (err && !cache.warned) {
        fprintf(stderr, "blobnet: warning: kernel cache %s: %s; the kernels timed in this run are not kept for the "
                        "next\n", cache.path, strerror(err));
        cache.warned = 1;
    }
    return BN_OK;
}

void bn_kernel_cache_reset(void)
{
    for (int i = 0; i < cache.count; i++) {
        free(cache.entries[i].key);
        free(cache.entries[i].choice);
    }
    free(cache.entries);
    free(cache.path);
    memset(&cache, 0, sizeof cache);
}
