#include "json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct parser {
    const char *s;
    size_t len, pos;
} parser;

static bn_status fail_at(size_t pos, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static bn_status fail_at(size_t pos, const char *fmt, ...)
{
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return bn_error(BN_ERR_DATA, "byte %zu: %s", pos, what);
}

static bn_status no_memory(void)
{
    return bn_error(BN_ERR_NOMEM, "out of host memory parsing JSON");
}

/* Length (1-4) of the well-formed UTF-8 sequence at s, or 0 when it is not one: overlong
 * forms, surrogates and code points past U+10FFFF are refused. Reads at most avail bytes,
 * and stops at the first byte that is not a continuation (so a NUL ends the scan). */
static size_t utf8_seq(const unsigned char *s, size_t avail)
{
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t n;
    unsigned long cp, min;
    if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) n = 3, cp = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07, min = 0x10000;
    else return 0;
    if (avail < n) return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

static size_t utf8_encode(unsigned long cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static void skip_ws(parser *p)
{
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

/* Describes the byte at pos for a message: "end of input", "'x'" or "byte 0x.."." */
static const char *describe(const parser *p, size_t pos, char *buf, size_t cap)
{
    if (pos >= p->len) return "end of input";
    unsigned char c = (unsigned char)p->s[pos];
    if (c > 0x20 && c < 0x7F) snprintf(buf, cap, "'%c'", c);
    else snprintf(buf, cap, "byte 0x%02x", c);
    return buf;
}

static bn_status unexpected(const parser *p, const char *wanted)
{
    char buf[16];
    return fail_at(p->pos, "expected %s, found %s", wanted, describe(p, p->pos, buf, sizeof buf));
}

static bn_json *new_node(bn_json_type type, size_t offset)
{
    bn_json *v = calloc(1, sizeof *v);
    if (v) {
        v->type = type;
        v->offset = offset;
    }
    return v;
}

static int hex4(const parser *p, size_t pos, unsigned long *out)
{
    if (p->len - pos < 4) return 0;
    unsigned long v = 0;
    for (size_t i = 0; i < 4; i++) {
        char c = p->s[pos + i];
        int d = c >= '0' && c <= '9' ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return 0;
        v = v << 4 | (unsigned long)d;
    }
    *out = v;
    return 1;
}

/* Decodes the \u escape at p->pos (pointing at the backslash), joining a surrogate pair. */
static bn_status unicode_escape(parser *p, unsigned long *cp)
{
    size_t at = p->pos;
    if (!hex4(p, at + 2, cp)) return fail_at(at, "\\u needs four hex digits");
    p->pos += 6;
    if (*cp >= 0xDC00 && *cp <= 0xDFFF) return fail_at(at, "lone low surrogate \\u%04lX", *cp);
    if (*cp < 0xD800 || *cp > 0xDBFF) return BN_OK;
    unsigned long low;
    if (p->len - p->pos < 6 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u' ||
        !hex4(p, p->pos + 2, &low) || low < 0xDC00 || low > 0xDFFF)
        return fail_at(at, "high surrogate \\u%04lX is not followed by a low one", *cp);
    p->pos += 6;
    *cp = 0x10000 + ((*cp - 0xD800) << 10) + (low - 0xDC00);
    return BN_OK;
}

/* Parses the string starting at the quote at p->pos into a node of its decoded bytes. */
static bn_status parse_string(parser *p, bn_json **out)
{
    size_t start = p->pos;
    size_t end = start + 1;
    while (end < p->len && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->len) return fail_at(start, "unterminated string");

    bn_json *v = new_node(BN_JSON_STRING, start);
    /* Decoding never lengthens: every escape is at least as long as the bytes it makes. */
    char *text = v ? malloc(end - start) : NULL;
    if (!text) {
        free(v);
        return no_memory();
    }
    v->text = text;
    *out = v;
    size_t n = 0;
    p->pos = start + 1;
    while (p->pos < end) {
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c < 0x20) return fail_at(p->pos, "control character 0x%02x in string", c);
        if (c >= 0x80) {
            size_t k = utf8_seq((const unsigned char *)p->s + p->pos, end - p->pos);
            if (k == 0) return fail_at(p->pos, "invalid UTF-8 in string");
            memcpy(text + n, p->s + p->pos, k);
            n += k;
            p->pos += k;
            continue;
        }
        if (c != '\\') {
            text[n++] = (char)c;
            p->pos++;
            continue;
        }
        char e = p->s[p->pos + 1];
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
        const char *hit = e ? strchr(from, e) : NULL;
        if (hit) {
            text[n++] = to[hit - from];
            p->pos += 2;
        } else if (e == 'u') {
            unsigned long cp = 0;
            BN_TRY(unicode_escape(p, &cp));
            n += utf8_encode(cp, text + n);
        } else {
            char buf[16];
            return fail_at(p->pos, "invalid escape \\%s", describe(p, p->pos + 1, buf, sizeof buf));
        }
    }
    text[n] = '\0';
    v->len = n;
    p->pos = end + 1;
    return BN_OK;
}

static int is_digit(const parser *p, size_t pos)
{
    return pos < p->len && p->s[pos] >= '0' && p->s[pos] <= '9';
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? ; keeps the literal for exact integers. */
static bn_status parse_number(parser *p, bn_json **out)
{
    size_t start = p->pos, i = start;
    if (i < p->len && p->s[i] == '-') i++;
    if (!is_digit(p, i)) return fail_at(i, "a number needs a digit here");
    if (p->s[i] == '0' && is_digit(p, i + 1)) return fail_at(i, "number with a leading zero");
    while (is_digit(p, i)) i++;
    if (i < p->len && p->s[i] == '.') {
        if (!is_digit(p, ++i)) return fail_at(i, "a fraction needs a digit after '.'");
        while (is_digit(p, i)) i++;
    }
    if (i < p->len && (p->s[i] == 'e' || p->s[i] == 'E')) {
        i++;
        if (i < p->len && (p->s[i] == '+' || p->s[i] == '-')) i++;
        if (!is_digit(p, i)) return fail_at(i, "an exponent needs a digit");
        while (is_digit(p, i)) i++;
    }
    bn_json *v = new_node(BN_JSON_NUMBER, start);
    char *text = v ? malloc(i - start + 1) : NULL;
    if (!text) {
        free(v);
        return no_memory();
    }
    memcpy(text, p->s + start, i - start);
    text[i - start] = '\0';
    v->text = text;
    v->len = i - start;
    *out = v;
    v->number = strtod(text, NULL);
    if (isinf(v->number)) return fail_at(start, "number %s is out of range", text);
    p->pos = i;
    return BN_OK;
}

static bn_status parse_literal(parser *p, bn_json **out)
{
    static const struct {
        const char *word;
        bn_json_type type;
        int boolean;
    } words[] = {{"true", BN_JSON_BOOL, 1}, {"false", BN_JSON_BOOL, 0}, {"null", BN_JSON_NULL, 0}};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        size_t n = strlen(words[i].word);
        if (p->len - p->pos >= n && memcmp(p->s + p->pos, words[i].word, n) == 0) {
            if (!(*out = new_node(words[i].type, p->pos))) return no_memory();
            (*out)->boolean = words[i].boolean;
            p->pos += n;
            return BN_OK;
        }
    }
    return unexpected(p, "a value");
}

/* Appends item (and key, for objects) to container v, taking ownership of both. */
static bn_status append(bn_json *v, bn_json *key, bn_json *item, size_t *cap)
{
    if (v->count == *cap) {
        size_t grown = *cap ? 2 * *cap : 4;
        bn_json **items = realloc(v->items, grown * sizeof *items);
        if (items) v->items = items;
        bn_json **keys = items && key ? realloc(v->keys, grown * sizeof *keys) : NULL;
        if (keys) v->keys = keys;
        if (!items || (key && !keys)) {
            bn_json_free(key);
            bn_json_free(item);
            return no_memory();
        }
        *cap = grown;
    }
    if (key) v->keys[v->count] = key;
    v->items[v->count++] = item;
    return BN_OK;
}

static int key_order(const void *a, const void *b)
{
    const bn_json *x = *(const bn_json *const *)a, *y = *(const bn_json *const *)b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->text, y->text, n);
    if (c) return c;
    return (x->len > y->len) - (x->len < y->len);
}

/* Sorting a copy of the key list keeps the check O(n log n) for headers of many tensors. */
static bn_status check_unique_keys(const bn_json *obj)
{
    if (obj->count < 2) return BN_OK;
    bn_json **sorted = malloc(obj->count * sizeof *sorted);
    if (!sorted) return no_memory();
    memcpy(sorted, obj->keys, obj->count * sizeof *sorted);
    qsort(sorted, obj->count, sizeof *sorted, key_order);
    bn_status s = BN_OK;
    for (size_t i = 1; i < obj->count && s == BN_OK; i++) {
        if (key_order(&sorted[i - 1], &sorted[i]) != 0) continue;
        const bn_json *later = sorted[i]->offset > sorted[i - 1]->offset ? sorted[i] : sorted[i - 1];
        s = fail_at(later->offset, "duplicate key \"%.60s\"", later->text);
    }
    free(sorted);
    return s;
}

static bn_status parse_value(parser *p, int depth, bn_json **out);

/* Parses an array or object at p->pos; `depth` counts the containers around it. */
static bn_status parse_container(parser *p, int depth, bn_json **out)
{
    int is_object = p->s[p->pos] == '{';
    char close = is_object ? '}' : ']';
    if (depth >= BN_JSON_MAX_DEPTH)
        return fail_at(p->pos, "nesting deeper than %d levels", BN_JSON_MAX_DEPTH);
    bn_json *v = new_node(is_object ? BN_JSON_OBJECT : BN_JSON_ARRAY, p->pos);
    if (!v) return no_memory();
    *out = v;
    p->pos++;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == close) {
        p->pos++;
        return BN_OK;
    }
    size_t cap = 0;
    for (;;) {
        bn_json *key = NULL, *item = NULL;
        if (is_object) {
            if (p->pos >= p->len || p->s[p->pos] != '"') return unexpected(p, "a string key");
            bn_status s = parse_string(p, &key);
            if (s != BN_OK) {
                bn_json_free(key);
                return s;
            }
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') {
                bn_json_free(key);
                return unexpected(p, "':' after the key");
            }
            p->pos++;
            skip_ws(p);
        }
        bn_status s = parse_value(p, depth + 1, &item);
        if (s != BN_OK) {
            bn_json_free(key);
            bn_json_free(item);
            return s;
        }
        BN_TRY(append(v, key, item, &cap));
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') {
            p->pos++;
            skip_ws(p);
            continue;
        }
        if (p->pos < p->len && p->s[p->pos] == close) break;
        return unexpected(p, is_object ? "',' or '}'" : "',' or ']'");
    }
    p->pos++;
    return is_object ? check_unique_keys(v) : BN_OK;
}

