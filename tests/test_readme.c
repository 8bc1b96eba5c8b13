/* test_readme.c - README.md's lists of optimizers, learning-rate policies and dataset formats
 * against their tables (core/optimizers/, core/lr_policies/, datasets/formats.c), so that the
 * README cannot drift from the code: the flags' rows, the [train] row of the model-file reference
 * and the bullet list of each name every entry once and nothing else. Run from the repository's
 * root, as make test does. */
#include <stdlib.h>
#include <string.h>

#include "core/lr_policies/lr_policies.h"
#include "core/optimizers/optimizers.h"
#include "dataset.h"
#include "testing.h"

#define MAX_WORDS 32

/* README.md's text, NUL-terminated, or NULL when it cannot be read (the caller frees it). */
static char *read_readme(void)
{
    FILE *f = fopen("README.md", "rb");
    if (!f) return NULL;
    char *text = NULL;
    size_t len = 0, cap = 0, got;
    char chunk[4096];
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (len + got + 1 > cap) {
            cap = 2 * (len + got + 1);
            char *grown = realloc(text, cap);
            if (!grown) break;
            text = grown;
        }
        memcpy(text + len, chunk, got);
        len += got;
    }
    fclose(f);
    if (text) text[len] = '\0';
    return text;
}

/* The line of text that starts with prefix, as [*start, *end); 0 when there is none. */
static int find_line(const char *text, const char *prefix, const char **start, const char **end)
{
    size_t n = strlen(prefix);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, prefix, n) == 0) {
            *start = p;
            *end = strchr(p, '\n');
            if (!*end) *end = p + strlen(p);
            return 1;
        }
    return 0;
}

/* Whether words (count of them, each [w, w + len)) are exactly names (NULL-terminated), each
 * once; what differs is described in why. */
static int same_names(const char *const *words, const size_t *lens, int count, const char *const *names,
                      char *why, size_t cap)
{
    int n = 0;
    for (; names[n]; n++) {
        int seen = 0;
        for (int i = 0; i < count; i++) seen += lens[i] == strlen(names[n]) && !strncmp(words[i], names[n], lens[i]);
        if (seen != 1) {
            snprintf(why, cap, "'%s' is listed %d times", names[n], seen);
            return 0;
        }
    }
    if (count != n) {
        snprintf(why, cap, "%d names listed for %d in the table", count, n);
        return 0;
    }
    return 1;
}

/* The `word`s of [start, end). */
static int backticked(const char *start, const char *end, const char **words, size_t *lens)
{
    int count = 0;
    for (const char *p = start; p < end && count < MAX_WORDS;) {
        const char *open = memchr(p, '`', (size_t)(end - p));
        if (!open) break;
        const char *close = memchr(open + 1, '`', (size_t)(end - open - 1));
        if (!close) break;
        words[count] = open + 1, lens[count] = (size_t)(close - open - 1), count++;
        p = close + 1;
    }
    return count;
}

/* The words of "`key` a\|b\|c (" in the line [start, end). */
static int choices(const char *start, const char *end, const char *key, const char **words, size_t *lens)
{
    char tag[64];
    snprintf(tag, sizeof tag, "`%s` ", key);
    const char *p = strstr(start, tag);
    if (!p || p >= end) return 0;
    p += strlen(tag);
    const char *stop = strstr(p, " (");
    int count = 0;
    while (p < stop && count < MAX_WORDS) {
        const char *bar = strstr(p, "\\|");
        const char *w_end = bar && bar < stop ? bar : stop;
        words[count] = p, lens[count] = (size_t)(w_end - p), count++;
        p = w_end == stop ? stop : w_end + 2;
    }
    return count;
}

/* The "- `name` ..." bullets of the paragraph after the line that starts with intro. */
static int bullets(const char *text, const char *intro, const char **words, size_t *lens)
{
    const char *start, *end;
    if (!find_line(text, intro, &start, &end)) return 0;
    int count = 0;
    for (const char *p = end + 1; *p && *p != '\n' && count < MAX_WORDS;) {
        const char *line_end = strchr(p, '\n');
        if (!line_end) line_end = p + strlen(p);
        if (strncmp(p, "- `", 3) == 0) {
            const char *close = memchr(p + 3, '`', (size_t)(line_end - p - 3));
            if (close) words[count] = p + 3, lens[count] = (size_t)(close - p - 3), count++;
        }
        p = *line_end ? line_end + 1 : line_end;
    }
    return count;
}

