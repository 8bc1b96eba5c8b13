/* The batch loader: order, standardisation and partial batches on the CPU path; training
 * batches augmented as [augment] says (shift, flip, zero or reflect padding, cutout), evaluation
 * batches never; the GPU's gather against the CPU's, bit for bit, eagerly and through a replayed
 * CUDA graph, on pixels and on float values, and so the GPU's batches staged a step ahead. */
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "gpu/graph.h"
#include "layer_testing.h"
#include "testing.h"
#include "train/loader.h"

static unsigned char pixels[5 * 4];
static uint16_t labels[5] = {3, 1, 4, 1, 5};

BN_TEST(loader_fills_standardised_batches_in_order)
{
    for (int i = 0; i < 20; i++) pixels[i] = (unsigned char)(i * 12);
    bn_dataset d = {.count = 5, .channels = 1, .height = 2, .width = 2, .num_classes = 10,
                    .pixels = pixels, .labels = labels};
    bn_net *net;
    CHECK_OK(bn_net_from_text("[input]\nchannels=1\nheight=2\nwidth=2\nmean=0.5\nstd=0.25\n[dense]\noutputs=2\n",
                              "l.cfg", &net));
    CHECK(net->input_mean[0] == 0.5f && net->input_std[0] == 0.25f);
    CHECK_OK(bn_net_setup(net, 3, NULL, 0, 1));
    bn_loader ld;
    CHECK_OK(bn_loader_init(&ld, &d, NULL));
    CHECK_OK(bn_loader_set_order(&ld, 0, 0));
    CHECK_OK(bn_loader_fill(&ld, net, 3, 2)); /* the partial last batch: examples 3 and 4 */
    CHECK(net->batch == 2 && net->input->n == 2);
    const float *x = bn_blob_host_rd(net->input), *y = bn_blob_host_rd(net->labels);
    for (int i = 0; i < 8; i++) CHECK_NEAR(x[i], ((12 + i) * 12 / 255.0 - 0.5) / 0.25, 1e-5);
    CHECK(y[0] == 1.0f && y[1] == 5.0f);
    CHECK_OK(bn_loader_set_order(&ld, 1, 42));
    int seen[5] = {0};
    for (int i = 0; i < 5; i++) seen[ld.order[i]]++;
    for (int i = 0; i < 5; i++) CHECK(seen[i] == 1);
    CHECK_ERR(bn_loader_fill(&ld, net, 4, 2), BN_ERR_INTERNAL, "outside the dataset");
    bn_loader_free(&ld);
    bn_net_free(net);
    return BN_PASS;
}

/* A net over c x h x w inputs standardised as `norm` says ([input]'s mean and std lines), with
 * `augment` (a model file's [augment] section, or "") after [input], set up for `batch` examples. */
static bn_status normed_net(int c, int h, int w, const char *norm, const char *augment, int batch, bn_ctx *ctx,
                            uint64_t seed, bn_net **net)
{
    char text[512];
    snprintf(text, sizeof text, "[input]\nchannels=%d\nheight=%d\nwidth=%d\n%s%s[dense]\noutputs=2\n", c, h, w, norm,
             augment);
    BN_TRY(bn_net_from_text(text, "augment.cfg", net));
    return bn_net_setup(*net, batch, ctx, 0, seed);
}

/* The same with mean 0.5 and std 0.25 for every channel. */
static bn_status augmented_net(int c, int h, int w, const char *augment, int batch, bn_ctx *ctx, uint64_t seed,
                               bn_net **net)
{
    return normed_net(c, h, w, "mean=0.5\nstd=0.25\n", augment, batch, ctx, seed, net);
}

/* A raw pixel as the input sees it, with the nets' mean and std: the loader's two operations. */
static float standardised(int v)
{
    return ((float)v / 255.0f - 0.5f) / 0.25f;
}

#define HAND_H 3
#define HAND_W 4
#define HAND_PIXELS (HAND_H * HAND_W)
#define HAND_COPIES 16

/* The example moved by draw d as the section says it is, in two steps: translated by (dx, dy)
 * with 0 moved in, then each row reversed when d.flip is set. */
/* An order made ahead (bn_loader_prepare_order) is the one set_order would make from its seed,
 * taken once; a set_order with another seed, or a second one, shuffles as before. */
BN_TEST(loader_order_made_ahead_is_the_order_of_its_seed)
{
    static unsigned char many[60 * 4];
    static uint16_t many_labels[60];
    bn_dataset d = {.count = 60, .channels = 1, .height = 2, .width = 2, .num_classes = 10,
                    .pixels = many, .labels = many_labels};
    bn_loader ld, ref;
    CHECK_OK(bn_loader_init(&ld, &d, NULL));
    CHECK_OK(bn_loader_init(&ref, &d, NULL));
    CHECK_OK(bn_loader_prepare_order(&ld, 8));
    CHECK(ld.prepared && ld.prepared_seed == 8);
    CHECK_OK(bn_loader_set_order(&ref, 1, 8));
    CHECK(memcmp(ld.order, ref.order, 60 * sizeof(int)) == 0);
    /* Taken: the order stays, and the mark goes. */
    ld.order[0] ^= 1; /* would show a second shuffle as a difference from the edit */
    CHECK_OK(bn_loader_set_order(&ld, 1, 8));
    CHECK(!ld.prepared && ld.order[0] == (ref.order[0] ^ 1));
    ld.order[0] ^= 1;
    /* Not taken twice: a second set_order with the same seed shuffles again, to the same order. */
    CHECK_OK(bn_loader_set_order(&ld, 1, 8));
    CHECK(memcmp(ld.order, ref.order, 60 * sizeof(int)) == 0);
    /* Another seed than the prepared one: shuffled from that seed. */
    CHECK_OK(bn_loader_prepare_order(&ld, 9));
    CHECK_OK(bn_loader_set_order(&ld, 1, 10));
    CHECK_OK(bn_loader_set_order(&ref, 1, 10));
    CHECK(!ld.prepared && memcmp(ld.order, ref.order, 60 * sizeof(int)) == 0);
    int moved = 0;
    for (int i = 0; i < 60; i++) moved += ld.order[i] != i;
    CHECK_MSG(moved > 30, "seed 10's order leaves %d of 60 examples in place", 60 - moved);
    /* The natural order never takes a prepared one. */
    CHECK_OK(bn_loader_prepare_order(&ld, 11));
    CHECK_OK(bn_loader_set_order(&ld, 0, 11));
    for (int i = 0; i < 60; i++) CHECK(ld.order[i] == i);
    bn_loader_free(&ld);
    bn_loader_free(&ref);
    return BN_PASS;
}

