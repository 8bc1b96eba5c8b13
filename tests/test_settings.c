/* test_settings.c - the training settings a checkpoint records: every [train] key but the seed
 * and the [augment] keys in one line, and the list of what a resumed run changed. */
#include "testing.h"
#include "core/lr_policies/lr_policies.h"
#include "core/optimizers/optimizers.h"
#include "train/settings.h"

BN_TEST(settings_line_holds_every_training_key)
{
    bn_train_config c = bn_train_config_defaults();
    c.optimizer = bn_optimizer_find("adamw");
    c.lr_policy = bn_lr_policy_find("onecycle");
    c.weight_decay = 5e-4;
    c.warmup = 100;
    bn_augment aug = {.shift = 2, .flip = 1, .pad = BN_AUGMENT_PAD_REFLECT, .cutout = 16};
    char line[BN_SETTINGS_MAX];
    bn_settings_format(&c, &aug, line);
    const char *want = "batch=64 epochs=10 optimizer=adamw lr=0.01 momentum=0.9 weight_decay=0.0005 beta1=0.9 "
                       "beta2=0.999 eps=1e-08 lr_policy=onecycle gamma=0.0001 power=0.75 stepsize=10000 lr_min=0 "
                       "pct_start=0.3 div_factor=25 final_div_factor=10000 warmup=100 bias_lr_mult=1 shift=2 flip=1 "
                       "pad=reflect cutout=16";
    CHECK_MSG(strcmp(line, want) == 0, "got %s", line);
    CHECK(bn_settings_valid(line));
    return BN_PASS;
}

BN_TEST(settings_changes_list_old_and_new_values)
{
    bn_train_config c = bn_train_config_defaults();
    bn_augment aug = {0};
    char old[BN_SETTINGS_MAX], now[BN_SETTINGS_MAX], changes[256];
    bn_settings_format(&c, &aug, old);
    CHECK(bn_settings_changes(old, old, changes, sizeof changes) == 0 && changes[0] == '\0');
    c.epochs = 20;
    c.lr = 0.005;
    aug.flip = 1;
    aug.pad = BN_AUGMENT_PAD_REFLECT;
    aug.cutout = 8;
    bn_settings_format(&c, &aug, now);
    CHECK(bn_settings_changes(old, now, changes, sizeof changes) == 5);
    CHECK_MSG(strcmp(changes, "epochs 10 -> 20, lr 0.01 -> 0.005, flip 0 -> 1, pad zero -> reflect, "
                              "cutout 0 -> 8") == 0, "got %s", changes);
    /* A key the old line lacks (a file from before the key existed) is no change. */
    CHECK(bn_settings_changes("epochs=10 lr=0.01", now, changes, sizeof changes) == 2);
    CHECK_MSG(strcmp(changes, "epochs 10 -> 20, lr 0.01 -> 0.005") == 0, "got %s", changes);
    /* The line of a checkpoint saved before pad and cutout existed ends at flip. */
    char before[BN_SETTINGS_MAX];
    snprintf(before, sizeof before, "%.*s", (int)(strstr(old, " pad=") - old), old);
    CHECK(bn_settings_valid(before) && !strstr(before, "cutout"));
    CHECK(bn_settings_changes(before, now, changes, sizeof changes) == 3);
    CHECK_MSG(strcmp(changes, "epochs 10 -> 20, lr 0.01 -> 0.005, flip 0 -> 1") == 0, "got %s", changes);
    /* A short buffer is cut, not overrun; the count is still whole. */
    CHECK(bn_settings_changes(old, now, changes, 12) == 5 && strlen(changes) == 11);
    return BN_PASS;
}

BN_TEST(settings_valid_refuses_what_is_not_key_value_pairs)
{
    static const char *const good[] = {"", "a=1", "a=1 b_2=x,y"};
    static const char *const bad[] = {" a=1", "a=1 ", "a=1  b=2", "a", "a=", "=1", "a-b=1", "a=1\nb=2"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) CHECK_MSG(bn_settings_valid(good[i]), "'%s'", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) CHECK_MSG(!bn_settings_valid(bad[i]), "'%s'", bad[i]);
    return BN_PASS;
}
