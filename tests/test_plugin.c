/* test_plugin.c - the plugin loader (src/core/plugin.c) and the example plugins
 * (layers/examples/): loading and its errors, PReLU's values and gradients, the check kit on
 * PReLU and on batch RMS normalization (with evaluation-mode bugs planted in copies of it), and
 * training with PReLU from the library and from the command line.
 *
 * The example is $BLOBNET_PLUGINS/prelu.so (the Makefile passes $(BUILD)/plugins). Broken
 * plugins are compiled here from a few lines of C with the system's cc. */
#include <stdlib.h>

#include "check/layercheck.h"
#include "core/plugin.h"
#include "core/registry.h"
#include "core/rng.h"
#include "layer_testing.h"
#include "testing.h"
#include "train/optimizer.h"

static char out[1 << 16];

/* $BLOBNET_PLUGINS/NAME.so */
static const char *example_path(const char *name)
{
    static char path[512];
    const char *dir = getenv("BLOBNET_PLUGINS");
    snprintf(path, sizeof path, "%s/%s.so", dir && *dir ? dir : "build/plugins", name);
    return path;
}

static const char *prelu_path(void)
{
    return example_path("prelu");
}

/* Writes source to <tmp>/<name>.c and compiles it into <tmp>/<name>.so (path receives it). */
static bn_status build_plugin(const char *name, const char *source, char *path, size_t cap)
{
    char src[512], cmd[2048];
    snprintf(src, sizeof src, "%s/%s.c", bn_test_tmpdir(), name);
    snprintf(path, cap, "%s/%s.so", bn_test_tmpdir(), name);
    FILE *f = fopen(src, "w");
    if (!f) return bn_error(BN_ERR_IO, "cannot write %s", src);
    fputs(source, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "${CC:-cc} -std=c11 -Wall -Wextra -Werror -shared -fPIC -Isrc -Ilayers/examples -o '%s' "
             "'%s' -lm", path, src);
    if (bn_test_run(cmd, out, sizeof out) != 0) return bn_error(BN_ERR_IO, "cannot build %s: %s", path, out);
    return BN_OK;
}

/* A plugin of type TYPE computing y = x * x whose backward multiplies x * dy by `factor` (an
 * expression in the element index i; "2.0f" would be right), built as TYPE.so. */
static bn_status build_square(const char *type, const char *factor, char *path, size_t cap)
{
    char source[2048];
    snprintf(source, sizeof source,
             "#include \"blobnet.h\"\n"
             "static bn_status setup(bn_layer *l, bn_shape in, bn_shape *out)\n"
             "{ (void)l; *out = in; return BN_OK; }\n"
             "static bn_status fwd(bn_layer *l, const bn_pass *p)\n"
             "{ (void)p; BN_HOST_RD(x, l->in); BN_HOST_WR(y, l->out);\n"
             "  for (size_t i = 0; i < bn_blob_count(l->in); i++) y[i] = x[i] * x[i];\n"
             "  return BN_OK; }\n"
             "static bn_status bwd(bn_layer *l, const bn_pass *p)\n"
             "{ (void)p; BN_HOST_RD(x, l->in); BN_HOST_RD(dy, l->out_grad); BN_HOST_WR(dx, l->in_grad);\n"
             "  for (size_t i = 0; i < bn_blob_count(l->in); i++) dx[i] = %s * x[i] * dy[i];\n"
             "  return BN_OK; }\n"
             "static const bn_layer_ops ops = {.type = \"%s\", .setup = setup,\n"
             "                                 .forward_cpu = fwd, .backward_cpu = bwd};\n"
             "bn_status blobnet_plugin_register(void) { return bn_register_layer(&ops); }\n",
             factor, type);
    return build_plugin(type, source, path, cap);
}

BN_TEST(plugin_prelu_registers_its_type_once)
{
    CHECK_OK(bn_plugin_load(prelu_path()));
    const bn_layer_ops *ops = bn_find_layer("prelu");
    CHECK(ops != NULL && strcmp(ops->type, "prelu") == 0);
    CHECK(ops->setup && ops->forward_cpu && ops->backward_cpu && !ops->is_loss);
    CHECK(strstr(ops->help, "init_slope") != NULL);
    CHECK((ops->forward_gpu != NULL) == bn_device_compiled());
    /* The same file again is already loaded: nothing happens. */
    int types = bn_layer_type_count();
    CHECK_OK(bn_plugin_load(prelu_path()));
    CHECK(bn_layer_type_count() == types);
    return BN_PASS;
}

