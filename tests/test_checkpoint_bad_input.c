/* test_checkpoint_bad_input.c - one hand-made broken checkpoint per error the loader names:
 * missing, short and malformed files, wrong tensors, non-finite values, bad metadata and progress
 * out of range, and a place that does not fit the run; each time checking that the network, the
 * optimizer and the training state were left untouched. */
#include "testing.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "checkpoint_testing.h"
#include "core/status.h"

BN_TEST(checkpoint_rejects_missing_and_short_files)
{
    ck_fixture f;
    char path[512];
    CHECK(ck_make_fixture(&f, CK_MODEL, 0.25f) == BN_PASS);
    CHECK(ck_load_fails(&f, ck_tmp_path(path, sizeof path, "absent.safetensors"), BN_ERR_DATA,
                     "No such file or directory") == BN_PASS);
    CHECK(strstr(bn_last_error(), path));
    CHECK(ck_load_weights_fails(&f, path, BN_ERR_DATA, "cannot open checkpoint") == BN_PASS);
    CHECK(ck_load_fails(&f, bn_test_tmpdir(), BN_ERR_DATA, "is not a regular file") == BN_PASS);

    CHECK(ck_write_raw(ck_tmp_path(path, sizeof path, "short.safetensors"), "\x10\0\0\0\0", 5) == 0);
    CHECK(ck_load_fails(&f, path, BN_ERR_DATA, "file is 5 bytes, too short") == BN_PASS);
    CHECK(ck_write_raw(path, "", 0) == 0);
    CHECK(ck_load_weights_fails(&f, path, BN_ERR_DATA, "file is 0 bytes") == BN_PASS);
    ck_free_fixture(&f);
    return BN_PASS;
}

BN_TEST(checkpoint_rejects_bad_header_length)
{
    ck_fixture f;
    char path[512];
    CHECK(ck_make_fixture(&f, CK_MODEL, 0.25f) == BN_PASS);
    ck_tmp_path(path, sizeof path, "len.safetensors");
    unsigned char zero[16] = {0};
    CHECK(ck_write_raw(path, zero, sizeof zero) == 0);
    CHECK(ck_load_fails(&f, path, BN_ERR_DATA, "header length is 0") == BN_PASS);

    unsigned char past[16] = {0xE8, 0x03}; /* 1000 bytes of header in a 16-byte file */
    CHECK(ck_write_raw(path, past, sizeof past) == 0);
    CHECK(ck_load_fails(&f, path, BN_ERR_DATA, "header length 1000 runs past the end of the file (16 bytes)") ==
          BN_PASS);

    unsigned char absurd[16] = {0, 0, 0, 0, 0, 1}; /* 2^40 */
    CHECK(ck_write_raw(path, absurd, sizeof absurd) == 0);
    CHECK(ck_load_fails(&f, path, BN_ERR_DATA, "header length 1099511627776 is absurd") == BN_PASS);
    ck_free_fixture(&f);
    return BN_PASS;
}

BN_TEST(checkpoint_rejects_invalid_json_header)
{
    ck_fixture f;
    char path[512];
    CHECK(ck_make_fixture(&f, CK_MODEL, 0.25f) == BN_PASS);
    ck_tmp_path(path, sizeof path, "json.safetensors");
    CHECK(ck_write_parts(path, "{\"a\":", 5, NULL, 0) == 0);
    CHECK(ck_load_fails(&f, path, BN_ERR_DATA, "header is not valid JSON at header byte 5: expected a value") ==
          BN_PASS);
    CHECK(ck_write_parts(path, "{\"a\":1}x", 8, NULL, 0) == 0);
    CHECK(ck_load_weights_fails(&f, path, BN_ERR_DATA, "at header byte 7: expected end of input") == BN_PASS);
    CHECK(ck_write_parts(path, "[1,2]   ", 8, NULL, 0) == 0);
    CHECK(ck_load_fails(&f, path, BN_ERR_DATA, "header is a JSON array, not an object") == BN_PASS);
    CHECK(ck_write_parts(path, "{\"__metadata__\":{\"format\":1}}", 29, NULL, 0) == 0);
    CHECK(ck_load_fails(&f, path, BN_ERR_DATA, "__metadata__ value of \"format\" is a number") == BN_PASS);
    ck_free_fixture(&f);
    return BN_PASS;
}

/* One broken variant of a saved checkpoint: its header with `from` replaced by `to`, which
 * loading must refuse with a message containing `needle`. */
