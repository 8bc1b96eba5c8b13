/* test_bench_common.c - tools/bench_common.sh's suite_data, which gives tools/bench.sh and
 * tools/recipes.sh each suite model's data folder: MNIST's and Fashion-MNIST's as given, for
 * cifar10 Fashion-MNIST written out as CIFAR-10 records once a run, and for npz Fashion-MNIST
 * written out as a folder of PNGs and fitted to the model's input as a NumPy archive, one for each
 * input shape. Run on a small synthetic IDX set by the CLI that make test builds; skipped without
 * bash or the CLI. */
#include "testing.h"

#include <stdlib.h>
#include <sys/stat.h>

static char out[1 << 15];

/* Bytes of the file at path, or -1. */
static long long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

BN_TEST(bench_suite_data_writes_cifar_records_once_and_names_every_suite_dataset)
{
    if (system("bash -c true >/dev/null 2>&1") != 0) BN_SKIP_TEST("no bash");
    if (file_size("./blobnet") < 0) BN_SKIP_TEST("no ./blobnet (make builds it)");
    char logs[512], cmd[4096];
    const char *idx = bn_test_synthetic_mnist("suite_idx", 200, 50);
    CHECK_MSG(idx != NULL, "cannot write the synthetic IDX set in %s", bn_test_tmpdir());
    snprintf(logs, sizeof logs, "%s/suite_logs", bn_test_tmpdir());
    /* The records from the IDX set, then again from a folder that does not exist (kept, not
     * written again); the archive likewise, then one of another input shape from the PNG folder
     * already written; every suite entry's dataset, and a dataset the suite does not have. */
    snprintf(cmd, sizeof cmd,
             "bash -c 'source tools/bench_common.sh; logs=%s; mkdir -p \"$logs\"; "
             "d=$(suite_data cifar10 /no/mnist %s) && echo \"first=$d\"; "
             "d=$(suite_data cifar10 /no/mnist /no/fashion) && echo \"again=$d\"; "
             "d=$(suite_data npz /no/mnist %s) && echo \"npz=$d\"; "
             "d=$(suite_data npz /no/mnist /no/fashion) && echo \"npz again=$d\"; "
             "d=$(suite_data npz /no/mnist /no/fashion models/vgg48x64.cfg) && echo \"npz 48x64=$d\"; "
             "for e in \"${suite[@]}\"; do read -r name model dataset batch <<<\"$e\"; "
             "echo \"$name: $(suite_data \"$dataset\" /m /f \"$model\")\"; done; "
             "suite_data svhn /m /f; echo \"svhn rc=$?\"'",
             logs, idx, idx);
    const int rc = bn_test_run(cmd, out, sizeof out);
    CHECK_MSG(rc == 0, "exit %d:\n%s", rc, out);
    char want[1024];
    snprintf(want, sizeof want, "first=%s/fashion-cifar10\n", logs);
    CHECK_MSG(strstr(out, want) != NULL, "no \"%s\" in:\n%s", want, out);
    snprintf(want, sizeof want, "again=%s/fashion-cifar10\n", logs);
    CHECK_MSG(strstr(out, want) != NULL, "the records were not kept for the second call:\n%s", out);
    CHECK_MSG(strstr(out, "lenet: /m\n") && strstr(out, "vgg_fashion: /f\n"), "MNIST and Fashion folders:\n%s", out);
    snprintf(want, sizeof want, "cifar10_resnet: %s/fashion-cifar10\n", logs);
    CHECK_MSG(strstr(out, want) != NULL, "cifar10_resnet's folder is not the records':\n%s", out);
    CHECK_MSG(strstr(out, "no data for the dataset 'svhn'") && strstr(out, "svhn rc=1"), "svhn:\n%s", out);
    /* Every suite entry got a folder: no entry names a dataset suite_data lacks. */
    CHECK_MSG(strstr(out, "no data for the dataset") == strstr(out, "no data for the dataset 'svhn'"),
              "a suite entry has a dataset without data:\n%s", out);
    /* One record is a label byte and 3x32x32 pixels; the examples as many as the IDX set's. */
    char path[1024];
    snprintf(path, sizeof path, "%s/fashion-cifar10/data_batch_1.bin", logs);
    CHECK_MSG(file_size(path) == 200LL * 3073, "%s: %lld bytes, expected %lld", path, file_size(path), 200LL * 3073);
    snprintf(path, sizeof path, "%s/fashion-cifar10/test_batch.bin", logs);
    CHECK_MSG(file_size(path) == 50LL * 3073, "%s: %lld bytes, expected %lld", path, file_size(path), 50LL * 3073);
    /* The archives: 3x64x64, kept for the second call and the 64x64 rows' data, and 3x48x64,
     * vgg48x64's; 250 examples of their bytes each, with their headers and labels. */
    snprintf(want, sizeof want, "npz=%s/fashion-3x64x64.npz\n", logs);
    CHECK_MSG(strstr(out, want) != NULL, "no \"%s\" in:\n%s", want, out);
    snprintf(want, sizeof want, "npz again=%s/fashion-3x64x64.npz\n", logs);
    CHECK_MSG(strstr(out, want) != NULL, "the archive was not kept for the second call:\n%s", out);
    snprintf(want, sizeof want, "photo64: %s/fashion-3x64x64.npz\n", logs);
    CHECK_MSG(strstr(out, want) != NULL, "photo64's data is not the archive:\n%s", out);
    snprintf(want, sizeof want, "bottleneck64: %s/fashion-3x64x64.npz\n", logs);
    CHECK_MSG(strstr(out, want) != NULL, "bottleneck64's data is not the archive:\n%s", out);
    snprintf(want, sizeof want, "npz 48x64=%s/fashion-3x48x64.npz\n", logs);
    CHECK_MSG(strstr(out, want) != NULL, "no \"%s\" in:\n%s", want, out);
    snprintf(want, sizeof want, "vgg48x64: %s/fashion-3x48x64.npz\n", logs);
    CHECK_MSG(strstr(out, want) != NULL, "vgg48x64's data is not its archive:\n%s", out);
    static const int shapes[2][2] = {{64, 64}, {48, 64}};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/fashion-3x%dx%d.npz", logs, shapes[i][0], shapes[i][1]);
        const long long pixels = 250LL * 3 * shapes[i][0] * shapes[i][1];
        CHECK_MSG(file_size(path) > pixels && file_size(path) < pixels + 64 * 1024,
                  "%s: %lld bytes, expected %lld and headers", path, file_size(path), pixels);
    }
    return BN_PASS;
}

