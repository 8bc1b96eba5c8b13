/* test_checkpoint.c - safetensors checkpoints: bit-exact round trips of weights, optimizer
 * state (SGD's momentum, Adam's moments) and training state; the file read back as plain
 * safetensors; a checkpoint follows the model's layers, not its text; files of the first format
 * still load. Saves that fail: test_checkpoint_save.c; files the loader refuses:
 * test_checkpoint_bad_input.c. */
#include "testing.h"

#include <float.h>
#include <stdint.h>
#include <stdlib.h>

#include "checkpoint_testing.h"
#include "core/device.h"
#include "core/status.h"
#include "io/json.h"

/* ---- round trips ---- */

BN_TEST(checkpoint_round_trip_is_bit_exact)
{
    ck_fixture f;
    char path[512];
    CHECK(ck_saved_fixture(&f, path, sizeof path, "round.safetensors") == BN_PASS);
    float *w = ck_copy_floats(f.net->params), *m = ck_copy_floats(f.opt->state[0]);
    CHECK(w && m);

    ck_fill(f.net->params, 9.0f);
    ck_fill(f.opt->state[0], 5.0f);
    f.opt->iter = 0;
    CHECK(!ck_same_floats(f.net->params, w) && !ck_same_floats(f.opt->state[0], m));
    bn_train_state st = {0};
    CHECK_OK(bn_checkpoint_load(path, f.net, f.opt, &st));
    CHECK(ck_same_floats(f.net->params, w));
    CHECK(ck_same_floats(f.opt->state[0], m));
    CHECK(f.opt->iter == 4321);
    CHECK(ck_same_state(&st, &f.st));
    CHECK(st.seed == 2147483647 && st.epoch_loss_sum == 0.1 + 0.2 && st.examples == 640);
    const float *p = bn_blob_host_rd(f.net->params);
    CHECK(signbit(p[1]) && p[1] == 0.0f && p[2] == 1e-40f && p[3] == FLT_MAX);

    /* A fresh net of the same model (other initial values) takes the file too. */
    ck_fixture g;
    CHECK(ck_make_fixture(&g, CK_MODEL, -3.0f) == BN_PASS);
    CHECK_OK(bn_checkpoint_load(path, g.net, g.opt, NULL));
    CHECK(ck_same_floats(g.net->params, w) && ck_same_floats(g.opt->state[0], m) && g.opt->iter == 4321);
    ck_fill(g.net->params, 2.0f);
    CHECK_OK(bn_checkpoint_load_weights(path, g.net));
    CHECK(ck_same_floats(g.net->params, w));

    /* Saving again over the old file replaces it. */
    CHECK_OK(bn_checkpoint_save(path, g.net, NULL, NULL));
    CHECK_OK(bn_checkpoint_load(path, f.net, NULL, &st));
    CHECK(st.epoch == 0 && st.step == 0 && st.seed == 0);
    free(w);
    free(m);
    ck_free_fixture(&f);
    ck_free_fixture(&g);
    return BN_PASS;
}