typedef struct header_edit {
    const char *from, *to, *needle;
} header_edit;

static int every_edit_fails(ck_fixture *f, const char *src, const char *path, const header_edit *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        CHECK_MSG(ck_edit_header(src, path, cases[i].from, cases[i].to) == 0, "case %zu", i);
        CHECK_MSG(ck_load_fails(f, path, BN_ERR_DATA, cases[i].needle) == BN_PASS, "case %zu", i);
    }
    return BN_PASS;
}

/* The same for the fixture saved as tmpdir/name, each broken variant written to name-bad. */
static int saved_edits_fail(const char *name, const header_edit *cases, size_t n)
{
    ck_fixture f;
    char src[512], path[600];
    CHECK(ck_saved_fixture(&f, src, sizeof src, name) == BN_PASS);
    snprintf(path, sizeof path, "%s-bad", src);
    int r = every_edit_fails(&f, src, path, cases, n);
    ck_free_fixture(&f);
    return r;
}

BN_TEST(checkpoint_rejects_malformed_tensor_entries)
{
    ck_fixture f;
    char src[512], path[512];
    CHECK(ck_saved_fixture(&f, src, sizeof src, "entries.safetensors") == BN_PASS);
    ck_tmp_path(path, sizeof path, "entries-bad.safetensors");
    const header_edit cases[] = {
        {"\"dtype\":\"F32\",", "", "tensor conv2d1.weight lacks \"dtype\""},
        {"\"shape\":[2,1,3,3],", "", "tensor conv2d1.weight lacks \"shape\""},
        {",\"data_offsets\":[0,72]", "", "tensor conv2d1.weight lacks \"data_offsets\""},
        {"{\"dtype\":\"F32\",\"shape\":[2,1,3,3],\"data_offsets\":[0,72]}", "7", "tensor conv2d1.weight is a number"},
        {"\"dtype\":\"F32\"", "\"dtype\":32", "dtype that is not a string"},
        {"[2,1,3,3]", "[2,1,-3,3]", "tensor conv2d1.weight: shape entry 2 is not a non-negative integer"},
        {"[2,1,3,3]", "[2,1,3.0,3]", "shape entry 2 is not a non-negative integer"},
        {"[2,1,3,3]", "[4294967296,4294967296,4294967296]", "element count overflows 64 bits"},
        {"[2,1,3,3]", "\"2x1x3x3\"", "shape that is not an array"},
        {"[0,72]", "[0,68]", "tensor conv2d1.weight: data_offsets [0,68] hold 68 bytes but shape [2,1,3,3] needs 72"},
        {"[0,72]", "[72,0]", "data_offsets must be [begin,end]"},
        {"[0,72]", "[0,72,0]", "data_offsets must be [begin,end]"},
        {"[940,952]", "[944,956]", "tensor momentum.dense1.bias: data_offsets end 956 is past the data section (952 bytes)"},
        {"\"iter\":\"4321\"", "\"iter\":\"4321\",\"iter\":\"1\"", "duplicate key \"iter\""},
    };
    CHECK(every_edit_fails(&f, src, path, cases, sizeof cases / sizeof cases[0]) == BN_PASS);
    /* A file cut short inside its data: the tensors' offsets run past what is left. */
    ck_file_parts p;
    CHECK(ck_read_parts(src, &p) == 0);
    CHECK(ck_write_raw(path, p.bytes, p.size - 100) == 0);
    ck_free_parts(&p);
    CHECK(ck_load_fails(&f, path, BN_ERR_DATA, "is past the data section (852 bytes)") == BN_PASS);
    ck_free_fixture(&f);
    return BN_PASS;
}

BN_TEST(checkpoint_rejects_wrong_dtype)
{
    ck_fixture f;
    char src[512], path[512];
    CHECK(ck_saved_fixture(&f, src, sizeof src, "dtype.safetensors") == BN_PASS);
    ck_tmp_path(path, sizeof path, "dtype-bad.safetensors");
    CHECK(ck_edit_header(src, path, "\"F32\"", "\"F16\"") == 0);
    CHECK(ck_load_fails(&f, path, BN_ERR_DATA, "tensor conv2d1.weight has dtype F16; blobnet checkpoints hold F32") ==
          BN_PASS);
    CHECK(ck_load_weights_fails(&f, path, BN_ERR_DATA, "has dtype F16") == BN_PASS);
    ck_free_fixture(&f);
    return BN_PASS;
}

