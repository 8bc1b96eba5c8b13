/* name_table.c - open addressing with linear probing over a power-of-two array of slots, kept
 * at most half full so that a probe ends after a slot or two on average. Names are never
 * removed: a network only gains layers while it is read. */
#include "name_table.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"

typedef struct slot {
    char *name; /* NULL: empty */
    int value;
} slot;

struct bn_name_table {
    slot *slots;
    size_t cap, count; /* cap: a power of two */
};

/* The slot that holds name, or the empty one where it would go. */
static slot *find(const slot *slots, size_t cap, const char *name)
{
    size_t i = (size_t)bn_fnv1a_text(BN_FNV1A_START, name) & (cap - 1);
    while (slots[i].name && strcmp(slots[i].name, name) != 0) i = (i + 1) & (cap - 1);
    return (slot *)&slots[i];
}

bn_name_table *bn_name_table_new(void)
{
    bn_name_table *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->cap = 16;
    if (!(t->slots = calloc(t->cap, sizeof *t->slots))) {
        free(t);
        return NULL;
    }
    return t;
}

int bn_name_table_get(const bn_name_table *t, const char *name)
{
    if (!t) return -1;
    const slot *s = find(t->slots, t->cap, name);
    return s->name ? s->value : -1;
}

static int grow(bn_name_table *t)
{
    size_t cap = t->cap * 2;
    slot *slots = calloc(cap, sizeof *slots);
    if (!slots) return -1;
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i].name) *find(slots, cap, t->slots[i].name) = t->slots[i];
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return 0;
}

int bn_name_table_set(bn_name_table *t, const char *name, int value)
{
    slot *s = find(t->slots, t->cap, name);
    if (s->name) {
        s->value = value;
        return 0;
    }
    if (2 * (t->count + 1) > t->cap) {
        if (grow(t) != 0) return -1;
        s = find(t->slots, t->cap, name);
    }
    if (!(s->name = strdup(name))) return -1;
    s->value = value;
    t->count++;
    return 0;
}

void bn_name_table_free(bn_name_table *t)
{
    if (!t) return;
    for (size_t i = 0; i < t->cap; i++) free(t->slots[i].name);
    free(t->slots);
    free(t);
}