static void move_by_hand(const unsigned char *image, bn_augment_draw d, unsigned char *out)
{
    unsigned char moved[HAND_PIXELS];
    for (int r = 0; r < HAND_H; r++)
        for (int c = 0; c < HAND_W; c++) {
            int sr = r - d.dy, sc = c - d.dx;
            moved[r * HAND_W + c] = sr >= 0 && sr < HAND_H && sc >= 0 && sc < HAND_W ? image[sr * HAND_W + sc] : 0;
        }
    for (int r = 0; r < HAND_H; r++)
        for (int c = 0; c < HAND_W; c++) out[r * HAND_W + c] = moved[r * HAND_W + (d.flip ? HAND_W - 1 - c : c)];
}

/* One 3 x 4 image (pixel (r, c) is 10 + 20 * (4r + c)) 16 times over, shift 1 and flip: every
 * example of 40 training batches is the image moved by its draw, and the two moves written out
 * below come out exactly, the pixels moved in at (0 - mean) / std = -2. */
BN_TEST(loader_shift_and_flip_move_a_hand_made_image)
{
    static unsigned char pixels_hm[HAND_COPIES * HAND_PIXELS];
    static uint16_t labels_hm[HAND_COPIES];
    for (int e = 0; e < HAND_COPIES; e++) {
        labels_hm[e] = (uint16_t)(e % 10);
        for (int k = 0; k < HAND_PIXELS; k++) pixels_hm[e * HAND_PIXELS + k] = (unsigned char)(10 + 20 * k);
    }
    const unsigned char *image = pixels_hm;
    /* Right and down by one; left by one, then mirrored. */
    static const unsigned char right_down[HAND_PIXELS] = {0, 0, 0, 0, 0, 10, 30, 50, 0, 90, 110, 130};
    static const unsigned char left_mirrored[HAND_PIXELS] = {0, 70, 50, 30, 0, 150, 130, 110, 0, 230, 210, 190};
    bn_dataset d = {.count = HAND_COPIES, .channels = 1, .height = HAND_H, .width = HAND_W, .num_classes = 10,
                    .pixels = pixels_hm, .labels = labels_hm};
    bn_net *net;
    CHECK_OK(augmented_net(1, HAND_H, HAND_W, "[augment]\nshift=1\nflip=1\n", HAND_COPIES, NULL, 5, &net));
    CHECK(standardised(0) == -2.0f);
    bn_loader ld;
    CHECK_OK(bn_loader_init(&ld, &d, NULL));
    int seen[3][3][2] = {{{0}}}, right_downs = 0, left_mirrors = 0;
    for (unsigned long long step = 0; step < 40; step++) {
        CHECK_OK(bn_loader_set_cursor(&ld, 0));
        CHECK_OK(bn_loader_set_step(&ld, step));
        CHECK_OK(bn_loader_fill_next(&ld, net, HAND_COPIES, 1));
        const float *x = bn_blob_host_rd(net->input), *y = bn_blob_host_rd(net->labels);
        CHECK(x && y);
        for (int e = 0; e < HAND_COPIES; e++) {
            bn_augment_draw dr = bn_augment_pick(net->augment, HAND_H, HAND_W, 5, step, (uint64_t)e);
            seen[dr.dx + 1][dr.dy + 1][dr.flip] = 1;
            unsigned char want[HAND_PIXELS];
            move_by_hand(image, dr, want);
            const unsigned char *written = NULL;
            if (dr.dx == 1 && dr.dy == 1 && !dr.flip) written = right_down, right_downs++;
            if (dr.dx == -1 && dr.dy == 0 && dr.flip) written = left_mirrored, left_mirrors++;
            for (int k = 0; k < HAND_PIXELS; k++) {
                const float got = x[e * HAND_PIXELS + k];
                CHECK_MSG(got == standardised(want[k]), "step %llu, example %d (dx %d, dy %d, flip %d), pixel %d: "
                          "%.9g, expected %.9g", step, e, dr.dx, dr.dy, dr.flip, k, got, standardised(want[k]));
                if (written) CHECK_MSG(got == standardised(written[k]), "step %llu, example %d, pixel %d", step, e, k);
            }
            CHECK(y[e] == (float)(e % 10));
        }
    }
    for (int i = 0; i < 18; i++)
        CHECK_MSG(seen[i / 6][i / 2 % 3][i % 2], "no draw of dx %d, dy %d, flip %d in 640", i / 6 - 1, i / 2 % 3 - 1,
                  i % 2);
    CHECK(right_downs > 0 && left_mirrors > 0);
    bn_loader_free(&ld);
    bn_net_free(net);
    return BN_PASS;
}