BN_TEST(checkpoint_rejects_wrong_shape)
{
    ck_fixture f;
    char src[512], path[512];
    CHECK(ck_saved_fixture(&f, src, sizeof src, "shape.safetensors") == BN_PASS);
    ck_tmp_path(path, sizeof path, "shape-bad.safetensors");
    /* Same element count, other shape: a transposed dense weight. */
    CHECK(ck_edit_header(src, path, "[3,32]", "[32,3]") == 0);
    CHECK(ck_load_fails(&f, path, BN_ERR_DATA, "tensor dense1.weight has shape [32,3] but the model expects [3,32]") ==
          BN_PASS);
    CHECK(ck_load_weights_fails(&f, path, BN_ERR_DATA, "has shape [32,3]") == BN_PASS);
    /* The conv kernel written 4-d as [2,1,3,3], not flattened. */
    CHECK(ck_edit_header(src, path, "[2,1,3,3]", "[2,9]") == 0);
    CHECK(ck_load_fails(&f, path, BN_ERR_DATA, "tensor conv2d1.weight has shape [2,9] but the model expects [2,1,3,3]") ==
          BN_PASS);
    /* A momentum tensor is checked too when the optimizer is restored. */
    CHECK(ck_edit_header(src, path, "\"momentum.dense1.weight\":{\"dtype\":\"F32\",\"shape\":[3,32]",
                      "\"momentum.dense1.weight\":{\"dtype\":\"F32\",\"shape\":[96]") == 0);
    CHECK(ck_load_fails(&f, path, BN_ERR_DATA, "tensor momentum.dense1.weight has shape [96] but the model expects [3,32]") ==
          BN_PASS);
    ck_free_fixture(&f);
    return BN_PASS;
}

BN_TEST(checkpoint_rejects_missing_tensor)
{
    ck_fixture f;
    char src[512], path[512];
    CHECK(ck_saved_fixture(&f, src, sizeof src, "missing.safetensors") == BN_PASS);
    ck_tmp_path(path, sizeof path, "missing-bad.safetensors");
    CHECK(ck_drop_entry(src, path, "conv2d1.bias") == 0);
    CHECK(ck_load_fails(&f, path, BN_ERR_DATA, "parameter conv2d1.bias of the model is missing from the file") ==
          BN_PASS);
    CHECK(ck_load_weights_fails(&f, path, BN_ERR_DATA, "conv2d1.bias of the model is missing") == BN_PASS);

    /* Without a momentum tensor the optimizer cannot resume, but the weights still load. */
    CHECK(ck_drop_entry(src, path, "momentum.dense1.bias") == 0);
    CHECK(ck_load_fails(&f, path, BN_ERR_DATA, "momentum of dense1.bias (tensor momentum.dense1.bias) is missing") ==
          BN_PASS);
    float *w = ck_copy_floats(f.net->params);
    ck_fill(f.net->params, 3.0f);
    CHECK_OK(bn_checkpoint_load_weights(path, f.net));
    CHECK(ck_same_floats(f.net->params, w));
    free(w);
    ck_free_fixture(&f);
    return BN_PASS;
}

BN_TEST(checkpoint_rejects_extra_tensor)
{
    ck_fixture f;
    char src[512], path[512];
    CHECK(ck_saved_fixture(&f, src, sizeof src, "extra.safetensors") == BN_PASS);
    ck_tmp_path(path, sizeof path, "extra-bad.safetensors");
    CHECK(ck_edit_header(src, path, "\"dense1.bias\"", "\"dense9.bias\"") == 0);
    CHECK(ck_load_fails(&f, path, BN_ERR_DATA, "tensor dense9.bias is not in the model") == BN_PASS);
    CHECK(ck_load_weights_fails(&f, path, BN_ERR_DATA, "tensor dense9.bias is not in the model") == BN_PASS);

    /* A stray momentum entry: refused when resuming, ignored by a weights-only load. */
    CHECK(ck_edit_header(src, path, "\"momentum.dense1.bias\"", "\"momentum.dense9.bias\"") == 0);
    CHECK(ck_load_fails(&f, path, BN_ERR_DATA, "tensor momentum.dense9.bias is not in the model") == BN_PASS);
    float *w = ck_copy_floats(f.net->params);
    ck_fill(f.net->params, 3.0f);
    CHECK_OK(bn_checkpoint_load_weights(path, f.net));
    CHECK(ck_same_floats(f.net->params, w));
    free(w);
    /* Names from the file are printed on one line even when they hold control characters. */
    CHECK(ck_edit_header(src, path, "\"dense1.bias\"", "\"dense1\\nbias\"") == 0);
    CHECK(ck_load_fails(&f, path, BN_ERR_DATA, "tensor dense1?bias is not in the model") == BN_PASS);
    ck_free_fixture(&f);
    return BN_PASS;
}

