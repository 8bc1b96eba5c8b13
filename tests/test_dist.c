/* test_dist.c - what data-parallel training rests on without several GPUs: the split of a
 * global batch into shares, the example offset that makes a share's dropout mask and
 * augmentation draws those of the same examples in the whole batch (CPU path, and GPU path on a
 * device), the hash the ranks compare their parameters by (on the host and the device), and the
 * communicator's refusal in a build without NCCL. The collectives themselves
 * are tested on two GPUs (test_multigpu.c). */
#include <stdlib.h>

#include "core/hash.h"
#include "core/rng.h"
#include "dist/dist.h"
#include "layer_testing.h"
#include "testing.h"
#include "train/loader.h"
#include "train/trainer.h"

BN_TEST(dist_shares_split_a_batch_in_rank_order)
{
    int off, count;
    /* 10 examples on 3 ranks: offsets r * 10 / 3. */
    static const int want[3][2] = {{0, 3}, {3, 3}, {6, 4}};
    for (int r = 0; r < 3; r++) {
        bn_dist_share(10, 3, r, &off, &count);
        CHECK_MSG(off == want[r][0] && count == want[r][1], "rank %d: %d+%d, want %d+%d", r, off, count, want[r][0],
                  want[r][1]);
    }
    /* Fewer examples than ranks: some shares are empty, none negative. */
    static const int counts[4] = {0, 1, 0, 1};
    for (int r = 0; r < 4; r++) {
        bn_dist_share(2, 4, r, &off, &count);
        CHECK_MSG(count == counts[r], "2 on 4 ranks, rank %d: %d examples", r, count);
    }
    for (int n = 0; n <= 70; n++)
        for (int world = 1; world <= 9; world++) {
            int next = 0, least = n, most = 0;
            for (int r = 0; r < world; r++) {
                bn_dist_share(n, world, r, &off, &count);
                CHECK_MSG(off == next && count >= 0, "n %d world %d rank %d: offset %d, want %d", n, world, r, off,
                          next);
                next += count;
                least = count < least ? count : least;
                most = count > most ? count : most;
            }
            CHECK_MSG(next == n && most - least <= 1, "n %d world %d: covers %d, sizes %d..%d", n, world, next, least,
                      most);
        }
    /* One rank takes the whole batch: the single-GPU path. */
    bn_dist_share(64, 1, 0, &off, &count);
    CHECK(off == 0 && count == 64);
    /* No overflow where rank * n passes INT_MAX. */
    bn_dist_share(1 << 30, 64, 63, &off, &count);
    CHECK(off == 63 * (1 << 24) && count == 1 << 24);
    return BN_PASS;
}

/* BLOBNET_DIST_SUM's values, and a one-line error naming the variable for anything else. */
BN_TEST(dist_sum_setting_reads_auto_peers_and_nccl)
{
    static const char *const text[] = {NULL, "", "auto", "peers", "nccl"};
    static const int want[] = {BN_DIST_SUM_AUTO, BN_DIST_SUM_AUTO, BN_DIST_SUM_AUTO, BN_DIST_SUM_PEERS,
                               BN_DIST_SUM_NCCL};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int way = -1;
        CHECK_MSG(bn_dist_sum_parse(text[i], &way) == BN_OK && way == want[i], "'%s': %d, want %d",
                  text[i] ? text[i] : "(unset)", way, want[i]);
    }
    int way = -1;
    CHECK(bn_dist_sum_parse("Peers", &way) == BN_ERR_USAGE);
    CHECK_MSG(strstr(bn_last_error(), "BLOBNET_DIST_SUM=Peers") && strstr(bn_last_error(), "auto, peers, nccl"),
              "%s", bn_last_error());
    return BN_PASS;
}

