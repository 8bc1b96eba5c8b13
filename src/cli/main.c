/* main.c - the blobnet command line: dispatch to subcommands, help and version. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "cli.h"
#include "core/device.h"
#include "core/lr_policies/lr_policies.h"
#include "core/optimizers/optimizers.h"
#include "core/parallel.h"
#include "core/plugin.h"
#include "core/registry.h"
#include "core/timeline.h"
#include "dataset.h"

#define BLOBNET_VERSION "0.1.0"

/* The --threads line of train, test and predict. */
#define THREADS_HELP                                                                       \
    "  --threads N         CPU threads for the CPU path (default: one per CPU, or\n"          \
    "                      $BLOBNET_THREADS); results do not depend on it\n"

static const char train_usage[] =
    "usage: blobnet train MODEL [options]\n"
    "Trains the network described by MODEL on the data its [data] section names, or on\n"
    "what the flags name (they override [data]; MNIST without either).\n"
    "  --dataset NAME      the data's format (the list below; default mnist)\n"
    "  --data PATH         the dataset's file or folder (default: the format's; for\n"
    "                      mnist $BLOBNET_DATA, else data/mnist)\n"
    "  --data-option K=V   a key of the format's (below), over [data]'s; may repeat\n"
    "  --holdout N         keep the last N training examples apart as a validation set,\n"
    "                      reported as val acc in every epoch line and in the log\n"
    "  --device SPEC       cpu, gpu, gpu:N or auto (default: auto, the GPU when present),\n"
    "                      or a list gpu:0,1,... to train on those GPUs as --gpus does\n"
    THREADS_HELP
    "  --gpus N            train on N GPUs of this machine (gpu 0..N-1), one process each\n"
    "  --rank R            with --world and --rendezvous: run as rank R (0..N-1) of N\n"
    "  --world N           processes that train together, on this or other machines\n"
    "  --rendezvous H:P    where the ranks meet: rank 0 listens on H:P, the others connect\n"
    "  --epochs N          epochs to train (a resumed run continues up to N)\n"
    "  --batch N           mini-batch size\n"
    "  --optimizer NAME    the optimizer (the list below; default sgd)\n"
    "  --lr X              base learning rate\n"
    "  --momentum X        momentum, for the optimizers below that read it\n"
    "  --weight-decay X    weight decay, applied as each optimizer below says\n"
    "  --lr-policy NAME    the learning-rate policy (the list below; default fixed)\n"
    "  --warmup N          scale the rate of step s < N by (s + 1) / N\n"
    "  --seed N            seed of initial weights, shuffling and dropout\n"
    "  --train-limit N     train on the first N training images only\n"
    "  --test-limit N      evaluate on the first N test images only\n"
    "  --save FILE         write a checkpoint (safetensors) after every epoch\n"
    "  --resume FILE       continue from a checkpoint written by --save\n"
    "  --checkpoint-every N  with --save, also write the checkpoint every N steps (it is\n"
    "                      replaced each time; a resume continues mid-epoch)\n"
    "  --debug-numerics N  every N steps, print each layer's mean |output|, |gradient|,\n"
    "                      |weights| and |weight gradients| to stderr\n"
    "  --quiet             print only errors and the final line\n"
    "  --log FILE          write a CSV metrics log (a row per epoch)\n"
    "  --log-every N       with --log, also a row every N steps\n"
    "  --tf32              allow TF32 tensor-core math on the GPU (faster, less exact)\n"
    "  --deterministic     only deterministic cuDNN algorithms: GPU runs repeat exactly\n"
    "  --autotune          choose each layer's GPU kernels by timing every candidate\n"
    "                      (blobnet's, cuDNN's, cuBLASLt's) instead of by the fixed rule\n"
    "  --precision P       fp32 (default), bf16 or bf16-strict: BF16 activations and\n"
    "                      products with FP32 master weights, gradients and optimizer (GPU\n"
    "                      only); bf16 trains in FP32 (as fp32 would) where a timing finds\n"
    "                      that faster for the model, and says so; bf16-strict never does\n"
    "  --plugin FILE       load a layer plugin (.so) first; may be given several times\n"
    "  --profile-steps A:B profiler capture (cudaProfilerStart/Stop) around steps A..B\n"
    "  --no-graph          launch every kernel of every step instead of replaying the\n"
    "                      step as a CUDA graph (the default on the GPU where it is safe)\n"
    "  --until-accuracy P  stop after the first epoch whose test accuracy reaches P percent\n"
    "  --shift N           augment: move each training image by up to N pixels each way\n"
    "                      (at most half its height and width; --pad says what moves in)\n"
    "  --flip, --no-flip   augment: mirror each training image left-right with probability\n"
    "                      1/2, or never (MNIST's digits must not be; Fashion-MNIST's may)\n"
    "  --pad zero|reflect  augment: what --shift moves in: 0 (default) or the image\n"
    "                      reflected at its edge (as torchvision's padding_mode='reflect')\n"
    "  --cutout N          augment: set an N x N square of each training image, centred at\n"
    "                      a random pixel and clipped to the image, to 0 after the [input]\n"
    "                      standardisation (the mean), in every channel; 0 turns it off\n"
    "Flags override the model file's [train] and [augment] sections. On a terminal, a\n"
    "live line shows each epoch's progress (batch, images/s, running loss and accuracy,\n"
    "time left). Evaluation and the test set are never augmented.\n"
    "SIGINT (Ctrl-C) or SIGTERM finishes the current step, saves the checkpoint (with\n"
    "--save) and exits with 130 or 143. A loss or weight that turns NaN or infinite stops\n"
    "training with an error naming the steps and the first layer where it shows; no\n"
    "checkpoint is written from then on, so the last good one stays.\n"
    "Several GPUs (a build with NCCL): --gpus N starts N copies of this program, ranks\n"
    "0..N-1, each training its share of every batch; the gradients are summed after\n"
    "every step. Rank 0 alone prints, logs and saves; the others print only errors,\n"
    "\"rank R: ...\". A signal reaches every rank; when one rank fails, the others are\n"
    "stopped and the exit code is the failed rank's. On several machines, start each\n"
    "rank yourself with --rank R --world N --rendezvous HOST:PORT (rank 0's address).\n"
    "BLOBNET_DIST_TIMEOUT (seconds, default 120) bounds every wait for the other ranks.\n"
    "The first epoch times the gradient all-reduces beside the backward pass and after\n"
    "it and keeps the faster (the same bits either way); BLOBNET_DIST_SCHEDULE=beside or\n"
    "after takes one instead. Between the GPUs of one machine the gradients are summed\n"
    "through each other's memory (BLOBNET_DIST_SUM=auto); =peers insists on it, =nccl\n"
    "takes NCCL's all-reduce. There, a bucket whose copies to the other ranks come to at\n"
    "most BLOBNET_DIST_PUSH bytes (default 1048576; 0: none) is written into each\n"
    "peer's memory and summed there, the sum applying the optimizer's update as it goes\n"
    "(BLOBNET_DIST_PUSH_UPDATE=0: an update pass after it instead; the same bits).\n";