/* The multi-GPU tools' models (scale_models): each names a model file that exists and a dataset
 * those tools read (MNIST or Fashion-MNIST), the default names are among them, and a name outside
 * them is refused with the list. */
BN_TEST(bench_scale_models_name_existing_files_and_refuse_others)
{
    if (system("bash -c true >/dev/null 2>&1") != 0) BN_SKIP_TEST("no bash");
    const int rc = bn_test_run("bash -c 'source tools/bench_common.sh; "
                               "for e in \"${scale_models[@]}\"; do read -r name model dataset batch <<<\"$e\"; "
                               "[ -f \"$model\" ] || echo \"missing $model\"; "
                               "case $dataset in mnist|fashion-mnist) ;; *) echo \"dataset $dataset of $name\";; esac; "
                               "echo \"entry $name\"; done; "
                               "for d in \"${scale_default[@]}\"; do echo \"default $d\"; done; "
                               "(check_scale_models tools/scale.sh inception_fashion svhn_net); echo \"rc=$?\"'",
                               out, sizeof out);
    CHECK_MSG(rc == 0, "exit %d:\n%s", rc, out);
    CHECK_MSG(!strstr(out, "missing ") && !strstr(out, "dataset "), "a bad entry:\n%s", out);
    CHECK_MSG(strstr(out, "entry inception_fashion\n") && strstr(out, "entry narrow_chain\n"), "entries:\n%s", out);
    const char *defaults[] = {"lenet", "resnet_fashion", "vgg_fashion"};
    for (int i = 0; i < 3; i++) {
        char want[64], entry[64];
        snprintf(want, sizeof want, "default %s\n", defaults[i]);
        snprintf(entry, sizeof entry, "entry %s\n", defaults[i]);
        CHECK_MSG(strstr(out, want) && strstr(out, entry), "%s is not a default and an entry:\n%s", defaults[i], out);
    }
    CHECK_MSG(strstr(out, "tools/scale.sh: model svhn_net: not one of lenet, resnet_fashion") && strstr(out, "rc=2"),
              "the refusal:\n%s", out);
    return BN_PASS;
}

