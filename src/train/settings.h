/* settings.h - a run's training settings as one line of text, "batch=64 epochs=10 ...": the
 * [train] keys but the seed (which checkpoints keep apart) and the [augment] keys, in a fixed
 * order, numbers in one spelling (core/describe.h); settings.c says which optimizer and policy
 * keys it holds. Checkpoints record it, so that a resumed run can say which settings it changed. */
#ifndef BN_SETTINGS_H
#define BN_SETTINGS_H

#include <stddef.h>

#include "core/augment.h"
#include "core/train_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Room for any settings line. */
#define BN_SETTINGS_MAX 1024

/* Writes the settings of cfg and aug into buf (BN_SETTINGS_MAX bytes). */
void bn_settings_format(const bn_train_config *cfg, const bn_augment *aug, char buf[BN_SETTINGS_MAX]);

/* 1 when text is a settings line: key=value pairs with one space between them, keys of letters,
 * digits and '_', values of printable characters but the space; 0 otherwise. */
int bn_settings_valid(const char *text);

/* Lists, into buf (cap bytes), the keys whose values differ from old (a valid settings line) to
 * now as "epochs 10 -> 20, lr 0.01 -> 0.005", in now's order; a key in only one of them (a file
 * written before the key existed) is left out. Returns how many differ. */
int bn_settings_changes(const char *old, const char *now, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