BN_TEST(readme_lists_every_optimizer_and_policy)
{
    char *text = read_readme();
    if (!text) BN_SKIP_TEST("README.md not found (not run from the repository's root)");
    const char *words[MAX_WORDS], *start, *end;
    size_t lens[MAX_WORDS];
    char why[128];
    struct {
        const char *flag_row, *key, *intro;
        const char *const *names;
    } lists[] = {
        {"| `--optimizer NAME` | train | ", "optimizer", "The optimizers (", bn_optimizer_names},
        {"| `--lr-policy NAME` | train | ", "lr_policy", "The learning-rate policies (", bn_lr_policy_names},
    };
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
        CHECK_MSG(find_line(text, lists[i].flag_row, &start, &end), "README.md has no row %s", lists[i].flag_row);
        int n = backticked(start + strlen(lists[i].flag_row), end, words, lens);
        CHECK_MSG(same_names(words, lens, n, lists[i].names, why, sizeof why), "the %s row: %s", lists[i].key, why);
        CHECK_MSG(find_line(text, "| `[train]` | ", &start, &end), "README.md has no [train] row");
        n = choices(start, end, lists[i].key, words, lens);
        CHECK_MSG(same_names(words, lens, n, lists[i].names, why, sizeof why), "[train] %s: %s", lists[i].key, why);
        n = bullets(text, lists[i].intro, words, lens);
        CHECK_MSG(same_names(words, lens, n, lists[i].names, why, sizeof why), "the list after \"%s\": %s",
                  lists[i].intro, why);
    }
    free(text);
    return BN_PASS;
}

/* The --dataset row names every format of the table once, between "format: " and its link. */
BN_TEST(readme_lists_every_dataset_format)
{
    char *text = read_readme();
    if (!text) BN_SKIP_TEST("README.md not found (not run from the repository's root)");
    const char *names[MAX_WORDS + 1], *words[MAX_WORDS], *start, *end;
    size_t lens[MAX_WORDS];
    char why[128];
    int count = bn_data_format_count();
    CHECK(count > 0 && count <= MAX_WORDS);
    for (int i = 0; i < count; i++) names[i] = bn_data_format_at(i)->name;
    names[count] = NULL;
    const char *row = "| `--dataset NAME` | ";
    CHECK_MSG(find_line(text, row, &start, &end), "README.md has no row %s", row);
    const char *from = strstr(start, "format: "), *to = from ? strstr(from, " ([") : NULL;
    CHECK_MSG(from && to && to < end, "the --dataset row does not list the formats as \"format: ... ([\"");
    int n = backticked(from, to, words, lens);
    CHECK_MSG(same_names(words, lens, n, names, why, sizeof why), "the --dataset row: %s", why);
    free(text);
    return BN_PASS;
}

/* The checks fail on a list with a name missing, one extra, or one twice. */
BN_TEST(readme_list_check_catches_missing_extra_and_repeated_names)
{
    static const char *const names[] = {"sgd", "adam", NULL};
    const char *words[MAX_WORDS];
    size_t lens[MAX_WORDS];
    char why[128];
    const char row[] = "`sgd` (default) or `adam` |";
    int n = backticked(row, row + strlen(row), words, lens);
    CHECK(n == 2 && same_names(words, lens, n, names, why, sizeof why));
    const char missing[] = "`sgd` only", extra[] = "`sgd`, `adam`, `lion`", twice[] = "`sgd`, `adam`, `adam`";
    CHECK(!same_names(words, lens, backticked(missing, missing + strlen(missing), words, lens), names, why, sizeof why));
    CHECK(!same_names(words, lens, backticked(extra, extra + strlen(extra), words, lens), names, why, sizeof why));
    CHECK(!same_names(words, lens, backticked(twice, twice + strlen(twice), words, lens), names, why, sizeof why));
    CHECK(strstr(why, "'adam' is listed 2 times"));
    const char train[] = "| `[train]` | `optimizer` sgd\\|adam (sgd), `lr` (0.01) |";
    CHECK(choices(train, train + strlen(train), "optimizer", words, lens) == 2);
    CHECK(same_names(words, lens, 2, names, why, sizeof why));
    const char list[] = "The optimizers (x):\n\n- `sgd` one\n- `adam` two\n  more of it\n\nafter\n- `lion`\n";
    CHECK(bullets(list, "The optimizers (", words, lens) == 0); /* a blank line ends the list at once */
    const char tight[] = "The optimizers (x):\n- `sgd` one\n- `adam` two\n  more of it\n\n- `lion`\n";
    n = bullets(tight, "The optimizers (", words, lens);
    CHECK(n == 2 && same_names(words, lens, n, names, why, sizeof why));
    return BN_PASS;
}
