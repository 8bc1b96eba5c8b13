/* test_data_source.c - what train, test and data read (src/cli/data_source.c): the model file's
 * [data] section under the flags, the table's formats by name, the set-up checks of the data
 * against the model, the holdout set, and [input]'s per-channel and auto mean and std. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/net.h"
#include "file_testing.h"
#include "testing.h"
#include "cifar.h"
#include "idx.h"
#include "io/image.h"
#include "train/checkpoint.h"

static char out[1 << 16];

/* A small dense model over 28x28 gray inputs with `outputs` classes, its [input] and [data] lines
 * given; written to NAME.cfg in the temporary folder, whose path lands in path. */
static int write_model(char *path, size_t cap, const char *name, const char *input_extra, const char *data,
                       int outputs)
{
    char text[2048];
    snprintf(text, sizeof text,
             "[input]\nchannels = 1\nheight = 28\nwidth = 28\n%s\n%s\n[train]\nbatch = 50\nepochs = 1\nlr = 0.05\n"
             "[dense]\noutputs = 16\n[relu]\n[dense]\noutputs = %d\n[softmax_ce]\n",
             input_extra, data, outputs);
    return ft_write_text(ft_path(path, cap, "%s.cfg", name), text);
}

BN_TEST(data_section_names_format_and_path_and_flags_override_it)
{
    const char *made = bn_test_synthetic_mnist("ds-idx", 300, 100);
    CHECK(made != NULL);
    char model[512], args[2048], data[700];
    snprintf(data, sizeof data, "[data]\nformat = idx\npath = %s\nclasses = 10\n", made);
    CHECK(write_model(model, sizeof model, "with-data", "", data, 10) == 0);
    snprintf(args, sizeof args, "train %s --device cpu --quiet", model);
    CHECK_CLI(args, 0, "final test accuracy");
    /* The flag's path wins over [data]'s: a folder without IDX files is named in the error. */
    snprintf(args, sizeof args, "train %s --device cpu --quiet --data %s", model, bn_test_tmpdir());
    CHECK_CLI(args, 1, "no training images file");
    /* Another format by flag leaves [data]'s keys behind: mnist has no `classes` key, and is not asked. */
    snprintf(args, sizeof args, "train %s --device cpu --quiet --dataset mnist --data %s --epochs 0", model, made);
    CHECK_CLI(args, 0, "final test accuracy");
    /* A key the format does not read is named with the format's keys. */
    snprintf(args, sizeof args, "train %s --device cpu --quiet --data-option label=fine --epochs 0", model);
    CHECK_CLI(args, 2, "unknown key 'label' (the idx format's keys: classes = N");
    snprintf(args, sizeof args, "train %s --device cpu --data-option path=x", model);
    CHECK_CLI(args, 2, "--data-option path=x: say it with --data");
    return BN_PASS;
}

BN_TEST(data_section_errors_name_the_file_and_line)
{
    char model[512], args[1024];
    CHECK(write_model(model, sizeof model, "bad-format", "", "[data]\nformat = tiff\n", 10) == 0);
    snprintf(args, sizeof args, "train %s --device cpu", model);
    CHECK_CLI(args, 2, "bad-format.cfg:7: [data] format: 'tiff' is not a dataset format; formats are: mnist, "
                       "fashion-mnist, idx");
    CHECK(write_model(model, sizeof model, "no-path", "", "[data]\nformat = idx\n", 10) == 0);
    snprintf(args, sizeof args, "train %s --device cpu", model);
    CHECK_CLI(args, 2, "the idx format reads a folder of IDX pairs");
    CHECK(write_model(model, sizeof model, "bad-holdout", "", "[data]\nholdout = some\n", 10) == 0);
    snprintf(args, sizeof args, "train %s --device cpu", model);
    CHECK_CLI(args, 2, "bad-holdout.cfg:7: [data] holdout = 'some' is not a count of examples");
    CHECK(write_model(model, sizeof model, "two-data", "", "[data]\nformat = idx\n[data]\nformat = idx\n", 10) == 0);
    snprintf(args, sizeof args, "summary %s", model);
    CHECK_CLI(args, 2, "second [data] section");
    return BN_PASS;
}

