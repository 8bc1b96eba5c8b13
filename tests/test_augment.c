/* The [augment] section (its keys, limits and errors) and the draws: their range, spread and
 * dependence on seed, step and position, and where a moved pixel comes from. */
#include <stdlib.h>

#include "core/augment.h"
#include "core/net.h"
#include "testing.h"

#define INPUT "[input]\nchannels = 1\nheight = 8\nwidth = 10\n"

static bn_status build(const char *text)
{
    bn_net *net = NULL;
    bn_status s = bn_net_from_text(text, "m.cfg", &net);
    bn_net_free(net);
    return s;
}

BN_TEST(augment_section_keys_and_defaults)
{
    bn_net *net;
    CHECK_OK(bn_net_from_text(INPUT "[dense]\noutputs=2\n", "m.cfg", &net));
    CHECK(net->augment.shift == 0 && net->augment.flip == 0 && !bn_augment_active(net->augment));
    bn_net_free(net);
    CHECK_OK(bn_net_from_text(INPUT "[train]\nbatch=4\n[augment]\nshift = 4\nflip = 1\n[dense]\noutputs=2\n", "m.cfg",
                              &net));
    CHECK(net->augment.shift == 4 && net->augment.flip == 1 && bn_augment_active(net->augment));
    CHECK(net->train.batch == 4);
    bn_net_free(net);
    CHECK_OK(bn_net_from_text(INPUT "[augment]\nflip = 1\n[dense]\noutputs=2\n", "m.cfg", &net));
    CHECK(net->augment.shift == 0 && net->augment.flip == 1 && bn_augment_active(net->augment));
    bn_net_free(net);
    CHECK_OK(bn_net_from_text(INPUT "[augment]\nshift = 0\nflip = 0\n[dense]\noutputs=2\n", "m.cfg", &net));
    CHECK(!bn_augment_active(net->augment));
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(augment_section_errors_name_the_line)
{
    /* 8 high and 10 wide: half the smaller side is 4. */
    CHECK(bn_augment_max_shift((bn_shape){1, 8, 10}) == 4 && bn_augment_max_shift((bn_shape){3, 9, 7}) == 3);
    CHECK_ERR(build(INPUT "[augment]\nshift = 5\n[dense]\noutputs=2\n"), BN_ERR_USAGE,
              "m.cfg:6: [augment] shift = 5 is more than half the input's 8x10 (at most 4)");
    CHECK_ERR(build(INPUT "[augment]\nshift = -1\n[dense]\noutputs=2\n"), BN_ERR_USAGE,
              "m.cfg:6: [augment] shift = -1 is out of range");
    CHECK_ERR(build(INPUT "[augment]\nshift = two\n[dense]\noutputs=2\n"), BN_ERR_USAGE,
              "shift = 'two' is not an integer");
    CHECK_ERR(build(INPUT "[augment]\nshift = 1\nflip = 2\n[dense]\noutputs=2\n"), BN_ERR_USAGE,
              "m.cfg:7: [augment] flip = 2 is out of range [0, 1]");
    CHECK_ERR(build(INPUT "[augment]\nshift = 1\nrotate = 15\n[dense]\noutputs=2\n"), BN_ERR_USAGE,
              "m.cfg:7: [augment] unknown key 'rotate'");
    CHECK_ERR(build(INPUT "[augment]\nshift = 1\n[augment]\nflip = 1\n[dense]\noutputs=2\n"), BN_ERR_USAGE,
              "m.cfg:7: second [augment] section");
    CHECK_ERR(build("[augment]\nshift = 1\n" INPUT "[dense]\noutputs=2\n"), BN_ERR_USAGE,
              "m.cfg:1: [augment] must come after [input]");
    return BN_PASS;
}

#define DRAWS 10000

/* shift 2: dx and dy each take the 5 values of [-2, 2] a fifth of the time and every (dx, dy)
 * pair a 25th, independently; flip half the time. Over 10,000 draws a fifth is 2000 with a
 * binomial spread of 40, a 25th 400 with 19.6 and a half 5000 with 50: the bounds are six of
 * them. A draw also changes with each of seed, step and position (50 outcomes: equal about 1 time
 * in 50 by chance, 200 of 10,000). */
BN_TEST(augment_draws_are_uniform_and_depend_on_seed_step_and_position)
{
    const bn_augment a = {.shift = 2, .flip = 1};
    int dx[5] = {0}, dy[5] = {0}, pair[5][5] = {{0}}, flips = 0, same_seed = 0, same_step = 0, same_pos = 0;
    for (int p = 0; p < DRAWS; p++) {
        bn_augment_draw d = bn_augment_pick(a, 7, 123, (uint64_t)p);
        CHECK_MSG(d.dx >= -2 && d.dx <= 2 && d.dy >= -2 && d.dy <= 2 && (d.flip == 0 || d.flip == 1),
                  "position %d: dx %d, dy %d, flip %d", p, d.dx, d.dy, d.flip);
        dx[d.dx + 2]++, dy[d.dy + 2]++, pair[d.dx + 2][d.dy + 2]++, flips += d.flip;
        bn_augment_draw other[3] = {bn_augment_pick(a, 8, 123, (uint64_t)p), bn_augment_pick(a, 7, 124, (uint64_t)p),
                                    bn_augment_pick(a, 7, 123, (uint64_t)p + DRAWS)};
        int *same[3] = {&same_seed, &same_step, &same_pos};
        for (int k = 0; k < 3; k++)
            *same[k] += other[k].dx == d.dx && other[k].dy == d.dy && other[k].flip == d.flip;
    }
    for (int v = 0; v < 5; v++) {
        CHECK_MSG(abs(dx[v] - 2000) <= 240 && abs(dy[v] - 2000) <= 240, "value %d: dx %d times, dy %d times", v - 2,
                  dx[v], dy[v]);
        for (int w = 0; w < 5; w++)
            CHECK_MSG(abs(pair[v][w] - 400) <= 118, "(%d, %d): %d times", v - 2, w - 2, pair[v][w]);
    }
    CHECK_MSG(abs(flips - 5000) <= 300, "%d flips", flips);
    CHECK_MSG(same_seed < 300 && same_step < 300 && same_pos < 300, "equal draws: %d for another seed, %d for another "
              "step, %d for another position", same_seed, same_step, same_pos);
    /* A pure function: the same arguments, the same draw. */
    bn_augment_draw d1 = bn_augment_pick(a, 7, 123, 45), d2 = bn_augment_pick(a, 7, 123, 45);
    CHECK(d1.dx == d2.dx && d1.dy == d2.dy && d1.flip == d2.flip);
    /* What is off stays off. */
    for (int p = 0; p < 1000; p++) {
        bn_augment_draw none = bn_augment_pick((bn_augment){0, 0}, 7, 123, (uint64_t)p);
        bn_augment_draw still = bn_augment_pick((bn_augment){2, 0}, 7, 123, (uint64_t)p);
        bn_augment_draw mirror = bn_augment_pick((bn_augment){0, 1}, 7, 123, (uint64_t)p);
        CHECK(none.dx == 0 && none.dy == 0 && none.flip == 0);
        CHECK(still.flip == 0);
        CHECK(mirror.dx == 0 && mirror.dy == 0);
    }
    return BN_PASS;
}

/* A 3 x 4 plane, pixel indices row * 4 + column: where each pixel of a moved one comes from. */
BN_TEST(augment_source_shifts_then_mirrors)
{
    const bn_augment_draw right = {1, 0, 0}, up = {0, -1, 0}, mirror = {0, 0, 1}, both = {1, 1, 1};
    CHECK(bn_augment_source(right, 3, 4, 0, 0) == -1); /* moved in from the left */
    CHECK(bn_augment_source(right, 3, 4, 0, 1) == 0);
    CHECK(bn_augment_source(right, 3, 4, 2, 3) == 10);
    CHECK(bn_augment_source(up, 3, 4, 0, 0) == 4);
    CHECK(bn_augment_source(up, 3, 4, 1, 2) == 10);
    CHECK(bn_augment_source(up, 3, 4, 2, 1) == -1); /* moved in from below */
    CHECK(bn_augment_source(mirror, 3, 4, 1, 0) == 7);
    CHECK(bn_augment_source(mirror, 3, 4, 2, 3) == 8);
    /* Shifted right and down by one, then mirrored: column x shows what was at 3 - x - 1. */
    CHECK(bn_augment_source(both, 3, 4, 1, 0) == 2);
    CHECK(bn_augment_source(both, 3, 4, 2, 2) == 4);
    CHECK(bn_augment_source(both, 3, 4, 1, 3) == -1);
    CHECK(bn_augment_source(both, 3, 4, 0, 1) == -1);
    return BN_PASS;
}
