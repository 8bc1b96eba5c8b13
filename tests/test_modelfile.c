/* Model-file parsing: every error kind names file:line and the problem. */
#include "core/lr_policies/lr_policies.h"
#include "core/net.h"
#include "core/optimizers/optimizers.h"
#include "testing.h"

#define INPUT "[input]\nchannels = 1\nheight = 8\nwidth = 8\n"

static bn_status build(const char *text)
{
    bn_net *net = NULL;
    bn_status s = bn_net_from_text(text, "m.cfg", &net);
    if (s == BN_OK) s = bn_net_setup(net, 2, NULL, 0, 1);
    bn_net_free(net);
    return s;
}

BN_TEST(modelfile_accepts_comments_and_spacing)
{
    bn_net *net;
    CHECK_OK(bn_net_from_text("# a comment\n" INPUT "  [ dense ]  \n outputs=3 ; trailing\n\n", "m.cfg", &net));
    CHECK(net->num_layers == 1);
    CHECK(strcmp(net->layers[0]->name, "dense1") == 0);
    CHECK(net->input_shape.c == 1 && net->input_shape.h == 8 && net->input_shape.w == 8);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(modelfile_syntax_errors_name_the_line)
{
    CHECK_ERR(build("outputs = 3\n" INPUT), BN_ERR_USAGE, "m.cfg:1: key 'outputs' appears before any [section]");
    CHECK_ERR(build(INPUT "[dense\n"), BN_ERR_USAGE, "m.cfg:5: section header");
    CHECK_ERR(build(INPUT "[dense]\noutputs\n"), BN_ERR_USAGE, "m.cfg:6: expected 'key = value'");
    CHECK_ERR(build(INPUT "[dense]\noutputs =\n"), BN_ERR_USAGE, "m.cfg:6: key 'outputs' has no value");
    CHECK_ERR(build(INPUT "[dense]\nout puts = 3\n"), BN_ERR_USAGE, "m.cfg:6: 'out puts' is not a valid key");
    CHECK_ERR(build(INPUT "[de nse]\n"), BN_ERR_USAGE, "not a valid section name");
    return BN_PASS;
}

BN_TEST(modelfile_semantic_errors_name_the_line)
{
    CHECK_ERR(build(INPUT "[convolution]\n"), BN_ERR_USAGE, "m.cfg:5: unknown section [convolution]; layer types are: dense");
    CHECK_ERR(build(INPUT "[swish]\n"), BN_ERR_USAGE, "; a layer type from a plugin needs --plugin FILE");
    CHECK_ERR(build(INPUT "[dense]\noutputs = 3\ncolour = red\n"), BN_ERR_USAGE, "m.cfg:7: [dense] unknown key 'colour'");
    CHECK_ERR(build(INPUT "[dense]\n"), BN_ERR_USAGE, "m.cfg:5: [dense] missing required key 'outputs'");
    CHECK_ERR(build(INPUT "[dense]\noutputs = ten\n"), BN_ERR_USAGE, "m.cfg:6: [dense] outputs = 'ten' is not an integer");
    CHECK_ERR(build(INPUT "[dense]\noutputs = 0\n"), BN_ERR_USAGE, "outputs = 0 is out of range");
    CHECK_ERR(build(INPUT "[dense]\noutputs = -4\n"), BN_ERR_USAGE, "out of range");
    CHECK_ERR(build(INPUT "[dense]\noutputs = 99999999999999999999\n"), BN_ERR_USAGE, "not an integer");
    CHECK_ERR(build(INPUT "[train]\nlr = fast\n[dense]\noutputs=2\n"), BN_ERR_USAGE, "m.cfg:6: [train] lr = 'fast' is not a finite number");
    CHECK_ERR(build(INPUT "[train]\nlr = nan\n[dense]\noutputs=2\n"), BN_ERR_USAGE, "not a finite number");
    CHECK_ERR(build(INPUT "[train]\nlr = 1e-400\n[dense]\noutputs=2\n"), BN_ERR_USAGE,
              "m.cfg:6: [train] lr = '1e-400' is too small to hold (it underflows to 0)");
    CHECK_ERR(build(INPUT "[train]\nlr = 1e400\n[dense]\noutputs=2\n"), BN_ERR_USAGE,
              "m.cfg:6: [train] lr = '1e400' is too large to hold (it overflows to infinity)");
    CHECK_ERR(build(INPUT "[train]\nlr = -1e400\n[dense]\noutputs=2\n"), BN_ERR_USAGE,
              "is too large to hold (it overflows to -infinity)");
    CHECK_ERR(build(INPUT "[train]\nlr_policy = warp\n[dense]\noutputs=2\n"), BN_ERR_USAGE, "is not one of: fixed, step, inv, cosine");
    CHECK_ERR(build(INPUT "[train]\nbatchsize = 3\n[dense]\noutputs=2\n"), BN_ERR_USAGE, "m.cfg:6: [train] unknown key 'batchsize'");
    CHECK_ERR(build(INPUT "[train]\noptimizer = lion\n[dense]\noutputs=2\n"), BN_ERR_USAGE, "m.cfg:6: [train] optimizer = 'lion' is not one of: sgd, adam, adamw");
    CHECK_ERR(build(INPUT "[train]\noptimizer = adam\nbeta1 = 1\n[dense]\noutputs=2\n"), BN_ERR_USAGE, "m.cfg:7: [train] beta1 = 1 is out of range [0, 1)");
    CHECK_ERR(build(INPUT "[train]\noptimizer = adam\nbeta2 = 1.5\n[dense]\noutputs=2\n"), BN_ERR_USAGE, "m.cfg:7: [train] beta2 = 1.5 is out of range [0, 1]");
    CHECK_ERR(build(INPUT "[train]\nwarmup = -3\n[dense]\noutputs=2\n"), BN_ERR_USAGE, "m.cfg:6: [train] warmup = -3 is out of range");
    CHECK_ERR(build(INPUT "[train]\nlr_policy = onecycle\npct_start = 2\n[dense]\noutputs=2\n"), BN_ERR_USAGE, "m.cfg:7: [train] pct_start = 2 is out of range");
    CHECK_ERR(build(INPUT "[train]\nlr_policy = onecycle\ndiv_factor = 0\n[dense]\noutputs=2\n"), BN_ERR_USAGE, "m.cfg:7: [train] div_factor = 0 is out of range");
    return BN_PASS;
}

/* The optimizer's and the schedules' keys, and their defaults when absent. */
BN_TEST(modelfile_train_section_reads_optimizer_and_schedule_keys)
{
    bn_net *net;
    CHECK_OK(bn_net_from_text(INPUT "[train]\noptimizer = adamw\nbeta1 = 0.8\nbeta2 = 0.99\neps = 1e-6\n"
                              "lr_policy = onecycle\npct_start = 0.25\ndiv_factor = 10\nfinal_div_factor = 100\n"
                              "warmup = 50\n[dense]\noutputs=2\n", "m.cfg", &net));
    const bn_train_config *c = &net->train;
    CHECK(c->optimizer == bn_optimizer_find("adamw") && bn_train_value_named(c, "beta1") == 0.8);
    CHECK(bn_train_value_named(c, "beta2") == 0.99 && bn_train_value_named(c, "eps") == 1e-6);
    CHECK(c->lr_policy == bn_lr_policy_find("onecycle") && bn_train_value_named(c, "pct_start") == 0.25);
    CHECK(bn_train_value_named(c, "div_factor") == 10 && bn_train_value_named(c, "final_div_factor") == 100);
    CHECK(c->warmup == 50);
    bn_net_free(net);
    CHECK_OK(bn_net_from_text(INPUT "[dense]\noutputs=2\n", "m.cfg", &net));
    c = &net->train;
    CHECK(c->optimizer == bn_optimizer_find("sgd") && bn_train_value_named(c, "beta1") == 0.9);
    CHECK(bn_train_value_named(c, "beta2") == 0.999 && bn_train_value_named(c, "eps") == 1e-8 && c->warmup == 0);
    CHECK(bn_train_value_named(c, "pct_start") == 0.3 && bn_train_value_named(c, "div_factor") == 25);
    CHECK(bn_train_value_named(c, "final_div_factor") == 1e4);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(modelfile_structure_errors)
{
    CHECK_ERR(build("[dense]\noutputs = 3\n"), BN_ERR_USAGE, "no [input] section");
    CHECK_ERR(build(INPUT), BN_ERR_USAGE, "m.cfg: no layers");
    CHECK_ERR(build(INPUT INPUT "[dense]\noutputs=1\n"), BN_ERR_USAGE, "m.cfg:5: second [input] section");
    CHECK_ERR(build("[input]\nchannels = 1\nheight = 0\nwidth = 8\n[dense]\noutputs=1\n"), BN_ERR_USAGE, "height = 0 is out of range");
    CHECK_ERR(build("[input]\nchannels = 1\nwidth = 8\n[dense]\noutputs=1\n"), BN_ERR_USAGE, "missing required key 'height'");
    CHECK_ERR(build(INPUT "[softmax_ce]\n[dense]\noutputs=2\n"), BN_ERR_USAGE, "loss layer softmax_ce1 must be the last layer");
    CHECK_ERR(build(INPUT "[dense]\nname = a\noutputs=2\n[relu]\nname = a\n"), BN_ERR_USAGE, "layer name 'a' is used twice");
    CHECK_ERR(build(INPUT "[dense]\nname = a/b\noutputs=2\n"), BN_ERR_USAGE, "without spaces");
    return BN_PASS;
}

BN_TEST(modelfile_shape_errors_name_the_layer)
{
    CHECK_ERR(build(INPUT "[conv2d]\nname = big\nfilters = 2\nsize = 9\n"), BN_ERR_USAGE, "layer big (conv2d)");
    CHECK_ERR(build(INPUT "[maxpool]\nsize = 2\npad = 2\n"), BN_ERR_USAGE, "maxpool");
    return BN_PASS;
}

BN_TEST(modelfile_missing_file_is_reported)
{
    bn_net *net = NULL;
    CHECK_ERR(bn_net_from_file("/nonexistent/model.cfg", &net), BN_ERR_USAGE, "/nonexistent/model.cfg: cannot open");
    CHECK(net == NULL);
    return BN_PASS;
}

BN_TEST(modelfile_inline_options_take_list_values)
{
    bn_options o = {0};
    CHECK_OK(bn_options_parse_inline(&o, "coeff=1,-2,0.5 outputs=3,seed=4"));
    CHECK_MSG(o.count == 3, "%d pairs", o.count);
    CHECK(strcmp(o.items[0].key, "coeff") == 0 && strcmp(o.items[0].value, "1,-2,0.5") == 0);
    CHECK(strcmp(o.items[1].value, "3") == 0 && strcmp(o.items[2].key, "seed") == 0);
    bn_options_clear(&o);
    /* A piece after a space is a pair of its own, and must have '='. */
    CHECK_ERR(bn_options_parse_inline(&o, "coeff=1 -2"), BN_ERR_USAGE, "option '-2' is not of the form key=value");
    bn_options_clear(&o);
    return BN_PASS;
}

/* A key given twice in a section is an error naming both lines, whichever value would have
 * won; the same key in two sections is fine. In inline options, the option is named. */
BN_TEST(modelfile_key_given_twice_names_both_lines)
{
    CHECK_ERR(build(INPUT "[dense]\noutputs = 3\ninit = he\noutputs = 4\n"), BN_ERR_USAGE,
              "m.cfg:8: [dense] key 'outputs' is given twice: also at m.cfg:6");
    CHECK_ERR(build("[input]\nchannels = 1\nheight = 8\nheight = 8\nwidth = 8\n[dense]\noutputs=2\n"), BN_ERR_USAGE,
              "m.cfg:4: [input] key 'height' is given twice: also at m.cfg:3");
    CHECK_ERR(build(INPUT "[train]\nlr = 0.1\nlr = 0.2\n[dense]\noutputs=2\n"), BN_ERR_USAGE,
              "m.cfg:7: [train] key 'lr' is given twice: also at m.cfg:6");
    CHECK_OK(build(INPUT "[dense]\noutputs = 3\n[dense]\noutputs = 3\n"));
    bn_options o = {0};
    CHECK_ERR(bn_options_parse_inline(&o, "rate=0.1 rate=0.2"), BN_ERR_USAGE, "option 'rate' is given twice");
    bn_options_clear(&o);
    return BN_PASS;
}

/* A UTF-8 byte-order mark (as Windows editors write) is not part of the first line; elsewhere
 * those bytes are still an error. */
BN_TEST(modelfile_accepts_a_utf8_byte_order_mark)
{
    bn_net *net;
    CHECK_OK(bn_net_from_text("\xEF\xBB\xBF" INPUT "[dense]\noutputs = 3\n", "m.cfg", &net));
    CHECK(net->num_layers == 1 && net->input_shape.h == 8);
    bn_net_free(net);
    CHECK_OK(bn_net_from_text("\xEF\xBB\xBF# a comment first\n" INPUT "[dense]\noutputs = 3\n", "m.cfg", &net));
    bn_net_free(net);
    CHECK_ERR(build(INPUT "\xEF\xBB\xBF[dense]\noutputs = 3\n"), BN_ERR_USAGE, "m.cfg:5: expected 'key = value'");
    return BN_PASS;
}

/* A binary file read as a model file: the message quotes at most 60 bytes of the line. */
BN_TEST(modelfile_error_quotes_a_long_line_cut_short)
{
    char text[600] = INPUT;
    size_t len = strlen(text);
    memset(text + len, 'x', 400);
    text[len + 400] = '\0';
    CHECK_ERR(build(text), BN_ERR_USAGE, "m.cfg:5: expected 'key = value' or '[section]', got 'xxxxxxxxxx");
    char want[80];
    snprintf(want, sizeof want, "got '%.*s...'", 60, text + len);
    CHECK_MSG(strstr(bn_last_error(), want), "%s", bn_last_error());
    return BN_PASS;
}