BN_TEST(checkpoint_file_is_plain_safetensors)
{
    ck_fixture f;
    char path[512];
    CHECK(ck_saved_fixture(&f, path, sizeof path, "plain.safetensors") == BN_PASS);
    ck_file_parts p;
    CHECK(ck_read_parts(path, &p) == 0);
    CHECK((8 + p.header_len) % 8 == 0);
    CHECK(p.data_len == 2 * CK_WEIGHT_BYTES);
    bn_json *h;
    CHECK_OK(bn_json_parse(p.header, p.header_len, &h));
    CHECK(h->type == BN_JSON_OBJECT && h->count == 1 + 2 * 4);

    const bn_json *meta = bn_json_get(h, "__metadata__");
    const char *want[][2] = {
        {"format", "blobnet"}, {"version", "2"},
        {"model", "input 1x6x6 mean=0 std=1\nconv2d1 conv2d <- input: filters=2 size=3\n"
                  "dense1 dense <- conv2d1: outputs=3\nsoftmax_ce1 softmax_ce <- dense1\n"},
        {"model_file", "ckpt_test.cfg"},
        {"settings", "batch=64 epochs=10 optimizer=sgd lr=0.01 momentum=0.9 weight_decay=0.0005 beta1=0.9 "
                     "beta2=0.999 eps=1e-08 lr_policy=fixed gamma=0.0001 power=0.75 stepsize=10000 lr_min=0 "
                     "pct_start=0.3 div_factor=25 final_div_factor=10000 warmup=0 bias_lr_mult=1 shift=0 flip=0 "
                     "pad=zero cutout=0"},
        {"seed", "2147483647"}, {"epoch", "3"}, {"batch_in_epoch", "17"}, {"step", "4321"}, {"iter", "4321"},
        {"epoch_loss_sum", "0.30000000000000004"}, {"epoch_correct", "33"}, {"epoch_seen", "99"},
        {"examples", "640"}, {"has_momentum", "1"}};
    CHECK(meta && meta->count == sizeof want / sizeof want[0]);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const bn_json *v = bn_json_get(meta, want[i][0]);
        CHECK_MSG(v && v->type == BN_JSON_STRING && strcmp(v->text, want[i][1]) == 0, "%s is %s", want[i][0],
                  v ? v->text : "missing");
    }

    /* Shapes by the rule in checkpoint.c; offsets contiguous, weights then momentum. */
    const struct {
        const char *name;
        const char *shape;
        uint64_t begin, end;
    } tensors[] = {{"conv2d1.weight", "2,1,3,3", 0, 72},  {"conv2d1.bias", "2", 72, 80},
                   {"dense1.weight", "3,32", 80, 464},     {"dense1.bias", "3", 464, 476},
                   {"momentum.conv2d1.weight", "2,1,3,3", 476, 548},
                   {"momentum.dense1.bias", "3", 940, 952}};
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++) {
        const bn_json *t = bn_json_get(h, tensors[i].name);
        CHECK_MSG(t, "%s missing", tensors[i].name);
        CHECK(strcmp(bn_json_get(t, "dtype")->text, "F32") == 0);
        const bn_json *shape = bn_json_get(t, "shape"), *off = bn_json_get(t, "data_offsets");
        char got[64] = "";
        for (size_t k = 0; k < shape->count; k++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s", k ? "," : "", shape->items[k]->text);
        CHECK_MSG(strcmp(got, tensors[i].shape) == 0, "%s has shape %s", tensors[i].name, got);
        uint64_t b, e;
        CHECK(off->count == 2 && bn_json_u64(off->items[0], &b) && bn_json_u64(off->items[1], &e));
        CHECK_MSG(b == tensors[i].begin && e == tensors[i].end, "%s at [%llu,%llu]", tensors[i].name,
                  (unsigned long long)b, (unsigned long long)e);
    }
    /* The data are the slabs as little-endian float32, whatever this host's byte order. */
    const float *w = bn_blob_host_rd(f.net->params), *m = bn_blob_host_rd(f.opt->state[0]);
    for (size_t i = 0; i < CK_NUM_PARAMS; i++) {
        uint32_t uw = 0, um = 0, bw, bm;
        for (int k = 3; k >= 0; k--) {
            uw = uw << 8 | p.data[4 * i + (size_t)k];
            um = um << 8 | p.data[CK_WEIGHT_BYTES + 4 * i + (size_t)k];
        }
        memcpy(&bw, &w[i], 4);
        memcpy(&bm, &m[i], 4);
        CHECK_MSG(uw == bw && um == bm, "element %zu", i);
    }
    bn_json_free(h);
    ck_free_parts(&p);
    ck_free_fixture(&f);
    return BN_PASS;
}

BN_TEST(checkpoint_without_optimizer_holds_weights_only)
{
    ck_fixture f;
    char path[512];
    CHECK(ck_make_fixture(&f, CK_MODEL, 0.5f) == BN_PASS);
    CHECK_OK(bn_checkpoint_save(ck_tmp_path(path, sizeof path, "weights.safetensors"), f.net, NULL, NULL));
    ck_file_parts p;
    CHECK(ck_read_parts(path, &p) == 0);
    CHECK(p.data_len == CK_WEIGHT_BYTES);
    CHECK(strstr(p.header, "\"has_momentum\":\"0\"") && strstr(p.header, "\"iter\":\"0\""));
    CHECK(strstr(p.header, "\"epoch\":\"0\"") && !strstr(p.header, "momentum."));
    ck_free_parts(&p);

    CHECK(ck_load_fails(&f, path, BN_ERR_DATA, "holds no optimizer state (has_momentum is 0)") == BN_PASS);
    float *w = ck_copy_floats(f.net->params);
    ck_fill(f.net->params, 4.0f);
    bn_train_state st = f.st;
    CHECK_OK(bn_checkpoint_load(path, f.net, NULL, &st));
    CHECK(ck_same_floats(f.net->params, w));
    CHECK(st.seed == 0 && st.epoch == 0 && st.step == 0 && st.epoch_loss_sum == 0.0 && st.epoch_seen == 0);
    ck_fill(f.net->params, 4.0f);
    CHECK_OK(bn_checkpoint_load_weights(path, f.net));
    CHECK(ck_same_floats(f.net->params, w));
    free(w);
    ck_free_fixture(&f);
    return BN_PASS;
}

