/* The [augment] section (its keys, limits and errors) and the draws: their range, spread and
 * dependence on seed, step and position, their bit layout, where a moved pixel comes from
 * (zero or reflect padding) and which pixels the cutout takes. */
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
    CHECK(net->augment.pad == BN_AUGMENT_PAD_ZERO && net->augment.cutout == 0);
    bn_net_free(net);
    CHECK_OK(bn_net_from_text(INPUT "[augment]\nshift = 2\npad = reflect\ncutout = 8\n[dense]\noutputs=2\n", "m.cfg",
                              &net));
    CHECK(net->augment.shift == 2 && net->augment.flip == 0 && net->augment.pad == BN_AUGMENT_PAD_REFLECT &&
          net->augment.cutout == 8);
    bn_net_free(net);
    /* A pad alone moves nothing; a cutout alone does. */
    CHECK_OK(bn_net_from_text(INPUT "[augment]\npad = reflect\n[dense]\noutputs=2\n", "m.cfg", &net));
    CHECK(net->augment.pad == BN_AUGMENT_PAD_REFLECT && !bn_augment_active(net->augment));
    bn_net_free(net);
    CHECK_OK(bn_net_from_text(INPUT "[augment]\npad = zero\ncutout = 1\n[dense]\noutputs=2\n", "m.cfg", &net));
    CHECK(net->augment.pad == BN_AUGMENT_PAD_ZERO && net->augment.cutout == 1 && bn_augment_active(net->augment));
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
    CHECK(bn_augment_max_cutout((bn_shape){1, 8, 10}) == 8 && bn_augment_max_cutout((bn_shape){3, 9, 7}) == 7);
    CHECK_ERR(build(INPUT "[augment]\nshift = 1\npad = mirror\n[dense]\noutputs=2\n"), BN_ERR_USAGE,
              "m.cfg:7: [augment] pad = 'mirror' is not one of: zero, reflect");
    CHECK_ERR(build(INPUT "[augment]\ncutout = -1\n[dense]\noutputs=2\n"), BN_ERR_USAGE,
              "m.cfg:6: [augment] cutout = -1 is out of range");
    CHECK_ERR(build(INPUT "[augment]\nflip = 1\ncutout = 9\n[dense]\noutputs=2\n"), BN_ERR_USAGE,
              "m.cfg:7: [augment] cutout = 9 is more than the smaller side of the input's 8x10 (at most 8)");
    CHECK_ERR(build(INPUT "[augment]\ncutout = 3.5\n[dense]\noutputs=2\n"), BN_ERR_USAGE,
              "cutout = '3.5' is not an integer");
    CHECK_OK(build(INPUT "[augment]\nshift = 4\npad = reflect\ncutout = 8\n[dense]\noutputs=2\n"));
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
        bn_augment_draw d = bn_augment_pick(a, 8, 10, 7, 123, (uint64_t)p);
        CHECK_MSG(d.dx >= -2 && d.dx <= 2 && d.dy >= -2 && d.dy <= 2 && (d.flip == 0 || d.flip == 1),
                  "position %d: dx %d, dy %d, flip %d", p, d.dx, d.dy, d.flip);
        dx[d.dx + 2]++, dy[d.dy + 2]++, pair[d.dx + 2][d.dy + 2]++, flips += d.flip;
        bn_augment_draw other[3] = {bn_augment_pick(a, 8, 10, 8, 123, (uint64_t)p),
                                    bn_augment_pick(a, 8, 10, 7, 124, (uint64_t)p),
                                    bn_augment_pick(a, 8, 10, 7, 123, (uint64_t)p + DRAWS)};
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
    bn_augment_draw d1 = bn_augment_pick(a, 8, 10, 7, 123, 45), d2 = bn_augment_pick(a, 8, 10, 7, 123, 45);
    CHECK(d1.dx == d2.dx && d1.dy == d2.dy && d1.flip == d2.flip);
    /* What is off stays off. */
    for (int p = 0; p < 1000; p++) {
        bn_augment_draw none = bn_augment_pick((bn_augment){.pad = BN_AUGMENT_PAD_REFLECT}, 8, 10, 7, 123,
                                               (uint64_t)p);
        bn_augment_draw still = bn_augment_pick((bn_augment){.shift = 2}, 8, 10, 7, 123, (uint64_t)p);
        bn_augment_draw mirror = bn_augment_pick((bn_augment){.flip = 1}, 8, 10, 7, 123, (uint64_t)p);
        CHECK(none.dx == 0 && none.dy == 0 && none.flip == 0 && none.reflect == 1);
        CHECK(still.flip == 0 && still.reflect == 0);
        CHECK(mirror.dx == 0 && mirror.dy == 0);
        /* Without cutout the box is empty. */
        for (int y = 0; y < 8; y++)
            for (int x = 0; x < 10; x++) CHECK(!bn_augment_cut(none, y, x) && !bn_augment_cut(still, y, x));
    }
    return BN_PASS;
}