#define COLOUR_C 3
#define COLOUR_H 5
#define COLOUR_W 6
#define COLOUR_PLANE (COLOUR_H * COLOUR_W)
#define COLOUR_PIXELS (COLOUR_C * COLOUR_PLANE)
#define COLOUR_PAD 2

/* Pixel k = 6 * row + column of channel c of the colour image. */
static unsigned char colour_pixel(int c, int k)
{
    return (unsigned char)(8 * k + 3 * c + 1);
}

/* Row or column i of a side of n padded by COLOUR_PAD each way as numpy's np.pad(mode='reflect')
 * lays it out: the COLOUR_PAD entries before the first one, then the side, then the
 * COLOUR_PAD entries before the last one, each run mirrored. */
static int padded_index(int i, int n)
{
    if (i < COLOUR_PAD) return COLOUR_PAD - i;
    if (i < COLOUR_PAD + n) return i - COLOUR_PAD;
    return n - 2 - (i - COLOUR_PAD - n);
}

/* Pixel k of channel c of the colour image moved by d as torchvision does it: padded by
 * COLOUR_PAD with reflection, cropped at row COLOUR_PAD - dy and column COLOUR_PAD - dx, then
 * mirrored when d.flip is set. */
static unsigned char move_colour_by_hand(bn_augment_draw d, int c, int k)
{
    int r = k / COLOUR_W, col = k % COLOUR_W;
    if (d.flip) col = COLOUR_W - 1 - col;
    int pr = COLOUR_PAD - d.dy + r, pc = COLOUR_PAD - d.dx + col;
    return colour_pixel(c, padded_index(pr, COLOUR_H) * COLOUR_W + padded_index(pc, COLOUR_W));
}

/* A 3 x 5 x 6 image 16 times over, shift 2, flip, reflect padding and a cutout of 3, as pixels and
 * as the float values those pixels are fed as: every example of 40 training batches is the image
 * moved by its draw, standardised, with exactly the square of its draw set to 0 in every channel;
 * the move written out below (left by 2, down by 2, mirrored) comes out exactly, and both clipped
 * and whole squares are seen. */
BN_TEST(loader_reflect_padding_and_cutout_on_a_hand_made_colour_image)
{
    static unsigned char pixels_c[HAND_COPIES * COLOUR_PIXELS];
    static float values_c[HAND_COPIES * COLOUR_PIXELS];
    static uint16_t labels_c[HAND_COPIES];
    for (int e = 0; e < HAND_COPIES; e++) {
        labels_c[e] = (uint16_t)(e % 10);
        for (int c = 0; c < COLOUR_C; c++)
            for (int k = 0; k < COLOUR_PLANE; k++) {
                pixels_c[(e * COLOUR_C + c) * COLOUR_PLANE + k] = colour_pixel(c, k);
                values_c[(e * COLOUR_C + c) * COLOUR_PLANE + k] = (float)colour_pixel(c, k) / 255.0f;
            }
    }
    /* The source pixel of each pixel moved left by 2, down by 2 and mirrored: rows 2, 1, 0, 1, 2
     * and columns 3, 4, 5, 4, 3, 2. */
    static const int written[COLOUR_PLANE] = {15, 16, 17, 16, 15, 14, 9, 10, 11, 10, 9, 8, 3, 4, 5,
                                              4,  3,  2,  9,  10, 11, 10, 9, 8,  15, 16, 17, 16, 15, 14};
    for (int as_values = 0; as_values < 2; as_values++) {
        bn_dataset d = {.count = HAND_COPIES, .channels = COLOUR_C, .height = COLOUR_H, .width = COLOUR_W,
                        .num_classes = 10, .pixels = as_values ? NULL : pixels_c,
                        .values = as_values ? values_c : NULL, .labels = labels_c};
        bn_net *net;
        CHECK_OK(augmented_net(COLOUR_C, COLOUR_H, COLOUR_W, "[augment]\nshift=2\nflip=1\npad=reflect\ncutout=3\n",
                               HAND_COPIES, NULL, 5, &net));
        bn_loader ld;
        CHECK_OK(bn_loader_init(&ld, &d, NULL));
        int writtens = 0, clipped = 0, whole = 0;
        for (unsigned long long step = 0; step < 40; step++) {
            CHECK_OK(bn_loader_set_cursor(&ld, 0));
            CHECK_OK(bn_loader_set_step(&ld, step));
            CHECK_OK(bn_loader_fill_next(&ld, net, HAND_COPIES, 1));
            const float *x = bn_blob_host_rd(net->input), *y = bn_blob_host_rd(net->labels);
            CHECK(x && y);
            for (int e = 0; e < HAND_COPIES; e++) {
                bn_augment_draw dr = bn_augment_pick(net->augment, COLOUR_H, COLOUR_W, 5, step, (uint64_t)e);
                const int is_written = dr.dx == -2 && dr.dy == 2 && dr.flip;
                const int area = (dr.bottom - dr.top) * (dr.right - dr.left);
                writtens += is_written;
                clipped += area < 9, whole += area == 9;
                CHECK_MSG(area > 0 && dr.top >= 0 && dr.bottom <= COLOUR_H && dr.left >= 0 && dr.right <= COLOUR_W,
                          "step %llu, example %d: rows %d..%d, columns %d..%d", step, e, dr.top, dr.bottom, dr.left,
                          dr.right);
                for (int c = 0; c < COLOUR_C; c++)
                    for (int k = 0; k < COLOUR_PLANE; k++) {
                        const float got = x[(e * COLOUR_C + c) * COLOUR_PLANE + k];
                        const int r = k / COLOUR_W, col = k % COLOUR_W;
                        const int cut = r >= dr.top && r < dr.bottom && col >= dr.left && col < dr.right;
                        const float want = cut ? 0.0f : standardised(move_colour_by_hand(dr, c, k));
                        CHECK_MSG(got == want, "%s, step %llu, example %d (dx %d, dy %d, flip %d, rows %d..%d, "
                                  "columns %d..%d), channel %d, pixel %d: %.9g, expected %.9g",
                                  as_values ? "values" : "pixels", step, e, dr.dx, dr.dy, dr.flip, dr.top, dr.bottom,
                                  dr.left, dr.right, c, k, got, want);
                        if (is_written && !cut)
                            CHECK_MSG(got == standardised(colour_pixel(c, written[k])), "step %llu, example %d, "
                                      "channel %d, pixel %d", step, e, c, k);
                    }
                CHECK(y[e] == (float)(e % 10));
            }
        }
        CHECK_MSG(writtens > 0 && clipped > 0 && whole > 0, "%d draws of the written move, %d clipped squares and %d "
                  "whole ones in 640", writtens, clipped, whole);
        bn_loader_free(&ld);
        bn_net_free(net);
    }
    return BN_PASS;
}