static const char test_usage[] =
    "usage: blobnet test MODEL WEIGHTS [options]\n"
    "Evaluates saved weights on the test set and prints the accuracy.\n"
    "  --dataset NAME      the data's format, over the model's [data] (as for train)\n"
    "  --data PATH         the dataset's file or folder (as for train)\n"
    "  --data-option K=V   a key of the format's, over [data]'s; may repeat\n"
    "  --device SPEC       cpu, gpu, gpu:N or auto (default: the GPU when there is one)\n"
    THREADS_HELP
    "  --batch N           evaluation batch size (default 1000)\n"
    "  --precision P       fp32 (default) or bf16 (bf16-strict alike): evaluate with BF16\n"
    "                      activations (GPU only)\n"
    "  --plugin FILE       load a layer plugin (.so) first; may be given several times\n"
    "  --misclassified DIR write each misclassified image to DIR as\n"
    "                      <index>-true<label>-pred<class>.png (DIR is checked first)\n"
    "Also prints the confusion matrix (rows: true class, columns: predicted class)\n"
    "and each class's accuracy.\n";

static const char predict_usage[] =
    "usage: blobnet predict MODEL WEIGHTS IMAGE... [options]\n"
    "Prints the 3 most likely classes of each image with their probabilities.\n"
    "Images are PNG (any colour type and bit depth), PGM or PPM (P2, P3, P5, P6; maxval\n"
    "up to 65535) or JPEG, of any size. For a model of MNIST's shape (28x28, one channel)\n"
    "each is made grayscale and fitted as MNIST's digits were: cropped to the ink, scaled\n"
    "so its longer side is 20 of 28 pixels and centred by centre of mass; MNIST digits\n"
    "are light on dark. For any other model (1 or 3 channels, any size) each is made gray\n"
    "or RGB, scaled to cover the input and cropped to its centre, as the folder dataset\n"
    "format makes its images (transparent pixels become black).\n"
    "  --invert            the images are dark on light (ink on paper): invert them\n"
    "                      (for a digit model transparent pixels count as background\n"
    "                      either way)\n"
    "  --json              one JSON object per image and line:\n"
    "                      {\"file\":\"7.png\",\"top\":[{\"class\":7,\"p\":0.99},...]}\n"
    "  --device SPEC       cpu, gpu, gpu:N or auto (default: the GPU when there is one)\n"
    THREADS_HELP
    "  --plugin FILE       load a layer plugin (.so) first; may be given several times\n"
    "An image that cannot be read, or is blank, gets a one-line error on stderr and the\n"
    "others are still predicted; the exit code is then 1. A light background draws a\n"
    "warning for a digit model, and so does an image too small to hold a digit (under 7\n"
    "pixels).\n";

