#include "settings.h"

#include <stdio.h>
#include <string.h>

#include "core/describe.h"

void bn_settings_format(const bn_train_config *c, const bn_augment *aug, char buf[BN_SETTINGS_MAX])
{
    /* A setting is a word (an enum's name) or, where word is NULL, a number. */
    const struct {
        const char *key, *word;
        double number;
    } settings[] = {
        {"batch", NULL, c->batch},
        {"epochs", NULL, c->epochs},
        {"optimizer", bn_optimizer_names[c->optimizer], 0},
        {"lr", NULL, c->lr},
        {"momentum", NULL, c->momentum},
        {"weight_decay", NULL, c->weight_decay},
        {"beta1", NULL, c->beta1},
        {"beta2", NULL, c->beta2},
        {"eps", NULL, c->eps},
        {"lr_policy", bn_lr_policy_names[c->lr_policy], 0},
        {"gamma", NULL, c->gamma},
        {"power", NULL, c->power},
        {"stepsize", NULL, c->stepsize},
        {"lr_min", NULL, c->lr_min},
        {"pct_start", NULL, c->pct_start},
        {"div_factor", NULL, c->div_factor},
        {"final_div_factor", NULL, c->final_div_factor},
        {"warmup", NULL, c->warmup},
        {"bias_lr_mult", NULL, c->bias_lr_mult},
        {"shift", NULL, aug->shift},
        {"flip", NULL, aug->flip},
        {"pad", bn_augment_pad_names[aug->pad], 0},
        {"cutout", NULL, aug->cutout},
    };
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof settings / sizeof settings[0] && len < BN_SETTINGS_MAX; i++) {
        char number[32];
        if (!settings[i].word) bn_describe_number(settings[i].number, number, sizeof number);
        int n = snprintf(buf + len, BN_SETTINGS_MAX - len, "%s%s=%s", len ? " " : "", settings[i].key,
                         settings[i].word ? settings[i].word : number);
        if (n > 0) len += (size_t)n;
    }
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