/* A copy of the example under another name is another library, whose type is taken. */
BN_TEST(plugin_duplicate_type_is_refused)
{
    CHECK_OK(bn_plugin_load(prelu_path()));
    char copy[600], cmd[1400];
    snprintf(copy, sizeof copy, "%s/prelu_again.so", bn_test_tmpdir());
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", prelu_path(), copy);
    CHECK(bn_test_run(cmd, out, sizeof out) == 0);
    int types = bn_layer_type_count();
    char want[700];
    snprintf(want, sizeof want, "plugin %s: layer type 'prelu' is already registered", copy);
    CHECK_ERR(bn_plugin_load(copy), BN_ERR_USAGE, want);
    CHECK(bn_layer_type_count() == types);
    return BN_PASS;
}

BN_TEST(plugin_nonexistent_file_is_an_error)
{
    CHECK_ERR(bn_plugin_load("/nonexistent/dir/layer.so"), BN_ERR_USAGE,
              "plugin /nonexistent/dir/layer.so: cannot load: /nonexistent/dir/layer.so: cannot open shared "
              "object file: No such file or directory");
    /* A bare name means the current directory, not the library search path. */
    CHECK_ERR(bn_plugin_load("layer_nowhere.so"), BN_ERR_USAGE,
              "plugin layer_nowhere.so: cannot load: ./layer_nowhere.so");
    CHECK_ERR(bn_plugin_load(""), BN_ERR_USAGE, "plugin: empty file name");
    return BN_PASS;
}

BN_TEST(plugin_without_entry_point_is_an_error)
{
    char path[600];
    CHECK_OK(build_plugin("no_entry", "int blobnet_plugin_version(void);\n"
                                      "int blobnet_plugin_version(void) { return 1; }\n", path, sizeof path));
    char want[800];
    snprintf(want, sizeof want, "plugin %s: no entry point 'blobnet_plugin_register' (", path);
    CHECK_ERR(bn_plugin_load(path), BN_ERR_USAGE, want);
    CHECK(strstr(bn_last_error(), "undefined symbol: blobnet_plugin_register") != NULL);
    CHECK(strstr(bn_last_error(), "a plugin defines bn_status blobnet_plugin_register(void)") != NULL);
    return BN_PASS;
}

/* A plugin compiled with BN_WITH_CUDA but linked without its .cu object names the missing GPU
 * function (the guide's error table gives the fix). */
BN_TEST(plugin_without_its_cuda_object_names_the_gpu_function)
{
    char path[600], cmd[1400];
    snprintf(path, sizeof path, "%s/prelu_no_cu.so", bn_test_tmpdir());
    snprintf(cmd, sizeof cmd, "${CC:-cc} -std=c11 -shared -fPIC -Isrc -DBN_WITH_CUDA -o '%s' layers/examples/prelu.c",
             path);
    CHECK_MSG(bn_test_run(cmd, out, sizeof out) == 0, "%s", out);
    CHECK_ERR(bn_plugin_load(path), BN_ERR_USAGE, "undefined symbol: bn_prelu_forward_gpu");
    return BN_PASS;
}

/* The registry's refusal of an incomplete ops table reaches the caller with the file's name. */
BN_TEST(plugin_with_incomplete_ops_is_an_error)
{
    char path[600];
    CHECK_OK(build_plugin("incomplete", "#include \"blobnet.h\"\n"
                                        "static bn_status setup(bn_layer *l, bn_shape in, bn_shape *out)\n"
                                        "{ (void)l; *out = in; return BN_OK; }\n"
                                        "static const bn_layer_ops ops = {.type = \"plugin_test_incomplete\",\n"
                                        "                                 .setup = setup};\n"
                                        "bn_status blobnet_plugin_register(void) { return bn_register_layer(&ops); }\n",
                          path, sizeof path));
    char want[800];
    snprintf(want, sizeof want, "plugin %s: layer type 'plugin_test_incomplete' needs setup, forward_cpu and "
             "backward_cpu", path);
    CHECK_ERR(bn_plugin_load(path), BN_ERR_USAGE, want);
    CHECK(bn_find_layer("plugin_test_incomplete") == NULL);
    return BN_PASS;
}

/* ---- PReLU ---- */

/* Two examples of 2 channels of 3 values, slopes 0.5 and 0.1, dy = 1..12. The expected values
 * follow from y = x (x > 0) or slope * x, dx = dy or slope * dy, dslope = sum of x * dy over
 * x <= 0 (the CPU convention at 0 is the slope branch, which adds nothing there). */
