#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (!*text || *end || errno == ERANGE || !isfinite(v))
        return bn_error(BN_ERR_USAGE, "%s: '%s' is not a finite number", flag, text);
    if (v < lo || v > hi) return bn_error(BN_ERR_USAGE, "%s: %g is outside %g..%g", flag, v, lo, hi);
    *out = v;
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

bn_status bn_cli_open_device(const char *spec, int quiet, bn_ctx **ctx)
{
    *ctx = NULL;
    if (strcmp(spec, "cpu") == 0) return BN_OK;
    if (strcmp(spec, "auto") == 0) {
        if (bn_device_count() > 0) return open_ordinal(spec, 0, ctx);
        if (bn_device_compiled() && !quiet)
            fprintf(stderr, "blobnet: warning: no CUDA device found; running on the CPU\n");
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

bn_status bn_cli_data_dir(const char *flag, const char *dataset, const char **dir)
{
    int fashion = strcmp(dataset, "fashion-mnist") == 0;
    if (!fashion && strcmp(dataset, "mnist") != 0)
        return bn_error(BN_ERR_USAGE, "--dataset: '%s' is not one of mnist, fashion-mnist", dataset);
    const char *env = getenv("BLOBNET_DATA");
    if (flag) *dir = flag;
    else if (fashion) *dir = "/usr/share/datasets/fashion-mnist";
    else if (env && *env) *dir = env;
    else *dir = "data/mnist";
    return BN_OK;
}

int bn_fail(bn_status s)
{
    fprintf(stderr, "blobnet: error: %s\n", bn_last_error());
    return s == BN_ERR_USAGE ? 2 : 1;
}

int bn_usage_error(const char *cmd, const char *message)
{
    fprintf(stderr, "blobnet: error: %s%s%s (see 'blobnet %s%s--help')\n", cmd ? cmd : "", cmd ? ": " : "", message,
            cmd ? cmd : "", cmd ? " " : "");
    return 2;
}

bn_status bn_cli_option_error(int opt, int optopt_value, const char *arg)
{
    if (opt == ':') return bn_error(BN_ERR_USAGE, "option %s needs a value", arg);
    (void)optopt_value;
    return bn_error(BN_ERR_USAGE, "unknown option '%s'", arg);
}