/* The bench's epoch milliseconds (blobnet_ms): each epoch after the first as the training images
 * over its images a second, so that two epochs the line's seconds round alike (0.039 s) still
 * read apart; from the seconds where the log names no training images. */
BN_TEST(bench_epoch_ms_come_from_images_a_second)
{
    if (system("bash -c true >/dev/null 2>&1") != 0) BN_SKIP_TEST("no bash");
    char path[1024], bare[1024], cmd[4096];
    snprintf(path, sizeof path, "%s/bench_ms.log", bn_test_tmpdir());
    snprintf(bare, sizeof bare, "%s/bench_ms_bare.log", bn_test_tmpdir());
    FILE *f = fopen(path, "w");
    CHECK_MSG(f != NULL, "cannot write %s", path);
    fputs("blobnet: training models/lenet.cfg on NVIDIA H200: 60000 train / 10000 test images, batch 256, 431080 "
          "parameters\n"
          "epoch 1/4  lr 0.009828  train loss 0.2359  train acc  93.48%  test acc  97.81%    0.053 s   1126233 img/s"
          "  eval 2.4 ms\n"
          "epoch 2/4  lr 0.009662  train loss 0.0571  train acc  98.34%  test acc  98.38%    0.039 s   1540225 img/s"
          "  eval 2.4 ms\n"
          "epoch 3/4  lr 0.009503  train loss 0.0347  train acc  99.02%  test acc  98.73%    0.039 s   1500000 img/s"
          "  eval 2.3 ms\n"
          "epoch 4/4  lr 0.009503  train loss 0.0347  train acc  99.02%  test acc  98.73%    0.038 s   1559249 img/s"
          "  eval 2.3 ms\n",
          f);
    fclose(f);
    /* The same epochs without the first line. */
    snprintf(cmd, sizeof cmd, "tail -n +2 %s > %s", path, bare);
    CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "bash -c 'source tools/bench_common.sh; echo \"ms=$(blobnet_ms %s)\"; "
                              "echo \"bare=$(blobnet_ms %s)\"'", path, bare);
    const int rc = bn_test_run(cmd, out, sizeof out);
    CHECK_MSG(rc == 0, "exit %d:\n%s", rc, out);
    /* Epochs 2-4: 60000 images at 1540225, 1500000 and 1559249 a second are 38.96, 40.00 and
     * 38.48 ms; the median is 38.96 (the seconds would give 39). */
    CHECK_MSG(strstr(out, "ms=38.96\n") != NULL, "%s", out);
    CHECK_MSG(strstr(out, "bare=39\n") != NULL, "%s", out);
    return BN_PASS;
}