/* A model whose outputs are fewer than the data's classes, or whose input is another shape, is
 * refused at set-up with one line naming both, before any training. */
BN_TEST(data_set_up_checks_classes_and_shape_against_the_model)
{
    const char *made = bn_test_synthetic_mnist("ds-check", 100, 50);
    CHECK(made != NULL);
    char model[512], args[1024];
    CHECK(write_model(model, sizeof model, "five", "", "", 5) == 0);
    snprintf(args, sizeof args, "train %s --device cpu --data %s", model, made);
    CHECK_CLI(args, 2, "five.cfg ends in 5 outputs but the training set of");
    CHECK(strstr(out, "has 10 classes; make the last layer's units 10") && !strstr(out, "epoch 1"));
    int lines = 0;
    for (const char *p = out; *p; p++) lines += *p == '\n';
    CHECK_MSG(lines == 1, "%d lines:\n%s", lines, out);
    snprintf(args, sizeof args, "train models/cifar10_resnet.cfg --device cpu --dataset mnist --data %s", made);
    CHECK_CLI(args, 2, "cifar10_resnet.cfg expects 3x32x32 inputs but the training set of");
    CHECK(strstr(out, "(mnist) holds 1x28x28 images"));
    return BN_PASS;
}

BN_TEST(data_holdout_is_reported_in_the_epoch_line_and_the_log)
{
    const char *made = bn_test_synthetic_mnist("ds-holdout", 300, 60);
    CHECK(made != NULL);
    char model[512], args[2048], log[512], text[4096];
    CHECK(write_model(model, sizeof model, "holdout", "", "[data]\nholdout = 100\n", 10) == 0);
    ft_path(log, sizeof log, "holdout.csv");
    snprintf(args, sizeof args, "train %s --device cpu --data %s --log %s", model, made, log);
    CHECK_CLI(args, 0, "val acc");
    CHECK_MSG(strstr(out, "200 train / 60 test images"), "the holdout leaves 200 to train on:\n%s", out);
    CHECK(ft_read_text(log, text, sizeof text) == 0);
    const char *row = strchr(text, '\n');
    CHECK(row);
    int fields = 1;
    for (const char *p = row + 1; *p && *p != '\n'; p++) fields += *p == ',';
    const char *last = strrchr(row, ',');
    CHECK_MSG(fields == 11 && last && atof(last + 1) >= 0 && atof(last + 1) <= 1 && last[1] != '\n',
              "epoch row without val_acc: %s", row + 1);
    snprintf(args, sizeof args, "train %s --device cpu --data %s --holdout 300", model, made);
    CHECK_CLI(args, 2, "holdout = 300: keep 1..299 of the 300 training examples");
    return BN_PASS;
}

BN_TEST(data_input_mean_and_std_per_channel_and_their_errors)
{
    bn_net *net;
    const char *three = "[input]\nchannels = 3\nheight = 4\nwidth = 4\nmean = 0.1, 0.2, 0.3\nstd = 0.5\n"
                        "[dense]\noutputs = 2\n[softmax_ce]\n";
    CHECK_OK(bn_net_from_text(three, "three.cfg", &net));
    CHECK(net->input_mean[0] == 0.1f && net->input_mean[1] == 0.2f && net->input_mean[2] == 0.3f);
    CHECK(net->input_std[0] == 0.5f && net->input_std[2] == 0.5f && net->input_norm_auto == 0);
    CHECK_MSG(strstr(net->description, "mean=0.1,0.2,0.3 std=0.5\n"), "%s", net->description);
    bn_net_free(net);
    CHECK_ERR(bn_net_from_text("[input]\nchannels = 3\nheight = 4\nwidth = 4\nmean = 0.1, 0.2\n[dense]\noutputs = 2\n",
                               "two.cfg", &net),
              BN_ERR_USAGE, "two.cfg:5: [input] mean = 0.1, 0.2: 2 values for 3 channels");
    CHECK_ERR(bn_net_from_text("[input]\nchannels = 1\nheight = 4\nwidth = 4\nstd = 0\n[dense]\noutputs = 2\n",
                               "zero.cfg", &net),
              BN_ERR_USAGE, "zero.cfg:5: [input] std = 0: 0 is outside 1e-06..1000");
    CHECK_OK(bn_net_from_text("[input]\nchannels = 2\nheight = 4\nwidth = 4\nmean = auto\n[dense]\noutputs = 2\n",
                              "auto.cfg", &net));
    CHECK(net->input_norm_auto == BN_NORM_AUTO_MEAN && strstr(net->description, "mean=auto std=1\n"));
    double mean[2] = {0.25, 0.75};
    CHECK_OK(bn_net_set_input_norm(net, mean, NULL));
    CHECK(net->input_mean[0] == 0.25f && net->input_mean[1] == 0.75f && net->input_std[1] == 1.0f);
    bn_net_free(net);
    return BN_PASS;
}