static const char summary_usage[] =
    "usage: blobnet summary MODEL [--dot] [--plugin FILE]...\n"
    "Prints each layer's name, type, output shape, parameters, forward MFLOPs per image and inputs.\n"
    "  --dot               print the network's graph in Graphviz's dot language instead\n"
    "                      (blobnet summary MODEL --dot | dot -Tpng -o model.png)\n"
    "  --plugin FILE       load a layer plugin (.so) first; may be given several times\n";

static const char data_usage[] =
    "usage: blobnet data [MODEL] [options]\n"
    "Prints what blobnet sees in a dataset: its format, the examples of each split, their\n"
    "shape, the classes with their counts, each channel's mean and std, and the first\n"
    "problem found (a class without training examples, a constant channel). The first\n"
    "command to run on new data. With MODEL, the data named by its [data] section (the flags\n"
    "override it) is read as training would read it: images fitted to the model's input.\n"
    "  --dataset NAME      the data's format (the list below; default mnist)\n"
    "  --data PATH         the dataset's file or folder\n"
    "  --data-option K=V   a key of the format's; may repeat\n"
    "  --write FORMAT:PATH write both splits out in another format (one whose line below\n"
    "                      says it writes), fitted to what that format holds\n"
    "  --plugin FILE       load a layer plugin (.so) first; may be given several times\n";

static const char check_layer_usage[] =
    "usage: blobnet check-layer TYPE [options]\n"
    "Checks a layer type against the layer contract on a one-layer network: shapes at batch 1\n"
    "and N, every output and input-gradient element written, gradients against central\n"
    "differences (CPU), parameter gradients added not overwritten (CPU and GPU), the evaluation\n"
    "pass and buffers, CPU against GPU, and bit-identical repeated passes. Prints a table;\n"
    "exits 1 when a check fails.\n"
    "  --plugin FILE       load a layer plugin (.so) first; may be given several times\n"
    "  --input C,H,W       shape of one input example (default 5,7,9); given again, the shape of\n"
    "                      the next input of a type that reads several\n"
    "  --inputs N          inputs the layer reads (default: as many as its type needs at\n"
    "                      least, or the number of --input shapes); each is a slice of the data\n"
    "  --options \"k=v ...\" the layer's keys, as in its model-file section\n"
    "  --device SPEC       cpu, gpu, gpu:N or auto (default auto: GPU checks when there is one)\n"
    "  --batch N           examples per pass, also compared with 1 (default 3)\n"
    "  --all-shapes        run the checks at a small shape (5,7,9, batch 3) and a realistic one\n"
    "                      (20,13,11, batch 10, every input); the error names the shape that failed\n"
    "  --stochastic        the layer draws random numbers in training (dropout): compare\n"
    "                      CPU and GPU in evaluation mode, and evaluation not with training\n"
    "                      (not for running statistics: those belong in buffers)\n"
    "  --eval-tolerance X  largest difference between evaluation and training once a layer's\n"
    "                      running statistics settled on one batch, relative (default 0.02)\n";