static const float prelu_x[] = {-2, 1, 0, 3, -1, -4, 0.5f, -0.5f, 2, -3, 0, 1};
static const float prelu_y[] = {-1, 1, 0, 3, -0.1f, -0.4f, 0.5f, -0.25f, 2, -0.3f, 0, 1};
static const float prelu_dy[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
static const float prelu_dx[] = {0.5f, 2, 1.5f, 4, 0.5f, 0.6f, 7, 4, 9, 1, 1.1f, 12};
static const float prelu_slopes[] = {0.5f, 0.1f};
/* channel 0: -2*1 + 0*3 - 0.5*8 = -6; channel 1: -1*5 - 4*6 - 3*10 + 0*11 = -59 */
static const float prelu_dslope[] = {-6, -59};

#define PRELU_NET "[input]\nchannels=2\nheight=1\nwidth=3\n[prelu]\n"

BN_TEST(plugin_prelu_values_and_gradients)
{
    CHECK_OK(bn_plugin_load(prelu_path()));
    bn_net *net;
    CHECK_OK(lt_net(PRELU_NET "init_slope=0.5\n", 2, 1, &net));
    bn_layer *l = net->layers[0];
    float v[12];
    CHECK(l->num_params == 1 && strcmp(l->params[0].name, "slope") == 0);
    CHECK(l->params[0].value->n == 2 && bn_blob_count(l->params[0].value) == 2);
    CHECK(l->params[0].decay_mult == 0.0f && l->params[0].lr_mult == 1.0f);
    CHECK_OK(lt_read(l->params[0].value, v, 2));
    CHECK(v[0] == 0.5f && v[1] == 0.5f); /* init_slope */
    CHECK_OK(lt_write(l->params[0].value, prelu_slopes, 2));
    CHECK_OK(lt_write(net->input, prelu_x, 12));
    CHECK_OK(bn_net_forward(net, 1));
    CHECK_OK(lt_read(l->out, v, 12));
    for (int i = 0; i < 12; i++) CHECK_MSG(v[i] == prelu_y[i], "y[%d] = %g, expected %g", i, v[i], prelu_y[i]);
    CHECK_OK(lt_write(l->out_grad, prelu_dy, 12));
    CHECK_OK(bn_net_backward(net));
    CHECK_OK(lt_read(net->input_grad, v, 12));
    for (int i = 0; i < 12; i++) CHECK_MSG(v[i] == prelu_dx[i], "dx[%d] = %g, expected %g", i, v[i], prelu_dx[i]);
    CHECK_OK(lt_read(l->params[0].grad, v, 2));
    CHECK(v[0] == prelu_dslope[0] && v[1] == prelu_dslope[1]);
    bn_net_free(net);

    /* Without init_slope the slopes start at 0.25, as in the paper. */
    CHECK_OK(lt_net(PRELU_NET, 1, 1, &net));
    CHECK_OK(lt_read(net->layers[0]->params[0].value, v, 2));
    CHECK(v[0] == 0.25f && v[1] == 0.25f);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(plugin_prelu_bad_option_names_the_line)
{
    CHECK_OK(bn_plugin_load(prelu_path()));
    CHECK_ERR(lt_setup_status(PRELU_NET "init_slope = 2\n"), BN_ERR_USAGE,
              "test-model:6: [prelu] init_slope = 2 is out of range [0, 1]");
    CHECK_ERR(lt_setup_status(PRELU_NET "slope = 0.1\n"), BN_ERR_USAGE, "test-model:6: [prelu] unknown key 'slope'");
    return BN_PASS;
}

BN_TEST(plugin_prelu_passes_the_kit_on_cpu)
{
    CHECK_OK(bn_plugin_load(prelu_path()));
    bn_layercheck_opts o = bn_layercheck_defaults();
    o.type = "prelu";
    o.input = (bn_shape){4, 5, 3};
    o.batch = 5;
    bn_layercheck_report r;
    CHECK_OK(bn_layercheck_run(&o, &r));
    for (int i = 0; i < BN_CHECK_COUNT; i++) {
        bn_check_outcome want = i == BN_CHECK_DEVICES || i == BN_CHECK_DETERMINISM_GPU ? BN_CHECK_SKIP : BN_CHECK_PASS;
        CHECK_MSG(r.checks[i].outcome == want, "%s: %s %s", r.checks[i].name,
                  bn_check_outcome_name(r.checks[i].outcome), r.checks[i].detail);
    }
    CHECK(strstr(r.checks[BN_CHECK_SHAPES].detail, "4x5x3 -> 4x5x3 at batch 1 and 5; slope 4x1x1x1") != NULL);
    /* 300 input values and 4 slopes, 100 coordinates of the input. */
    CHECK_MSG(strstr(r.checks[BN_CHECK_GRADIENT].detail, "104 coordinates") != NULL, "%s",
              r.checks[BN_CHECK_GRADIENT].detail);
    CHECK(r.passed == 6 && r.failed == 0 && r.skipped == 2);
    return BN_PASS;
}

BN_TEST(plugin_prelu_passes_the_kit_on_gpu)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    CHECK_OK(bn_plugin_load(prelu_path()));
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    /* Up to 2,800 values per channel: each thread of the slope reduction adds several. */
    static const bn_shape inputs[] = {{4, 5, 3}, {3, 1, 1}, {2, 20, 20}};
    for (int k = 0; k < 3; k++) {
        bn_layercheck_opts o = bn_layercheck_defaults();
        o.type = "prelu";
        o.input = inputs[k];
        o.batch = 7;
        o.ctx = ctx;
        bn_layercheck_report r;
        CHECK_OK(bn_layercheck_run(&o, &r));
        for (int i = 0; i < BN_CHECK_COUNT; i++)
            CHECK_MSG(r.checks[i].outcome == BN_CHECK_PASS, "%dx%dx%d %s: %s %s", inputs[k].c, inputs[k].h,
                      inputs[k].w, r.checks[i].name, bn_check_outcome_name(r.checks[i].outcome), r.checks[i].detail);
        CHECK(strstr(r.checks[BN_CHECK_DEVICES].detail, "no GPU functions") == NULL);
    }
    return BN_PASS;
}

/* A plugin type "rawrelu": the built-in relu's passes under another name, with graph_safe left
 * unset, as a type that keeps host state per step would leave it. */
static bn_status build_rawrelu(char *path, size_t cap)
{
    static const char source[] =
        "#include \"blobnet.h\"\n"
        "#include \"core/registry.h\"\n"
        "static bn_layer_ops raw;\n"
        "BN_PLUGIN_EXPORT bn_status blobnet_plugin_register(void)\n"
        "{\n"
        "    const bn_layer_ops *relu = bn_find_layer(\"relu\");\n"
        "    if (!relu) return bn_error(BN_ERR_INTERNAL, \"no relu\");\n"
        "    raw = *relu;\n"
        "    raw.type = \"rawrelu\";\n"
        "    raw.graph_safe = 0;\n"
        "    raw.absorbable_as = 0;\n"
        "    return bn_register_layer(&raw);\n"
        "}\n";
    return build_plugin("rawrelu", source, path, cap);
}

/* PReLU says it may be captured in a CUDA graph; rawrelu does not, and the network names it.
 * Without CUDA no layer has GPU passes, so the first one is named. */
BN_TEST(plugin_graph_blocker_names_unsafe_layer)
{
    CHECK_OK(bn_plugin_load(prelu_path()));
    CHECK(bn_find_layer("prelu")->graph_safe);
    char raw[512];
    CHECK_OK(build_rawrelu(raw, sizeof raw));
    if (!bn_find_layer("rawrelu")) CHECK_OK(bn_plugin_load(raw));
    CHECK(!bn_find_layer("rawrelu")->graph_safe);
    bn_net *net;
    CHECK_OK(lt_net("[input]\nchannels=2\nheight=1\nwidth=3\n[prelu]\nname=p\n[rawrelu]\nname=d\n[prelu]\n", 1, 1,
                    &net));
    const bn_layer *b = bn_net_graph_blocker(net);
    CHECK(b != NULL && strcmp(b->name, bn_device_compiled() ? "d" : "p") == 0);
    CHECK(!bn_net_graph_safe(net));
    bn_net_free(net);
    CHECK_OK(lt_net(PRELU_NET, 1, 1, &net));
    CHECK((bn_net_graph_blocker(net) == NULL) == bn_device_compiled());
    CHECK(bn_net_graph_safe(net) == bn_device_compiled());
    bn_net_free(net);
    return BN_PASS;
}

static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

/* A type that may not be captured keeps every step eager; train says so once, naming the layer,
 * and nothing when asked for eager steps. */
BN_TEST(plugin_graph_unsafe_layer_is_named_once)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    const char *data = bn_test_synthetic_mnist("graph-note-data", 640, 100);
    CHECK(data != NULL);
    char raw[512], model[512], cmd[2048];
    CHECK_OK(build_rawrelu(raw, sizeof raw));
    snprintf(model, sizeof model, "%s/rawrelu.cfg", bn_test_tmpdir());
    FILE *f = fopen(model, "w");
    CHECK(f && fputs("[input]\nchannels=1\nheight=28\nwidth=28\n[dense]\nname=ip1\noutputs=32\n[rawrelu]\n"
                     "name=raw1\n[dense]\noutputs=10\n[softmax_ce]\n", f) >= 0 && fclose(f) == 0);
    static const char note[] = "blobnet: note: layer raw1 (rawrelu) leaves graph_safe unset, so every training "
                               "step launches its kernels instead of replaying a CUDA graph\n";
    snprintf(cmd, sizeof cmd, "%s train %s --plugin %s --device gpu --epochs 2 --batch 64 --quiet --data %s",
             bn_test_cli(), model, raw, data);
    CHECK_MSG(bn_test_run(cmd, out, sizeof out) == 0, "%s", out);
    CHECK_MSG(count(out, "blobnet: note:") == 1 && strstr(out, note), "%s", out);
    snprintf(cmd, sizeof cmd, "%s train %s --plugin %s --device gpu --epochs 1 --batch 64 --quiet --no-graph --data %s",
             bn_test_cli(), model, raw, data);
    CHECK_MSG(bn_test_run(cmd, out, sizeof out) == 0 && !strstr(out, "note:"), "%s", out);
    return BN_PASS;
}

