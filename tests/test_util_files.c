/* test_util_files.c - the helpers of file_testing.h; it holds no tests itself. */
#include "file_testing.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testing.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"

const char *ft_path(char *buf, size_t cap, const char *format, ...)
{
    int used = snprintf(buf, cap, "%s/", bn_test_tmpdir());
    if (used < 0 || (size_t)used >= cap) return buf;
    va_list ap;
    va_start(ap, format);
    vsnprintf(buf + used, cap - (size_t)used, format, ap);
    va_end(ap);
    return buf;
}

int ft_read_text(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
    return 0;
}

void ft_each_file(const char *dir, void (*visit)(const char *path, const char *name, void *user), void *user)
{
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) ft_each_file(path, visit, user);
        else if (S_ISREG(st.st_mode)) visit(path, e->d_name, user);
    }
    closedir(d);
}

int ft_write_bytes(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = n == 0 || fwrite(bytes, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

int ft_write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

const char *ft_small_mnist(void)
{
    static char dir[512];
    if (!dir[0]) {
        const char *made = bn_test_synthetic_mnist("small-mnist", 1000, 200);
        if (made) snprintf(dir, sizeof dir, "%s", made);
    }
    return dir[0] ? dir : NULL;
}

int ft_checkpoint_loads(const char *model, const char *path)
{
    bn_net *net = NULL;
    bn_optimizer *opt = NULL;
    bn_train_state st;
    bn_status s = bn_net_from_file(model, &net);
    if (s == BN_OK) s = bn_net_setup(net, 1, NULL, 0, 1);
    if (s == BN_OK) s = bn_optimizer_create(net, &net->train, &opt);
    if (s == BN_OK) s = bn_checkpoint_load(path, net, opt, &st);
    if (s != BN_OK) fprintf(stderr, "    %s\n", bn_last_error());
    bn_optimizer_free(opt);
    bn_net_free(net);
    return s == BN_OK;
}

pid_t ft_start_train(const char *env, const char *args, const char *data, const char *log)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "exec env %s %s train %s --data %s >'%s' 2>&1", env, bn_test_cli(), args, data, log);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}