BN_TEST(dist_without_nccl_every_entry_point_says_what_is_missing)
{
    if (bn_dist_compiled()) BN_SKIP_TEST("this build has NCCL");
    const char *why = bn_dist_missing();
    CHECK_MSG(strstr(why, "built without") && strstr(why, "NCCL"), "%s", why);
    unsigned char id[BN_DIST_ID_BYTES];
    bn_dist d = {.rank = 0, .world = 2};
    double v[2] = {1, 2};
    int any = 7, updated = 7;
    bn_status calls[] = {bn_dist_unique_id(id, sizeof id), bn_dist_open(&d, id, NULL),
                         bn_dist_attach_grads(&d, NULL, NULL, 0),
                         bn_dist_allreduce_grads(&d, NULL, NULL, 0, 1.0),
                         bn_dist_allreduce_update(&d, NULL, NULL, 0, 1.0, NULL, &updated), bn_dist_join_comm(&d, NULL),
                         bn_dist_average(&d, NULL, NULL, 0),
                         bn_dist_sum(&d, NULL, v, 2), bn_dist_max(&d, NULL, 1, &any),
                         bn_dist_max_begin(&d, NULL, 1), bn_dist_max_end(&d, NULL, &any),
                         bn_dist_check_same(&d, NULL, 0, 0), bn_dist_wait(&d, NULL)};
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) CHECK_MSG(calls[i] == BN_ERR_USAGE, "call %zu", i);
    CHECK_MSG(strcmp(bn_last_error(), why) == 0, "%s", bn_last_error());
    CHECK(v[0] == 1 && v[1] == 2 && any == 7 && updated == 0);
    bn_dist_close(&d, 0);
    bn_dist_close(NULL, 1);
    return BN_PASS;
}

#define DROP_PER_EXAMPLE 64
#define DROP_BATCH 8
#define DROP_COUNT (DROP_PER_EXAMPLE * DROP_BATCH)

/* A dropout layer's training output for examples [first, first + n) of in at `offset`. */
static bn_status dropout_share(bn_net *net, const float *in, int first, int n, int offset, float *out)
{
    BN_TRY(bn_net_set_batch(net, n));
    BN_TRY(lt_write(net->input, in + first * DROP_PER_EXAMPLE, (size_t)n * DROP_PER_EXAMPLE));
    net->pass.step = 17;
    net->pass.offset = offset;
    BN_TRY(bn_net_forward(net, 1));
    return lt_read(bn_net_output(net), out, (size_t)n * DROP_PER_EXAMPLE);
}

/* Forwards a batch of 8 whole, then as two shares at offsets 0 and 4: the same elements dropped.
 * The second share at offset 0 drops others (the offset is what makes them agree). */
static int dropout_split_matches(bn_ctx *ctx)
{
    bn_net *net;
    CHECK_OK(bn_net_from_text("[input]\nchannels=1\nheight=8\nwidth=8\n[dropout]\nrate=0.5\n", "drop.cfg", &net));
    CHECK_OK(bn_net_setup(net, DROP_BATCH, ctx, 0, 4321));
    float *in = malloc(DROP_COUNT * sizeof *in), *whole = malloc(DROP_COUNT * sizeof *whole),
          *split = malloc(DROP_COUNT * sizeof *split);
    CHECK(in && whole && split);
    for (int i = 0; i < DROP_COUNT; i++) in[i] = 1.0f + (float)i / DROP_COUNT; /* never 0: 0 means dropped */
    CHECK_OK(dropout_share(net, in, 0, DROP_BATCH, 0, whole));
    CHECK_OK(dropout_share(net, in, 0, 4, 0, split));
    CHECK_OK(dropout_share(net, in, 4, 4, 4, split + 4 * DROP_PER_EXAMPLE));
    int dropped = 0, differ = 0;
    for (int i = 0; i < DROP_COUNT; i++) {
        CHECK_MSG(whole[i] == split[i], "element %d (example %d): %g whole, %g as a share", i, i / DROP_PER_EXAMPLE,
                  whole[i], split[i]);
        dropped += whole[i] == 0.0f;
    }
    CHECK_MSG(dropped > DROP_COUNT / 4 && dropped < 3 * DROP_COUNT / 4, "%d of %d dropped at rate 0.5", dropped,
              DROP_COUNT);
    CHECK_OK(dropout_share(net, in, 4, 4, 0, split));
    for (int i = 0; i < 4 * DROP_PER_EXAMPLE; i++) differ += (split[i] == 0.0f) != (whole[4 * DROP_PER_EXAMPLE + i] == 0.0f);
    CHECK_MSG(differ > 0, "the second share's mask at offset 0 equals its mask at offset 4");
    free(in), free(whole), free(split);
    bn_net_free(net);
    return BN_PASS;
}

