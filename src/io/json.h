/* json.h - a small strict JSON reader (RFC 8259) that builds a tree, and the one writing
 * helper blobnet needs: quoting a string. Made for file headers read from disk, so it
 * trusts nothing: input is a byte span (not NUL-terminated), strings must be valid UTF-8,
 * nesting is limited to BN_JSON_MAX_DEPTH and every error names its byte offset. */
#ifndef BN_JSON_H
#define BN_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Arrays and objects nested deeper than this are refused (bounds the parser's recursion). */
#define BN_JSON_MAX_DEPTH 32

typedef enum bn_json_type {
    BN_JSON_NULL,
    BN_JSON_BOOL,
    BN_JSON_NUMBER,
    BN_JSON_STRING,
    BN_JSON_ARRAY,
    BN_JSON_OBJECT
} bn_json_type;

typedef struct bn_json bn_json;
struct bn_json {
    bn_json_type type;
    size_t offset;      /* byte offset of the value's first character in the parsed text */
    int boolean;        /* BOOL: 0 or 1 */
    double number;      /* NUMBER: the value as a double */
    char *text;         /* STRING: the decoded UTF-8 value; NUMBER: the literal as written.
                         * NUL-terminated; a string with \u0000 holds NULs, so see len */
    size_t len;         /* bytes in text, without the terminating NUL */
    size_t count;       /* ARRAY, OBJECT: number of elements or members */
    bn_json **items;    /* ARRAY: the elements; OBJECT: the members' values, in file order */
    bn_json **keys;     /* OBJECT: keys[i] is the STRING naming items[i]; keys are unique */
};

/* Parses len bytes of text as one JSON value (whitespace around it allowed, nothing else).
 * *out is owned by the caller (bn_json_free). Malformed input is BN_ERR_DATA with a message
 * "byte N: problem"; duplicate object keys and numbers beyond double range are refused. */
bn_status bn_json_parse(const char *text, size_t len, bn_json **out);

/* Frees a tree from bn_json_parse. NULL is fine. */
void bn_json_free(bn_json *v);

/* The value of member `key` of object obj, or NULL when obj is not an object or lacks it.
 * The result belongs to obj. */
const bn_json *bn_json_get(const bn_json *obj, const char *key);

/* 1 and *out set when v is a number written as a plain non-negative integer (no sign,
 * fraction or exponent) that fits in 64 bits, else 0. Exact where a double is not. */
int bn_json_u64(const bn_json *v, uint64_t *out);

/* A lower-case name of the type ("object", "string", ...), for messages. */
const char *bn_json_type_name(bn_json_type t);

/* Writes s as a quoted JSON string literal into dst (at most cap bytes including the NUL,
 * like snprintf) and returns the literal's full length. Quotes, backslashes and control
 * characters are escaped; bytes that are not valid UTF-8 become U+FFFD, so the result is
 * always valid JSON. */
size_t bn_json_quote(char *dst, size_t cap, const char *s);

#ifdef __cplusplus
}
#endif
#endif