/* Every suite entry's model file builds a network (`blobnet summary`, which parses the file and
 * sets every layer up for its input), and those written for shapes the suite lacked hold the
 * parameters counted by hand: allconv_leaky's six convolutions with their batch normalizations
 * and classifier (1120 + 14440 + 28880 + 57680 + 115360 + 25760 + 2 * (40 + 40 + 80 + 80 + 160 +
 * 160) + 1610), mlp_elu's six dense layers (784-600-400-400-300-200-10 with biases), LeNet
 * (520 + 25050 + 400500 + 5010) and cifar_dropout, whose dense layer reads the 6x6 maps that its
 * unpadded windows and odd pooling leave (896 + 9248 + 18496 + 36928 + 64 * 6 * 6 * 512 + 512 +
 * 5130), and photo64's stem, residual blocks and classifier (480 + 4704 + 14624 + 57920 + 230528 +
 * 1290, each block its convolutions, projection and batch normalizations), bottleneck64's
 * (4800 + 19392 + 96128 + 380672 + 5130: the 7x7 stem, then each stage's 1x1, 3x3 and widening
 * 1x1 convolutions and projection with their batch normalizations, and the classifier) and
 * vgg48x64's six 3x3 convolutions with their batch normalizations and classifier (672 + 5208 +
 * 10416 + 20784 + 41568 + 83040 + 2 * (24 + 24 + 48 + 48 + 96 + 96) + 970), wide_shallow's three
 * 3x3 convolutions with their batch normalizations and classifier (1280 + 184480 + 461120 + 2 * (128
 * + 160 + 320) + 3210), stem7's 7x7 stem, two blocks and projection (3200 + 2 * 36928 + 73856 +
 * 147584 + 8320 + 2 * (64 + 64 + 64 + 128 + 128 + 128) + 1290), overlap_pool's convolutions and
 * the dense layer that reads the 6x6 maps its overlapping poolings leave (1040 + 28880 + 9720 +
 * 120 * 6 * 6 * 200 + 200 + 2010), mlp_odd's four dense layers (784-1000-700-300-10), dcgan_disc's
 * three 4x4 stride-2 convolutions, two batch normalizations and the dense layer that reads their
 * 3x3 maps (1088 + 131200 + 524544 + 2 * (128 + 256) + 256 * 3 * 3 * 10 + 10) and patch4's 4x4
 * stride-4 stem and four 3x3 convolutions with their batch normalizations and classifier (1632 +
 * 4 * 83040 + 5 * 2 * 96 + 970). */
BN_TEST(bench_suite_models_build_and_the_new_shapes_hold_their_parameters)
{
    if (system("bash -c true >/dev/null 2>&1") != 0) BN_SKIP_TEST("no bash");
    if (file_size("./blobnet") < 0) BN_SKIP_TEST("no ./blobnet (make builds it)");
    const int rc = bn_test_run("bash -c 'source tools/bench_common.sh; "
                               "for e in \"${suite[@]}\"; do read -r name model dataset batch <<<\"$e\"; "
                               "t=$(./blobnet summary \"$model\" 2>&1 | grep \"^total:\"); "
                               "echo \"$name: ${t:-failed}\"; done'",
                               out, sizeof out);
    CHECK_MSG(rc == 0, "exit %d:\n%s", rc, out);
    CHECK_MSG(!strstr(out, ": failed"), "a suite model file does not build:\n%s", out);
    /* Each model's summary line, as its layers and parameters were counted by hand (above). */
    static const char *const totals[] = {
        "allconv_leaky: total: 21 layers, 245970 parameters",
        "mlp_elu: total: 12 layers, 1054310 parameters",
        "lenet256: total: 8 layers, 431080 parameters",
        "cifar_dropout: total: 17 layers, 1250858 parameters",
        "photo64: total: 40 layers, 309546 parameters",
        "bottleneck64: total: 43 layers, 506122 parameters",
        "vgg48x64: total: 24 layers, 163330 parameters",
        "wide_shallow: total: 14 layers, 651306 parameters",
        "stem7: total: 23 layers, 309258 parameters",
        "overlap_pool: total: 12 layers, 905850 parameters",
        "mlp_odd: total: 8 layers, 1699010 parameters",
        "dcgan_disc: total: 10 layers, 680650 parameters",
        "patch4: total: 20 layers, 335722 parameters",
    };
    for (size_t i = 0; i < sizeof totals / sizeof totals[0]; i++)
        CHECK_MSG(strstr(out, totals[i]), "no line \"%s\" in:\n%s", totals[i], out);
    return BN_PASS;
}

/* spread_over_gpus, which runs tools/bench.sh's models and tools/recipes.sh's trainings over
 * several GPUs: every item runs exactly once, each on its worker's GPU (worker w on GPU w % gpus,
 * read from CUDA_VISIBLE_DEVICES's list where that is set), on as many workers as asked at a time;
 * and gpus_asked, which reads BENCH_GPUS and RECIPES_GPUS: a count past the GPUs visible, or not a
 * positive whole number, is a one-line error and exit 2. Items sleep a little so that the workers
 * overlap. */