/* A small net with a PReLU learns to tell which half of its input is larger: the loss falls and
 * the slopes move away from where they started. */
BN_TEST(plugin_prelu_net_learns)
{
    CHECK_OK(bn_plugin_load(prelu_path()));
    enum { N = 32, STEPS = 60 };
    bn_net *net;
    CHECK_OK(bn_net_from_text("[input]\nchannels=4\nheight=1\nwidth=1\n[train]\nlr=0.1\nmomentum=0.9\n"
                              "[dense]\noutputs=8\n[prelu]\n[dense]\noutputs=2\n[softmax_ce]\n",
                              "prelu-net", &net));
    CHECK_OK(bn_net_setup(net, N, NULL, 0, 3));
    bn_rng r;
    bn_rng_seed(&r, 5, 1);
    float x[4 * N], y[N];
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < 4; k++) x[4 * i + k] = (float)bn_rng_normal(&r);
        y[i] = x[4 * i] + x[4 * i + 1] > x[4 * i + 2] + x[4 * i + 3] ? 1.0f : 0.0f;
    }
    CHECK_OK(lt_write(net->input, x, 4 * N));
    CHECK_OK(lt_write(net->labels, y, N));
    bn_optimizer *opt;
    CHECK_OK(bn_optimizer_create(net, &net->train, &opt));
    double first = 0, loss = 0, correct = 0;
    for (int s = 0; s < STEPS; s++) {
        CHECK_OK(bn_net_zero_grad(net));
        CHECK_OK(bn_net_forward(net, 1));
        CHECK_OK(bn_net_backward(net));
        CHECK_OK(bn_optimizer_step(opt, net));
        CHECK_OK(bn_net_metrics(net, &loss, &correct));
        if (s == 0) first = loss / N;
    }
    CHECK_OK(bn_net_forward(net, 0));
    CHECK_OK(bn_net_metrics(net, &loss, &correct));
    float slopes[8];
    CHECK_OK(lt_read(net->layers[1]->params[0].value, slopes, 8));
    int moved = 0;
    for (int k = 0; k < 8; k++) moved += fabsf(slopes[k] - 0.25f) > 1e-3f;
    printf("    prelu net: loss %.3f -> %.3f, %.0f/%d correct, %d of 8 slopes moved\n", first, loss / N, correct, N,
           moved);
    CHECK_MSG(loss / N < 0.25 * first, "loss %.4f from %.4f", loss / N, first);
    CHECK(correct >= N - 2);
    CHECK(moved >= 4);
    bn_optimizer_free(opt);
    bn_net_free(net);
    return BN_PASS;
}

