/* npy.c - the .npy preamble and header. The header is a Python literal that NumPy reads with
 * ast.literal_eval; here a small parser takes the one shape NumPy writes, a dict of 'descr',
 * 'fortran_order' and 'shape', in any key order and spacing, and refuses anything else with a
 * message saying where. */
#include "npy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

/* NumPy's own bound on a header (np.load's max_header_size) is 10000 bytes; a larger one would
 * hold more dimensions than anything here reads. */
#define MAX_HEADER (1u << 16)

static int host_big_endian(void)
{
    const uint16_t one = 1;
    return *(const unsigned char *)&one == 0;
}

static void format_shape(const uint64_t *shape, int ndim, char *buf, size_t cap)
{
    size_t used = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < ndim && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%llu", i ? ", " : "", (unsigned long long)shape[i]);
    if (used < cap) snprintf(buf + used, cap - used, ndim == 1 ? ",)" : ")");
}

/* A position in the header text. */
typedef struct cursor {
    const char *what;
    const char *text, *p, *end;
} cursor;

/* The error at c's position, quoting what stands there (controls shown as spaces, so the message
 * stays one line). */
static bn_status malformed(const cursor *c, const char *expected)
{
    char near[41];
    size_t n = 0;
    for (const char *q = c->p; q < c->end && n < sizeof near - 1; q++)
        near[n++] = (unsigned char)*q < 0x20 || (unsigned char)*q >= 0x7f ? ' ' : *q;
    near[n] = '\0';
    return bn_error(BN_ERR_DATA, "%s: malformed .npy header: expected %s at character %d, found \"%s\"", c->what,
                    expected, (int)(c->p - c->text), near);
}

