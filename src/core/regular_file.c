#include "regular_file.h"

#include <sys/stat.h>

static const char *kind_of(mode_t mode)
{
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "a special file";
}

bn_status bn_check_regular_file(const char *path, bn_status code)
{
    struct stat st;
    if (stat(path, &st) != 0 || S_ISREG(st.st_mode)) return BN_OK;
    return bn_error(code, "%s: is not a regular file but %s", path, kind_of(st.st_mode));
}
