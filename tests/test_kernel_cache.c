/* Tests of the kernel cache (src/gpu/kernel_cache.c): where the file lives, choices kept in the
 * process and in the file, rewritten whole, malformed files refused with file and line, a folder
 * given for the file refused naming it, and a file that cannot be written costing nothing but the
 * warning. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/kernel_cache.h"
#include "testing.h"

/* The environment the cache reads. */
static const char *const vars[] = {"BLOBNET_KERNEL_CACHE", "XDG_CACHE_HOME", "HOME"};
static char *saved[3];

/* Runs body with the environment it may change saved, then restores it and forgets the cache's
 * state, pass or fail. */
static int with_saved_env(int (*body)(void))
{
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(vars[i]);
        saved[i] = v ? strdup(v) : NULL;
    }
    int r = body();
    for (int i = 0; i < 3; i++) {
        if (saved[i]) setenv(vars[i], saved[i], 1);
        else unsetenv(vars[i]);
        free(saved[i]);
        saved[i] = NULL;
    }
    bn_kernel_cache_reset();
    return r;
}

/* A fresh cache file path under the tests' folder (its folder not yet made). */
static const char *fresh_path(const char *name)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/kernel-cache-%s/sub/kernels.txt", bn_test_tmpdir(), name);
    remove(path);
    return path;
}

static void use_file(const char *path)
{
    setenv("BLOBNET_KERNEL_CACHE", path, 1);
    bn_kernel_cache_reset();
}

/* The file's lines that are not comments, joined by '|'. */
static const char *entries_of(const char *path)
{
    static char out[4096];
    char line[512];
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        line[strcspn(line, "\n")] = '\0';
        if (out[0]) strncat(out, "|", sizeof out - strlen(out) - 1);
        strncat(out, line, sizeof out - strlen(out) - 1);
    }
    fclose(f);
    return out;
}

static int lookup(const char *key, char *choice, size_t cap)
{
    int found = -1;
    if (bn_kernel_cache_get(key, choice, cap, &found) != BN_OK) return -1;
    return found;
}

static int keeps_choices(void)
{
    const char *path = fresh_path("keep");
    use_file(path);
    CHECK_MSG(strcmp(bn_kernel_cache_path(), path) == 0, "path %s, want %s", bn_kernel_cache_path(), path);
    char choice[BN_KERNEL_CHOICE_MAX];
    CHECK(lookup("gpu A conv2d 1x8x8", choice, sizeof choice) == 0);
    CHECK_OK(bn_kernel_cache_put("gpu A conv2d 1x8x8", "fwd=rows data=- filter=argmax"));
    CHECK_OK(bn_kernel_cache_put("gpu A dense dw n4", "own 3"));
    const char *lines = entries_of(path);
    CHECK_MSG(lines && strcmp(lines, "gpu A conv2d 1x8x8\tfwd=rows data=- filter=argmax|gpu A dense dw n4\town 3") == 0,
              "the file holds \"%s\"", lines ? lines : "(no file)");
    /* A later process reads them back. */
    bn_kernel_cache_reset();
    CHECK(lookup("gpu A dense dw n4", choice, sizeof choice) == 1 && strcmp(choice, "own 3") == 0);
    CHECK(lookup("gpu B dense dw n4", choice, sizeof choice) == 0);
    /* A new choice for a key replaces the old one, in the process and in the file. */
    CHECK_OK(bn_kernel_cache_put("gpu A conv2d 1x8x8", "fwd=cudnn:1 data=- filter=rows"));
    CHECK(lookup("gpu A conv2d 1x8x8", choice, sizeof choice) == 1 &&
          strcmp(choice, "fwd=cudnn:1 data=- filter=rows") == 0);
    lines = entries_of(path);
    CHECK_MSG(lines &&
                  strcmp(lines, "gpu A conv2d 1x8x8\tfwd=cudnn:1 data=- filter=rows|gpu A dense dw n4\town 3") == 0,
              "the file holds \"%s\"", lines ? lines : "(no file)");
    /* A choice that would not survive the file's format is refused. */
    CHECK_ERR(bn_kernel_cache_put("gpu A\tx", "own 1"), BN_ERR_INTERNAL, "cannot keep");
    CHECK_ERR(bn_kernel_cache_put("gpu A y", "own\n1"), BN_ERR_INTERNAL, "cannot keep");
    CHECK(lookup("gpu A y", choice, sizeof choice) == 0);
    return BN_PASS;
}

BN_TEST(kernel_cache_keeps_choices_in_its_file)
{
    return with_saved_env(keeps_choices);
}

static int default_paths(void)
{
    unsetenv("BLOBNET_KERNEL_CACHE");
    setenv("XDG_CACHE_HOME", "/var/cache/u", 1);
    setenv("HOME", "/home/u", 1);
    bn_kernel_cache_reset();
    CHECK_MSG(strcmp(bn_kernel_cache_path(), "/var/cache/u/blobnet/kernels.txt") == 0, "%s", bn_kernel_cache_path());
    unsetenv("XDG_CACHE_HOME");
    bn_kernel_cache_reset();
    CHECK_MSG(strcmp(bn_kernel_cache_path(), "/home/u/.cache/blobnet/kernels.txt") == 0, "%s", bn_kernel_cache_path());
    unsetenv("HOME");
    bn_kernel_cache_reset();
    CHECK(bn_kernel_cache_path() == NULL);
    /* off: choices live in the process only. */
    setenv("HOME", "/home/u", 1);
    setenv("BLOBNET_KERNEL_CACHE", "off", 1);
    bn_kernel_cache_reset();
    CHECK(bn_kernel_cache_path() == NULL);
    char choice[BN_KERNEL_CHOICE_MAX];
    CHECK_OK(bn_kernel_cache_put("gpu A dense fwd n1", "lt 2"));
    CHECK(lookup("gpu A dense fwd n1", choice, sizeof choice) == 1 && strcmp(choice, "lt 2") == 0);
    bn_kernel_cache_reset();
    CHECK(lookup("gpu A dense fwd n1", choice, sizeof choice) == 0);
    return BN_PASS;
}

