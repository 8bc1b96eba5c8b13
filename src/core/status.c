#include "status.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_message[1024];
static _Thread_local bn_status last_code;

bn_status bn_error(bn_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_message, sizeof last_message, fmt, ap);
    va_end(ap);
    last_code = code;
    return code;
}

const char *bn_last_error(void) { return last_message; }

bn_status bn_last_status(void) { return last_code; }

void bn_clear_error(void)
{
    last_message[0] = '\0';
    last_code = BN_OK;
}

const char *bn_status_name(bn_status s)
{
    switch (s) {
    case BN_OK: return "ok";
    case BN_ERR_USAGE: return "usage";
    case BN_ERR_DATA: return "data";
    case BN_ERR_IO: return "io";
    case BN_ERR_NOMEM: return "out of memory";
    case BN_ERR_DEVICE: return "device";
    case BN_ERR_NUMERIC: return "numeric";
    case BN_ERR_INTERNAL: return "internal";
    case BN_ERR_INTERRUPTED: return "interrupted";
    }
    return "unknown";
}