/* ---- the command line ---- */

BN_TEST(plugin_cli_loads_and_reports_errors)
{
    char args[1400];
    snprintf(args, sizeof args, "summary models/lenet_prelu.cfg --plugin %s", prelu_path());
    CHECK_CLI(args, 0, "total: 8 layers, 431580 parameters");
    CHECK(strstr(out, "prelu1           prelu          500x   1x1              500") != NULL);
    CHECK_CLI("summary models/lenet_prelu.cfg", 2, "lenet_prelu.cfg:52: unknown section [prelu]");
    CHECK(strstr(out, ", batchnorm; a layer type from a plugin needs --plugin FILE\n") != NULL);
    CHECK_CLI("summary models/lenet_prelu.cfg --plugin", 2, "option --plugin needs a value");
    CHECK_CLI("summary models/lenet.cfg --plugins x.so", 2, "summary: unknown option");
    CHECK_CLI("train models/lenet.cfg --plugin /nonexistent/x.so", 2,
              "blobnet: error: plugin /nonexistent/x.so: cannot load: /nonexistent/x.so: cannot open shared");
    CHECK_MSG(strchr(out, '\n') == out + strlen(out) - 1, "more than one line: %s", out);
    CHECK_CLI("test models/lenet.cfg w.safetensors --plugin /nonexistent/x.so", 2, "plugin /nonexistent/x.so");
    snprintf(args, sizeof args, "check-layer prelu --plugin %s --plugin %s --device cpu --input 2,3,3", prelu_path(),
             prelu_path());
    CHECK_CLI(args, 0, "6 passed, 0 failed, 2 skipped");
    CHECK(strstr(out, "shapes           pass    2x3x3 -> 2x3x3 at batch 1 and 3; slope 2x1x1x1") != NULL);
    CHECK_CLI("check-layer prelu --device cpu", 2, "unknown layer type 'prelu'");
    return BN_PASS;
}

