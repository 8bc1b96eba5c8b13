#include "settings.h"

#include <stdio.h>
#include <string.h>

#include "core/describe.h"
#include "core/lr_policies/lr_policies.h"
#include "core/optimizers/optimizers.h"

/* Appends "key=value" (a word, or the number where word is NULL) while buf has room. */
static void append(char buf[BN_SETTINGS_MAX], size_t *len, const char *key, const char *word, double number)
{
    if (*len >= BN_SETTINGS_MAX) return;
    char text[32];
    if (!word) bn_describe_number(number, text, sizeof text);
    int n = snprintf(buf + *len, BN_SETTINGS_MAX - *len, "%s%s=%s", *len ? " " : "", key, word ? word : text);
    if (n > 0) *len += (size_t)n;
}

/* A setting of the line's fixed part: a word (a table entry's name) or, where word is NULL, a
 * number. */
typedef struct fixed_setting {
    const char *key, *word;
    double number;
} fixed_setting;

/* The keys of one optimizer or policy that the fixed part of the line lacks. */
static void append_new_keys(const bn_train_config *c, const bn_train_key *keys, int n, const fixed_setting *fixed,
                            size_t num_fixed, char buf[BN_SETTINGS_MAX], size_t *len)
{
    for (int i = 0; i < n; i++) {
        size_t k = 0;
        while (k < num_fixed && strcmp(fixed[k].key, keys[i].name) != 0) k++;
        if (k == num_fixed) append(buf, len, keys[i].name, NULL, bn_train_key_value(c, &keys[i]));
    }
}

/* The line starts with the [train] keys that every line has held since checkpoints first kept
 * one, in that order, whatever the run's optimizer and policy: a key of another optimizer or
 * policy shows the value it would take there. Keys that optimizers and policies brought since
 * follow, only those of the run's own, so that the line of a run that uses none of them stays
 * what it was. */
void bn_settings_format(const bn_train_config *c, const bn_augment *aug, char buf[BN_SETTINGS_MAX])
{
    const bn_optimizer_type *t = bn_optimizer_type_at(c->optimizer);
    const bn_lr_policy *p = bn_lr_policy_at(c->lr_policy);
    const fixed_setting fixed[] = {
        {"batch", NULL, c->batch},
        {"epochs", NULL, c->epochs},
        {"optimizer", t->name, 0},
        {"lr", NULL, c->lr},
        {"momentum", NULL, bn_train_value_named(c, "momentum")},
        {"weight_decay", NULL, c->weight_decay},
        {"beta1", NULL, bn_train_value_named(c, "beta1")},
        {"beta2", NULL, bn_train_value_named(c, "beta2")},
        {"eps", NULL, bn_train_value_named(c, "eps")},
        {"lr_policy", p->name, 0},
        {"gamma", NULL, bn_train_value_named(c, "gamma")},
        {"power", NULL, bn_train_value_named(c, "power")},
        {"stepsize", NULL, bn_train_value_named(c, "stepsize")},
        {"lr_min", NULL, bn_train_value_named(c, "lr_min")},
        {"pct_start", NULL, bn_train_value_named(c, "pct_start")},
        {"div_factor", NULL, bn_train_value_named(c, "div_factor")},
        {"final_div_factor", NULL, bn_train_value_named(c, "final_div_factor")},
        {"warmup", NULL, c->warmup},
        {"bias_lr_mult", NULL, c->bias_lr_mult},
    };
    const size_t num_fixed = sizeof fixed / sizeof fixed[0];
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < num_fixed; i++) append(buf, &len, fixed[i].key, fixed[i].word, fixed[i].number);
    append_new_keys(c, t->keys, t->num_keys, fixed, num_fixed, buf, &len);
    append_new_keys(c, p->keys, p->num_keys, fixed, num_fixed, buf, &len);
    append(buf, &len, "shift", NULL, aug->shift);
    append(buf, &len, "flip", NULL, aug->flip);
    append(buf, &len, "pad", bn_augment_pad_names[aug->pad], 0);
    append(buf, &len, "cutout", NULL, aug->cutout);
}

/* One "key=value" of a settings line: where its key and value start and how long they are. */
typedef struct setting {
    const char *key, *value;
    size_t key_len, value_len;
} setting;

/* Reads the pair at *p into *s and moves *p past it and its space; 0 at the end or on a
 * malformed pair. */
static int next_setting(const char **p, setting *s)
{
    const char *at = *p;
    if (!*at) return 0;
    s->key = at;
    s->key_len = strspn(at, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
    if (s->key_len == 0 || at[s->key_len] != '=') return 0;
    s->value = at + s->key_len + 1;
    s->value_len = 0;
    while ((unsigned char)s->value[s->value_len] > ' ') s->value_len++;
    at = s->value + s->value_len;
    if (s->value_len == 0 || (*at && (*at != ' ' || !at[1]))) return 0;
    *p = *at ? at + 1 : at;
    return 1;
}

int bn_settings_valid(const char *text)
{
    setting s;
    while (next_setting(&text, &s)) {}
    return *text == '\0';
}

/* The value of the key s names in text (a valid settings line), or 0 when text lacks it. */
static int find_setting(const char *text, const setting *s, setting *found)
{
    while (next_setting(&text, found))
        if (found->key_len == s->key_len && memcmp(found->key, s->key, s->key_len) == 0) return 1;
    return 0;
}

int bn_settings_changes(const char *old, const char *now, char *buf, size_t cap)
{
    int changes = 0;
    size_t len = 0;
    buf[0] = '\0';
    setting s, was;
    while (next_setting(&now, &s)) {
        if (!find_setting(old, &s, &was)) continue;
        if (was.value_len == s.value_len && memcmp(was.value, s.value, s.value_len) == 0) continue;
        if (len < cap) {
            int n = snprintf(buf + len, cap - len, "%s%.*s %.*s -> %.*s", changes ? ", " : "", (int)s.key_len, s.key,
                             (int)was.value_len, was.value, (int)s.value_len, s.value);
            if (n > 0) len += (size_t)n;
        }
        changes++;
    }
    return changes;
}