/* On failure *out may hold a partial node, which the caller frees. */
static bn_status parse_value(parser *p, int depth, bn_json **out)
{
    *out = NULL;
    if (p->pos >= p->len) return unexpected(p, "a value");
    char c = p->s[p->pos];
    if (c == '{' || c == '[') return parse_container(p, depth, out);
    if (c == '"') return parse_string(p, out);
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(p, out);
    return parse_literal(p, out);
}

bn_status bn_json_parse(const char *text, size_t len, bn_json **out)
{
    *out = NULL;
    parser p = {text, len, 0};
    bn_json *root = NULL;
    skip_ws(&p);
    bn_status s = parse_value(&p, 0, &root);
    if (s == BN_OK) {
        skip_ws(&p);
        if (p.pos < p.len) s = unexpected(&p, "end of input after the value");
    }
    if (s != BN_OK) {
        bn_json_free(root);
        return s;
    }
    *out = root;
    return BN_OK;
}

void bn_json_free(bn_json *v)
{
    if (!v) return;
    for (size_t i = 0; i < v->count; i++) {
        bn_json_free(v->items[i]);
        if (v->keys) bn_json_free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->text);
    free(v);
}

const bn_json *bn_json_get(const bn_json *obj, const char *key)
{
    if (!obj || obj->type != BN_JSON_OBJECT) return NULL;
    size_t n = strlen(key);
    for (size_t i = 0; i < obj->count; i++)
        if (obj->keys[i]->len == n && memcmp(obj->keys[i]->text, key, n) == 0) return obj->items[i];
    return NULL;
}