/* help and time take --plugin like the other commands. */
BN_TEST(plugin_cli_help_and_time)
{
    char args[1400];
    snprintf(args, sizeof args, "help prelu --plugin %s", prelu_path());
    CHECK_CLI(args, 0, "[prelu] x for x > 0, slope[c] * x otherwise, a learnable slope per channel\n"
                       "  keys: init_slope (0.25, in [0, 1])\n");
    snprintf(args, sizeof args, "help --plugin %s", prelu_path());
    CHECK_CLI(args, 0, "layer types (model-file sections):");
    CHECK(strstr(out, " prelu\n") != NULL);
    CHECK_CLI("help prelu", 2, "'prelu' is neither a command nor a layer type");
    CHECK_CLI("help prelu --plugin /nonexistent/x.so", 2, "blobnet: error: plugin /nonexistent/x.so: cannot load");
    snprintf(args, sizeof args, "time models/lenet_prelu.cfg --plugin %s --device cpu --batch 2 --iters 1",
             prelu_path());
    CHECK_CLI(args, 0, "\nprelu1           prelu ");
    CHECK_CLI("time models/lenet_prelu.cfg --device cpu --batch 2 --iters 1", 2, "unknown section [prelu]");
    return BN_PASS;
}

/* A plugin layer whose backward is wrong: check-layer prints FAIL for the gradient and exits 1. */
BN_TEST(plugin_cli_check_layer_fails_a_wrong_backward)
{
    char path[600];
    /* d(x^2)/dx is 2x, not x */
    CHECK_OK(build_square("square_wrong", "1.0f", path, sizeof path));
    char args[1400];
    snprintf(args, sizeof args, "check-layer square_wrong --plugin %s --device cpu", path);
    CHECK_CLI(args, 1, "gradient         FAIL    gradient check failed at input[");
    CHECK(strstr(out, "writes           pass") != NULL);
    CHECK(strstr(out, "4 passed, 1 failed, 3 skipped\n") != NULL);
    CHECK(strstr(out, "blobnet: error: check-layer square_wrong: 1 of 5 checks failed: gradient\n") != NULL);
    return BN_PASS;
}

/* 5,000 images (79 steps) of LeNet with a PReLU reach about 93%, as the ReLU LeNet does. */
BN_TEST(plugin_cli_trains_lenet_prelu)
{
    if (!bn_test_data_dir()) BN_SKIP_TEST("BLOBNET_TEST_DATA not set");
    char args[1400];
    snprintf(args, sizeof args, "train models/lenet_prelu.cfg --plugin %s --device cpu --data %s --epochs 1 "
             "--train-limit 5000", prelu_path(), bn_test_data_dir());
    CHECK_CLI(args, 0, "final test accuracy: ");
    CHECK(strstr(out, "431580 parameters") != NULL);
    double acc = atof(strstr(out, "final test accuracy: ") + strlen("final test accuracy: "));
    printf("    lenet_prelu, 5000 images, 1 epoch: %.2f%% test accuracy\n", acc);
    CHECK_MSG(acc >= 90.0, "accuracy %.2f%% below 90%%", acc);
    return BN_PASS;
}

/* A layer whose input gradient is 5% off past the 1,000th element: the small shape (945
 * elements) cannot see it, the realistic one does, and the error says which shape failed. */
BN_TEST(plugin_cli_all_shapes_names_the_failing_shape)
{
    char path[600];
    CHECK_OK(build_square("square_large", "(i < 1000 ? 2.0f : 2.1f)", path, sizeof path));
    char args[1400];
    snprintf(args, sizeof args, "check-layer square_large --plugin %s --device cpu", path);
    CHECK_CLI(args, 0, "5 passed, 0 failed, 3 skipped\n");
    snprintf(args, sizeof args, "check-layer square_large --plugin %s --device cpu --all-shapes", path);
    CHECK_CLI(args, 1, "realistic shape: check-layer square_large: input 20x13x11, batch 10");
    CHECK(strstr(out, "small shape: check-layer square_large: input 5x7x9, batch 3") != NULL);
    CHECK(strstr(out, "all shapes: 9 passed, 1 failed, 6 skipped\n") != NULL);
    CHECK_MSG(strstr(out, "blobnet: error: check-layer square_large: 1 of 10 checks failed: gradient at the realistic "
                          "shape (20x13x11, batch 10)\n") != NULL, "%s", out);
    snprintf(args, sizeof args, "check-layer square_large --plugin %s --all-shapes --batch 4", path);
    CHECK_CLI(args, 2, "--all-shapes picks the shapes and batches; leave out --batch");
    return BN_PASS;
}