/* A model file may change in every way that leaves its layers alone: comments, [train] and
 * [augment], the order of keys, their spacing and the spelling of numbers. */
static const char *const SAME_LAYERS =
    "# the model of MODEL, written another way\n[train]\nepochs = 20\nlr = 0.5\n[input]\nwidth = 6\n"
    "height=6\nchannels = 1 ; a comment\nmean = 0.0\n[augment]\nshift = 1\n[conv2d]\nsize = 3\nfilters=2\n"
    "[dense]\n  outputs   =  3\n[softmax_ce]\n";

/* The description of CK_MODEL as the header writes it (newlines escaped). */
#define MODEL_TEXT "input 1x6x6 mean=0 std=1\\nconv2d1 conv2d <- input: filters=2 size=3\\n" \
                   "dense1 dense <- conv2d1: outputs=3\\nsoftmax_ce1 softmax_ce <- dense1\\n"

BN_TEST(checkpoint_follows_the_layers_not_the_text)
{
    ck_fixture f, g;
    char src[512], path[512];
    CHECK(ck_saved_fixture(&f, src, sizeof src, "layers.safetensors") == BN_PASS);
    float *w = ck_copy_floats(f.net->params), *m = ck_copy_floats(f.opt->state[0]);
    CHECK(w && m);
    CHECK(ck_make_fixture(&g, SAME_LAYERS, 1.0f) == BN_PASS);
    CHECK(g.net->text_hash != f.net->text_hash && strcmp(g.net->description, f.net->description) == 0);
    bn_train_state st;
    CHECK_OK(bn_checkpoint_load(src, g.net, g.opt, &st));
    CHECK(ck_same_floats(g.net->params, w) && ck_same_floats(g.opt->state[0], m) && ck_same_state(&st, &f.st));
    ck_fill(g.net->params, 3.0f);
    CHECK_OK(bn_checkpoint_load_weights(src, g.net));
    CHECK(ck_same_floats(g.net->params, w));
    ck_free_fixture(&g);

    /* What changes the computation is another model, named at the first line that differs. */
    static const struct {
        const char *model, *needle;
    } others[] = {
        {"[input]\nchannels=1\nheight=6\nwidth=6\nmean=0.5\n[conv2d]\nfilters=2\nsize=3\n[dense]\noutputs=3\n"
         "[softmax_ce]\n",
         "the checkpoint has `input 1x6x6 mean=0 std=1` where the model has `input 1x6x6 mean=0.5 std=1`"},
        {"[input]\nchannels=1\nheight=6\nwidth=6\n[conv2d]\nfilters=2\nsize=3\n[relu]\n[dense]\noutputs=3\n"
         "[softmax_ce]\n",
         "the checkpoint has `dense1 dense <- conv2d1: outputs=3` where the model has `relu1 relu <- conv2d1`"},
        {"[input]\nchannels=1\nheight=6\nwidth=6\n[conv2d]\nfilters=2\nsize=3\n[dense]\noutputs=3\ninit=he\n"
         "[softmax_ce]\n",
         "the checkpoint has `dense1 dense <- conv2d1: outputs=3` where the model has "
         "`dense1 dense <- conv2d1: init=he outputs=3`"},
    };
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        char needle[600];
        CHECK(ck_make_fixture(&g, others[i].model, 1.0f) == BN_PASS);
        snprintf(needle, sizeof needle, "%s was saved from a different model than ckpt_test.cfg: %s", src,
                 others[i].needle);
        CHECK_MSG(ck_load_fails(&g, src, BN_ERR_DATA, needle) == BN_PASS, "model %zu", i);
        CHECK_MSG(ck_load_weights_fails(&g, src, BN_ERR_DATA, needle) == BN_PASS, "model %zu", i);
        ck_free_fixture(&g);
    }

    /* Without its model a file resumes nothing; its weights load by names and shapes alone. */
    ck_tmp_path(path, sizeof path, "layers-none.safetensors");
    CHECK(ck_edit_header(src, path, ",\"model\":\"" MODEL_TEXT "\"", "") == 0);
    CHECK(ck_load_fails(&f, path, BN_ERR_DATA, "__metadata__ lacks \"model\"") == BN_PASS);
    ck_fill(f.net->params, 3.0f);
    CHECK_OK(bn_checkpoint_load_weights(path, f.net));
    CHECK(ck_same_floats(f.net->params, w));
    free(w);
    free(m);
    ck_free_fixture(&f);
    return BN_PASS;
}