BN_TEST(bench_spread_over_gpus_runs_each_item_once_on_its_workers_gpu)
{
    if (system("bash -c true >/dev/null 2>&1") != 0) BN_SKIP_TEST("no bash");
    if (system("flock -V >/dev/null 2>&1") != 0) BN_SKIP_TEST("no flock (Debian: util-linux)");
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "bash -c 'source tools/bench_common.sh; d=%s/spread; rm -rf \"$d\"; mkdir -p \"$d\"; "
             "f() { mkdir \"$d/$1.run\" 2>/dev/null || echo \"twice $1\"; echo \"$BENCH_WORKER\" > \"$d/$1.run/w\"; "
             "sleep 0.0$((RANDOM %% 5)); "
             "echo \"$1 gpu=$CUDA_VISIBLE_DEVICES w=$BENCH_WORKER\"; }; "
             "CUDA_VISIBLE_DEVICES= spread_over_gpus 4 2 f a b c d e f g h i | sort; "
             "CUDA_VISIBLE_DEVICES=5,7 spread_over_gpus 2 2 f x y z | sort; "
             "echo \"n=$(CUDA_VISIBLE_DEVICES=5,7 gpus_asked t BENCH_GPUS 2)\"; "
             "(CUDA_VISIBLE_DEVICES=5,7 gpus_asked t BENCH_GPUS 3); echo \"rc3=$?\"; "
             "(gpus_asked t RECIPES_GPUS two); echo \"rc_two=$?\"; echo \"one=$(gpus_asked t BENCH_GPUS \"\")\"'",
             bn_test_tmpdir());
    const int rc = bn_test_run(cmd, out, sizeof out);
    CHECK_MSG(rc == 0, "exit %d:\n%s", rc, out);
    CHECK_MSG(!strstr(out, "twice "), "an item ran twice:\n%s", out);
    /* Worker w's GPU is w % 2: workers 0 and 2 on GPU 0, 1 and 3 on GPU 1; every item once. */
    const char *items = "abcdefghi";
    for (int i = 0; items[i]; i++) {
        char at[8];
        snprintf(at, sizeof at, "%c gpu=", items[i]);
        const char *p = strstr(out, at);
        CHECK_MSG(p != NULL, "item %c did not run:\n%s", items[i], out);
        int gpu = -1, w = -1;
        CHECK_MSG(sscanf(p + 6, "%d w=%d", &gpu, &w) == 2 && w >= 0 && w < 4 && gpu == w % 2,
                  "item %c: gpu %d on worker %d:\n%s", items[i], gpu, w, out);
    }
    /* With CUDA_VISIBLE_DEVICES=5,7 the workers' GPUs are 5 and 7, the list's entries. */
    for (const char *c = "xyz"; *c; c++) {
        char at[8];
        snprintf(at, sizeof at, "%c gpu=", *c);
        const char *p = strstr(out, at);
        int gpu = -1, w = -1;
        CHECK_MSG(p && sscanf(p + 6, "%d w=%d", &gpu, &w) == 2 && gpu == (w == 0 ? 5 : 7),
                  "item %c: not on its worker's GPU of the visible list:\n%s", *c, out);
    }
    CHECK_MSG(strstr(out, "n=2\n"), "two of two GPUs:\n%s", out);
    CHECK_MSG(strstr(out, "t: BENCH_GPUS=3: this machine shows 2 GPU(s)") && strstr(out, "rc3=2\n"), "three of two:\n%s",
              out);
    CHECK_MSG(strstr(out, "t: RECIPES_GPUS=two: not a positive whole number of GPUs") && strstr(out, "rc_two=2\n"),
              "a count that is no number:\n%s", out);
    CHECK_MSG(strstr(out, "one=1\n"), "the default of one GPU:\n%s", out);
    return BN_PASS;
}
