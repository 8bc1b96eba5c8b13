/* test_install.c - `make install PREFIX=...` into a temporary prefix: a layer author's program
 * builds against it with pkg-config and runs, and so does the example plugin with the shipped
 * recipe; `make uninstall` removes exactly what was installed and leaves what was there before. */
#include "testing.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char out[1 << 16];

/* make with this build's settings ($BLOBNET_MAKE, set by `make test`), outside its jobserver. */
static int run_make(const char *target, const char *prefix)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL %s -s %s PREFIX='%s'", getenv("BLOBNET_MAKE"),
             target, prefix);
    return bn_test_run(cmd, out, sizeof out);
}

static int exists(const char *prefix, const char *rel)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", prefix, rel);
    return access(path, F_OK) == 0;
}

/* A custom layer that doubles its input, in a program of its own. */
static const char my_layer_c[] =
    "#include <stdio.h>\n"
    "#include \"blobnet.h\"\n"
    "#include \"core/net.h\"\n"
    "#include \"core/lr_policies/lr_policies.h\"\n"
    "#include \"train/optimizer.h\"\n"
    "static bn_status setup(bn_layer *l, bn_shape in, bn_shape *out) { (void)l; *out = in; return BN_OK; }\n"
    "static bn_status forward(bn_layer *l, const bn_pass *p)\n"
    "{\n"
    "    (void)p;\n"
    "    BN_HOST_RD(x, l->in);\n"
    "    BN_HOST_WR(y, l->out);\n"
    "    for (size_t i = 0; i < bn_blob_count(l->out); i++) y[i] = 2 * x[i];\n"
    "    return BN_OK;\n"
    "}\n"
    "static bn_status backward(bn_layer *l, const bn_pass *p)\n"
    "{\n"
    "    (void)p;\n"
    "    if (!l->in_grad) return BN_OK;\n"
    "    BN_HOST_RD(dy, l->out_grad);\n"
    "    BN_HOST_WR(dx, l->in_grad);\n"
    "    for (size_t i = 0; i < bn_blob_count(l->in_grad); i++) dx[i] = 2 * dy[i];\n"
    "    return BN_OK;\n"
    "}\n"
    "static const bn_layer_ops double_ops = {.type = \"double\", .help = \"y = 2x\", .kind = BN_NVTX_LAYER_OTHER,\n"
    "    .setup = setup, .forward_cpu = forward, .backward_cpu = backward};\n"
    "int main(void)\n"
    "{\n"
    "    bn_net *net;\n"
    "    if (bn_register_layer(&double_ops) != BN_OK ||\n"
    "        bn_net_from_text(\"[input]\\nchannels=1\\nheight=2\\nwidth=2\\n[double]\\n\", \"mine.cfg\", &net) != BN_OK ||\n"
    "        bn_net_setup(net, 1, NULL, 0, 1) != BN_OK) {\n"
    "        fprintf(stderr, \"%s\\n\", bn_last_error());\n"
    "        return 1;\n"
    "    }\n"
    "    float *x = bn_blob_host_wr(net->input);\n"
    "    for (int i = 0; i < 4; i++) x[i] = (float)(i + 1);\n"
    "    if (bn_net_forward(net, 0) != BN_OK) return 1;\n"
    "    const float *y = bn_blob_host_rd(bn_net_output(net));\n"
    "    printf(\"doubled: %g %g %g %g\\n\", y[0], y[1], y[2], y[3]);\n"
    "    bn_net_free(net);\n"
    "    return 0;\n"
    "}\n";

