/* test_describe.c - the description checkpoints are tied to: one line per layer with its name,
 * type, every input by name and its keys sorted, numbers in one spelling; the same text for
 * model files that differ only in comments, [train], [augment], key order and spacing, and
 * another as soon as a layer, a wire or a key changes. */
#include <stdlib.h>

#include "core/describe.h"
#include "core/net.h"
#include "testing.h"

static const char *const RESIDUAL =
    "[input]\nchannels=1\nheight=8\nwidth=8\nmean=0.25\n"
    "[conv2d]\nname=stem\nfilters=4\nsize=3\npad=1\n"
    "[conv2d]\nname=body\nfilters=4\nsize=3\npad=1\n"
    "[add]\nname=sum\ninput=stem, body\n"
    "[dense]\noutputs=10\n[softmax_ce]\n";

/* The description of text, or NULL when it does not build (after printing why). */
static char *describe(const char *text)
{
    bn_net *net;
    if (bn_net_from_text(text, "m.cfg", &net) != BN_OK) {
        fprintf(stderr, "    %s\n", bn_last_error());
        return NULL;
    }
    char *d = strdup(net->description);
    bn_net_free(net);
    return d;
}

BN_TEST(describe_names_every_layer_input_and_key)
{
    char *d = describe(RESIDUAL);
    CHECK(d);
    const char *want = "input 1x8x8 mean=0.25 std=1\n"
                       "stem conv2d <- input: filters=4 pad=1 size=3\n"
                       "body conv2d <- stem: filters=4 pad=1 size=3\n"
                       "sum add <- stem,body\n"
                       "dense1 dense <- sum: outputs=10\n"
                       "softmax_ce1 softmax_ce <- dense1\n";
    CHECK_MSG(strcmp(d, want) == 0, "got:\n%s", d);
    free(d);
    return BN_PASS;
}

/* Comments, [train], [augment], key order, spacing and the spelling of numbers are not part of
 * what the weights mean. */
BN_TEST(describe_ignores_what_does_not_change_the_layers)
{
    char *a = describe(RESIDUAL);
    char *b = describe("# the same network\n[train]\nepochs = 99\nlr = 0.5\nseed = 3\n"
                       "[input]\nwidth = 8 ; eight\nheight=8\nchannels=1\nmean = 2.5e-1\nstd = 1.0\n"
                       "[augment]\nshift = 2\nflip = 1\n"
                       "[conv2d]\npad = 1\nsize=3\nfilters = 4\nname = stem\n"
                       "[conv2d]\nname=body\nsize=3\nfilters=4\npad=1\n"
                       "[add]\ninput = stem,body\nname = sum\n"
                       "[dense]\noutputs = 10\n\n\n[softmax_ce]\n");
    CHECK(a && b);
    CHECK_MSG(strcmp(a, b) == 0, "\n%s\nvs\n%s", a, b);
    free(a);
    free(b);
    return BN_PASS;
}

/* Each of these changes what the weights mean (or which weights there are), and the text. */
BN_TEST(describe_changes_with_a_layer_a_wire_or_a_key)
{
    static const char *const edits[][2] = {
        {"mean=0.25", "mean=0.5"},          /* the input's standardisation */
        {"[dense]\n", "[dense]\nname=head\n"}, /* a layer's name (its tensors' names) */
        {"input=stem, body", "input=body, stem"}, /* the wiring */
        {"pad=1\n[add]", "pad=1\nstride=1\n[add]"}, /* a key written out, even at its default */
        {"[dense]\noutputs=10\n", "[dense]\noutputs=10\n[relu]\n"}, /* a layer more */
    };
    char *base = describe(RESIDUAL);
    CHECK(base);
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        char text[1024];
        const char *at = strstr(RESIDUAL, edits[i][0]);
        CHECK_MSG(at, "edit %zu", i);
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - RESIDUAL), RESIDUAL, edits[i][1], at + strlen(edits[i][0]));
        char *d = describe(text);
        CHECK_MSG(d && strcmp(d, base) != 0, "edit %zu left the description as it was", i);
        free(d);
    }
    free(base);
    return BN_PASS;
}

BN_TEST(describe_spells_numbers_one_way)
{
    static const struct {
        const char *text, *want;
    } cases[] = {{"20", "20"},     {"2e1", "20"},       {"20.0", "20"},   {"5e-4", "0.0005"},
                 {"0.0005", "0.0005"}, {"0.1307", "0.1307"}, {"-0.5", "-0.5"}, {"1e-08", "1e-08"},
                 {"1e20", "1e+20"}, {"0.1", "0.1"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[32];
        CHECK_MSG(bn_describe_value(cases[i].text, buf, sizeof buf) == 1, "%s", cases[i].text);
        CHECK_MSG(strcmp(buf, cases[i].want) == 0, "%s spelt %s, not %s", cases[i].text, buf, cases[i].want);
    }
    /* Text that is not one finite number stays as it is. */
    static const char *const words[] = {"he", "1,-2", "inf", "nan", " 3", "3x", ""};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        char buf[32];
        CHECK_MSG(bn_describe_value(words[i], buf, sizeof buf) == 0, "'%s' taken for a number", words[i]);
    }
    return BN_PASS;
}
