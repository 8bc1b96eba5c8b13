/* fuzz_common.h - shared by the libFuzzer targets and their seed maker: the readers under
 * test take paths, so each input is written to a scratch file first. The scratch directory is
 * one per process (libFuzzer's -fork and -jobs run several) inside $BLOBNET_FUZZ_SCRATCH, which
 * tools/fuzz.sh makes in /dev/shm (no disk I/O) and removes, whatever way the run ends; a
 * target run by hand without it uses $TMPDIR or /tmp and removes its directory at exit. */
#ifndef BN_FUZZ_COMMON_H
#define BN_FUZZ_COMMON_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char fuzz_dir[512];

/* Removes what fuzz_path made: the files it named (fuzz_names) and the directory. */
static const char *fuzz_names[8];
static int fuzz_num_names;

static inline void fuzz_remove_dir(void)
{
    char path[640];
    for (int i = 0; i < fuzz_num_names; i++) {
        snprintf(path, sizeof path, "%s/%s", fuzz_dir, fuzz_names[i]);
        unlink(path);
    }
    rmdir(fuzz_dir);
}

/* path = <scratch dir of this process>/name, the directory made on first use; name must be a
 * string literal (it is kept for the clean-up). */
static inline const char *fuzz_path(char *buf, size_t cap, const char *name)
{
    if (!fuzz_dir[0]) {
        const char *root = getenv("BLOBNET_FUZZ_SCRATCH"), *tmp = getenv("TMPDIR");
        int own = !root || !*root;
        if (own) root = tmp && *tmp ? tmp : "/tmp";
        snprintf(fuzz_dir, sizeof fuzz_dir, "%s/blobnet-fuzz-%ld", root, (long)getpid());
        if (mkdir(fuzz_dir, 0700) != 0 && errno != EEXIST) abort();
        if (own) atexit(fuzz_remove_dir);
    }
    int known = 0;
    for (int i = 0; i < fuzz_num_names; i++) known |= fuzz_names[i] == name;
    if (!known && fuzz_num_names < 8) fuzz_names[fuzz_num_names++] = name;
    snprintf(buf, cap, "%s/%s", fuzz_dir, name);
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
