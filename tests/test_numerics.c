/* test_numerics.c - numeric faults (src/train/numerics.c and the trainer's checks): the first
 * non-finite value is found in the layer where it is; the --debug-numerics table shows each
 * layer's magnitudes; no checkpoint holding NaN or infinity is ever written; and a learning
 * rate that makes training diverge stops it with exit 1, a message naming the steps and the
 * layer, and the earlier checkpoint unchanged, on the CPU and (when there is one) the GPU. */
#include "testing.h"

#include <stdlib.h>

#include "core/device.h"
#include "train/checkpoint.h"
#include "train/numerics.h"

static char out[1 << 16];

/* conv2d1 -> relu1 -> dense1 -> softmax_ce1 on 1x6x6 inputs. */
static const char MODEL[] =
    "[input]\nchannels=1\nheight=6\nwidth=6\n[conv2d]\nfilters=2\nsize=3\n[relu]\n[dense]\noutputs=3\n[softmax_ce]\n";

/* A set-up net after one forward and backward pass on varied inputs with labels 0, 1. */
static int make_net(bn_net **net)
{
    CHECK_OK(bn_net_from_text(MODEL, "numerics.cfg", net));
    CHECK_OK(bn_net_setup(*net, 2, NULL, 0, 3));
    float *x = bn_blob_host_wr((*net)->input), *y = bn_blob_host_wr((*net)->labels);
    for (int i = 0; i < 72; i++) x[i] = (float)((i * 7) % 11) / 11.0f - 0.3f;
    y[0] = 0, y[1] = 1;
    CHECK_OK(bn_net_zero_grad(*net));
    CHECK_OK(bn_net_forward(*net, 1));
    CHECK_OK(bn_net_backward(*net));
    return BN_PASS;
}

BN_TEST(numerics_locate_finds_the_first_layer_holding_nan_or_infinity)
{
    bn_net *net;
    int r = make_net(&net);
    if (r != BN_PASS) return r;
    char where[256];
    CHECK(bn_numerics_locate(net, where, sizeof where) == 0);
    /* Outputs are searched in forward order: the relu's, not the later dense's. */
    bn_blob_host_wr(bn_net_find_layer(net, "relu1")->out)[5] = NAN;
    bn_blob_host_wr(bn_net_find_layer(net, "dense1")->out)[0] = INFINITY;
    CHECK(bn_numerics_locate(net, where, sizeof where) == 1);
    CHECK_MSG(strcmp(where, "layer relu1 (relu) output, element 5: NaN") == 0, "%s", where);
    /* Parameters come before any output: a bad weight is where a fault starts. */
    bn_blob_host_wr(bn_net_find_layer(net, "dense1")->params[0].value)[2] = -INFINITY;
    CHECK(bn_numerics_locate(net, where, sizeof where) == 1);
    CHECK_MSG(strcmp(where, "layer dense1 (dense) parameter weight, element 2: -infinity") == 0, "%s", where);
    bn_net_free(net);
    /* Gradients, last: in backward order. */
    r = make_net(&net);
    if (r != BN_PASS) return r;
    bn_blob_host_wr(bn_net_find_layer(net, "conv2d1")->params[1].grad)[1] = NAN;
    bn_blob_host_wr(bn_net_find_layer(net, "relu1")->out_grad)[3] = INFINITY;
    CHECK(bn_numerics_locate(net, where, sizeof where) == 1);
    CHECK_MSG(strcmp(where, "layer relu1 (relu) output gradient, element 3: +infinity") == 0, "%s", where);
    bn_net_free(net);
    return BN_PASS;
}

static double mean_abs(bn_blob *b)
{
    const float *v = bn_blob_host_rd(b);
    double s = 0;
    for (size_t i = 0; i < bn_blob_count(b); i++) s += fabs(v[i]);
    return s / (double)bn_blob_count(b);
}