/* The file src as the format before descriptions wrote it (version 1, the model file's text hash,
 * no settings, no training set size) at dst. */
static int to_format_1(const char *src, const char *dst, uint64_t text_hash)
{
    char hash[64];
    snprintf(hash, sizeof hash, "\"version\":\"1\",\"model_hash\":\"%016llx\"", (unsigned long long)text_hash);
    CHECK(ck_edit_header(src, dst, "\"version\":\"2\",\"model\":\"" MODEL_TEXT "\"", hash) == 0);
    ck_file_parts p;
    CHECK(ck_read_parts(dst, &p) == 0);
    char *from = strstr(p.header, ",\"settings\":\""), *to = from ? strstr(from, "\",\"seed\"") : NULL;
    char cut[1024];
    int ok = to && (size_t)(to + 2 - from) < sizeof cut;
    if (ok) snprintf(cut, sizeof cut, "%.*s", (int)(to + 1 - from), from);
    ck_free_parts(&p);
    CHECK(ok && ck_edit_header(dst, dst, cut, "") == 0);
    CHECK(ck_edit_header(dst, dst, ",\"examples\":\"640\"", "") == 0);
    return BN_PASS;
}

/* Files of format 1 recorded a hash of the model file's text: they load while it is the same,
 * and when it has changed, as long as the tensors' names and shapes match the model. */
BN_TEST(checkpoint_of_format_1_still_loads)
{
    ck_fixture f, g;
    char src[512], path[512];
    CHECK(ck_saved_fixture(&f, src, sizeof src, "old.safetensors") == BN_PASS);
    ck_tmp_path(path, sizeof path, "old-1.safetensors");
    CHECK(to_format_1(src, path, f.net->text_hash) == BN_PASS);
    ck_file_parts p;
    CHECK(ck_read_parts(path, &p) == 0);
    CHECK(strstr(p.header, "\"version\":\"1\"") && !strstr(p.header, "\"model\"") && !strstr(p.header, "settings"));
    ck_free_parts(&p);
    float *w = ck_copy_floats(f.net->params);
    bn_train_state want = f.st, st;
    want.examples = 0;
    ck_fill(f.net->params, 3.0f);
    CHECK_OK(bn_checkpoint_load(path, f.net, f.opt, &st));
    CHECK(ck_same_floats(f.net->params, w) && ck_same_state(&st, &want));

    CHECK(ck_make_fixture(&g, SAME_LAYERS, 1.0f) == BN_PASS);
    CHECK_OK(bn_checkpoint_load(path, g.net, g.opt, &st));
    CHECK(ck_same_floats(g.net->params, w));
    ck_fill(g.net->params, 3.0f);
    CHECK_OK(bn_checkpoint_load_weights(path, g.net));
    CHECK(ck_same_floats(g.net->params, w));
    ck_free_fixture(&g);
    bn_net *other;
    CHECK_OK(bn_net_from_text("[input]\nchannels=1\nheight=6\nwidth=6\n[conv2d]\nfilters=2\nsize=3\n[dense]\n"
                              "outputs=4\n[softmax_ce]\n", "other.cfg", &other));
    CHECK_OK(bn_net_setup(other, 2, NULL, 0, 7));
    CHECK_ERR(bn_checkpoint_load_weights(path, other), BN_ERR_DATA,
              "tensor dense1.weight has shape [3,32] but the model expects [4,32]");
    bn_net_free(other);

    CHECK(ck_edit_header(path, path, "\"model_hash\":\"", "\"model_hash\":\"z") == 0);
    CHECK(ck_load_fails(&f, path, BN_ERR_DATA, "metadata model_hash = \"z") == BN_PASS);
    CHECK(strstr(bn_last_error(), "is not 16 hex digits"));
    free(w);
    ck_free_fixture(&f);
    return BN_PASS;
}

