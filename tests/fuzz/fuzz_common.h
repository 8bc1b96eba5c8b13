/* fuzz_common.h - shared by the libFuzzer targets and their seed maker: the readers under
 * test take paths, so each input is written to a scratch file first (in /dev/shm when there
 * is one: no disk I/O). */
#ifndef BN_FUZZ_COMMON_H
#define BN_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* path = <scratch dir of this process>/name, the directory made on first use. */
static inline const char *fuzz_path(char *buf, size_t cap, const char *name)
{
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/blobnet-fuzz-%ld", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp",
                 (long)getpid());
        char cmd[96];
        snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
        if (system(cmd) != 0) abort();
    }
    snprintf(buf, cap, "%s/%s", dir, name);
    return buf;
}

/* Writes n bytes to path; aborts when it cannot (the harness, not the code under test, failed). */
static inline void fuzz_write(const char *path, const uint8_t *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) abort();
}

/* The model fuzz_checkpoint loads into. Every checkpoint seed carries its hash, so a change
 * here needs new seeds (tools/fuzz.sh seeds). */
#define FUZZ_CHECKPOINT_MODEL \
    "[input]\nchannels=1\nheight=6\nwidth=6\n[conv2d]\nfilters=2\nsize=3\n[dense]\noutputs=3\n[softmax_ce]\n"

#endif