static const char time_usage[] =
    "usage: blobnet time MODEL [--batch N] [--iters N] [--device SPEC] [--threads N] [--tf32]\n"
    "                          [--autotune] [--precision fp32|bf16|bf16-strict] [--plugin FILE]...\n"
    "Times each layer's forward and backward pass and the update over N training steps\n"
    "(default 50, after 5 warm-up steps) on random data: CUDA events on the GPU, a\n"
    "monotonic clock on the CPU. --batch defaults to the model's [train] batch.\n"
    "  --plugin FILE       load a layer plugin (.so) first; may be given several times\n";

static const char conv_families_usage[] =
    "usage: blobnet conv-families [--batch N] [--channels C] [--height H] [--width W]\n"
    "                             [--filters F] [--size K] [--stride S] [--pad P] [--pass PASS]\n"
    "                             [--reps N] [--pooled] [--tf32] [--beside] [--device SPEC]\n"
    "                             [--seed N]\n"
    "Runs each of conv2d's kernel families, and cuDNN, alone on one convolution shape on the\n"
    "GPU: per pass, each runner's name, whether it applies (or why not), the time per call and\n"
    "the largest error against the CPU's im2col-and-BLAS result, relative to the output's\n"
    "largest value. Exits 1 when a runner's error is over its tolerance (1e-4, or 1e-2 with\n"
    "--tf32). Inputs are random (uniform in [-1, 1]).\n"
    "  --batch N           images (default 8)\n"
    "  --channels C        input channels (default 3)\n"
    "  --height H, --width W  input size (default 16x16)\n"
    "  --filters F         output channels (default 16)\n"
    "  --size K            square window (default 3)\n"
    "  --stride S, --pad P step (default 1) and zero border (default 0, smaller than K)\n"
    "  --pass PASS         forward, backward-data, backward-filter or all (default)\n"
    "  --reps N            timed calls after one warm-up call (default 20)\n"
    "  --pooled            a 2x2 max pooling reads the output (fused): the families that read\n"
    "                      the gradient through it take a random pooled gradient and argmax\n"
    "  --tf32              allow TF32 products (blobnet's tensor cores, cuDNN's)\n"
    "  --beside            the backward passes in the launch shapes a family gives them when\n"
    "                      both run side by side (each still runs alone here)\n"
    "  --device SPEC       gpu or gpu:N (default gpu)\n"
    "  --seed N            seed of the random inputs (default 1)\n";

const bn_command bn_commands[] = {
    {"train", "train a model on MNIST or your own data", train_usage, bn_cmd_train},
    {"test", "evaluate saved weights on the test set", test_usage, bn_cmd_test},
    {"predict", "classify PNG or PGM images with saved weights", predict_usage, bn_cmd_predict},
    {"summary", "print a model's layers, shapes and sizes", summary_usage, bn_cmd_summary},
    {"data", "show what blobnet sees in a dataset", data_usage, bn_cmd_data},
    {"check-layer", "check a layer type against the layer contract", check_layer_usage, bn_cmd_check_layer},
    {"time", "time each layer's forward and backward pass", time_usage, bn_cmd_time},
    {"conv-families", "run, check and time each convolution kernel family alone", conv_families_usage,
     bn_cmd_conv_families},
    {NULL, NULL, NULL, NULL},
};

static const bn_command *find_command(const char *name)
{
    for (const bn_command *c = bn_commands; c->name; c++)
        if (strcmp(c->name, name) == 0) return c;
    return NULL;
}

/* The registered layer types, wrapped into indented lines. */
static void print_layer_types(void)
{
    int col = 0;
    for (int i = 0; i < bn_layer_type_count(); i++) {
        const char *type = bn_layer_type_at(i)->type;
        if (col && col + 1 + (int)strlen(type) > 88) {
            putchar('\n');
            col = 0;
        }
        col += printf("%s%s", col ? " " : "  ", type);
    }
    putchar('\n');
}

