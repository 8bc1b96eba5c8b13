/* regular_file.h - the check every reader of a named file makes first: that the name is a
 * regular file. Opening a FIFO blocks until something writes to it, and a device or a socket
 * never ends, so a reader given one would hang instead of failing. */
#ifndef BN_REGULAR_FILE_H
#define BN_REGULAR_FILE_H

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* `code` with "PATH: is not a regular file but a FIFO (named pipe)" (or a directory, a device, a
 * socket), found without opening it; BN_OK for a regular file, and for a path that cannot be
 * looked at, whose open then says why in the reader's own words. */
bn_status bn_check_regular_file(const char *path, bn_status code);

#ifdef __cplusplus
}
#endif
#endif