#define RAND_COUNT 51
#define RAND_C 2
#define RAND_MAX_C 3
#define RAND_H 7
#define RAND_W 9
#define RAND_PER (RAND_C * RAND_H * RAND_W)
#define RAND_MAX_PER (RAND_MAX_C * RAND_H * RAND_W)

/* 51 images of channels x 7 x 9 (at most 3 channels): random pixels, or with as_values random
 * normal floats; labels random in [0, 10). */
static bn_dataset random_images_of(int channels, int as_values)
{
    static unsigned char pixels_r[RAND_COUNT * RAND_MAX_PER];
    static float values_r[RAND_COUNT * RAND_MAX_PER];
    static uint16_t labels_r[RAND_COUNT];
    const int count = RAND_COUNT * channels * RAND_H * RAND_W;
    bn_rng r;
    bn_rng_seed(&r, 2024, 0);
    for (int i = 0; i < count; i++) pixels_r[i] = (unsigned char)bn_rng_below(&r, 256);
    for (int i = 0; i < RAND_COUNT; i++) labels_r[i] = (uint16_t)bn_rng_below(&r, 10);
    bn_rng_seed(&r, 2024, 1);
    for (int i = 0; i < count; i++) values_r[i] = (float)bn_rng_normal(&r);
    return (bn_dataset){.count = RAND_COUNT, .channels = channels, .height = RAND_H, .width = RAND_W,
                        .num_classes = 10, .pixels = as_values ? NULL : pixels_r, .values = as_values ? values_r : NULL,
                        .labels = labels_r};
}

/* 51 images of 2 x 7 x 9 random pixels. */
static bn_dataset random_images(void)
{
    return random_images_of(RAND_C, 0);
}

/* The n examples from the cursor, for training (train) or not, into out. */
static bn_status next_batch(bn_loader *ld, bn_net *net, int n, int train, float *out)
{
    BN_TRY(bn_loader_fill_next(ld, net, n, train));
    return lt_read(net->input, out, (size_t)n * bn_dataset_example_size(ld->data));
}

/* The first n examples of the order as the training batch of `step`, into out. */
static bn_status batch_at(bn_loader *ld, bn_net *net, unsigned long long step, int n, float *out)
{
    BN_TRY(bn_loader_set_cursor(ld, 0));
    BN_TRY(bn_loader_set_step(ld, step));
    return next_batch(ld, net, n, 1, out);
}

#define REPEAT_N 8
#define REPEAT_FLOATS (REPEAT_N * RAND_PER)

BN_TEST(loader_augmented_batches_repeat_from_seed_and_step)
{
    bn_dataset d = random_images();
    bn_net *net, *other_seed;
    const char *aug = "[augment]\nshift=3\nflip=1\npad=reflect\ncutout=3\n";
    CHECK_OK(augmented_net(RAND_C, RAND_H, RAND_W, aug, REPEAT_N, NULL, 3, &net));
    CHECK_OK(augmented_net(RAND_C, RAND_H, RAND_W, aug, REPEAT_N, NULL, 4, &other_seed));
    bn_loader ld;
    CHECK_OK(bn_loader_init(&ld, &d, NULL));
    CHECK_OK(bn_loader_set_order(&ld, 1, 9));
    static float a[REPEAT_FLOATS], b[REPEAT_FLOATS], c[REPEAT_FLOATS];
    CHECK_OK(batch_at(&ld, net, 10, REPEAT_N, a));
    CHECK_OK(batch_at(&ld, net, 10, REPEAT_N, b));
    CHECK_MSG(memcmp(a, b, sizeof a) == 0, "the same seed and step drew another batch");
    CHECK_OK(batch_at(&ld, net, 11, REPEAT_N, c));
    CHECK_MSG(memcmp(a, c, sizeof a) != 0, "steps 10 and 11 moved the same examples alike");
    CHECK_OK(batch_at(&ld, other_seed, 10, REPEAT_N, c));
    CHECK_MSG(memcmp(a, c, sizeof a) != 0, "seeds 3 and 4 moved the same examples alike");
    /* Filled in turn, the second batch is the one of step 11 from its place in the order, and the
     * step moves on once per training batch only. */
    CHECK_OK(batch_at(&ld, net, 10, REPEAT_N, b));
    CHECK_OK(next_batch(&ld, net, REPEAT_N, 1, b));
    CHECK(ld.host_step == 12);
    CHECK_OK(bn_loader_set_cursor(&ld, REPEAT_N));
    CHECK_OK(bn_loader_set_step(&ld, 11));
    CHECK_OK(next_batch(&ld, net, REPEAT_N, 1, c));
    CHECK_MSG(memcmp(b, c, sizeof b) == 0, "the second batch in turn is not step 11's");
    CHECK_OK(bn_loader_set_cursor(&ld, 0));
    CHECK_OK(bn_loader_set_step(&ld, 10));
    CHECK_OK(next_batch(&ld, net, REPEAT_N, 0, c));
    CHECK(ld.host_step == 10);
    CHECK_OK(bn_loader_set_cursor(&ld, 0));
    CHECK_OK(next_batch(&ld, net, REPEAT_N, 1, c));
    CHECK_MSG(memcmp(a, c, sizeof a) == 0, "an evaluation batch moved the step on");
    bn_loader_free(&ld);
    bn_net_free(net);
    bn_net_free(other_seed);
    return BN_PASS;
}

