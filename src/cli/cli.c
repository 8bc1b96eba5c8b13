#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/options.h"
#include "core/parallel.h"
#include "core/timeline.h"
#include "data_cache.h"
#include "train/loader.h"

bn_status bn_cli_int(const char *flag, const char *text, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (!*text || *end || errno == ERANGE)
        return bn_error(BN_ERR_USAGE, "%s: '%s' is not an integer", flag, text);
    if (v < lo || v > hi) return bn_error(BN_ERR_USAGE, "%s: %ld is outside %ld..%ld", flag, v, lo, hi);
    *out = v;
    return BN_OK;
}

bn_status bn_cli_float(const char *flag, const char *text, double lo, double hi, double *out)
{
    double v;
    const char *why = bn_parse_finite(text, &v);
    if (why) return bn_error(BN_ERR_USAGE, "%s: '%s' %s", flag, text, why);
    if (v < lo || v > hi) return bn_error(BN_ERR_USAGE, "%s: %g is outside %g..%g", flag, v, lo, hi);
    *out = v;
    return BN_OK;
}

bn_status bn_cli_precision(const char *text, int *bf16)
{
    static const char *const names[] = {"fp32", "bf16", "bf16-strict", NULL}; /* BN_PRECISION_*'s order */
    if ((*bf16 = bn_name_index(names, text)) >= 0) return BN_OK;
    char list[64];
    bn_names_join(names, list, sizeof list);
    return bn_error(BN_ERR_USAGE, "--precision: '%s' is not one of %s", text, list);
}

bn_status bn_cli_apply_precision(int bf16, bn_ctx *ctx)
{
    if (bf16 && !ctx)
        return bn_error(BN_ERR_USAGE, "--precision %s needs a GPU, and this run is on the CPU; use --precision fp32 "
                        "there", bf16 == BN_PRECISION_BF16_STRICT ? "bf16-strict" : "bf16");
    if (ctx) ctx->bf16 = bf16 != 0;
    return BN_OK;
}

/* Opens a device the user asked for; a failure names the --device value it came from, unless
 * the message names it already. */
static bn_status open_ordinal(const char *spec, int ordinal, bn_ctx **ctx)
{
    bn_status s = bn_ctx_open(ordinal, ctx);
    if (s == BN_OK || strstr(bn_last_error(), spec)) return s;
    char why[900];
    snprintf(why, sizeof why, "%s", bn_last_error());
    return bn_error(s, "--device %s: %s", spec, why);
}

/* bn_cli_open_device, once the driver has started. */
static bn_status open_spec(const char *spec, int quiet, bn_ctx **ctx)
{
    static int warned;
    if (!spec) return bn_device_count() > 0 ? open_ordinal("auto", 0, ctx) : BN_OK;
    if (strcmp(spec, "cpu") == 0) return BN_OK;
    if (strcmp(spec, "auto") == 0) {
        if (bn_device_count() > 0) return open_ordinal(spec, 0, ctx);
        if (bn_device_compiled() && !quiet && !warned++)
            bn_cli_report("warning", "no CUDA device found; running on the CPU");
        return BN_OK;
    }
    long ordinal = 0;
    if (strcmp(spec, "gpu") != 0) {
        if (strncmp(spec, "gpu:", 4) != 0)
            return bn_error(BN_ERR_USAGE, "--device: '%s' is not one of cpu, gpu, gpu:N, auto", spec);
        BN_TRY(bn_cli_int("--device", spec + 4, 0, 1024, &ordinal));
    }
    return open_ordinal(spec, (int)ordinal, ctx);
}

static void *preload_on_thread(void *arg)
{
    (void)arg;
    bn_device_preload();
    bn_timeline_mark("cuBLAS loaded");
    return NULL;
}

/* bn_cli_open_device, setting *driver_started (where not NULL) once the driver has started. The
 * driver starts first; then cuBLAS (bn_device_preload, 50-70 ms) loads on a thread of its own
 * while this one makes the context (about 100 ms), rather than after it, when the handles are
 * made. */