/* `auto` is computed once from the training set, printed, and kept in the checkpoint, so that
 * test uses the values training used. */
BN_TEST(data_auto_input_statistics_are_printed_saved_and_reused_by_test)
{
    const char *made = bn_test_synthetic_mnist("ds-auto", 200, 50);
    CHECK(made != NULL);
    char model[512], ckpt[512], args[2048];
    CHECK(write_model(model, sizeof model, "auto", "mean = auto\nstd = auto", "", 10) == 0);
    ft_path(ckpt, sizeof ckpt, "auto.safetensors");
    snprintf(args, sizeof args, "train %s --device cpu --data %s --save %s", model, made, ckpt);
    CHECK_CLI(args, 0, "input statistics of the 200 training examples: mean 0.");
    bn_net *net;
    CHECK_OK(bn_net_from_file(model, &net));
    CHECK_OK(bn_net_setup(net, 10, NULL, 0, 1));
    CHECK(net->input_mean[0] == 0.0f && net->input_std[0] == 1.0f);
    CHECK_OK(bn_checkpoint_load_weights(ckpt, net));
    bn_dataset train;
    double mean, std;
    CHECK_OK(bn_dataset_load(made, 1, 0, &train));
    bn_dataset_stats(&train, &mean, &std);
    bn_dataset_free(&train);
    CHECK_MSG(net->input_mean[0] == (float)mean && net->input_std[0] == (float)std && std > 0.01,
              "kept mean %.9g std %.9g, the data's %.9g %.9g", net->input_mean[0], net->input_std[0], mean, std);
    bn_net_free(net);
    snprintf(args, sizeof args, "test %s %s --device cpu --data %s", model, ckpt, made);
    CHECK_CLI(args, 0, "test accuracy");
    /* A checkpoint of a model without auto has no statistics to give. */
    char plain[512], plain_ckpt[512];
    CHECK(write_model(plain, sizeof plain, "auto-plain", "", "", 10) == 0);
    ft_path(plain_ckpt, sizeof plain_ckpt, "plain.safetensors");
    snprintf(args, sizeof args, "train %s --device cpu --data %s --save %s --epochs 0 --quiet", plain, made,
             plain_ckpt);
    CHECK_CLI(args, 0, "final test accuracy");
    CHECK_OK(bn_net_from_file(model, &net));
    CHECK_OK(bn_net_setup(net, 10, NULL, 0, 1));
    bn_status s = bn_checkpoint_load_weights(plain_ckpt, net);
    bn_net_free(net);
    CHECK_MSG(s != BN_OK, "a checkpoint of another model loaded");
    return BN_PASS;
}