/* Whether the n examples in x differ from examples order[start ..) unaugmented (pixel / 255,
 * standardised). */
static int plain_batch_differs(const bn_loader *ld, int start, const float *x, int n)
{
    for (int e = 0; e < n; e++)
        for (int k = 0; k < RAND_PER; k++)
            if (x[e * RAND_PER + k] != standardised(ld->data->pixels[(size_t)ld->order[start + e] * RAND_PER + k]))
                return 1;
    return 0;
}

/* With shift 3 and flip, or with a cutout alone: the training batch changes, the evaluation
 * batches of bn_loader_fill and of bn_loader_fill_next are the plain examples. */
BN_TEST(loader_evaluation_batches_are_never_augmented)
{
    bn_dataset d = random_images();
    const char *const sections[] = {"[augment]\nshift=3\nflip=1\n", "[augment]\npad=reflect\ncutout=3\n"};
    for (int i = 0; i < 2; i++) {
        bn_net *net;
        CHECK_OK(augmented_net(RAND_C, RAND_H, RAND_W, sections[i], REPEAT_N, NULL, 3, &net));
        bn_loader ld;
        CHECK_OK(bn_loader_init(&ld, &d, NULL));
        CHECK_OK(bn_loader_set_order(&ld, 1, 9));
        static float x[REPEAT_FLOATS];
        CHECK_OK(batch_at(&ld, net, 0, REPEAT_N, x));
        CHECK(plain_batch_differs(&ld, 0, x, REPEAT_N));
        CHECK_OK(bn_loader_set_cursor(&ld, 0));
        for (int start = 0; start < 3 * REPEAT_N; start += REPEAT_N) {
            CHECK_OK(next_batch(&ld, net, REPEAT_N, 0, x));
            CHECK_MSG(!plain_batch_differs(&ld, start, x, REPEAT_N), "'%s': evaluation batch at %d was changed",
                      sections[i], start);
            CHECK_OK(bn_loader_fill(&ld, net, start + 1, REPEAT_N));
            CHECK_OK(lt_read(net->input, x, REPEAT_FLOATS));
            CHECK_MSG(!plain_batch_differs(&ld, start + 1, x, REPEAT_N), "'%s': bn_loader_fill at %d was changed",
                      sections[i], start + 1);
        }
        bn_loader_free(&ld);
        bn_net_free(net);
    }
    return BN_PASS;
}

/* shift, flip and cutout 0, written or left out, whatever the pad: a training batch is the plain
 * one, bit for bit. */
BN_TEST(loader_without_augmentation_trains_on_the_plain_batch)
{
    bn_dataset d = random_images();
    const char *const sections[] = {"", "[augment]\nshift=0\nflip=0\n", "[augment]\npad=reflect\ncutout=0\n"};
    for (int i = 0; i < 3; i++) {
        bn_net *net;
        CHECK_OK(augmented_net(RAND_C, RAND_H, RAND_W, sections[i], REPEAT_N, NULL, 3, &net));
        bn_loader ld;
        CHECK_OK(bn_loader_init(&ld, &d, NULL));
        CHECK_OK(bn_loader_set_order(&ld, 1, 9));
        CHECK_OK(bn_loader_set_step(&ld, 77));
        static float x[REPEAT_FLOATS];
        for (int start = 0; start < 3 * REPEAT_N; start += REPEAT_N) {
            CHECK_OK(next_batch(&ld, net, REPEAT_N, 1, x));
            CHECK_MSG(!plain_batch_differs(&ld, start, x, REPEAT_N), "'%s': training batch at %d was moved",
                      sections[i], start);
        }
        bn_loader_free(&ld);
        bn_net_free(net);
    }
    return BN_PASS;
}

typedef struct fill_args {
    bn_loader *ld;
    bn_net *net;
    int n;
} fill_args;

static bn_status training_fill(void *arg)
{
    fill_args *f = arg;
    return bn_loader_fill_next(f->ld, f->net, f->n, 1);
}