BN_TEST(checkpoint_rejects_non_finite_values)
{
    ck_fixture f;
    char src[512], path[512];
    CHECK(ck_saved_fixture(&f, src, sizeof src, "nan.safetensors") == BN_PASS);
    ck_tmp_path(path, sizeof path, "nan-bad.safetensors");
    /* In the last weight tensor, so that every earlier one was already staged. */
    CHECK(ck_poke_float(src, path, 464 + 8, NAN) == 0);
    CHECK(ck_load_fails(&f, path, BN_ERR_DATA, "tensor dense1.bias holds NaN at element 2") == BN_PASS);
    CHECK(ck_load_weights_fails(&f, path, BN_ERR_DATA, "holds NaN") == BN_PASS);
    CHECK(ck_poke_float(src, path, CK_WEIGHT_BYTES + 4, -INFINITY) == 0);
    CHECK(ck_load_fails(&f, path, BN_ERR_DATA, "tensor momentum.conv2d1.weight holds infinity at element 1") ==
          BN_PASS);
    ck_free_fixture(&f);
    return BN_PASS;
}

BN_TEST(checkpoint_rejects_bad_metadata)
{
    const header_edit cases[] = {
        {"\"epoch\":\"3\"", "\"epoch\":\"3x\"", "metadata epoch = \"3x\" is not an integer"},
        {"\"epoch\":\"3\"", "\"epoch\":\" 3\"", "metadata epoch = \" 3\" is not an integer"},
        {"\"step\":\"4321\"", "\"step\":\"\"", "metadata step = \"\" is not an integer"},
        {"\"seed\":\"2147483647\"", "\"seed\":\"99999999999999999999\"", "metadata seed = \"99999999999999999999\" is "
                                                                          "outside 0..2147483647"},
        {"\"epoch_loss_sum\":\"", "\"epoch_loss_sum\":\"1.5.", "metadata epoch_loss_sum = \"1.5.0.3"},
        {"\"iter\":\"4321\",", "", "__metadata__ lacks \"iter\""},
        {"\"has_momentum\":\"1\"", "\"has_momentum\":\"yes\"", "metadata has_momentum = \"yes\" is not 0 or 1"},
        {"\"format\":\"blobnet\"", "\"format\":\"pytorch\"", "format is \"pytorch\", not \"blobnet\""},
        {"\"version\":\"2\"", "\"version\":\"3\"", "checkpoint version \"3\" is not supported (this blobnet reads 1 "
                                                   "and 2)"},
        {"\"__metadata__\"", "\"__other__\"", "no __metadata__; not a blobnet checkpoint"},
        {"\"settings\":\"batch=64 ", "\"settings\":\"batch=64  ", "metadata settings = \"batch=64  epochs"},
        {"\"settings\":\"batch=64 ", "\"settings\":\"batch ", "is not a list of key=value settings"},
    };
    return saved_edits_fail("meta.safetensors", cases, sizeof cases / sizeof cases[0]);
}

/* Every number of the progress is checked against what the model, the other fields and the
 * arithmetic that uses them allow, with a message naming the file and the field: a counter at
 * LONG_MAX would overflow the trainer's and optimizer's arithmetic, a negative epoch start a
 * million-epoch run, a NaN sum be blamed on the learning rate. The fixture was saved 99 examples
 * (17 steps) into epoch 4 of a set of 640, at step 4321. */