/* A plugin of type "upsample" repeating each input element in a 2x2 block, whose backward walks
 * the output gradient's rows `step` apart ("2 * w" is right), built as NAME.so. */
static bn_status build_upsample(const char *name, const char *step, char *path, size_t cap)
{
    char source[2048];
    snprintf(source, sizeof source,
             "#include \"blobnet.h\"\n"
             "static bn_status setup(bn_layer *l, bn_shape in, bn_shape *out)\n"
             "{ (void)l; *out = (bn_shape){in.c, 2 * in.h, 2 * in.w}; return BN_OK; }\n"
             "static bn_status fwd(bn_layer *l, const bn_pass *p)\n"
             "{ (void)p; BN_HOST_RD(x, l->in); BN_HOST_WR(y, l->out);\n"
             "  size_t h = (size_t)l->in->h, w = (size_t)l->in->w, planes = (size_t)l->in->n * l->in->c;\n"
             "  for (size_t q = 0; q < planes; q++) for (size_t i = 0; i < 2 * h; i++) for (size_t j = 0; j < 2 * w; j++)\n"
             "    y[(q * 2 * h + i) * 2 * w + j] = x[(q * h + i / 2) * w + j / 2];\n"
             "  return BN_OK; }\n"
             "static bn_status bwd(bn_layer *l, const bn_pass *p)\n"
             "{ (void)p; if (!l->in_grad) return BN_OK;\n"
             "  BN_HOST_RD(dy, l->out_grad); BN_HOST_WR(dx, l->in_grad);\n"
             "  size_t h = (size_t)l->in->h, w = (size_t)l->in->w, planes = (size_t)l->in->n * l->in->c;\n"
             "  for (size_t q = 0; q < planes; q++) for (size_t i = 0; i < h; i++) for (size_t j = 0; j < w; j++) {\n"
             "    const float *d = dy + q * 4 * h * w + 2 * i * (%s) + 2 * j;\n"
             "    dx[(q * h + i) * w + j] = d[0] + d[1] + d[%s] + d[(%s) + 1]; }\n"
             "  return BN_OK; }\n"
             "static const bn_layer_ops ops = {.type = \"upsample\", .setup = setup,\n"
             "                                 .forward_cpu = fwd, .backward_cpu = bwd};\n"
             "bn_status blobnet_plugin_register(void) { return bn_register_layer(&ops); }\n",
             step, step, step);
    return build_plugin(name, source, path, cap);
}

/* An upsample whose backward steps through the output gradient by the height where it means the
 * width. The kit's old shapes were square (3x8x8 at batch 3, 20x12x12 at batch 16), where the
 * two are the same: it passed all 10 checks there, as it still passes at 3x8x8. The shapes now
 * have a height unlike their width, and the gradient check fails at each of them. */
BN_TEST(plugin_cli_kit_catches_height_for_width)
{
    char good[600], bad[600], args[1400];
    CHECK_OK(build_upsample("upsample_good", "2 * w", good, sizeof good));
    CHECK_OK(build_upsample("upsample_hw", "2 * h", bad, sizeof bad));
    snprintf(args, sizeof args, "check-layer upsample --plugin %s --device cpu --all-shapes", good);
    CHECK_CLI(args, 0, "all shapes: 10 passed, 0 failed, 6 skipped\n");
    snprintf(args, sizeof args, "check-layer upsample --plugin %s --device cpu --input 3,8,8", bad);
    CHECK_CLI(args, 0, "5 passed, 0 failed, 3 skipped\n");
    snprintf(args, sizeof args, "check-layer upsample --plugin %s --device cpu", bad);
    CHECK_CLI(args, 1, "blobnet: error: check-layer upsample: 1 of 5 checks failed: gradient\n");
    CHECK(strstr(out, "gradient         FAIL    gradient check failed at input[") != NULL);
    snprintf(args, sizeof args, "check-layer upsample --plugin %s --device cpu --all-shapes", bad);
    CHECK_CLI(args, 1, "blobnet: error: check-layer upsample: 2 of 10 checks failed: gradient at the small shape "
              "(5x7x9, batch 3); gradient at the realistic shape (20x13x11, batch 10)\n");
    return BN_PASS;
}

/* ---- batch RMS normalization, the example with a buffer ---- */