/* The GPU's batch (input and labels) against the CPU's, bit for bit. */
static int same_batches(bn_net *gpu, bn_net *cpu, int n)
{
    const float *gx = bn_blob_host_rd(gpu->input), *gy = bn_blob_host_rd(gpu->labels);
    const float *cx = bn_blob_host_rd(cpu->input), *cy = bn_blob_host_rd(cpu->labels);
    const size_t per = (size_t)cpu->input_shape.c * (size_t)cpu->input_shape.h * (size_t)cpu->input_shape.w;
    return gx && gy && cx && cy && memcmp(gx, cx, (size_t)n * per * sizeof *gx) == 0 &&
           memcmp(gy, cy, (size_t)n * sizeof *gy) == 0;
}

/* What a comparison of the GPU's batches with the CPU's holds: the graph, both loaders and nets. */
static void free_pair(bn_step_graph *g, bn_loader *gld, bn_loader *cld, bn_net *gpu, bn_net *cpu)
{
    bn_step_graph_free(g);
    bn_loader_free(gld);
    bn_loader_free(cld);
    bn_net_free(gpu);
    bn_net_free(cpu);
}

/* An epoch of training batches from `step` on both paths, as the trainer runs them on the GPU:
 * the first and the partial last eagerly, the full ones between through the captured graph g
 * (captured by the first of them when g is empty); *replays counts the replayed ones. */
static int epoch_against_cpu(bn_ctx *ctx, bn_step_graph *g, bn_loader *gld, bn_net *gpu, bn_loader *cld, bn_net *cpu,
                             unsigned long long step, int *replays)
{
    CHECK_OK(bn_loader_set_cursor(gld, 0));
    CHECK_OK(bn_loader_set_cursor(cld, 0));
    CHECK_OK(bn_loader_set_step(gld, step));
    CHECK_OK(bn_loader_set_step(cld, step));
    for (int start = 0; start < RAND_COUNT; start += REPEAT_N) {
        fill_args f = {gld, gpu, RAND_COUNT - start < REPEAT_N ? RAND_COUNT - start : REPEAT_N};
        int replayed = 0;
        if (start == 0 || f.n < REPEAT_N) {
            CHECK_OK(training_fill(&f));
        } else {
            CHECK_OK(bn_net_set_batch(gpu, f.n));
            CHECK_OK(bn_step_graph_run(g, ctx, training_fill, NULL, &f, &replayed));
        }
        if (replayed) {
            /* What the trainer's note_replay does for the skipped host side. */
            gld->host_cursor += f.n;
            bn_net_mark_device_written(gpu);
            ++*replays;
        }
        CHECK_OK(bn_loader_fill_next(cld, cpu, f.n, 1));
        CHECK_MSG(same_batches(gpu, cpu, f.n), "step %llu: the GPU's batch at %d differs from the CPU's%s",
                  step + (unsigned long long)(start / REPEAT_N), start, replayed ? " (a replay)" : "");
    }
    return BN_PASS;
}

/* Shift and flip on 2 channels of pixels; reflect padding and a cutout (even and odd sides) on 3
 * channels of pixels and of float values; a mean and std per channel; and the same read from
 * pinned host memory, as a set past the data budget is. */
BN_TEST(loader_gpu_augmented_gather_matches_cpu_through_graph_replays)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    static const char *const even = "mean=0.5\nstd=0.25\n", *const per_channel = "mean=0.1,0.5,0.9\nstd=0.2,0.3,0.7\n";
    static const struct {
        int channels, as_values;
        const char *norm, *augment;
        int streamed;
    } cases[] = {{RAND_C, 0, even, "[augment]\nshift=3\nflip=1\n", 0},
                 {RAND_MAX_C, 0, even, "[augment]\nshift=3\nflip=1\npad=reflect\ncutout=4\n", 0},
                 {RAND_MAX_C, 1, even, "[augment]\nshift=2\nflip=1\npad=reflect\ncutout=5\n", 0},
                 {RAND_MAX_C, 1, even, "[augment]\ncutout=7\n", 0},
                 {RAND_MAX_C, 0, per_channel, "[augment]\nshift=3\nflip=1\npad=reflect\ncutout=4\n", 0},
                 {RAND_MAX_C, 0, per_channel, "[augment]\nshift=3\nflip=1\npad=reflect\ncutout=4\n", 1},
                 {RAND_MAX_C, 1, per_channel, "[augment]\nshift=2\nflip=1\n", 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bn_dataset d = random_images_of(cases[i].channels, cases[i].as_values);
        const char *aug = cases[i].augment;
        bn_net *gpu, *cpu;
        CHECK_OK(normed_net(d.channels, RAND_H, RAND_W, cases[i].norm, aug, REPEAT_N, ctx, 11, &gpu));
        CHECK_OK(normed_net(d.channels, RAND_H, RAND_W, cases[i].norm, aug, REPEAT_N, NULL, 11, &cpu));
        bn_loader gld, cld;
        /* A budget of one byte sends any set to pinned host memory. */
        if (cases[i].streamed) setenv("BLOBNET_DATA_BUDGET", "1", 1);
        bn_status up = bn_loader_init(&gld, &d, ctx);
        unsetenv("BLOBNET_DATA_BUDGET");
        CHECK_OK(up);
        CHECK_MSG(gld.streamed == cases[i].streamed, "case %zu: streamed %d", i, gld.streamed);
        CHECK_OK(bn_loader_init(&cld, &d, NULL));
        bn_step_graph g = {0};
        int replays = 0;
        /* Two epochs in other orders: the replays read the cursor and the step set on the device. */
        CHECK_OK(bn_loader_set_order(&gld, 1, 21));
        CHECK_OK(bn_loader_set_order(&cld, 1, 21));
        CHECK_MSG(epoch_against_cpu(ctx, &g, &gld, gpu, &cld, cpu, 1000, &replays) == BN_PASS, "%s", aug);
        /* The second order made ahead, as the trainer does after an epoch's last step: its upload
         * is queued, and set_order finds it in place. */
        CHECK_OK(bn_loader_prepare_order(&gld, 22));
        CHECK_OK(bn_loader_set_order(&gld, 1, 22));
        CHECK(!gld.prepared);
        CHECK_OK(bn_loader_set_order(&cld, 1, 22));
        CHECK_MSG(epoch_against_cpu(ctx, &g, &gld, gpu, &cld, cpu, 5000, &replays) == BN_PASS, "%s", aug);
        CHECK_MSG(replays == 9, "%s: %d batches were replays, not 9", aug, replays);
        /* Evaluation batches: unchanged on both paths, and the step stays where it was. */
        CHECK_OK(bn_loader_set_cursor(&gld, 0));
        CHECK_OK(bn_loader_set_cursor(&cld, 0));
        CHECK_OK(bn_loader_fill_next(&gld, gpu, REPEAT_N, 0));
        CHECK_OK(bn_loader_fill_next(&cld, cpu, REPEAT_N, 0));
        CHECK_MSG(same_batches(gpu, cpu, REPEAT_N), "%s: the evaluation batch differs", aug);
        CHECK_OK(bn_loader_fill_next(&gld, gpu, REPEAT_N, 1));
        CHECK_OK(bn_loader_fill_next(&cld, cpu, REPEAT_N, 1));
        CHECK_MSG(same_batches(gpu, cpu, REPEAT_N), "%s: the training batch after an evaluation batch differs", aug);
        free_pair(&g, &gld, &cld, gpu, cpu);
    }
    return BN_PASS;
}