BN_TEST(checkpoint_range_checks_every_progress_field)
{
    const header_edit cases[] = {
        {"\"seed\":\"2147483647\"", "\"seed\":\"-1\"", "range.safetensors-bad: metadata seed = \"-1\" is outside "
                                                       "0..2147483647"},
        {"\"seed\":\"2147483647\"", "\"seed\":\"2147483648\"", "metadata seed = \"2147483648\" is outside"},
        {"\"epoch\":\"3\"", "\"epoch\":\"-1000000\"", "metadata epoch = \"-1000000\" is outside 0..1048576"},
        {"\"epoch\":\"3\"", "\"epoch\":\"3000000000\"", "metadata epoch = \"3000000000\" is outside 0..1048576"},
        {"\"batch_in_epoch\":\"17\"", "\"batch_in_epoch\":\"2000000000\"", "metadata batch_in_epoch = \"2000000000\" "
                                                                           "is outside 1..99"},
        {"\"batch_in_epoch\":\"17\"", "\"batch_in_epoch\":\"0\"", "metadata batch_in_epoch = \"0\" is outside 1..99"},
        {"\"step\":\"4321\"", "\"step\":\"9223372036854775807\"", "metadata step = \"9223372036854775807\" is outside "
                                                                  "4..8589934588"},
        {"\"step\":\"4321\"", "\"step\":\"3\"", "metadata step = \"3\" is outside 4..8589934588 (at least one "
                                              "step for each epoch begun, at most 2147483647 for each up to this one)"},
        {"\"iter\":\"4321\"", "\"iter\":\"9223372036854775807\"", "metadata iter = \"9223372036854775807\" is outside "
                                                                  "4321..4321"},
        {"\"iter\":\"4321\"", "\"iter\":\"-5\"", "metadata iter = \"-5\" is outside 4321..4321"},
        {"\"epoch_seen\":\"99\"", "\"epoch_seen\":\"641\"", "metadata epoch_seen = \"641\" is outside 0..640"},
        {"\"epoch_seen\":\"99\"", "\"epoch_seen\":\"0\"", "metadata batch_in_epoch = \"17\" is outside 0..0"},
        {"\"examples\":\"640\"", "\"examples\":\"-1\"", "metadata examples = \"-1\" is outside 0..2147483647"},
        {"\"examples\":\"640\"", "\"examples\":\"98\"", "metadata epoch_seen = \"99\" is outside 0..98"},
        {"\"epoch_correct\":\"33\"", "\"epoch_correct\":\"100\"", "metadata epoch_correct = \"100\" is outside 0..99"},
        {"\"epoch_correct\":\"33\"", "\"epoch_correct\":\"33.5\"", "metadata epoch_correct = \"33.5\" is not a count"},
        {"\"epoch_loss_sum\":\"0.30000000000000004\"", "\"epoch_loss_sum\":\"nan\"", "metadata epoch_loss_sum = "
                                                                                     "\"nan\" is outside 0..3.40282347e+38"},
        {"\"epoch_loss_sum\":\"0.30000000000000004\"", "\"epoch_loss_sum\":\"inf\"", "epoch_loss_sum = \"inf\" is "
                                                                                     "outside"},
        {"\"epoch_loss_sum\":\"0.30000000000000004\"", "\"epoch_loss_sum\":\"-1\"", "epoch_loss_sum = \"-1\" is "
                                                                                    "outside"},
        {"\"epoch_loss_sum\":\"0.30000000000000004\"", "\"epoch_loss_sum\":\"1e39\"", "epoch_loss_sum = \"1e39\" is "
                                                                                      "outside"},
    };
    CHECK(saved_edits_fail("range.safetensors", cases, sizeof cases / sizeof cases[0]) == BN_PASS);
    /* A file of weights alone has steps no optimizer took: iter is 0 there, and at most the step. */
    ck_fixture f;
    char src[512], path[512];
    CHECK(ck_make_fixture(&f, CK_MODEL, 0.25f) == BN_PASS);
    ck_tmp_path(src, sizeof src, "range-weights.safetensors");
    ck_tmp_path(path, sizeof path, "range-weights-bad.safetensors");
    CHECK_OK(bn_checkpoint_save(src, f.net, NULL, &f.st));
    bn_train_state st;
    CHECK_OK(bn_checkpoint_load(src, f.net, NULL, &st));
    CHECK(ck_edit_header(src, path, "\"iter\":\"0\"", "\"iter\":\"4322\"") == 0);
    CHECK_ERR(bn_checkpoint_load(path, f.net, NULL, &st), BN_ERR_DATA, "metadata iter = \"4322\" is outside 0..4321");
    /* Saved at the end of epoch 4: four epochs begun, and five up to the one the file is in. */
    f.st = (bn_train_state){.seed = 2147483647, .epoch = 4, .step = 4400, .examples = 640};
    CHECK_OK(bn_checkpoint_save(src, f.net, NULL, &f.st));
    CHECK(ck_edit_header(src, path, "\"step\":\"4400\"", "\"step\":\"10737418236\"") == 0);
    CHECK_ERR(bn_checkpoint_load(path, f.net, NULL, &st), BN_ERR_DATA, "metadata step = \"10737418236\" is outside "
              "4..10737418235 (at least one step for each epoch begun, at most 2147483647 for each up to this one)");
    CHECK(ck_edit_header(src, path, "\"step\":\"4400\"", "\"step\":\"10737418235\"") == 0);
    CHECK_OK(bn_checkpoint_load(path, f.net, NULL, &st));
    CHECK(st.epoch == 4 && st.step == 10737418235L && st.epoch_seen == 0);
    ck_free_fixture(&f);
    return BN_PASS;
}

