/* cli.h - the command line's shared pieces: strict flag parsing and device choice. */
#ifndef BN_CLI_H
#define BN_CLI_H

#include "commands.h"
#include "core/device.h"
#include "core/status.h"

/* Parses a whole-string integer in [lo, hi] given to `flag`; usage error otherwise. */
bn_status bn_cli_int(const char *flag, const char *text, long lo, long hi, long *out);

/* Parses a whole-string finite number in [lo, hi] given to `flag`. */
bn_status bn_cli_float(const char *flag, const char *text, double lo, double hi, double *out);

/* Parses --precision's value: *bf16 is 0 for fp32, 1 for bf16; a usage error listing both otherwise. */
bn_status bn_cli_precision(const char *text, int *bf16);

/* Sets the opened device's precision; bf16 without a device (ctx NULL) is a usage error, the CPU
 * path having no BF16. */
bn_status bn_cli_apply_precision(int bf16, bn_ctx *ctx);

/* Opens the device named by spec (cpu, gpu, gpu:N, auto): *ctx is NULL for the CPU. A NULL
 * spec is auto left unsaid: the GPU when there is one, the CPU without a word otherwise; an
 * "auto" falling back to the CPU warns once per process, unless quiet. */
bn_status bn_cli_open_device(const char *spec, int quiet, bn_ctx **ctx);

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

/* The usage error for getopt's ':' (missing value) or '?' (unknown option) at arg. */
bn_status bn_cli_option_error(int opt, int optopt_value, const char *arg);

#endif