/* The step of the batch the net reads, where the step's draws read it (bn_pass.dev_step). */
static unsigned long long taken_step(const bn_net *net)
{
    unsigned long long s = ~0ull;
    return net->pass.dev_step && bn_device_d2h(&s, net->pass.dev_step, sizeof s) == BN_OK ? s : ~0ull;
}

/* Two steps of a group (trainer.c), each taking the batch staged before it, staging the next beside
 * it and ending with the side stream joined, as a step's backward pass joins it: the first reads
 * the stage, the second its own buffers, so each launch starts and ends as the one before. The
 * first one's batch is copied into snap (input, then labels) for the comparison after the launch. */
typedef struct two_steps {
    bn_loader *ld;
    bn_net *net;
    int n;
    float *snap;
} two_steps;

static bn_status take_and_stage_twice(void *arg)
{
    two_steps *t = arg;
    bn_ctx *ctx = t->net->pass.ctx;
    const size_t xs = (size_t)t->n * t->net->input->c * t->net->input->h * t->net->input->w;
    for (int k = 0; k < 2; k++) {
        BN_TRY(bn_loader_take(t->ld, t->net, t->n));
        if (k == 0) {
            BN_TRY(bn_gpu_fill(t->snap, 0.0f, xs + (size_t)t->n, ctx));
            BN_TRY(bn_gpu_add(t->snap, bn_blob_dev_rd(t->net->input), xs, ctx));
            BN_TRY(bn_gpu_add(t->snap + xs, bn_blob_dev_rd(t->net->labels), (size_t)t->n, ctx));
        }
        BN_TRY(bn_loader_stage(t->ld, t->net, t->n));
        BN_TRY(bn_ctx_join_side(ctx));
    }
    return BN_OK;
}

/* The snapshot of two_steps against the CPU's batch, bit for bit (the snapshot adds each value to
 * +0, which keeps every value the loader makes: none is -0). */
static int same_snapshot(const float *snap, bn_net *cpu, int n)
{
    const size_t xs = (size_t)n * cpu->input_shape.c * cpu->input_shape.h * cpu->input_shape.w;
    float *host = malloc((xs + (size_t)n) * sizeof *host);
    const float *cx = bn_blob_host_rd(cpu->input), *cy = bn_blob_host_rd(cpu->labels);
    int same = host && cx && cy && bn_device_d2h(host, snap, (xs + (size_t)n) * sizeof *host) == BN_OK &&
               memcmp(host, cx, xs * sizeof *host) == 0 && memcmp(host + xs, cy, (size_t)n * sizeof *host) == 0;
    free(host);
    return same;
}

/* A batch staged a step ahead (bn_loader_stage) and taken in the next (bn_loader_take) is the
 * batch bn_loader_fill_next gives the CPU, bit for bit, augmented with the same draws, and the
 * step's draws read its step: eagerly (the batches taking turns between the stage and the input's
 * own buffers, read where they lie), and through a captured pair of steps replayed (the stage and
 * the own buffers each written and read inside each replay). While the input reads the stage a
 * gather into it is refused; bn_loader_read_own points it back. Pixels and float values, a mean
 * and std per channel. */