static void skip_space(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

/* Consumes ch after any spaces; 0 when something else is there. */
static int take(cursor *c, char ch)
{
    skip_space(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A quoted string (either quote) into buf. */
static bn_status parse_string(cursor *c, char *buf, size_t cap)
{
    skip_space(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return malformed(c, "a quoted string");
    char quote = *c->p++;
    size_t n = 0;
    for (; c->p < c->end && *c->p != quote; c->p++) {
        if (*c->p == '\\' && c->p + 1 < c->end) c->p++;
        if (n + 1 >= cap) return malformed(c, "a shorter string");
        if ((unsigned char)*c->p < 0x20 || *c->p == 0x7f) return malformed(c, "a printable string");
        buf[n++] = *c->p;
    }
    if (c->p >= c->end) return malformed(c, "the string's closing quote");
    c->p++;
    buf[n] = '\0';
    return BN_OK;
}

static bn_status parse_bool(cursor *c, int *out)
{
    skip_space(c);
    size_t left = (size_t)(c->end - c->p);
    if (left >= 4 && memcmp(c->p, "True", 4) == 0) *out = 1, c->p += 4;
    else if (left >= 5 && memcmp(c->p, "False", 5) == 0) *out = 0, c->p += 5;
    else return malformed(c, "True or False");
    return BN_OK;
}

/* A tuple of integers: "()", "(5,)", "(3, 4)"; Python 2's long suffix "3L" is taken too. */
static bn_status parse_shape(cursor *c, bn_npy_header *h)
{
    if (!take(c, '(')) return malformed(c, "'(' opening the shape");
    h->ndim = 0;
    while (!take(c, ')')) {
        if (h->ndim > 0 && !take(c, ',')) return malformed(c, "',' or ')' in the shape");
        if (h->ndim > 0 && take(c, ')')) break;
        skip_space(c);
        if (c->p >= c->end || *c->p < '0' || *c->p > '9') return malformed(c, "a dimension");
        if (h->ndim == BN_NPY_MAX_DIMS)
            return bn_error(BN_ERR_DATA, "%s: the array has more than %d dimensions", c->what, BN_NPY_MAX_DIMS);
        uint64_t v = 0;
        for (; c->p < c->end && *c->p >= '0' && *c->p <= '9'; c->p++) {
            if (v > (UINT64_MAX - 9) / 10) return malformed(c, "a dimension below 2^64");
            v = v * 10 + (uint64_t)(*c->p - '0');
        }
        if (c->p < c->end && *c->p == 'L') c->p++;
        h->shape[h->ndim++] = v;
    }
    return BN_OK;
}

/* descr: an optional byte order ('<', '>', '|', '='), a kind letter and a size in bytes. */
static bn_status parse_type(const char *what, const char *descr, bn_npy_type *t)
{
    snprintf(t->descr, sizeof t->descr, "%s", descr);
    const char *p = descr;
    t->big_endian = host_big_endian();
    if (*p == '<' || *p == '|') t->big_endian = 0, p++;
    else if (*p == '>') t->big_endian = 1, p++;
    else if (*p == '=') p++;
    t->kind = *p;
    char *rest = (char *)p;
    long size = *p ? strtol(p + 1, &rest, 10) : 0;
    if (!*p || p[1] < '0' || p[1] > '9' || *rest || size < 1 || size > 64)
        return bn_error(BN_ERR_DATA, "%s: dtype '%s' is not a plain element type", what, descr);
    t->size = (int)size;
    return BN_OK;
}

/* Parses the header's dict, text[0..len); messages start with what. */
static bn_status parse_header(const char *what, const char *text, size_t len, bn_npy_header *h)
{
    memset(h, 0, sizeof *h);
    cursor c = {what, text, text, text + len};
    int seen_descr = 0, seen_order = 0, seen_shape = 0;
    if (!take(&c, '{')) return malformed(&c, "'{'");
    while (!take(&c, '}')) {
        if (seen_descr + seen_order + seen_shape > 0 && !take(&c, ',')) return malformed(&c, "',' or '}'");
        if (take(&c, '}')) break;
        char key[32];
        BN_TRY(parse_string(&c, key, sizeof key));
        if (!take(&c, ':')) return malformed(&c, "':'");
        if (strcmp(key, "descr") == 0 && !seen_descr) {
            skip_space(&c);
            if (c.p < c.end && *c.p == '[')
                return bn_error(BN_ERR_DATA, "%s: a structured dtype (a list of fields) is not read; save a plain array",
                                what);
            char descr[sizeof h->type.descr];
            BN_TRY(parse_string(&c, descr, sizeof descr));
            BN_TRY(parse_type(what, descr, &h->type));
            seen_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0 && !seen_order) {
            BN_TRY(parse_bool(&c, &h->fortran_order));
            seen_order = 1;
        } else if (strcmp(key, "shape") == 0 && !seen_shape) {
            BN_TRY(parse_shape(&c, h));
            seen_shape = 1;
        } else {
            return bn_error(BN_ERR_DATA, "%s: unexpected or repeated key '%s' in the .npy header", what, key);
        }
    }
    skip_space(&c);
    if (c.p != c.end) return malformed(&c, "the end after '}'");
    if (!seen_descr || !seen_order || !seen_shape)
        return bn_error(BN_ERR_DATA, "%s: the .npy header lacks '%s'", what,
                        !seen_descr ? "descr" : !seen_order ? "fortran_order" : "shape");
    format_shape(h->shape, h->ndim, h->shape_text, sizeof h->shape_text);
    return BN_OK;
}

/* The length of the header that follows the preamble's fixed part, after the magic and version
 * were checked. */
static bn_status read_preamble(bn_zip_stream *s, uint32_t *header_len)
{
    unsigned char pre[12];
    uint64_t left = bn_zip_stream_left(s);
    if (left == 0) return bn_error(BN_ERR_DATA, "%s: empty, not a .npy array", s->what);
    size_t n = left < 10 ? (size_t)left : 10;
    BN_TRY(bn_zip_stream_read(s, pre, n));
    if (memcmp(pre, magic, n < 6 ? n : 6) != 0)
        return bn_error(BN_ERR_DATA, "%s: not a .npy array (bad magic; the file should start with \\x93NUMPY)", s->what);
    if (n < 10) return bn_error(BN_ERR_DATA, "%s: truncated .npy header (%zu bytes)", s->what, n);
    int major = pre[6], minor = pre[7];
    if (major < 1 || major > 3 || minor != 0)
        return bn_error(BN_ERR_DATA, "%s: .npy version %d.%d; versions 1.0, 2.0 and 3.0 are read", s->what, major, minor);
    *header_len = (uint32_t)pre[8] | (uint32_t)pre[9] << 8;
    if (major > 1) {
        if (bn_zip_stream_left(s) < 2) return bn_error(BN_ERR_DATA, "%s: truncated .npy header", s->what);
        BN_TRY(bn_zip_stream_read(s, pre + 10, 2));
        *header_len |= (uint32_t)pre[10] << 16 | (uint32_t)pre[11] << 24;
    }
    return BN_OK;
}

bn_status bn_npy_read_header(bn_zip_stream *s, bn_npy_header *h)
{
    uint32_t len = 0;
    BN_TRY(read_preamble(s, &len));
    if (len > MAX_HEADER) return bn_error(BN_ERR_DATA, "%s: a .npy header of %u bytes, past %u", s->what, len, MAX_HEADER);
    if (len > bn_zip_stream_left(s))
        return bn_error(BN_ERR_DATA, "%s: truncated .npy header: %u bytes said, %llu there", s->what, len,
                        (unsigned long long)bn_zip_stream_left(s));
    char *text = malloc((size_t)len + 1);
    if (!text) return bn_error(BN_ERR_NOMEM, "%s: out of memory for the .npy header", s->what);
    bn_status st = bn_zip_stream_read(s, text, len);
    if (st == BN_OK) st = parse_header(s->what, text, len, h);
    free(text);
    BN_TRY(st);
    /* Each step stays below 2^64 / size, so the byte count cannot wrap before it is compared. */
    uint64_t bytes = (uint64_t)h->type.size;
    for (int i = 0; i < h->ndim; i++) {
        if (h->shape[i] && bytes > UINT64_MAX / h->shape[i])
            return bn_error(BN_ERR_DATA, "%s: shape %s of %s is past any file's size", s->what, h->shape_text,
                            h->type.descr);
        bytes *= h->shape[i];
    }
    uint64_t left = bn_zip_stream_left(s);
    if (bytes > left)
        return bn_error(BN_ERR_DATA, "%s: truncated: shape %s of %s needs %llu data bytes, there are %llu", s->what,
                        h->shape_text, h->type.descr, (unsigned long long)bytes, (unsigned long long)left);
    if (bytes < left)
        return bn_error(BN_ERR_DATA, "%s: %llu bytes past the %llu data bytes that shape %s of %s needs", s->what,
                        (unsigned long long)(left - bytes), (unsigned long long)bytes, h->shape_text, h->type.descr);
    return BN_OK;
}

size_t bn_npy_preamble(char *buf, const char *descr, const uint64_t *shape, int ndim)
{
    char shape_text[BN_NPY_MAX_DIMS * 22 + 4];
    format_shape(shape, ndim, shape_text, sizeof shape_text);
    int n = snprintf(buf + 10, BN_NPY_PREAMBLE_MAX - 10, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     descr, shape_text);
    /* Spaces, then a newline, pad the whole to a multiple of 64 bytes, as NumPy writes it. */
    size_t total = (10 + (size_t)n + 1 + 63) / 64 * 64;
    memset(buf + 10 + n, ' ', total - 10 - (size_t)n);
    buf[total - 1] = '\n';
    memcpy(buf, magic, sizeof magic);
    buf[6] = 1, buf[7] = 0;
    buf[8] = (char)((total - 10) & 0xff), buf[9] = (char)((total - 10) >> 8);
    return total;
}