static void print_main_help(void)
{
    printf("blobnet %s - a small deep-learning trainer in C on CUDA\n\n"
           "usage: blobnet COMMAND [options]\n\ncommands:\n", BLOBNET_VERSION);
    for (const bn_command *c = bn_commands; c->name; c++) printf("  %-12s %s\n", c->name, c->summary);
    printf("  %-12s %s\n", "help CMD", "show a command's options");
    printf("  %-12s %s\n\n", "help TYPE", "show a layer type's keys (--plugin FILE: a plugin's type)");
    printf("layer types (model-file sections):\n");
    print_layer_types();
    printf("\nRun 'blobnet CMD --help' for a command's options.\n"
           "Exit codes: 0 success, 1 failure at run time, 2 usage error.\n");
}

/* A layer type's help line, split at its "; keys: " (or "; no keys"), as every built-in writes
 * it; a line without either is printed whole. */
static void print_layer_help(const bn_layer_ops *ops)
{
    const char *help = ops->help ? ops->help : "";
    const char *keys = strstr(help, "; keys: "), *none = strstr(help, "; no keys");
    const char *end = keys ? keys : none ? none : help + strlen(help);
    printf("[%s] %.*s\n", ops->type, (int)(end - help), help);
    if (keys || none) printf("  keys: %s\n", keys ? keys + strlen("; keys: ") : "none");
    printf("  every section also takes: name, input (the layers it reads; default the one above)\n");
    int lo = ops->min_inputs ? ops->min_inputs : 1, hi = ops->max_inputs ? ops->max_inputs : 1;
    if (lo == hi) printf("  inputs: %d\n", lo);
    else printf("  inputs: %d to %d\n", lo, hi);
    if (ops->is_loss) printf("  a loss layer: reads the labels and starts the gradient\n");
    if (!bn_device_compiled()) return;
    if (!ops->forward_gpu || !ops->backward_gpu)
        printf("  GPU: %s on the CPU when the network is on the GPU\n",
               ops->forward_gpu ? "backward runs" : ops->backward_gpu ? "forward runs" : "runs");
    else printf("  GPU: forward and backward, %s\n", ops->graph_safe ? "graph_safe" : "not graph_safe (steps run kernel by kernel)");
}

/* `blobnet help [CMD | TYPE] [--plugin FILE]...`: the plugins load first, so that their types
 * are listed and described like the built-in ones. */
static int run_help(int argc, char **argv)
{
    const char *topic = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--plugin") == 0) {
            if (++i == argc) return bn_usage_error(NULL, "help: option --plugin needs a value");
            bn_status s = bn_plugin_load(argv[i]);
            if (s != BN_OK) return bn_fail(s);
        } else if (argv[i][0] == '-') {
            return bn_usage_error(NULL, "help: unknown option");
        } else if (topic) {
            return bn_usage_error(NULL, "help: expected one command or layer type");
        } else {
            topic = argv[i];
        }
    }
    if (!topic) {
        print_main_help();
        return 0;
    }
    if (find_command(topic)) {
        bn_print_command_help(topic);
        return 0;
    }
    const bn_layer_ops *ops = bn_find_layer(topic);
    if (!ops) {
        bn_cli_report("error", "help: '%s' is neither a command nor a layer type (see 'blobnet help')", topic);
        return 2;
    }
    print_layer_help(ops);
    return 0;
}

/* The table of dataset formats, for the help of the commands that read data. */
static void print_data_formats(void)
{
    printf("Dataset formats (--dataset NAME --data PATH, or [data] format and path):\n");
    for (int i = 0; i < bn_data_format_count(); i++) {
        const bn_data_format *f = bn_data_format_at(i);
        printf("  %-15s %s\n", f->name, f->reads);
        if (f->default_path) printf("  %-15s default PATH: %s\n", "", f->default_path);
        if (f->keys) printf("  %-15s keys: %s\n", "", f->keys);
        if (f->save) printf("  %-15s blobnet data --write %s:PATH writes it\n", "", f->name);
    }
}

/* An optimizer's or a policy's [train] keys with their defaults, under its line. */
static void print_keys(const bn_train_key *keys, int n)
{
    if (!n) return;
    printf("  %-15s keys:", "");
    for (int i = 0; i < n; i++) printf("%s %s (%g)", i ? "," : "", keys[i].name, keys[i].def);
    putchar('\n');
}