/* The hash the ranks compare their parameters by (core/hash.h): every word and its place count. */
BN_TEST(dist_word_hash_sees_each_word_and_its_place)
{
    enum { N = 4099 };
    static uint32_t w[N];
    bn_rng rng;
    bn_rng_seed(&rng, 7, 0);
    for (int i = 0; i < N; i++) w[i] = (uint32_t)(bn_rng_next(&rng) >> 32);
    const uint64_t h = bn_hash_words(w, N);
    CHECK(h == bn_hash_words(w, N) && h != bn_hash_words(w, N - 1) && bn_hash_words(w, 0) == 0);
    for (int i = 0; i < N; i += 97) {
        w[i] ^= 1u << (i % 32);
        CHECK_MSG(bn_hash_words(w, N) != h, "word %d's bit %d left the hash as it was", i, i % 32);
        w[i] ^= 1u << (i % 32);
    }
    uint32_t t = w[3];
    w[3] = w[4000], w[4000] = t;
    CHECK_MSG(bn_hash_words(w, N) != h, "two words swapped left the hash as it was");
    w[4000] = w[3], w[3] = t;
    /* A sum of the words' mixes: any order of the words gives it (the device adds in its own). */
    uint64_t back = 0;
    for (int i = N - 1; i >= 0; i--) back += bn_hash_word((uint64_t)i, w[i]);
    CHECK(back == h);
    return BN_PASS;
}

BN_TEST(gpu_dist_word_hash_on_the_device_is_the_hosts)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    static const size_t sizes[] = {0, 1, 255, 256, 257, 870634, 3000001};
    uint32_t *w = malloc(3000001 * sizeof *w);
    void *d = NULL;
    CHECK(w != NULL);
    CHECK_OK(bn_device_alloc(&d, 3000001 * sizeof *w));
    bn_rng rng;
    bn_rng_seed(&rng, 11, 0);
    for (size_t i = 0; i < 3000001; i++) w[i] = (uint32_t)bn_rng_next(&rng);
    CHECK_OK(bn_device_h2d(d, w, 3000001 * sizeof *w));
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        uint64_t got = 1;
        CHECK_OK(bn_gpu_hash_words(d, sizes[k], &got, ctx));
        CHECK_MSG(got == bn_hash_words(w, sizes[k]), "%zu words: the device's hash %016llx, the host's %016llx",
                  sizes[k], (unsigned long long)got, (unsigned long long)bn_hash_words(w, sizes[k]));
    }
    bn_device_free(d);
    free(w);
    return BN_PASS;
}

BN_TEST(dist_dropout_share_takes_its_part_of_the_batch_mask)
{
    return dropout_split_matches(NULL);
}

BN_TEST(gpu_dist_dropout_share_takes_its_part_of_the_batch_mask)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    return dropout_split_matches(ctx);
}

#define AUG_H 6
#define AUG_W 5
#define AUG_PIXELS (AUG_H * AUG_W)

/* Loads `n` training examples from position `cursor` of the order at step 9 and `offset`. */
static bn_status augmented_share(bn_loader *ld, bn_net *net, int cursor, int n, int offset, float *out)
{
    BN_TRY(bn_loader_set_cursor(ld, cursor));
    BN_TRY(bn_loader_set_step(ld, 9));
    net->pass.offset = offset;
    BN_TRY(bn_loader_fill_next(ld, net, n, 1));
    return lt_read(net->input, out, (size_t)n * AUG_PIXELS);
}

/* Eight distinct images shifted and flipped: loaded whole, then as two shares at offsets 0 and
 * 4, every pixel the same; the loader's stride moves a share's cursor past the other shares. */