BN_TEST(numerics_table_has_each_layers_mean_magnitudes)
{
    bn_net *net;
    int r = make_net(&net);
    if (r != BN_PASS) return r;
    char path[512];
    snprintf(path, sizeof path, "%s/numerics.txt", bn_test_tmpdir());
    FILE *f = fopen(path, "w+");
    CHECK(f != NULL);
    CHECK_OK(bn_numerics_print(net, f, 7));
    rewind(f);
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = '\0';
    fclose(f);
    const char *head = "numerics after step 7 (mean |x|):\n";
    CHECK_MSG(strncmp(out, head, strlen(head)) == 0, "%s", out);
    /* The dense layer's row, computed here: weight and bias together for the parameters. */
    bn_layer *d = bn_net_find_layer(net, "dense1");
    double w = mean_abs(d->params[0].value) * 96, b = mean_abs(d->params[1].value) * 3;
    double gw = mean_abs(d->params[0].grad) * 96, gb = mean_abs(d->params[1].grad) * 3;
    char row[256];
    snprintf(row, sizeof row, "  %-16s %-12s  %10.3e  %10.3e  %10.3e  %10.3e\n", "dense1", "dense", mean_abs(d->out),
             mean_abs(d->out_grad), (w + b) / 99, (gw + gb) / 99);
    CHECK_MSG(strstr(out, row) != NULL, "no row\n%sin\n%s", row, out);
    /* Layers without parameters, and the loss without an output gradient, show '-'. */
    CHECK_MSG(strstr(out, "  relu1            relu        ") && strstr(out, "           -           -\n"), "%s", out);
    int rows = 0;
    for (const char *p = out; (p = strchr(p, '\n')); p++) rows++;
    CHECK_MSG(rows == 2 + 4, "%d lines:\n%s", rows, out);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(numerics_checkpoint_save_refuses_nan_and_keeps_the_old_file)
{
    bn_net *net;
    int r = make_net(&net);
    if (r != BN_PASS) return r;
    bn_optimizer *opt;
    CHECK_OK(bn_optimizer_create(net, &net->train, &opt));
    char path[512], cmd[1200];
    snprintf(path, sizeof path, "%s/numerics.safetensors", bn_test_tmpdir());
    CHECK_OK(bn_checkpoint_save(path, net, opt, NULL));
    snprintf(cmd, sizeof cmd, "cp '%s' '%s.copy'", path, path);
    CHECK(system(cmd) == 0);
    bn_blob_host_wr(bn_net_find_layer(net, "dense1")->params[1].value)[2] = NAN;
    CHECK_ERR(bn_checkpoint_save(path, net, opt, NULL), BN_ERR_NUMERIC, "dense1.bias holds NaN at element 2");
    bn_blob_host_wr(bn_net_find_layer(net, "dense1")->params[1].value)[2] = 0;
    bn_blob_host_wr(opt->state[0])[0] = INFINITY;
    CHECK_ERR(bn_checkpoint_save(path, net, opt, NULL), BN_ERR_NUMERIC, "momentum.conv2d1.weight holds infinity");
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s.copy'", path, path);
    CHECK_MSG(system(cmd) == 0, "the checkpoint changed");
    bn_optimizer_free(opt);
    bn_net_free(net);
    return BN_PASS;
}

static const char *data_dir(void)
{
    static char dir[512];
    const char *d = dir[0] ? dir : bn_test_synthetic_mnist("numerics-data", 1000, 200);
    if (d && !dir[0]) snprintf(dir, sizeof dir, "%s", d);
    return dir[0] ? dir : NULL;
}

static int train(const char *device, const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s train models/lenet.cfg --device %s --data %s --quiet %s", bn_test_cli(), device,
             data_dir(), args);
    return bn_test_run(cmd, out, sizeof out);
}

/* One epoch at a sane rate saves a checkpoint; resuming it at --lr 1000 diverges: exit 1 with
 * one error line naming the steps and a layer, and the checkpoint left as it was. */
static int diverge_on(const char *device)
{
    char ck[512], copy[600], args[2048];
    snprintf(ck, sizeof ck, "%s/diverge-%s.safetensors", bn_test_tmpdir(), device);
    snprintf(copy, sizeof copy, "%s.copy", ck);
    snprintf(args, sizeof args, "--epochs 1 --save %s", ck);
    CHECK_MSG(train(device, args) == 0, "%s", out);
    snprintf(args, sizeof args, "cp '%s' '%s'", ck, copy);
    CHECK(system(args) == 0);
    snprintf(args, sizeof args, "--epochs 3 --lr 1000 --resume %s --save %s", ck, ck);
    int rc = train(device, args);
    /* What the run said, each line indented under the test's. */
    printf("    %s:", device);
    for (const char *p = out; *p; p++) {
        if (p == out || p[-1] == '\n') fputs(p == out ? " " : "      ", stdout);
        putchar(*p);
    }
    CHECK_MSG(rc == 1, "exit %d: %s", rc, out);
    /* The resume first says which settings it changed, then fails in one line. */
    const char *note = "blobnet: note: resuming ", *changed = "with changed training settings: epochs 1 -> 3, lr 0.01 -> 1000\n";
    CHECK_MSG(strncmp(out, note, strlen(note)) == 0 && strstr(out, changed), "%s", out);
    const char *error = strstr(out, changed) + strlen(changed);
    CHECK_MSG(strncmp(error, "blobnet: error: the training loss became ", 41) == 0 &&
              strchr(error, '\n') == out + strlen(out) - 1, "%s", out);
    CHECK_MSG(strstr(out, " step") && (strstr(out, "; first non-finite value: layer ") ||
                                       strstr(out, "; every value is finite: layer ")), "%s", out);
    CHECK_MSG(strstr(out, "(conv2d)") || strstr(out, "(maxpool)") || strstr(out, "(dense)") || strstr(out, "(relu)") ||
              strstr(out, "(softmax_ce)"), "no layer type: %s", out);
    snprintf(args, sizeof args, "cmp -s '%s' '%s'", ck, copy);
    CHECK_MSG(system(args) == 0, "the checkpoint changed");
    return BN_PASS;
}

BN_TEST(numerics_diverging_training_names_the_layer_and_keeps_the_checkpoint)
{
    CHECK(data_dir() != NULL);
    int r = diverge_on("cpu");
    if (r != BN_PASS || bn_device_count() == 0) return r;
    return diverge_on("gpu");
}

/* --debug-numerics N: the table every N steps, on stderr, with a row per layer. */
BN_TEST(numerics_debug_flag_prints_the_table_every_n_steps)
{
    CHECK(data_dir() != NULL);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "{ %s train models/lenet.cfg --device cpu --data %s --quiet --epochs 1 --batch 100 "
             "--debug-numerics 4 2>&1 >/dev/null; }", bn_test_cli(), data_dir());
    CHECK(bn_test_run(cmd, out, sizeof out) == 0);
    /* 10 steps: tables after steps 4 and 8. */
    CHECK_MSG(strstr(out, "numerics after step 4 (mean |x|):\n") && strstr(out, "numerics after step 8 (mean |x|):\n") &&
              !strstr(out, "after step 1 ") && !strstr(out, "after step 10 "), "%s", out);
    const char *t = strstr(out, "after step 8");
    CHECK(strstr(t, "\n  conv1            conv2d     ") && strstr(t, "\n  ip2              dense      ") &&
          strstr(t, "\n  loss             softmax_ce "));
    return BN_PASS;
}
