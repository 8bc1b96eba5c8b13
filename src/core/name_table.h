/* name_table.h - a hash table from names to numbers: the network's layer names to their
 * indices, so that the reader of a model file checks a name, resolves an `input = a, b` list
 * and counts a type's layers in constant time per layer, however many layers there are. */
#ifndef BN_NAME_TABLE_H
#define BN_NAME_TABLE_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bn_name_table bn_name_table;

/* An empty table, owned by the caller (bn_name_table_free), or NULL when out of memory. */
bn_name_table *bn_name_table_new(void);

/* The number stored under name, or -1 when there is none. A NULL table holds nothing. */
int bn_name_table_get(const bn_name_table *t, const char *name);

/* Stores value (>= 0) under name, copying the name, replacing any value it had. Returns 0, or
 * -1 when out of memory (the table is unchanged then). */
int bn_name_table_set(bn_name_table *t, const char *name, int value);

/* Frees the table and its copies of the names. NULL is fine. */
void bn_name_table_free(bn_name_table *t);

#ifdef __cplusplus
}
#endif
#endif