BN_TEST(kernel_cache_file_follows_the_environment)
{
    return with_saved_env(default_paths);
}

static int refuses_malformed(void)
{
    static const struct {
        const char *text, *needle;
    } cases[] = {
        {"# comment\n\nkey one\tchoice\nno tab here\n", "kernels.txt:4: expected KEY<TAB>CHOICE"},
        {"key\tchoice\textra\n", "kernels.txt:1: expected KEY<TAB>CHOICE"},
        {"\tchoice\n", "kernels.txt:1: expected KEY<TAB>CHOICE"},
        {"key\t\n", "kernels.txt:1: expected KEY<TAB>CHOICE"},
    };
    char choice[BN_KERNEL_CHOICE_MAX];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path = fresh_path("bad");
        use_file(path);
        CHECK_OK(bn_kernel_cache_put("made", "the folder")); /* creates the folder, then the file is replaced */
        FILE *f = fopen(path, "w");
        CHECK(f && fputs(cases[i].text, f) >= 0 && fclose(f) == 0);
        bn_kernel_cache_reset();
        int found = -1;
        CHECK_ERR(bn_kernel_cache_get("key one", choice, sizeof choice, &found), BN_ERR_DATA, cases[i].needle);
        CHECK_MSG(strstr(bn_last_error(), path) && strstr(bn_last_error(), "delete the file"), "%s", bn_last_error());
    }
    /* A key longer than blobnet writes. */
    const char *path = fresh_path("long");
    use_file(path);
    CHECK_OK(bn_kernel_cache_put("made", "the folder"));
    FILE *f = fopen(path, "w");
    CHECK(f);
    for (int i = 0; i < BN_KERNEL_KEY_MAX; i++) fputc('k', f);
    CHECK(fputs("\town 1\n", f) >= 0 && fclose(f) == 0);
    bn_kernel_cache_reset();
    int found = -1;
    CHECK_ERR(bn_kernel_cache_get("k", choice, sizeof choice, &found), BN_ERR_DATA,
              "kernels.txt:1: a key or choice longer");
    return BN_PASS;
}

BN_TEST(kernel_cache_refuses_a_malformed_file_naming_the_line)
{
    return with_saved_env(refuses_malformed);
}

static int unwritable(void)
{
    /* The cache's folder would have to be made inside a plain file. */
    char path[512];
    snprintf(path, sizeof path, "%s/kernel-cache-plain-file", bn_test_tmpdir());
    FILE *f = fopen(path, "w");
    CHECK(f && fclose(f) == 0);
    strncat(path, "/kernels.txt", sizeof path - strlen(path) - 1);
    use_file(path);
    char choice[BN_KERNEL_CHOICE_MAX];
    CHECK_OK(bn_kernel_cache_put("gpu A dense dx n3", "skinny"));
    CHECK(lookup("gpu A dense dx n3", choice, sizeof choice) == 1 && strcmp(choice, "skinny") == 0);
    CHECK(entries_of(path) == NULL);
    /* The one warning, naming the file and what follows. */
    const char *said = bn_test_stderr();
    CHECK_MSG(strstr(said, "blobnet: warning: kernel cache ") && strstr(said, "kernel-cache-plain-file/kernels.txt") &&
                  strstr(said, "the kernels timed in this run are not kept for the next"),
              "stderr: %s", said);
    return BN_PASS;
}

BN_TEST(kernel_cache_unwritable_file_keeps_choices_in_the_process)
{
    return with_saved_env(unwritable);
}

/* BLOBNET_KERNEL_CACHE naming a folder (where the file was meant to go): one error naming the
 * folder and what the variable takes, at the first lookup and at the first choice kept, and
 * nothing written into the folder. */
static int refuses_folder(void)
{
    char dir[512];
    const char *file = fresh_path("folder-made");
    use_file(file);
    CHECK_OK(bn_kernel_cache_put("made", "the tests' folder")); /* makes the folders above */
    CHECK(snprintf(dir, sizeof dir, "%s", file) > 0);
    *strrchr(dir, '/') = '\0'; /* the folder that holds it */
    use_file(dir);
    char choice[BN_KERNEL_CHOICE_MAX];
    int found = -1;
    CHECK_ERR(bn_kernel_cache_get("gpu A conv2d 1x8x8", choice, sizeof choice, &found), BN_ERR_IO, "is a folder");
    CHECK_MSG(strstr(bn_last_error(), dir) && strstr(bn_last_error(), "BLOBNET_KERNEL_CACHE names the cache's file"),
              "%s", bn_last_error());
    CHECK(found == 0);
    CHECK_ERR(bn_kernel_cache_put("gpu A conv2d 1x8x8", "halo"), BN_ERR_IO, "is a folder");
    /* The folder still holds the one file, unchanged. */
    CHECK_MSG(strcmp(entries_of(file), "made\tthe tests' folder") == 0, "%s", entries_of(file));
    DIR *d = opendir(dir);
    CHECK(d);
    int files = 0;
    for (struct dirent *e; (e = readdir(d));) files += e->d_name[0] != '.';
    closedir(d);
    CHECK_MSG(files == 1, "%d files in %s", files, dir);
    return BN_PASS;
}

BN_TEST(kernel_cache_refuses_a_folder_naming_it)
{
    return with_saved_env(refuses_folder);
}