BN_TEST(checkpoint_load_weights_reads_plain_safetensors)
{
    ck_fixture f;
    char src[512], path[512];
    CHECK(ck_saved_fixture(&f, src, sizeof src, "foreign.safetensors") == BN_PASS);
    ck_file_parts p;
    CHECK(ck_read_parts(src, &p) == 0);
    const char *start = strstr(p.header, "},\"conv2d1.weight\"");
    CHECK(start);
    char header[2048];
    snprintf(header, sizeof header, "{%s", start + 2); /* everything after the metadata */
    CHECK(ck_write_parts(ck_tmp_path(path, sizeof path, "foreign-plain.safetensors"), header, strlen(header), p.data,
                      p.data_len) == 0);
    ck_free_parts(&p);
    float *w = ck_copy_floats(f.net->params);
    ck_fill(f.net->params, -1.0f);
    CHECK_OK(bn_checkpoint_load_weights(path, f.net));
    CHECK(ck_same_floats(f.net->params, w));
    CHECK(ck_load_fails(&f, path, BN_ERR_DATA, "no __metadata__") == BN_PASS);
    free(w);
    ck_free_fixture(&f);
    return BN_PASS;
}

/* On the GPU path the newest values live on the device: save must read them from there and
 * load must leave the device seeing the file's values. */
BN_TEST(gpu_checkpoint_round_trip_syncs_device_copies)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    bn_net *net;
    CHECK_OK(bn_net_from_text(CK_MODEL, "ckpt_test.cfg", &net));
    CHECK_OK(bn_net_setup(net, 2, ctx, 0, 7));
    bn_optimizer *opt;
    CHECK_OK(bn_optimizer_create(net, &net->train, &opt));
    float w[CK_NUM_PARAMS], m[CK_NUM_PARAMS], back[CK_NUM_PARAMS];
    for (int i = 0; i < CK_NUM_PARAMS; i++) w[i] = 0.5f - 0.01f * (float)i, m[i] = 0.002f * (float)i;
    float *dw = bn_blob_dev_wr(net->params), *dm = bn_blob_dev_wr(opt->state[0]);
    CHECK(dw && dm);
    CHECK_OK(bn_device_h2d(dw, w, sizeof w));
    CHECK_OK(bn_device_h2d(dm, m, sizeof m));
    char path[512];
    CHECK_OK(bn_checkpoint_save(ck_tmp_path(path, sizeof path, "gpu.safetensors"), net, opt, NULL));

    CHECK_OK(bn_blob_zero(net->params)); /* on the device: the host copy goes stale */
    CHECK_OK(bn_blob_zero(opt->state[0]));
    CHECK(bn_blob_state(net->params) == BN_SYNC_DEVICE);
    CHECK_OK(bn_checkpoint_load(path, net, opt, NULL));
    CHECK_OK(bn_device_d2h(back, bn_blob_dev_rd(net->params), sizeof back));
    CHECK(memcmp(back, w, sizeof w) == 0);
    CHECK_OK(bn_device_d2h(back, bn_blob_dev_rd(opt->state[0]), sizeof back));
    CHECK(memcmp(back, m, sizeof m) == 0);
    bn_optimizer_free(opt);
    bn_net_free(net);
    return BN_PASS;
}

