/* test_code_load.c - the library's GPU code loaded ahead of a run's first step (gpu/code_load.cu):
 * each module is noted at its first launch, in order and once; a list of them loads on a thread;
 * a training run keeps its model's list in the kernel cache, which the next run of that model loads
 * beside its setup; and every library file that launches kernels has its anchor and its row. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/blob.h"
#include "core/device.h"
#include "core/net.h"
#include "file_testing.h"
#include "testing.h"

static char out[1 << 16];
static char source[1 << 20];

/* In each library .cu file of dir (and its folders but layers/examples, whose plugins are out of
 * tree) that launches kernels through bn_launch_early (or bn_launch_opted, which calls it), an
 * anchor named after the file, and that name in code_load.cu's table (`table`): else its module
 * would never be noted nor loaded ahead. Counts the files in *files; NULL, or the first file that
 * lacks either. */
static const char *unanchored(const char *dir, const char *table, int *files)
{
    static char bad[512];
    DIR *d = opendir(dir);
    if (!d) return NULL;
    struct dirent *e;
    const char *found = NULL;
    while (!found && (e = readdir(d))) {
        char path[512], want[160];
        const size_t n = strlen(e->d_name);
        if (e->d_name[0] == '.' || strcmp(e->d_name, "examples") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (n < 4 || strcmp(e->d_name + n - 3, ".cu") != 0) {
            found = unanchored(path, table, files); /* a folder, or NULL for any other file */
            continue;
        }
        if (ft_read_text(path, source, sizeof source) != 0 ||
            (!strstr(source, "bn_launch_early(") && !strstr(source, "bn_launch_opted(")))
            continue;
        ++*files;
        snprintf(want, sizeof want, "BN_CODE_ANCHOR(%.*s,", (int)(n - 3), e->d_name);
        const int anchored = strstr(source, want) != NULL;
        snprintf(want, sizeof want, "X(%.*s)", (int)(n - 3), e->d_name);
        if (!anchored || !strstr(table, want)) found = strcpy(bad, path);
    }
    closedir(d);
    return found;
}

BN_TEST(code_load_every_library_file_that_launches_has_an_anchor_in_the_table)
{
    static char table[1 << 16];
    CHECK(ft_read_text("src/gpu/code_load.cu", table, sizeof table) == 0);
    int files = 0;
    const char *bad = unanchored("src", table, &files);
    if (!bad) bad = unanchored("layers", table, &files);
    CHECK_MSG(bad == NULL,
              "%s launches through bn_launch_early but has no BN_CODE_ANCHOR of its name, or code_load.cu's table "
              "lacks it", bad);
    CHECK_MSG(files >= 20, "only %d files found launching kernels", files);
    return BN_PASS;
}

BN_TEST(code_load_notes_each_module_once_in_launch_order_and_loads_a_list)
{
    char used[128];
    bn_device_code_used(used, sizeof used);
    if (bn_device_count() == 0) {
        CHECK(used[0] == '\0' && bn_device_code_load_end() == 0);
        BN_SKIP_TEST("no CUDA device");
    }
    bn_ctx *ctx = NULL;
    CHECK_OK(bn_ctx_open(0, &ctx));
    bn_net *net = NULL;
    CHECK_OK(bn_net_from_file("models/lenet.cfg", &net));
    CHECK_OK(bn_net_setup(net, 16, ctx, 0, 1));
    /* Zero images of class 0: the passes read defined values. */
    bn_blob *fed[] = {net->input, net->labels};
    for (int i = 0; i < 2; i++) {
        float *v = bn_blob_host_wr(fed[i]);
        CHECK(v != NULL);
        memset(v, 0, bn_blob_count(fed[i]) * sizeof *v);
    }
    CHECK_OK(bn_net_forward(net, 1));
    CHECK_OK(bn_net_backward(net));
    bn_device_code_used(used, sizeof used);
    const size_t n = strlen(used);
    /* At least the convolutions', the dense products' and the loss's modules. */
    CHECK_MSG(n >= 3, "'%s'", used);
    for (size_t i = 0; i < n; i++) CHECK_MSG(strchr(used + i + 1, used[i]) == NULL, "'%s' repeats a module", used);
    /* Noted again, a module keeps its first place; a list one short is a prefix of it. */
    char shorter[128];
    bn_device_code_used(shorter, n);
    CHECK_MSG(strlen(shorter) == n - 1 && strncmp(shorter, used, n - 1) == 0, "'%s' against '%s'", shorter, used);
    bn_device_code_load_begin(used);
    CHECK(bn_device_code_load_end() == (int)n);
    /* Characters that name no module are skipped. */
    char odd[160];
    snprintf(odd, sizeof odd, "#%s~", used);
    bn_device_code_load_begin(odd);
    CHECK(bn_device_code_load_end() == (int)n);
    /* A load still running when the context closes is waited for there. */
    bn_device_code_load_begin(used);
    bn_net_free(net);
    bn_ctx_close();
    CHECK(bn_device_code_load_end() == (int)n);
    return BN_PASS;
}

/* Trains LeNet briefly on the GPU with the kernel cache at `cache` and the timeline's marks. */
static int short_run(const char *cache)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "BLOBNET_KERNEL_CACHE=%s BLOBNET_TIMELINE=1 %s train models/lenet.cfg --device gpu --epochs 1 "
             "--train-limit 640 --test-limit 640 --quiet --data %s",
             cache, bn_test_cli(), bn_test_data_dir());
    return bn_test_run(cmd, out, sizeof out);
}

BN_TEST(code_load_a_run_keeps_its_modules_and_the_next_run_loads_them_beside_its_setup)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    if (!bn_test_data_dir()) BN_SKIP_TEST("BLOBNET_TEST_DATA not set");
    char cache[512], text[1 << 14];
    ft_path(cache, sizeof cache, "code_load_kernels.txt");
    remove(cache);
    CHECK_MSG(short_run(cache) == 0, "%s", out);
    CHECK_MSG(strstr(out, "the model's GPU code loaded") == NULL, "the first run found a list: %s", out);
    CHECK(ft_read_text(cache, text, sizeof text) == 0);
    const char *line = strstr(text, " code ");
    CHECK_MSG(line != NULL, "no list of modules in the cache:\n%s", text);
    const char *list = strchr(line, '\t');
    CHECK(list && list[1] && list[1] != '\n');
    CHECK_MSG(short_run(cache) == 0, "%s", out);
    const char *loaded = strstr(out, "the model's GPU code loaded"), *open = strstr(out, "device open");
    CHECK_MSG(loaded && open && loaded > open, "the second run loaded no list after its device opened: %s", out);
    remove(cache);
    return BN_PASS;
}
