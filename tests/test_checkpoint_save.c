/* test_checkpoint_save.c - atomic checkpoint saves: a save that fails leaves the old file alone
 * and no temporary file behind and names the path and the reason; a save clears the temporary
 * files of saves that were killed. */
#include "testing.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint_testing.h"
#include "core/status.h"

/* Saves as an unprivileged user in a child process; 0 when that save failed as it should.
 * The answer comes back through a pipe, not the exit status, which valgrind may replace;
 * the child frees what it inherited (f, held) to keep valgrind's report of it clean. */
static int save_unprivileged(const char *path, ck_fixture *f, ck_file_parts *held)
{
    int fds[2];
    if (pipe(fds) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        char answer = '1';
        close(fds[0]);
        if (setgid(65534) == 0 && setuid(65534) == 0) {
            bn_status s = bn_checkpoint_save(path, f->net, f->opt, &f->st);
            if (s == BN_ERR_IO && strstr(bn_last_error(), path)) answer = '0';
        }
        ck_free_fixture(f);
        ck_free_parts(held);
        ssize_t wrote = write(fds[1], &answer, 1);
        _exit(wrote == 1 ? 0 : 1);
    }
    close(fds[1]);
    char answer = 0;
    ssize_t got = read(fds[0], &answer, 1);
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    return got == 1 && answer == '0' ? 0 : -1;
}

BN_TEST(checkpoint_save_to_unwritable_directory_keeps_old_file)
{
    ck_fixture f;
    char dir[512], path[600];
    ck_tmp_path(dir, sizeof dir, "readonly");
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(path, sizeof path, "%s/ck.safetensors", dir);
    CHECK(ck_make_fixture(&f, CK_MODEL, 0.25f) == BN_PASS);
    CHECK_OK(bn_checkpoint_save(path, f.net, f.opt, &f.st));
    ck_file_parts before;
    CHECK(ck_read_parts(path, &before) == 0);

    ck_fill(f.net->params, 7.0f);
    CHECK(chmod(dir, 0555) == 0);
    if (geteuid() == 0) {
        /* root writes anywhere: drop to nobody, for whom the directory is closed. */
        CHECK(save_unprivileged(path, &f, &before) == 0);
    } else {
        CHECK_ERR(bn_checkpoint_save(path, f.net, f.opt, &f.st), BN_ERR_IO, "cannot save checkpoint");
        CHECK(strstr(bn_last_error(), path) && strstr(bn_last_error(), "Permission denied"));
    }
    CHECK(chmod(dir, 0755) == 0);

    ck_file_parts after;
    CHECK(ck_read_parts(path, &after) == 0);
    CHECK(after.size == before.size && memcmp(after.bytes, before.bytes, before.size) == 0);
    CHECK(!ck_has_temp_files(dir));
    ck_free_parts(&before);
    ck_free_parts(&after);
    ck_free_fixture(&f);
    return BN_PASS;
}

/* A write that fails half-way (the file-size limit stops it) removes its temporary file. */
BN_TEST(checkpoint_failed_write_removes_temp_file)
{
    ck_fixture f;
    char dir[512], path[600];
    ck_tmp_path(dir, sizeof dir, "fsize");
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(path, sizeof path, "%s/ck.safetensors", dir);
    CHECK(ck_make_fixture(&f, CK_MODEL, 0.25f) == BN_PASS);
    CHECK_OK(bn_checkpoint_save(path, f.net, f.opt, &f.st));
    ck_file_parts before;
    CHECK(ck_read_parts(path, &before) == 0);

    ck_fill(f.net->params, 7.0f);
    struct rlimit old, small;
    CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    small = old;
    small.rlim_cur = 512;
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);
    bn_clear_error();
    bn_status s = bn_checkpoint_save(path, f.net, f.opt, &f.st);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, old_handler);
    CHECK_MSG(s == BN_ERR_IO, "status %d: %s", (int)s, bn_last_error());
    CHECK(strstr(bn_last_error(), "cannot save checkpoint") && strstr(bn_last_error(), path));
    CHECK(strstr(bn_last_error(), "File too large"));

    ck_file_parts after;
    CHECK(ck_read_parts(path, &after) == 0);
    CHECK(after.size == before.size && memcmp(after.bytes, before.bytes, before.size) == 0);
    CHECK(!ck_has_temp_files(dir));
    ck_free_parts(&before);
    ck_free_parts(&after);
    ck_free_fixture(&f);
    return BN_PASS;
}

BN_TEST(checkpoint_save_names_path_and_reason)
{
    ck_fixture f;
    CHECK(ck_make_fixture(&f, CK_MODEL, 0.25f) == BN_PASS);
    CHECK_ERR(bn_checkpoint_save("/nonexistent-dir/ck.safetensors", f.net, f.opt, NULL), BN_ERR_IO,
              "cannot save checkpoint /nonexistent-dir/ck.safetensors");
    CHECK(strstr(bn_last_error(), "No such file or directory"));
    ck_free_fixture(&f);
    return BN_PASS;
}

/* A save removes the temporary files that saves to the same path left when they were killed,
 * but not one that a save in progress holds (locked), nor files of other names. */
BN_TEST(checkpoint_save_removes_temporary_files_of_killed_saves)
{
    ck_fixture f;
    char dir[512], path[600], name[700];
    ck_tmp_path(dir, sizeof dir, "stale");
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(path, sizeof path, "%s/ck.safetensors", dir);
    static const char *const stale[] = {"ck.safetensors.tmp.Ab12Cd", "ck.safetensors.tmp.zzzzzz",
                                        "ck.safetensors.tmp.Held00"};
    static const char *const others[] = {"ck.safetensors.tmp.Ab12Cd7", "other.safetensors.tmp.Ab12Cd",
                                         "ck.safetensors.tmpx.Ab12Cd", "ck.safetensors.tmp.Ab-2Cd"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "%s/%s", dir, stale[i]);
        CHECK(ck_write_raw(name, "partial", 7) == 0);
    }
    for (size_t i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "%s/%s", dir, others[i]);
        CHECK(ck_write_raw(name, "mine", 4) == 0);
    }
    /* A save in progress: its file locked through a descriptor of its own. */
    snprintf(name, sizeof name, "%s/%s", dir, stale[2]);
    int held = open(name, O_RDONLY);
    CHECK(held >= 0 && flock(held, LOCK_EX) == 0);

    CHECK(ck_make_fixture(&f, CK_MODEL, 0.25f) == BN_PASS);
    CHECK_OK(bn_checkpoint_save(path, f.net, f.opt, &f.st));
    for (size_t i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "%s/%s", dir, stale[i]);
        CHECK_MSG((access(name, F_OK) == 0) == (i == 2), "%s %s", stale[i], i == 2 ? "was removed" : "is still there");
    }
    for (size_t i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "%s/%s", dir, others[i]);
        CHECK_MSG(access(name, F_OK) == 0, "%s was removed", others[i]);
    }
    close(held);
    CHECK_OK(bn_checkpoint_save(path, f.net, f.opt, &f.st));
    snprintf(name, sizeof name, "%s/%s", dir, stale[2]);
    CHECK_MSG(access(name, F_OK) != 0, "%s is still there once no save holds it", stale[2]);
    ck_free_fixture(&f);
    return BN_PASS;
}