/* A 3 x 4 plane, pixel indices row * 4 + column: where each pixel of a moved one comes from. */
BN_TEST(augment_source_shifts_then_mirrors)
{
    const bn_augment_draw right = {.dx = 1}, up = {.dy = -1}, mirror = {.flip = 1};
    const bn_augment_draw both = {.dx = 1, .dy = 1, .flip = 1};
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

/* The reflection of numpy's and torchvision's 'reflect' padding: the edge is not repeated. */
BN_TEST(augment_reflect_mirrors_about_the_edge_pixel)
{
    static const int below[] = {1, 2, 3}, above[] = {4, 3, 2}; /* -1, -2, -3 and 5, 6, 7 of a side of 6 */
    for (int k = 0; k < 3; k++) {
        CHECK_MSG(bn_augment_reflect(-1 - k, 6) == below[k], "%d -> %d", -1 - k, bn_augment_reflect(-1 - k, 6));
        CHECK_MSG(bn_augment_reflect(6 + k, 6) == above[k], "%d -> %d", 6 + k, bn_augment_reflect(6 + k, 6));
    }
    for (int i = 0; i < 6; i++) CHECK(bn_augment_reflect(i, 6) == i);
    CHECK(bn_augment_reflect(0, 1) == 0);
    return BN_PASS;
}

/* A 3 x 4 plane with reflect padding: where each pixel of a moved one comes from (row * 4 +
 * column), never outside. */
BN_TEST(augment_source_with_reflect_padding)
{
    const bn_augment_draw right = {.dx = 1, .reflect = 1}, left = {.dx = -1, .reflect = 1},
                          up = {.dy = -1, .reflect = 1}, down = {.dy = 1, .reflect = 1},
                          all = {.dx = 1, .dy = 1, .flip = 1, .reflect = 1};
    CHECK(bn_augment_source(right, 3, 4, 0, 0) == 1); /* column -1 shows column 1 */
    CHECK(bn_augment_source(right, 3, 4, 2, 3) == 10);
    CHECK(bn_augment_source(left, 3, 4, 1, 3) == 6);  /* column 4 shows column 2 */
    CHECK(bn_augment_source(up, 3, 4, 2, 1) == 5);    /* row 3 shows row 1 */
    CHECK(bn_augment_source(down, 3, 4, 0, 2) == 6);  /* row -1 shows row 1 */
    /* Shifted right and down by one, reflected, then mirrored. */
    CHECK(bn_augment_source(all, 3, 4, 1, 3) == 1);
    CHECK(bn_augment_source(all, 3, 4, 0, 1) == 5);
    CHECK(bn_augment_source(all, 3, 4, 2, 0) == 6);
    /* 5 x 6, right by 2 and up by 1: rows 1, 2, 3, 4, 3 and columns 2, 1, 0, 1, 2, 3 of the source;
     * mirrored, the columns run 3, 2, 1, 0, 1, 2. */
    static const int rows[5] = {1, 2, 3, 4, 3}, cols[6] = {2, 1, 0, 1, 2, 3};
    const bn_augment_draw d = {.dx = 2, .dy = -1, .reflect = 1}, m = {.dx = 2, .dy = -1, .flip = 1, .reflect = 1};
    for (int y = 0; y < 5; y++)
        for (int x = 0; x < 6; x++) {
            CHECK_MSG(bn_augment_source(d, 5, 6, y, x) == rows[y] * 6 + cols[x], "(%d, %d): %d", y, x,
                      bn_augment_source(d, 5, 6, y, x));
            CHECK_MSG(bn_augment_source(m, 5, 6, y, x) == rows[y] * 6 + cols[5 - x], "mirrored (%d, %d): %d", y, x,
                      bn_augment_source(m, 5, 6, y, x));
        }
    /* Every shift up to half the side stays inside after one reflection. */
    for (int s = -3; s <= 3; s++)
        for (int f = 0; f < 2; f++)
            for (int y = 0; y < 7; y++)
                for (int x = 0; x < 6; x++) {
                    const bn_augment_draw e = {.dx = s, .dy = -s, .flip = f, .reflect = 1};
                    int at = bn_augment_source(e, 7, 6, y, x);
                    CHECK_MSG(at >= 0 && at < 42, "shift %d, flip %d, (%d, %d): %d", s, f, y, x, at);
                }
    return BN_PASS;
}

/* The draw as augment.h lays out its bits, computed here from the hash: dx from bits 0-23 of h,
 * dy from bits 24-47, flip from bit 63, the cutout's centre row and column from bits 0-23 and
 * 24-47 of mix(h). Odd and even sides, on a 9 x 7 input. */
BN_TEST(augment_draws_follow_the_documented_bit_layout)
{
    const int height = 9, width = 7;
    for (int side = 1; side <= 7; side++) {
        const bn_augment a = {.shift = 3, .flip = 1, .pad = BN_AUGMENT_PAD_REFLECT, .cutout = side};
        for (uint64_t p = 0; p < 500; p++) {
            const uint64_t seed = 99 + (uint64_t)side, step = 1000003 * p;
            uint64_t h = bn_counter_mix(bn_counter_mix(bn_counter_mix(seed) ^ step) ^ p), g = bn_counter_mix(h);
            int dx = (int)(((h & 0xffffff) * 7) >> 24) - 3, dy = (int)((((h >> 24) & 0xffffff) * 7) >> 24) - 3;
            int cy = (int)(((g & 0xffffff) * 9) >> 24), cx = (int)((((g >> 24) & 0xffffff) * 7) >> 24);
            int top = cy - side / 2, left = cx - side / 2, bottom = top + side, right = left + side;
            top = top < 0 ? 0 : top, left = left < 0 ? 0 : left;
            bottom = bottom > height ? height : bottom, right = right > width ? width : right;
            bn_augment_draw d = bn_augment_pick(a, height, width, seed, step, p);
            CHECK_MSG(d.dx == dx && d.dy == dy && d.flip == (int)(h >> 63) && d.reflect == 1, "side %d, position %llu",
                      side, (unsigned long long)p);
            CHECK_MSG(d.top == top && d.left == left && d.bottom == bottom && d.right == right,
                      "side %d, position %llu: rows %d..%d and columns %d..%d, expected %d..%d and %d..%d", side,
                      (unsigned long long)p, d.top, d.bottom, d.left, d.right, top, bottom, left, right);
            /* The square's centre pixel (the lower-right one of the middle four for an even side). */
            CHECK(bn_augment_cut(d, cy, cx));
        }
    }
    return BN_PASS;
}

/* The centre (cy, cx) of a cutout of side 3, read back from its box: over 10,000 draws on an 8 x 10
 * input each of the 8 rows comes an 8th of the time (1250, spread 33), each of the 10 columns a
 * 10th (1000, spread 30), each (dx, cy) of shift 2 a 40th (250, spread 15.6): bounds of six
 * spreads. The box is the square clipped to the image, and the cutout leaves dx, dy and flip as
 * they are without it. */
BN_TEST(augment_cutout_centres_are_uniform_and_boxes_clipped)
{
    const bn_augment a = {.shift = 2, .flip = 1, .cutout = 3}, plain = {.shift = 2, .flip = 1};
    int rows[8] = {0}, cols[10] = {0}, pair[5][8] = {{0}}, clipped = 0;
    for (int p = 0; p < DRAWS; p++) {
        bn_augment_draw d = bn_augment_pick(a, 8, 10, 7, 123, (uint64_t)p);
        bn_augment_draw o = bn_augment_pick(plain, 8, 10, 7, 123, (uint64_t)p);
        CHECK(d.dx == o.dx && d.dy == o.dy && d.flip == o.flip);
        CHECK_MSG(d.top >= 0 && d.top < d.bottom && d.bottom <= 8 && d.left >= 0 && d.left < d.right && d.right <= 10,
                  "position %d: rows %d..%d, columns %d..%d", p, d.top, d.bottom, d.left, d.right);
        int cy = d.top > 0 || d.bottom - d.top == 3 ? d.top + 1 : d.bottom - 2;
        int cx = d.left > 0 || d.right - d.left == 3 ? d.left + 1 : d.right - 2;
        CHECK_MSG(d.top == (cy > 0 ? cy - 1 : 0) && d.bottom == (cy < 7 ? cy + 2 : 8) &&
                  d.left == (cx > 0 ? cx - 1 : 0) && d.right == (cx < 9 ? cx + 2 : 10),
                  "position %d: rows %d..%d, columns %d..%d", p, d.top, d.bottom, d.left, d.right);
        rows[cy]++, cols[cx]++, pair[d.dx + 2][cy]++;
        clipped += d.bottom - d.top < 3 || d.right - d.left < 3;
    }
    for (int y = 0; y < 8; y++) {
        CHECK_MSG(abs(rows[y] - 1250) <= 200, "row %d: %d times", y, rows[y]);
        for (int v = 0; v < 5; v++) CHECK_MSG(abs(pair[v][y] - 250) <= 94, "(%d, %d): %d times", v - 2, y, pair[v][y]);
    }
    for (int x = 0; x < 10; x++) CHECK_MSG(abs(cols[x] - 1000) <= 180, "column %d: %d times", x, cols[x]);
    /* A centre on the first or last row or column: 1 - (6/8)(8/10) = 40% of draws (spread 49). */
    CHECK_MSG(abs(clipped - 4000) <= 300, "%d clipped boxes", clipped);
    /* A square as large as the smaller side still covers at least half of it around the centre. */
    const bn_augment whole = {.cutout = 8};
    for (int p = 0; p < 1000; p++) {
        bn_augment_draw d = bn_augment_pick(whole, 8, 10, 7, 123, (uint64_t)p);
        CHECK_MSG(d.bottom - d.top >= 4 && d.bottom - d.top <= 8 && d.right - d.left >= 4 && d.right - d.left <= 8,
                  "position %d: rows %d..%d, columns %d..%d", p, d.top, d.bottom, d.left, d.right);
    }
    return BN_PASS;
}