BN_TEST(data_command_shows_what_blobnet_sees)
{
    const char *made = bn_test_synthetic_mnist("ds-show", 120, 40);
    CHECK(made != NULL);
    char args[1024];
    snprintf(args, sizeof args, "data --dataset idx --data %s", made);
    CHECK_CLI(args, 0, "training set: 120 examples of 1x28x28 uint8");
    CHECK(strstr(out, "format: idx") && strstr(out, "test set: 40 examples") && strstr(out, "classes: 10"));
    CHECK_MSG(strstr(out, "      9                               12          4"), "class 9's counts:\n%s", out);
    CHECK(strstr(out, "first problem: none found"));
    snprintf(args, sizeof args, "data --dataset idx --data %s --data-option classes=12", made);
    CHECK_CLI(args, 0, "first problem: class 10 has no examples in either set");
    snprintf(args, sizeof args, "data models/cifar10_resnet.cfg --dataset idx --data %s", made);
    CHECK_CLI(args, 0, "model: models/cifar10_resnet.cfg expects 3x32x32 inputs: the data does not fit it");
    CHECK_CLI("data --dataset idx", 2, "the idx format reads a folder of IDX pairs");
    CHECK_CLI("data --help", 0, "Dataset formats (--dataset NAME --data PATH");
    return BN_PASS;
}

/* test --misclassified writes colour examples as RGB PNGs, and refuses float examples before
 * evaluating anything. */
BN_TEST(data_misclassified_colour_images_are_written_as_rgb)
{
    char dir[512], model[512], ckpt[512], mis[512], args[2400], path[700];
    ft_path(dir, sizeof dir, "mis-cifar");
    CHECK(mkdir(dir, 0777) == 0);
    bn_dataset d;
    CHECK_OK(bn_dataset_alloc(&d, "made", 8, 3, 32, 32, 10, 0));
    for (size_t i = 0; i < bn_dataset_example_size(&d) * 8; i++) d.pixels[i] = (unsigned char)(i * 7 % 251);
    for (int i = 0; i < 8; i++) d.labels[i] = (uint16_t)i;
    snprintf(path, sizeof path, "%s/data_batch_1.bin", dir);
    CHECK_OK(bn_cifar_write(&d, path, 0));
    snprintf(path, sizeof path, "%s/test_batch.bin", dir);
    CHECK_OK(bn_cifar_write(&d, path, 0));
    CHECK(ft_write_text(ft_path(model, sizeof model, "mis.cfg"),
                        "[input]\nchannels = 3\nheight = 32\nwidth = 32\n[data]\nformat = cifar10\n"
                        "[dense]\noutputs = 10\n[softmax_ce]\n") == 0);
    ft_path(ckpt, sizeof ckpt, "mis.safetensors");
    ft_path(mis, sizeof mis, "mis-out");
    snprintf(args, sizeof args, "train %s --device cpu --data %s --epochs 0 --save %s --quiet", model, dir, ckpt);
    CHECK_CLI(args, 0, "final test accuracy");
    snprintf(args, sizeof args, "test %s %s --device cpu --data %s --misclassified %s", model, ckpt, dir, mis);
    CHECK_CLI(args, 0, "misclassified: ");
    int written = atoi(strstr(out, "misclassified: ") + 15);
    CHECK_MSG(written > 0, "%s", out);
    /* The first misclassified example, read back: its pixels are the example's, channels interleaved. */
    int first = -1;
    for (int i = 0; i < 8 && first < 0; i++) {
        char name[700];
        for (int c = 0; c < 10 && first < 0; c++) {
            snprintf(name, sizeof name, "%s/%05d-true%d-pred%d.png", mis, i, i, c);
            if (access(name, F_OK) == 0) first = i, snprintf(path, sizeof path, "%s", name);
        }
    }
    CHECK(first >= 0);
    bn_image img;
    CHECK_OK(bn_image_read_color(path, 3, &img));
    CHECK(img.channels == 3 && img.width == 32 && img.height == 32);
    const unsigned char *src = d.pixels + (size_t)first * bn_dataset_example_size(&d);
    for (int p = 0; p < 32 * 32; p++)
        for (int c = 0; c < 3; c++) CHECK(img.pixels[p * 3 + c] == src[c * 32 * 32 + p]);
    bn_image_free(&img);
    bn_dataset_free(&d);
    return BN_PASS;
}