int bn_json_u64(const bn_json *v, uint64_t *out)
{
    if (!v || v->type != BN_JSON_NUMBER) return 0;
    uint64_t x = 0;
    for (size_t i = 0; i < v->len; i++) {
        char c = v->text[i];
        if (c < '0' || c > '9') return 0;
        unsigned d = (unsigned)(c - '0');
        if (x > (UINT64_MAX - d) / 10) return 0;
        x = 10 * x + d;
    }
    *out = x;
    return 1;
}

const char *bn_json_type_name(bn_json_type t)
{
    switch (t) {
    case BN_JSON_NULL: return "null";
    case BN_JSON_BOOL: return "boolean";
    case BN_JSON_NUMBER: return "number";
    case BN_JSON_STRING: return "string";
    case BN_JSON_ARRAY: return "array";
    case BN_JSON_OBJECT: return "object";
    }
    return "unknown";
}

size_t bn_json_quote(char *dst, size_t cap, const char *s)
{
    size_t n = 0;
#define PUT(ch) do { if (n + 1 < cap) dst[n] = (ch); n++; } while (0)
    PUT('"');
    const unsigned char *u = (const unsigned char *)s;
    while (*u) {
        unsigned char c = *u;
        const char *short_form = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n"
                               : c == '\r' ? "\\r" : c == '\t' ? "\\t" : c == '\b' ? "\\b"
                               : c == '\f' ? "\\f" : NULL;
        char esc[8];
        size_t k = 1;
        if (short_form) {
            snprintf(esc, sizeof esc, "%s", short_form);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
        } else if (c >= 0x80 && (k = utf8_seq(u, 4)) == 0) {
            snprintf(esc, sizeof esc, "\\ufffd");
            k = 1;
        } else {
            for (size_t i = 0; i < k; i++) PUT((char)u[i]);
            u += k;
            continue;
        }
        for (const char *e = esc; *e; e++) PUT(*e);
        u += k;
    }
    PUT('"');
#undef PUT
    if (cap) dst[n < cap ? n : cap - 1] = '\0';
    return n;
}