/* The tables of optimizers and learning-rate policies, for train's help. */
static void print_optimizers_and_policies(void)
{
    printf("Optimizers (--optimizer NAME, or [train] optimizer and its keys, defaults in parentheses):\n");
    for (int i = 0; i < bn_optimizer_type_count(); i++) {
        const bn_optimizer_type *t = bn_optimizer_type_at(i);
        printf("  %-15s %s\n", t->name, t->rule);
        print_keys(t->keys, t->num_keys);
    }
    printf("Learning-rate policies (--lr-policy NAME, or [train] lr_policy and its keys; the rate\n"
           "at step s of a run of T steps):\n");
    for (int i = 0; i < bn_lr_policy_count(); i++) {
        const bn_lr_policy *p = bn_lr_policy_at(i);
        printf("  %-15s %s\n", p->name, p->formula);
        print_keys(p->keys, p->num_keys);
    }
}

void bn_print_command_help(const char *cmd)
{
    for (const bn_command *c = bn_commands; c->name; c++) {
        if (strcmp(c->name, cmd) != 0) continue;
        fputs(c->usage, stdout);
        if (strstr(c->usage, "--dataset")) print_data_formats();
        if (strstr(c->usage, "--optimizer")) print_optimizers_and_policies();
    }
}

/* Whether /proc/self/exe is the file this code was loaded from. Under valgrind, or run by a
 * loader (ld.so ./blobnet), it names the tool or the loader instead: executing it would start
 * that without its launcher (valgrind stops with "You cannot run './blobnet' directly"). The
 * file holding a function of ours is found in /proc/self/maps, which shows it either way. */
static int exe_is_this_program(void)
{
    struct stat exe;
    FILE *maps = stat("/proc/self/exe", &exe) == 0 ? fopen("/proc/self/maps", "r") : NULL;
    if (!maps) return 0;
    uintptr_t here = (uintptr_t)&exe_is_this_program;
    char line[4096];
    int same = 0;
    while (fgets(line, sizeof line, maps)) {
        unsigned long lo, hi, inode;
        unsigned major_no, minor_no;
        if (sscanf(line, "%lx-%lx %*s %*s %x:%x %lu", &lo, &hi, &major_no, &minor_no, &inode) == 5 && here >= lo &&
            here < hi) {
            same = inode == exe.st_ino && makedev(major_no, minor_no) == exe.st_dev;
            break;
        }
    }
    fclose(maps);
    return same;
}

/* OpenBLAS reads its choice of kernels only when the library loads: where the CPU can run a
 * better class than OpenBLAS took for it (bn_blas_core_wanted), and the user has not chosen, the
 * program restarts once with that choice. A program run by a tool (valgrind) is not restarted:
 * OpenBLAS keeps its own choice there. Nor is one whose OpenBLAS already took kernels of that
 * class: the restart loads the program and its libraries a second time (60 ms with the CUDA
 * libraries, on a warm page cache), before a GPU run that never calls BLAS. */
static void choose_blas_kernels(char **argv)
{
    if (getenv("OPENBLAS_CORETYPE")) return;
    const char *core = bn_blas_core_wanted();
    if (!core || !exe_is_this_program() || setenv("OPENBLAS_CORETYPE", core, 0) != 0) return;
    execv("/proc/self/exe", argv); /* returns only on failure: carry on as we are */
}

int main(int argc, char **argv)
{
    bn_timeline_mark("main");
    choose_blas_kernels(argv);
    if (bn_cli_check_env() != BN_OK) {
        bn_cli_report("error", "%s", bn_last_error());
        return 2;
    }
    if (argc < 2) {
        print_main_help();
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        print_main_help();
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("blobnet %s (%s)\n", BLOBNET_VERSION, bn_device_build_info());
        return 0;
    }
    if (strcmp(cmd, "help") == 0) return run_help(argc - 1, argv + 1);
    const bn_command *c = find_command(cmd);
    if (!c) {
        bn_cli_report("error", "unknown command '%s'; run 'blobnet --help'", cmd);
        return 2;
    }
    return c->run(argc - 1, argv + 1);
}