/* A layer may be named "momentum": its weights are not taken for optimizer state. */
BN_TEST(checkpoint_layer_named_momentum_round_trips)
{
    ck_fixture f;
    char path[512];
    CHECK(ck_make_fixture(&f, "[input]\nchannels=1\nheight=6\nwidth=6\n[conv2d]\nfilters=2\nsize=3\n[dense]\n"
                           "name=momentum\noutputs=3\n[softmax_ce]\n", 0.75f) == BN_PASS);
    CHECK_OK(bn_checkpoint_save(ck_tmp_path(path, sizeof path, "named.safetensors"), f.net, f.opt, &f.st));
    float *w = ck_copy_floats(f.net->params), *m = ck_copy_floats(f.opt->state[0]);
    CHECK(w && m);
    ck_fill(f.net->params, 2.0f);
    ck_fill(f.opt->state[0], 2.0f);
    CHECK_OK(bn_checkpoint_load(path, f.net, f.opt, NULL));
    CHECK(ck_same_floats(f.net->params, w) && ck_same_floats(f.opt->state[0], m));
    ck_fill(f.net->params, 2.0f);
    CHECK_OK(bn_checkpoint_load_weights(path, f.net));
    CHECK(ck_same_floats(f.net->params, w));
    free(w);
    free(m);
    ck_free_fixture(&f);
    return BN_PASS;
}

/* ---- Adam and AdamW ---- */

/* Copies of every state slab of f's optimizer. */
static int copy_state(const ck_fixture *f, float *out[BN_OPTIMIZER_MAX_STATE])
{
    for (int k = 0; k < f->opt->num_state; k++) CHECK((out[k] = ck_copy_floats(f->opt->state[k])) != NULL);
    return BN_PASS;
}

/* Adam's moments go into the file after the weights, as exp_avg.* and then exp_avg_sq.*, the
 * metadata names the optimizer, and a load gives all of it back bit for bit; AdamW's too. */
BN_TEST(checkpoint_adam_round_trip_is_bit_exact)
{
    static const char *const kinds[] = {"adam", "adamw"};
    for (int i = 0; i < 2; i++) {
        ck_fixture f, g;
        char path[512];
        CHECK(ck_make_fixture_of(&f, CK_MODEL, 0.25f, kinds[i]) == BN_PASS);
        CHECK(f.opt->num_state == 2);
        CHECK_OK(bn_checkpoint_save(ck_tmp_path(path, sizeof path, "adam.safetensors"), f.net, f.opt, &f.st));
        ck_file_parts p;
        CHECK(ck_read_parts(path, &p) == 0);
        CHECK(p.data_len == 3 * CK_WEIGHT_BYTES && !strstr(p.header, "momentum."));
        bn_json *h;
        CHECK_OK(bn_json_parse(p.header, p.header_len, &h));
        CHECK(h->type == BN_JSON_OBJECT && h->count == 1 + 3 * 4);
        const bn_json *meta = bn_json_get(h, "__metadata__"), *name = bn_json_get(meta, "optimizer");
        CHECK(name && strcmp(name->text, kinds[i]) == 0);
        CHECK(strcmp(bn_json_get(meta, "has_momentum")->text, "1") == 0);
        const struct {
            const char *name;
            uint64_t begin, end;
        } tensors[] = {{"exp_avg.conv2d1.weight", 476, 548}, {"exp_avg.dense1.bias", 940, 952},
                       {"exp_avg_sq.conv2d1.weight", 952, 1024}, {"exp_avg_sq.dense1.bias", 1416, 1428}};
        for (size_t t = 0; t < sizeof tensors / sizeof tensors[0]; t++) {
            const bn_json *e = bn_json_get(h, tensors[t].name);
            CHECK_MSG(e, "%s missing", tensors[t].name);
            const bn_json *off = bn_json_get(e, "data_offsets");
            uint64_t b, end;
            CHECK(off->count == 2 && bn_json_u64(off->items[0], &b) && bn_json_u64(off->items[1], &end));
            CHECK_MSG(b == tensors[t].begin && end == tensors[t].end, "%s at [%llu,%llu]", tensors[t].name,
                      (unsigned long long)b, (unsigned long long)end);
        }
        bn_json_free(h);
        ck_free_parts(&p);

        float *w = ck_copy_floats(f.net->params), *m[BN_OPTIMIZER_MAX_STATE] = {NULL};
        CHECK(w && copy_state(&f, m) == BN_PASS);
        CHECK(ck_make_fixture_of(&g, CK_MODEL, -3.0f, kinds[i]) == BN_PASS);
        CHECK(!ck_same_floats(g.opt->state[1], m[1]));
        bn_train_state st = {0};
        CHECK_OK(bn_checkpoint_load(path, g.net, g.opt, &st));
        CHECK(ck_same_floats(g.net->params, w) && ck_same_floats(g.opt->state[0], m[0]) &&
              ck_same_floats(g.opt->state[1], m[1]));
        CHECK(g.opt->iter == 4321 && ck_same_state(&st, &f.st));
        /* Weights alone, into a net whose optimizer is SGD: the moments are passed by. */
        ck_fixture s;
        CHECK(ck_make_fixture(&s, CK_MODEL, 2.0f) == BN_PASS);
        CHECK_OK(bn_checkpoint_load_weights(path, s.net));
        CHECK(ck_same_floats(s.net->params, w));
        free(w);
        free(m[0]);
        free(m[1]);
        ck_free_fixture(&f);
        ck_free_fixture(&g);
        ck_free_fixture(&s);
    }
    return BN_PASS;
}