BN_TEST(plugin_batchrms_passes_the_kit_at_all_shapes)
{
    char args[1400];
    snprintf(args, sizeof args, "check-layer batchrms --plugin %s --device cpu --all-shapes", example_path("batchrms"));
    CHECK_CLI(args, 0, "all shapes: 12 passed, 0 failed, 4 skipped\n");
    CHECK(strstr(out, "evaluation       pass    writes all 28600 outputs, repeats bit for bit, leaves the buffers, "
                      "examples independent; buffers moved by training, settled after") != NULL);
    return BN_PASS;
}

BN_TEST(plugin_batchrms_passes_the_kit_on_gpu)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    CHECK_OK(bn_plugin_load(example_path("batchrms")));
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    for (int k = 0; k < BN_LAYERCHECK_SHAPES; k++) {
        bn_layercheck_opts o = bn_layercheck_defaults();
        o.type = "batchrms";
        o.input = bn_layercheck_shapes[k].input;
        o.batch = bn_layercheck_shapes[k].batch;
        o.ctx = ctx;
        bn_layercheck_report r;
        CHECK_OK(bn_layercheck_run(&o, &r));
        for (int i = 0; i < BN_CHECK_COUNT; i++)
            CHECK_MSG(r.checks[i].outcome == BN_CHECK_PASS, "%s shape, %s: %s %s", bn_layercheck_shapes[k].name,
                      r.checks[i].name, bn_check_outcome_name(r.checks[i].outcome), r.checks[i].detail);
        CHECK_MSG(strstr(r.checks[BN_CHECK_EVALUATION].detail, "alike on cpu and gpu") &&
                  strstr(r.checks[BN_CHECK_EVALUATION].detail, "; gpu writes all, repeats, agrees within"),
                  "%s", r.checks[BN_CHECK_EVALUATION].detail);
    }
    return BN_PASS;
}

/* A copy of layers/examples/batchrms.c with `find` replaced by `replace`, built as NAME.so. */
static bn_status plant(const char *name, const char *find, const char *replace, char *path, size_t cap)
{
    static char source[1 << 15], patched[1 << 15];
    FILE *f = fopen("layers/examples/batchrms.c", "r");
    if (!f) return bn_error(BN_ERR_IO, "cannot read layers/examples/batchrms.c");
    size_t n = fread(source, 1, sizeof source - 1, f);
    fclose(f);
    source[n] = '\0';
    const char *at = strstr(source, find);
    if (!at) return bn_error(BN_ERR_USAGE, "'%s' is not in layers/examples/batchrms.c", find);
    snprintf(patched, sizeof patched, "%.*s%s%s", (int)(at - source), source, replace, at + strlen(find));
    return build_plugin(name, patched, path, cap);
}

/* The evaluation-mode bugs of a normalization layer, each planted in a copy of the example,
 * on its CPU path: every other check passes, the evaluation check names the bug. */
BN_TEST(plugin_check_layer_catches_evaluation_bugs)
{
    static const struct {
        const char *name, *find, *replace, *message;
    } bugs[] = {
        {"eval_no_sqrt", "float scale = (float)(1.0 / sqrt(ms + b->eps));",
         "float scale = (float)(p->train ? 1.0 / sqrt(ms + b->eps) : 1.0 / (ms + b->eps));",
         "evaluation does not compute what the running statistics say"},
        {"never_updated", "running[c] = (float)((1.0 - b->momentum) * running[c] + b->momentum * ms);", "",
         "a training pass left every buffer as it was: running statistics are never updated"},
        {"eval_batch_stats", "double ms = running[c];\n        if (p->train) {", "double ms = running[c];\n        {",
         "the evaluation pass changed running_ms[0]"},
        {"eval_skips_rows", "EACH_ROW(b, n, c, row) for (int k = 0; k < b->plane; k++) y[row + k]",
         "EACH_ROW(b, p->train ? n : 1, c, row) for (int k = 0; k < b->plane; k++) y[row + k]",
         "the evaluation pass left 630 of 945 outputs NaN or infinite"},
    };
    for (size_t i = 0; i < sizeof bugs / sizeof bugs[0]; i++) {
        char path[600], args[1400];
        CHECK_OK(plant(bugs[i].name, bugs[i].find, bugs[i].replace, path, sizeof path));
        snprintf(args, sizeof args, "check-layer batchrms --plugin %s --device cpu", path);
        CHECK_CLI(args, 1, "5 passed, 1 failed, 2 skipped\n");
        CHECK_MSG(strstr(out, "evaluation       FAIL    ") && strstr(out, bugs[i].message), "%s: %s", bugs[i].name, out);
        CHECK_MSG(strstr(out, "1 of 6 checks failed: evaluation\n"), "%s: %s", bugs[i].name, out);
    }
    return BN_PASS;
}