/* A resume goes on from the example where the checkpoint stopped, in the order of examples drawn
 * for that epoch: it refuses a training set or seed that would draw another order mid-epoch, and
 * at the end of an epoch takes this run's settings, listing what changed. */
BN_TEST(checkpoint_resume_checks_the_place_against_the_run)
{
    ck_fixture f;
    char src[512], needle[1400];
    CHECK(ck_saved_fixture(&f, src, sizeof src, "resume.safetensors") == BN_PASS);
    bn_train_state st;
    bn_resume r = {.examples = 640};
    CHECK_OK(bn_checkpoint_resume(src, f.net, f.opt, &st, &r));
    CHECK_MSG(r.changes[0] == '\0', "changes: %s", r.changes);
    CHECK(ck_same_state(&st, &f.st));

    r.examples = 600;
    snprintf(needle, sizeof needle, "%s was saved 99 examples into epoch 4 of a training set of 640 examples, and "
             "this run's has 600: the rest of the epoch would come in another order, so that some examples would be "
             "skipped and others seen twice; resume with the same training set (--train-limit 640) or from a "
             "checkpoint saved at the end of an epoch", src);
    CHECK_ERR(bn_checkpoint_resume(src, f.net, f.opt, &st, &r), BN_ERR_USAGE, needle);
    r.examples = 50;
    CHECK_ERR(bn_checkpoint_resume(src, f.net, f.opt, &st, &r), BN_ERR_USAGE,
              "was saved 99 examples into epoch 4, past the end of this run's training set of 50 examples");
    r.examples = 640;
    f.opt->cfg.seed = 5;
    CHECK_ERR(bn_checkpoint_resume(src, f.net, f.opt, &st, &r), BN_ERR_USAGE,
              "of a run with seed 2147483647, and this run's seed is 5: the rest of the epoch would come in another "
              "order");
    CHECK(strstr(bn_last_error(), "resume with --seed 2147483647 or from a checkpoint saved at the end of an epoch"));

    /* At the end of an epoch every setting may change; the new ones are used. */
    f.st = (bn_train_state){.seed = 2147483647, .epoch = 4, .step = 4400, .examples = 640};
    f.opt->iter = 4400;
    f.opt->cfg.seed = 2147483647;
    CHECK_OK(bn_checkpoint_save(src, f.net, f.opt, &f.st));
    f.opt->cfg.seed = 5;
    f.opt->cfg.lr = 0.5;
    f.opt->cfg.epochs = 20;
    f.net->augment = (bn_augment){.flip = 1, .pad = BN_AUGMENT_PAD_REFLECT, .cutout = 2};
    r.examples = 600;
    CHECK_OK(bn_checkpoint_resume(src, f.net, f.opt, &st, &r));
    CHECK_MSG(strcmp(r.changes, "epochs 10 -> 20, lr 0.01 -> 0.5, flip 0 -> 1, pad zero -> reflect, cutout 0 -> 2, "
                                "seed 2147483647 -> 5, training examples 640 -> 600") == 0, "changes: %s", r.changes);
    CHECK(st.seed == 5 && st.epoch == 4 && st.step == 4400 && st.epoch_seen == 0);
    /* A file saved before pad and cutout existed resumes; they are not listed as changes. */
    char old[512];
    ck_tmp_path(old, sizeof old, "resume-before-cutout.safetensors");
    CHECK(ck_edit_header(src, old, " pad=zero cutout=0\"", "\"") == 0);
    CHECK_OK(bn_checkpoint_resume(old, f.net, f.opt, &st, &r));
    CHECK_MSG(strcmp(r.changes, "epochs 10 -> 20, lr 0.01 -> 0.5, flip 0 -> 1, seed 2147483647 -> 5, training "
                                "examples 640 -> 600") == 0, "changes: %s", r.changes);
    CHECK(st.seed == 5 && st.epoch == 4 && st.step == 4400 && st.epoch_seen == 0);
    ck_free_fixture(&f);
    return BN_PASS;
}

/* A plain safetensors file (no metadata, as NumPy or PyTorch would write it) loads as weights. */