BN_TEST(install_builds_with_pkg_config_and_uninstall_removes_it_all)
{
    const char *make = getenv("BLOBNET_MAKE");
    /* A plain `make` could rebuild another configuration over this one: only under make test. */
    if (!make || !*make) BN_SKIP_TEST("BLOBNET_MAKE not set (run through make test)");
    if (system("pkg-config --version >/dev/null 2>&1") != 0) BN_SKIP_TEST("pkg-config is not installed");
    char prefix[512], keep[600], src[600], cmd[4096];
    snprintf(prefix, sizeof prefix, "%s/prefix", bn_test_tmpdir());
    snprintf(keep, sizeof keep, "%s/share/keep.txt", prefix);
    CHECK(mkdir(prefix, 0777) == 0);
    snprintf(cmd, sizeof cmd, "%s/share", prefix);
    CHECK(mkdir(cmd, 0777) == 0);
    FILE *f = fopen(keep, "w");
    CHECK(f && fputs("not blobnet's\n", f) >= 0 && fclose(f) == 0);

    int rc = run_make("install", prefix);
    CHECK_MSG(rc == 0, "make install exited %d:\n%s", rc, out);
    static const char *const installed[] = {
        "bin/blobnet", "lib/libblobnet.a", "lib/pkgconfig/blobnet.pc", "include/blobnet/blobnet.h",
        "include/blobnet/core/layer.h", "include/blobnet/core/net.h", "include/blobnet/core/registry.h",
        "include/blobnet/core/blob.h", "include/blobnet/core/status.h",
        "include/blobnet/core/optimizers/optimizer_type.h", "include/blobnet/core/lr_policies/lr_policies.h",
        "include/blobnet/gpu/cuda_check.h",
        "include/blobnet/train/trainer.h", "include/blobnet/idx.h", "include/blobnet/io/image.h",
        "share/blobnet/models/lenet.cfg", "share/blobnet/models/mlp.cfg", "share/blobnet/install-manifest.txt"};
    for (size_t i = 0; i < sizeof installed / sizeof *installed; i++)
        CHECK_MSG(exists(prefix, installed[i]), "%s was not installed", installed[i]);
    CHECK(!exists(prefix, "include/blobnet/cli") && !exists(prefix, "include/blobnet/cli.h"));
    snprintf(cmd, sizeof cmd, "%s/bin/blobnet --version", prefix);
    CHECK(bn_test_run(cmd, out, sizeof out) == 0 && strncmp(out, "blobnet 0.", 10) == 0);

    snprintf(src, sizeof src, "%s/my_layer.c", bn_test_tmpdir());
    f = fopen(src, "w");
    CHECK(f && fputs(my_layer_c, f) >= 0 && fclose(f) == 0);
    snprintf(cmd, sizeof cmd, "cd %s && export PKG_CONFIG_PATH=%s/lib/pkgconfig && "
             "cc -std=c11 -Wall -Wextra -Werror my_layer.c $(pkg-config --cflags --libs blobnet) -o my_layer && "
             "./my_layer", bn_test_tmpdir(), prefix);
    rc = bn_test_run(cmd, out, sizeof out);
    CHECK_MSG(rc == 0 && strcmp(out, "doubled: 2 4 6 8\n") == 0, "exit %d:\n%s", rc, out);

    /* The example plugin, built out of tree from the installed sources with the installed recipe
     * and blobnet-plugin.pc alone, loads into the installed blobnet. */
    static const char *const shipped[] = {"lib/pkgconfig/blobnet-plugin.pc", "share/blobnet/examples/prelu.c",
                                          "share/blobnet/examples/prelu.h", "share/blobnet/examples/prelu.cu",
                                          "share/blobnet/examples/Makefile", "share/blobnet/models/lenet_prelu.cfg",
                                          "share/blobnet/examples/batchrms.c", "share/blobnet/examples/batchrms.h",
                                          "share/blobnet/examples/batchrms.cu", "share/blobnet/models/lenet_batchrms.cfg"};
    for (size_t i = 0; i < sizeof shipped / sizeof *shipped; i++)
        CHECK_MSG(exists(prefix, shipped[i]), "%s was not installed", shipped[i]);
    snprintf(cmd, sizeof cmd, "export PKG_CONFIG_PATH=%s/lib/pkgconfig && pkg-config --libs blobnet-plugin",
             prefix);
    CHECK(bn_test_run(cmd, out, sizeof out) == 0);
    CHECK_MSG(strstr(out, "blobnet") == NULL, "a plugin must not link the static library: %s", out);
    snprintf(cmd, sizeof cmd, "cp -r %s/share/blobnet/examples %s/my-plugin && cd %s/my-plugin && "
             "PKG_CONFIG_PATH=%s/lib/pkgconfig env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s && "
             "%s/bin/blobnet check-layer prelu --plugin ./prelu.so --device cpu && "
             "%s/bin/blobnet summary %s/share/blobnet/models/lenet_prelu.cfg --plugin ./prelu.so",
             prefix, bn_test_tmpdir(), bn_test_tmpdir(), prefix, prefix, prefix, prefix);
    rc = bn_test_run(cmd, out, sizeof out);
    CHECK_MSG(rc == 0, "the out-of-tree PReLU plugin: exit %d:\n%s", rc, out);
    CHECK_MSG(strstr(out, "6 passed, 0 failed, 2 skipped\n") && strstr(out, "total: 8 layers, 431580 parameters"),
              "%s", out);
    /* The second example, a layer with a buffer, from the same folder with NAME. */
    snprintf(cmd, sizeof cmd, "cd %s/my-plugin && PKG_CONFIG_PATH=%s/lib/pkgconfig env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL "
             "make -s NAME=batchrms && %s/bin/blobnet check-layer batchrms --plugin ./batchrms.so --device cpu "
             "--all-shapes && %s/bin/blobnet summary %s/share/blobnet/models/lenet_batchrms.cfg --plugin ./batchrms.so",
             bn_test_tmpdir(), prefix, prefix, prefix, prefix);
    rc = bn_test_run(cmd, out, sizeof out);
    CHECK_MSG(rc == 0, "the out-of-tree batch-RMS plugin: exit %d:\n%s", rc, out);
    CHECK_MSG(strstr(out, "all shapes: 12 passed, 0 failed, 4 skipped\n") &&
              strstr(out, "total: 10 layers, 431150 parameters (1.64 MiB), 70 buffer values"), "%s", out);

    rc = run_make("uninstall", prefix);
    CHECK_MSG(rc == 0, "make uninstall exited %d:\n%s", rc, out);
    snprintf(cmd, sizeof cmd, "cd %s && find . | sort", prefix);
    CHECK(bn_test_run(cmd, out, sizeof out) == 0);
    CHECK_MSG(strcmp(out, ".\n./share\n./share/keep.txt\n") == 0, "left behind:\n%s", out);
    return BN_PASS;
}
