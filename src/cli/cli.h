/* cli.h - the command line's shared pieces: strict flag parsing and device choice. */
#ifndef BN_CLI_H
#define BN_CLI_H

#include <pthread.h>
#include <stdio.h>

#include "commands.h"
#include "core/device.h"
#include "core/status.h"

/* Parses a whole-string integer in [lo, hi] given to `flag`; usage error otherwise. */
bn_status bn_cli_int(const char *flag, const char *text, long lo, long hi, long *out);

/* Parses a whole-string finite number in [lo, hi] given to `flag`. */
bn_status bn_cli_float(const char *flag, const char *text, double lo, double hi, double *out);

/* --precision's values: FP32; BF16 where it trains faster than FP32 (train/precision.h); BF16
 * everywhere. */
enum { BN_PRECISION_FP32, BN_PRECISION_BF16, BN_PRECISION_BF16_STRICT };

/* Parses --precision's value into *bf16, one of BN_PRECISION_*; a usage error listing them
 * otherwise. */
bn_status bn_cli_precision(const char *text, int *bf16);

/* --threads N: the CPU pool's size (core/parallel.h), 1..BN_CPU_MAX_THREADS. */
bn_status bn_cli_threads(const char *text);

/* The environment's settings, where set: $BLOBNET_THREADS checked as --threads is, and the sizes
 * $BLOBNET_DATA_CACHE_MAX and $BLOBNET_DATA_BUDGET; the error names the variable. */
bn_status bn_cli_check_env(void);

/* Sets the opened device's precision (ctx->bf16 for either BF16 value); BF16 without a device
 * (ctx NULL) is a usage error, the CPU path having no BF16. */
bn_status bn_cli_apply_precision(int bf16, bn_ctx *ctx);

/* Opens the device named by spec (cpu, gpu, gpu:N, auto): *ctx is NULL for the CPU. A NULL
 * spec is auto left unsaid: the GPU when there is one, the CPU without a word otherwise; an
 * "auto" falling back to the CPU warns once per process, unless quiet. On a GPU the CUDA driver
 * starts first, then the libraries opened at run time (cuBLAS, bn_device_preload) load on a
 * thread of their own while the device's context is made. */
bn_status bn_cli_open_device(const char *spec, int quiet, bn_ctx **ctx);

/* A device being opened beside other work: bn_cli_open_device on a thread of its own. */
typedef struct bn_cli_opening {
    const char *spec;
    int quiet;
    int started;         /* the thread runs (else the open was made at once, in begin) */
    int driver_started;  /* the CUDA driver has started, or there is none to start (atomic) */
    pthread_t thread;
    bn_ctx *ctx;
    bn_status status;
    char message[1024];  /* the thread's error message, when status is not BN_OK */
} bn_cli_opening;

/* Starts opening the device named by spec as bn_cli_open_device does, on a thread of its own,
 * so that the caller can read data meanwhile; bn_cli_open_device_end must follow. */
bn_status bn_cli_open_device_begin(const char *spec, int quiet, bn_cli_opening *o);

/* Waits until the driver has started (at once where there is none to start). Host work that
 * maps and fills much memory (reading a dataset, loading a library) beside the driver's start
 * slows it by half and runs slower itself; beside the making of the context it costs much less:
 * on an H200's host, LeNet's context was ready about 40 ms sooner with the data read and cuBLAS
 * loaded after this wait (docs/performance.md, version 71). */
void bn_cli_open_device_wait_driver(bn_cli_opening *o);

/* Waits for the opening begun in o and gives its context (NULL for the CPU) in *ctx, current
 * on the calling thread too; or its error, as bn_cli_open_device would have returned it. */
bn_status bn_cli_open_device_end(bn_cli_opening *o, bn_ctx **ctx);

/* Writes text to f with every byte that could drive a terminal (control characters, DEL, bytes
 * that are not UTF-8) as \xNN, so that a binary file's bytes or a strange file name stay inert. */
void bn_cli_put_escaped(FILE *f, const char *text);

/* Prints "blobnet: KIND: message" on stderr, one line, with control characters and bytes that
 * are not UTF-8 (a binary file's, a strange file name's) escaped as \xNN. */
void bn_cli_report(const char *kind, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Checks before any work that the output directory given to `flag` can be written into: an
 * existing directory that may be written, or a name that can be created in an existing,
 * writable directory. A usage error naming the flag and what is wrong otherwise. */
bn_status bn_cli_check_output_dir(const char *flag, const char *dir);

/* Checks before any work that the file given to `flag` can be written: an existing regular file
 * that may be written, or a name that can be created in an existing, writable directory. A usage
 * error naming the flag and what is wrong otherwise. */
bn_status bn_cli_check_output_file(const char *flag, const char *path);

/* The usage error for getopt's ':' (missing value) or '?' (unknown option) at arg. */
bn_status bn_cli_option_error(int opt, int optopt_value, const char *arg);

#endif