/* Resuming with another optimizer than the file's is refused in one line that names the file
 * and both optimizers; the weights and progress still load without an optimizer. A file that
 * names no optimizer holds SGD's state. */
BN_TEST(checkpoint_refuses_another_optimizers_state)
{
    ck_fixture sgd, adam, adamw;
    char sgd_path[512], adam_path[512], path[512], needle[1200];
    CHECK(ck_saved_fixture(&sgd, sgd_path, sizeof sgd_path, "by-sgd.safetensors") == BN_PASS);
    CHECK(ck_make_fixture_of(&adam, CK_MODEL, 0.5f, "adam") == BN_PASS);
    CHECK(ck_make_fixture_of(&adamw, CK_MODEL, 0.75f, "adamw") == BN_PASS);
    CHECK_OK(bn_checkpoint_save(ck_tmp_path(adam_path, sizeof adam_path, "by-adam.safetensors"), adam.net, adam.opt,
                                &adam.st));
    snprintf(needle, sizeof needle, "%s holds the state of optimizer sgd, but this run's optimizer is adam", sgd_path);
    CHECK(ck_load_fails(&adam, sgd_path, BN_ERR_DATA, needle) == BN_PASS);
    snprintf(needle, sizeof needle, "%s holds the state of optimizer adam, but this run's optimizer is sgd", adam_path);
    CHECK(ck_load_fails(&sgd, adam_path, BN_ERR_DATA, needle) == BN_PASS);
    snprintf(needle, sizeof needle, "%s holds the state of optimizer adam, but this run's optimizer is adamw",
             adam_path);
    CHECK(ck_load_fails(&adamw, adam_path, BN_ERR_DATA, needle) == BN_PASS);

    float *w = ck_copy_floats(adam.net->params);
    CHECK(w);
    bn_train_state st = {0};
    CHECK_OK(bn_checkpoint_load(adam_path, sgd.net, NULL, &st));
    CHECK(ck_same_floats(sgd.net->params, w) && ck_same_state(&st, &adam.st));
    free(w);

    ck_tmp_path(path, sizeof path, "by-adam-bad.safetensors");
    CHECK(ck_edit_header(adam_path, path, ",\"optimizer\":\"adam\"", "") == 0);
    CHECK(ck_load_fails(&adam, path, BN_ERR_DATA, "holds the state of optimizer sgd, but this run's optimizer is adam") ==
          BN_PASS);
    CHECK(ck_edit_header(adam_path, path, "\"optimizer\":\"adam\"", "\"optimizer\":\"lion\"") == 0);
    CHECK(ck_load_fails(&adam, path, BN_ERR_DATA, "metadata optimizer = \"lion\" is not an optimizer that blobnet knows") ==
          BN_PASS);
    CHECK(ck_drop_entry(adam_path, path, "exp_avg_sq.dense1.bias") == 0);
    CHECK(ck_load_fails(&adam, path, BN_ERR_DATA,
                     "exp_avg_sq of dense1.bias (tensor exp_avg_sq.dense1.bias) is missing from the file") == BN_PASS);
    CHECK(ck_edit_header(adam_path, path, "\"exp_avg.dense1.bias\"", "\"momentum.dense1.bias\"") == 0);
    CHECK(ck_load_fails(&adam, path, BN_ERR_DATA, "tensor momentum.dense1.bias is not in the model") == BN_PASS);
    ck_free_fixture(&sgd);
    ck_free_fixture(&adam);
    ck_free_fixture(&adamw);
    return BN_PASS;
}