BN_TEST(loader_gpu_staged_batches_match_the_cpu_through_replays)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    static const struct {
        int channels, as_values;
        const char *norm, *augment;
    } cases[] = {{RAND_C, 0, "mean=0.5\nstd=0.25\n", "[augment]\nshift=3\nflip=1\n"},
                 {RAND_MAX_C, 1, "mean=0.1,0.5,0.9\nstd=0.2,0.3,0.7\n",
                  "[augment]\nshift=2\nflip=1\npad=reflect\ncutout=4\n"}};
    const int n = 4; /* 12 batches of the 51 examples */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bn_dataset d = random_images_of(cases[i].channels, cases[i].as_values);
        bn_net *gpu, *cpu;
        CHECK_OK(normed_net(d.channels, RAND_H, RAND_W, cases[i].norm, cases[i].augment, REPEAT_N, ctx, 11, &gpu));
        CHECK_OK(normed_net(d.channels, RAND_H, RAND_W, cases[i].norm, cases[i].augment, REPEAT_N, NULL, 11, &cpu));
        bn_loader gld, cld;
        CHECK_OK(bn_loader_init(&gld, &d, ctx));
        CHECK_OK(bn_loader_init(&cld, &d, NULL));
        CHECK_OK(bn_loader_set_order(&gld, 1, 31));
        CHECK_OK(bn_loader_set_order(&cld, 1, 31));
        CHECK_OK(bn_loader_set_step(&gld, 500));
        CHECK_OK(bn_loader_set_step(&cld, 500));
        gpu->pass.dev_step = gld.dev_step + 1; /* as a training run sets it */
        CHECK_OK(bn_loader_reserve_stage(&gld, gpu, n));
        /* Nothing staged yet: a take is refused. */
        CHECK(bn_loader_take(&gld, gpu, n) != BN_OK);
        int batch = 0;
        CHECK_OK(bn_loader_fill_next(&gld, gpu, n, 1));
        CHECK_OK(bn_loader_fill_next(&cld, cpu, n, 1));
        float *own = bn_blob_dev_wr(gpu->input);
        CHECK_MSG(same_batches(gpu, cpu, n) && taken_step(gpu) == 500, "case %zu: the first batch", i);
        /* Eagerly: two batches staged and taken, the first read in the stage, the second in the own
         * buffers again. */
        for (batch = 1; batch <= 2; batch++) {
            CHECK_OK(bn_loader_stage(&gld, gpu, n));
            CHECK(bn_loader_stage(&gld, gpu, n) != BN_OK); /* one batch staged at a time */
            CHECK_OK(bn_ctx_join_side(ctx));
            CHECK_OK(bn_loader_take(&gld, gpu, n));
            CHECK_MSG((bn_blob_dev_wr(gpu->input) == own) == (batch == 2), "case %zu, batch %d: read in the %s", i,
                      batch, batch == 2 ? "stage" : "own buffer");
            CHECK_OK(bn_loader_fill_next(&cld, cpu, n, 1));
            CHECK_MSG(same_batches(gpu, cpu, n), "case %zu: staged batch %d differs from the CPU's", i, batch);
            CHECK_MSG(taken_step(gpu) == 500ull + (unsigned)batch, "case %zu, batch %d: step %llu", i, batch,
                      taken_step(gpu));
        }
        /* Through the graph: batch 3 staged eagerly, then each launch takes two and stages the next. */
        CHECK_OK(bn_loader_stage(&gld, gpu, n));
        CHECK_OK(bn_ctx_join_side(ctx));
        float *snap = NULL;
        CHECK_OK(bn_device_alloc((void **)&snap, (bn_blob_count(gpu->input) + (size_t)n) * sizeof *snap));
        bn_step_graph g = {0};
        int replays = 0;
        two_steps t = {&gld, gpu, n, snap};
        for (batch = 3; batch <= 10; batch += 2) {
            int replayed = 0;
            CHECK_OK(bn_step_graph_run(&g, ctx, take_and_stage_twice, NULL, &t, &replayed));
            if (replayed) {
                gld.host_cursor += 2 * n; /* the stages' host side, which a replay skips */
                bn_net_mark_device_written(gpu);
                replays++;
            }
            CHECK_OK(bn_loader_fill_next(&cld, cpu, n, 1));
            CHECK_MSG(same_snapshot(snap, cpu, n), "case %zu: batch %d differs from the CPU's%s", i, batch,
                      replayed ? " (a replay)" : "");
            CHECK_OK(bn_loader_fill_next(&cld, cpu, n, 1));
            CHECK_MSG(same_batches(gpu, cpu, n), "case %zu: batch %d differs from the CPU's%s", i, batch + 1,
                      replayed ? " (a replay)" : "");
            CHECK_MSG(taken_step(gpu) == 500ull + (unsigned)batch + 1, "case %zu, batch %d: step %llu", i, batch + 1,
                      taken_step(gpu));
        }
        CHECK_MSG(replays == 3, "case %zu: %d replays, not 3", i, replays);
        bn_device_free(snap);
        /* The last batch staged by the last replay, taken eagerly: read in the stage, where a
         * gather into the input is refused until the input reads its own buffer again. */
        CHECK_OK(bn_loader_take(&gld, gpu, n));
        CHECK_OK(bn_loader_fill_next(&cld, cpu, n, 1));
        CHECK_MSG(same_batches(gpu, cpu, n) && taken_step(gpu) == 511, "case %zu: the last batch", i);
        CHECK(bn_loader_fill(&gld, gpu, 0, n) != BN_OK);
        bn_loader_read_own(&gld, gpu);
        CHECK_MSG(bn_blob_dev_wr(gpu->input) == own && gpu->pass.dev_step == gld.dev_step + 1,
                  "case %zu: the input reads the stage after bn_loader_read_own", i);
        CHECK_OK(bn_loader_fill(&gld, gpu, 0, n));
        CHECK_OK(bn_loader_fill(&cld, cpu, 0, n));
        CHECK_MSG(same_batches(gpu, cpu, n), "case %zu: a batch filled after the stage's differs", i);
        free_pair(&g, &gld, &cld, gpu, cpu);
    }
    return BN_PASS;
}
