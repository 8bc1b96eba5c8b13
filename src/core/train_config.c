#include "train_config.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "core/lr_policies/lr_policies.h"
#include "core/optimizers/optimizers.h"

bn_train_config bn_train_config_defaults(void)
{
    bn_train_config c = {
        .batch = 64, .epochs = 10, .optimizer = 0, .lr = 0.01, .weight_decay = 5e-4, .lr_policy = 0, .warmup = 0,
        .bias_lr_mult = 1.0, .seed = 1,
    };
    return c;
}

static const bn_given_key *find_given(const bn_train_config *c, const char *name)
{
    for (int i = 0; i < c->num_given; i++)
        if (strcmp(c->given[i].key, name) == 0) return &c->given[i];
    return NULL;
}

double bn_train_key_value(const bn_train_config *c, const bn_train_key *key)
{
    const bn_given_key *g = find_given(c, key->name);
    return g ? g->value : key->def;
}

bn_status bn_train_config_set(bn_train_config *c, const char *key, double value)
{
    bn_given_key *g = (bn_given_key *)find_given(c, key);
    if (!g) {
        if (c->num_given == BN_TRAIN_MAX_GIVEN)
            return bn_error(BN_ERR_INTERNAL, "[train] holds %d optimizer and policy keys already", BN_TRAIN_MAX_GIVEN);
        g = &c->given[c->num_given++];
        g->key = key;
    }
    g->value = value;
    return BN_OK;
}

static const bn_train_key *key_in(const bn_train_key *keys, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(keys[i].name, name) == 0) return &keys[i];
    return NULL;
}

/* The key called name of the optimizer, or of the policy, at index i; NULL when it reads none. */
static const bn_train_key *optimizer_key(int i, const char *name)
{
    const bn_optimizer_type *t = bn_optimizer_type_at(i);
    return key_in(t->keys, t->num_keys, name);
}

static const bn_train_key *policy_key(int i, const char *name)
{
    const bn_lr_policy *p = bn_lr_policy_at(i);
    return key_in(p->keys, p->num_keys, name);
}

/* The key called name of the first optimizer (of_optimizers) or policy that reads it, or NULL. */
static const bn_train_key *first_key(int of_optimizers, const char *name)
{
    int n = of_optimizers ? bn_optimizer_type_count() : bn_lr_policy_count();
    for (int i = 0; i < n; i++) {
        const bn_train_key *key = of_optimizers ? optimizer_key(i, name) : policy_key(i, name);
        if (key) return key;
    }
    return NULL;
}

double bn_train_value_named(const bn_train_config *c, const char *name)
{
    const bn_given_key *g = find_given(c, name);
    if (g) return g->value;
    const bn_train_key *key = optimizer_key(c->optimizer, name);
    if (!key) key = policy_key(c->lr_policy, name);
    if (!key) key = first_key(1, name);
    if (!key) key = first_key(0, name);
    return key ? key->def : 0.0;
}

static int present(const bn_options *o, const char *key)
{
    for (int i = 0; i < o->count; i++)
        if (strcmp(o->items[i].key, key) == 0) return 1;
    return 0;
}

/* The keys of one optimizer or policy that the section gives, each checked against its range. */
static bn_status read_keys(bn_options *o, const bn_train_key *keys, int n, bn_train_config *cfg)
{
    for (int i = 0; i < n; i++) {
        const bn_train_key *k = &keys[i];
        if (!present(o, k->name)) continue;
        double v;
        if (k->form == BN_KEY_INT) {
            int whole;
            BN_TRY(bn_opt_int(o, k->name, 0, (int)k->lo, (int)k->hi, &whole));
            v = whole;
        } else {
            BN_TRY(bn_opt_float(o, k->name, k->def, k->lo, k->hi, &v));
            if (k->form == BN_KEY_BELOW_HI && v == k->hi)
                return bn_opt_error(o, k->name, "%s = %g is out of range [%g, %g)", k->name, v, k->lo, k->hi);
        }
        BN_TRY(bn_train_config_set(cfg, k->name, v));
    }
    return BN_OK;
}

/* "adam, adamw": the optimizers (policies when !optimizers) that read key. */
static void owners(const char *key, int optimizers, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    int n = optimizers ? bn_optimizer_type_count() : bn_lr_policy_count();
    for (int i = 0; i < n && len < cap; i++) {
        const char *name = optimizers ? bn_optimizer_type_at(i)->name : bn_lr_policy_at(i)->name;
        if (!(optimizers ? optimizer_key(i, key) : policy_key(i, key))) continue;
        int w = snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", name);
        if (w > 0) len += (size_t)w;
    }
}

/* A key left unread that another optimizer or policy reads is named with whose it is; any other
 * is left for the caller's check of unknown keys. */
static bn_status refuse_misplaced(const bn_options *o, const bn_train_config *cfg)
{
    for (int i = 0; i < o->count; i++) {
        const char *key = o->items[i].key;
        if (o->items[i].used) continue;
        int of_optimizer = first_key(1, key) != NULL;
        if (!of_optimizer && !first_key(0, key)) continue;
        char list[256];
        owners(key, of_optimizer, list, sizeof list);
        const char *what = of_optimizer ? "optimizer" : "lr_policy";
        const char *chosen = of_optimizer ? bn_optimizer_names[cfg->optimizer] : bn_lr_policy_names[cfg->lr_policy];
        return bn_opt_error(o, key, "%s is a key of %s %s, not of %s = %s", key, what, list, what, chosen);
    }
    return BN_OK;
}

bn_status bn_train_config_parse(bn_options *o, bn_train_config *cfg)
{
    int seed = (int)cfg->seed;
    BN_TRY(bn_opt_int(o, "batch", cfg->batch, 1, 1 << 20, &cfg->batch));
    BN_TRY(bn_opt_int(o, "epochs", cfg->epochs, 0, 1 << 20, &cfg->epochs));
    BN_TRY(bn_opt_choice(o, "optimizer", bn_optimizer_names, cfg->optimizer, &cfg->optimizer));
    BN_TRY(bn_opt_float(o, "lr", cfg->lr, 0.0, 1e3, &cfg->lr));
    BN_TRY(bn_opt_float(o, "weight_decay", cfg->weight_decay, 0.0, 1.0, &cfg->weight_decay));
    BN_TRY(bn_opt_choice(o, "lr_policy", bn_lr_policy_names, cfg->lr_policy, &cfg->lr_policy));
    BN_TRY(bn_opt_int(o, "warmup", cfg->warmup, 0, INT_MAX, &cfg->warmup));
    BN_TRY(bn_opt_float(o, "bias_lr_mult", cfg->bias_lr_mult, 0.0, 1e3, &cfg->bias_lr_mult));
    BN_TRY(bn_opt_int(o, "seed", seed, 0, INT_MAX, &seed));
    cfg->seed = (unsigned long long)seed;
    const bn_optimizer_type *t = bn_optimizer_type_at(cfg->optimizer);
    BN_TRY(read_keys(o, t->keys, t->num_keys, cfg));
    const bn_lr_policy *p = bn_lr_policy_at(cfg->lr_policy);
    BN_TRY(read_keys(o, p->keys, p->num_keys, cfg));
    return refuse_misplaced(o, cfg);
}