static int augmentation_split_matches(bn_ctx *ctx)
{
    static unsigned char pixels[DROP_BATCH * AUG_PIXELS];
    static uint16_t labels[DROP_BATCH];
    for (int i = 0; i < DROP_BATCH * AUG_PIXELS; i++) pixels[i] = (unsigned char)(1 + (i * 37) % 250);
    for (int e = 0; e < DROP_BATCH; e++) labels[e] = (uint16_t)e;
    bn_dataset d = {.count = DROP_BATCH, .channels = 1, .height = AUG_H, .width = AUG_W, .num_classes = 10,
                    .pixels = pixels, .labels = labels};
    bn_net *net;
    CHECK_OK(bn_net_from_text("[input]\nchannels=1\nheight=6\nwidth=5\n[augment]\nshift=2\nflip=1\n[dense]\noutputs=2\n",
                              "aug.cfg", &net));
    CHECK_OK(bn_net_setup(net, DROP_BATCH, ctx, 0, 77));
    bn_loader ld;
    CHECK_OK(bn_loader_init(&ld, &d, ctx));
    CHECK_OK(bn_loader_set_order(&ld, 0, 0));
    float whole[DROP_BATCH * AUG_PIXELS], split[DROP_BATCH * AUG_PIXELS], other[4 * AUG_PIXELS];
    CHECK_OK(augmented_share(&ld, net, 0, DROP_BATCH, 0, whole));
    ld.stride = DROP_BATCH;
    CHECK_OK(augmented_share(&ld, net, 0, 4, 0, split));
    CHECK_MSG(ld.host_cursor == DROP_BATCH, "the cursor moved to %d, not by the stride to %d", ld.host_cursor,
              DROP_BATCH);
    CHECK_OK(augmented_share(&ld, net, 4, 4, 4, split + 4 * AUG_PIXELS));
    for (int i = 0; i < DROP_BATCH * AUG_PIXELS; i++)
        CHECK_MSG(whole[i] == split[i], "pixel %d of example %d: %g whole, %g as a share", i % AUG_PIXELS,
                  i / AUG_PIXELS, whole[i], split[i]);
    /* At offset 0 the second share's examples draw the first share's moves instead. */
    CHECK_OK(augmented_share(&ld, net, 4, 4, 0, other));
    CHECK(memcmp(other, whole + 4 * AUG_PIXELS, sizeof other) != 0);
    bn_loader_free(&ld);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(dist_augmentation_share_draws_as_in_the_whole_batch)
{
    return augmentation_split_matches(NULL);
}

BN_TEST(gpu_dist_augmentation_share_draws_as_in_the_whole_batch)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    return augmentation_split_matches(ctx);
}

/* 44 steps of 32 an epoch, the last one short: more than twice the trainer's STOP_EVERY, so that
 * stop agreements are queued ahead and read later as well as made at once. */
#define ONE_TRAIN 1400
#define ONE_TEST 100
#define ONE_PIXELS 64

static const char one_rank_model[] =
    "[input]\nchannels=1\nheight=8\nwidth=8\n[train]\nbatch=32\nlr=0.05\nmomentum=0.9\nseed=3\n"
    "[conv2d]\nfilters=4\nsize=3\n[relu]\n[maxpool]\nsize=2\nstride=2\n[dense]\noutputs=16\n[relu]\n"
    "[dense]\noutputs=4\n[softmax_ce]\n";

/* Two epochs of the small net above on d and t from the same seed, as one rank of a group when
 * dist is set, every step eager with no_graph; *params receives the final weights (malloc'd)
 * and *acc the test accuracy. */
static bn_status train_small(bn_ctx *ctx, const bn_dataset *d, const bn_dataset *t, bn_dist *dist, int no_graph,
                             float **params, size_t *count, double *acc)
{
    bn_net *net;
    bn_optimizer *opt = NULL;
    BN_TRY(bn_net_from_text(one_rank_model, "one.cfg", &net));
    bn_status s = bn_net_setup(net, 32, ctx, 0, 3);
    if (s == BN_OK) s = bn_optimizer_create(net, &net->train, &opt);
    bn_trainer_opts opts = {.epochs = 2, .dist = dist, .no_graph = no_graph};
    bn_train_state st = {.seed = 3};
    bn_epoch_report last;
    if (s == BN_OK) s = bn_train(net, opt, d, t, &opts, &st, &last);
    const float *w = s == BN_OK ? bn_blob_host_rd(net->params) : NULL;
    if (s == BN_OK && !w) s = bn_last_status();
    if (s == BN_OK) {
        *count = bn_blob_count(net->params);
        *params = malloc(*count * sizeof **params);
        if (*params) memcpy(*params, w, *count * sizeof **params);
        else s = bn_error(BN_ERR_NOMEM, "test: no memory for the weights");
        *acc = last.test_acc;
    }
    bn_optimizer_free(opt);
    bn_net_free(net);
    return s;
}