static bn_status open_device(const char *spec, int quiet, bn_ctx **ctx, int *driver_started)
{
    *ctx = NULL;
    pthread_t preload;
    const int gpu = (!spec || strcmp(spec, "cpu") != 0) && bn_device_count() > 0;
    /* Marked before anything waits on the flag, so that the timeline's order is the run's. */
    if (gpu) bn_timeline_mark("the CUDA driver started");
    const int preloading = gpu && pthread_create(&preload, NULL, preload_on_thread, NULL) == 0;
    if (driver_started) __atomic_store_n(driver_started, 1, __ATOMIC_RELEASE);
    bn_status s = open_spec(spec, quiet, ctx);
    if (preloading) pthread_join(preload, NULL);
    return s;
}

bn_status bn_cli_open_device(const char *spec, int quiet, bn_ctx **ctx)
{
    return open_device(spec, quiet, ctx, NULL);
}

static void *open_on_thread(void *arg)
{
    bn_cli_opening *o = arg;
    o->status = open_device(o->spec, o->quiet, &o->ctx, &o->driver_started);
    if (o->status != BN_OK) snprintf(o->message, sizeof o->message, "%s", bn_last_error());
    return NULL;
}

bn_status bn_cli_open_device_begin(const char *spec, int quiet, bn_cli_opening *o)
{
    *o = (bn_cli_opening){.spec = spec, .quiet = quiet};
    if (pthread_create(&o->thread, NULL, open_on_thread, o) == 0) {
        o->started = 1;
    } else {
        open_on_thread(o); /* no thread to be had: open it here and now */
    }
    return BN_OK;
}

void bn_cli_open_device_wait_driver(bn_cli_opening *o)
{
    const struct timespec nap = {0, 200000};
    while (o->started && !__atomic_load_n(&o->driver_started, __ATOMIC_ACQUIRE)) nanosleep(&nap, NULL);
}

bn_status bn_cli_open_device_end(bn_cli_opening *o, bn_ctx **ctx)
{
    *ctx = NULL;
    if (o->started) pthread_join(o->thread, NULL);
    o->started = 0;
    if (o->status != BN_OK) return bn_error(o->status, "%s", o->message);
    /* The context is the process's; opening it again makes its device current on this thread. */
    if (o->ctx) BN_TRY(bn_ctx_open(o->ctx->device, &o->ctx));
    *ctx = o->ctx;
    return BN_OK;
}

/* The directory that holds the last name of path ("." when path has no slash). */
static void parent_dir(const char *path, char *dir, size_t cap)
{
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--; /* "out/" names out */
    while (len > 0 && path[len - 1] != '/') len--;
    while (len > 1 && path[len - 1] == '/') len--;
    if (len == 0) snprintf(dir, cap, ".");
    else snprintf(dir, cap, "%.*s", (int)len, path);
}

bn_status bn_cli_check_output_dir(const char *flag, const char *dir)
{
    struct stat sb;
    if (stat(dir, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode)) return bn_error(BN_ERR_USAGE, "%s: %s exists and is not a directory", flag, dir);
        if (access(dir, W_OK | X_OK) != 0)
            return bn_error(BN_ERR_USAGE, "%s: cannot write into directory %s: %s", flag, dir, strerror(errno));
        return BN_OK;
    }
    if (errno != ENOENT) return bn_error(BN_ERR_USAGE, "%s: %s: %s", flag, dir, strerror(errno));
    char parent[4096];
    parent_dir(dir, parent, sizeof parent);
    if (stat(parent, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return bn_error(BN_ERR_USAGE, "%s: cannot create %s: directory %s does not exist", flag, dir, parent);
    if (access(parent, W_OK | X_OK) != 0)
        return bn_error(BN_ERR_USAGE, "%s: cannot create %s in directory %s: %s", flag, dir, parent, strerror(errno));
    return BN_OK;
}

bn_status bn_cli_check_output_file(const char *flag, const char *path)
{
    if (!path[0]) return bn_error(BN_ERR_USAGE, "%s: an empty path names no file", flag);
    struct stat sb;
    int exists = stat(path, &sb) == 0;
    if (exists && !S_ISREG(sb.st_mode))
        return bn_error(BN_ERR_USAGE, "%s: %s is %s, not a file that can be written", flag, path,
                        S_ISDIR(sb.st_mode) ? "a directory" : "not a regular file");
    if (!exists && errno != ENOENT) return bn_error(BN_ERR_USAGE, "%s: %s: %s", flag, path, strerror(errno));
    char dir[4096];
    parent_dir(path, dir, sizeof dir);
    if (!exists && (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)))
        return bn_error(BN_ERR_USAGE, "%s: directory %s does not exist", flag, dir);
    /* Opening says what access() cannot: a read-only file system, or /proc, refuses even root. An
     * existing file is opened without truncation; for a new one, a file of a name of its own is
     * made beside it and removed, so that ranks checking the same path at once do not collide. */
    if (exists) {
        int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) return bn_error(BN_ERR_USAGE, "%s: cannot write %s: %s", flag, path, strerror(errno));
        close(fd);
        return BN_OK;
    }
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.blobnet-probe-XXXXXX", dir);
    int fd = mkstemp(probe);
    if (fd < 0)
        return bn_error(BN_ERR_USAGE, "%s: cannot create %s in directory %s: %s", flag, path, dir, strerror(errno));
    close(fd);
    unlink(probe);
    return BN_OK;
}