/* The run of train_small in a group of one, against the run alone. */
static int one_rank_run(bn_ctx *ctx, const bn_dataset *d, const bn_dataset *t, int no_graph, const float *alone,
                        size_t n_alone, double acc_alone)
{
    float *grouped = NULL;
    size_t n_grouped = 0;
    double acc_grouped = 0;
    unsigned char id[BN_DIST_ID_BYTES];
    CHECK_OK(bn_dist_unique_id(id, sizeof id));
    bn_dist group = {.rank = 0, .world = 1, .timeout_s = 60};
    CHECK_OK(bn_dist_open(&group, id, ctx));
    char dir[512], file[600];
    snprintf(dir, sizeof dir, "%s", bn_test_tmpdir());
    setenv("BLOBNET_RANK_WEIGHTS", dir, 1);
    bn_status s = train_small(ctx, d, t, &group, no_graph, &grouped, &n_grouped, &acc_grouped);
    unsetenv("BLOBNET_RANK_WEIGHTS");
    bn_dist_close(&group, s != BN_OK);
    CHECK_MSG(s == BN_OK, "training as a group of one%s: %s", no_graph ? " (eager)" : "", bn_last_error());
    CHECK(group.comm == NULL && group.stream == NULL);
    CHECK(n_alone == n_grouped && n_alone > 0);
    size_t differ = 0, first = 0;
    for (size_t i = 0; i < n_alone; i++)
        if (alone[i] != grouped[i] && !differ++) first = i;
    CHECK_MSG(differ == 0, "%s: %zu of %zu weights differ, the first at %zu: %.9g alone, %.9g in a group",
              no_graph ? "eager" : "graph", differ, n_alone, first, alone[first], grouped[first]);
    CHECK_NEAR(acc_alone, acc_grouped, 1e-6);
    snprintf(file, sizeof file, "%s/rank0.safetensors", dir);
    FILE *f = fopen(file, "rb");
    CHECK_MSG(f != NULL, "BLOBNET_RANK_WEIGHTS wrote no %s", file);
    fclose(f);
    remove(file);
    free(grouped);
    return BN_PASS;
}

/* A group of one rank goes through every collective of the trainer (per-layer all-reduces in
 * the eager steps and in the replayed graph, a short last batch, sharded evaluation, stop
 * agreements queued ahead and made at once, the parameter hash, BLOBNET_RANK_WEIGHTS) and must
 * end with exactly the weights of the same run without a group, replaying graphs and eager: each
 * sum of one rank's gradients scaled by 1 is that gradient. */
BN_TEST(gpu_dist_one_rank_group_trains_exactly_like_one_gpu)
{
    if (!bn_dist_compiled()) BN_SKIP_TEST("built without NCCL");
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    int was_deterministic = ctx->deterministic;
    ctx->deterministic = 1;
    static unsigned char pixels[(ONE_TRAIN + ONE_TEST) * ONE_PIXELS];
    static uint16_t labels[ONE_TRAIN + ONE_TEST];
    bn_rng r;
    bn_rng_seed(&r, 11, 0);
    for (int e = 0; e < ONE_TRAIN + ONE_TEST; e++) {
        labels[e] = (uint16_t)bn_rng_below(&r, 4);
        /* Each class lights its own quarter of the image, so the net learns something. */
        for (int i = 0; i < ONE_PIXELS; i++)
            pixels[e * ONE_PIXELS + i] = (unsigned char)((i / 16 == labels[e] ? 160 : 0) + bn_rng_below(&r, 90));
    }
    bn_dataset d = {.count = ONE_TRAIN, .channels = 1, .height = 8, .width = 8, .num_classes = 4,
                    .pixels = pixels, .labels = labels};
    bn_dataset t = d;
    t.count = ONE_TEST;
    t.pixels = pixels + ONE_TRAIN * ONE_PIXELS;
    t.labels = labels + ONE_TRAIN;
    float *alone = NULL;
    size_t n_alone = 0;
    double acc_alone = 0;
    bn_status s = train_small(ctx, &d, &t, NULL, 0, &alone, &n_alone, &acc_alone);
    int ok = s == BN_OK;
    for (int no_graph = 0; ok && no_graph <= 1; no_graph++)
        ok = one_rank_run(ctx, &d, &t, no_graph, alone, n_alone, acc_alone) == BN_PASS;
    ctx->deterministic = was_deterministic;
    free(alone);
    CHECK_OK(s);
    CHECK_MSG(acc_alone > 0.5, "the net learned nothing (test accuracy %.3f): the comparison proves little", acc_alone);
    CHECK(ok);
    return BN_PASS;
}