/* The length of the UTF-8 sequence that starts at p, or 0 when it is not one: a lone
 * continuation byte, a truncated or overlong sequence, or a C1 control (U+0080..U+009F). */
static int utf8_length(const unsigned char *p)
{
    int n = p[0] >= 0xC2 && p[0] <= 0xDF ? 2 : p[0] >= 0xE0 && p[0] <= 0xEF ? 3 : p[0] >= 0xF0 && p[0] <= 0xF4 ? 4 : 0;
    for (int i = 1; i < n; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    if (p[0] == 0xC2 && p[1] < 0xA0) return 0;
    if ((p[0] == 0xE0 && p[1] < 0xA0) || (p[0] == 0xF0 && p[1] < 0x90)) return 0;
    return n;
}

void bn_cli_put_escaped(FILE *f, const char *text)
{
    for (const unsigned char *p = (const unsigned char *)text; *p;) {
        int n = *p >= 0x20 && *p < 0x7F ? 1 : *p >= 0x80 ? utf8_length(p) : 0;
        if (n) {
            fwrite(p, 1, (size_t)n, f);
            p += n;
        } else {
            fprintf(f, "\\x%02x", *p++);
        }
    }
}

void bn_cli_report(const char *kind, const char *fmt, ...)
{
    char text[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    /* The line is made whole first and written at once: stderr is unbuffered, and the ranks of
     * a run on several GPUs share it, so a line written in pieces could interleave with theirs. */
    char *line = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&line, &len);
    FILE *to = m ? m : stderr;
    fprintf(to, "blobnet: %s: ", kind);
    bn_cli_put_escaped(to, text);
    fputc('\n', to);
    if (m && fclose(m) == 0) fwrite(line, 1, len, stderr);
    free(line);
}

int bn_fail(bn_status s)
{
    bn_cli_report("error", "%s", bn_last_error());
    return s == BN_ERR_USAGE ? 2 : 1;
}

int bn_usage_error(const char *cmd, const char *message)
{
    bn_cli_report("error", "%s%s%s (see 'blobnet %s%s--help')", cmd ? cmd : "", cmd ? ": " : "", message,
                  cmd ? cmd : "", cmd ? " " : "");
    return 2;
}

bn_status bn_cli_option_error(int opt, int optopt_value, const char *arg)
{
    if (opt == ':') return bn_error(BN_ERR_USAGE, "option %s needs a value", arg);
    (void)optopt_value;
    return bn_error(BN_ERR_USAGE, "unknown option '%s'", arg);
}

bn_status bn_cli_threads(const char *text)
{
    long n = 0;
    BN_TRY(bn_cli_int("--threads", text, 1, BN_CPU_MAX_THREADS, &n));
    return bn_cpu_threads_set((int)n);
}

/* The settings that the environment gives every command, each read by the function that reads it
 * for the run (the data budget's with no free memory to take half of: only its text is checked). */
static bn_status env_settings(void)
{
    const char *threads = getenv("BLOBNET_THREADS");
    long n = 0;
    if (threads) BN_TRY(bn_cli_int("BLOBNET_THREADS", threads, 1, BN_CPU_MAX_THREADS, &n));
    uint64_t limit;
    BN_TRY(bn_data_cache_max_bytes(&limit));
    size_t budget;
    return bn_loader_data_budget(0, &budget);
}

bn_status bn_cli_check_env(void)
{
    if (env_settings() == BN_OK) return BN_OK;
    char why[600];
    snprintf(why, sizeof why, "%s", bn_last_error());
    return bn_error(BN_ERR_USAGE, "environment: %s", why);
}
