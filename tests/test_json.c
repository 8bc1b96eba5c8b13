/* test_json.c - the strict JSON reader on valid documents, escapes, numbers and every kind
 * of malformed input, and the string quoting helper round-tripping through the reader. */
#include "testing.h"

#include <stdint.h>
#include <stdlib.h>

#include "core/status.h"
#include "io/json.h"

static bn_status parse(const char *text, bn_json **out)
{
    return bn_json_parse(text, strlen(text), out);
}

/* The parse must fail as data and its message must contain needle. */
static int rejects(const char *text, const char *needle)
{
    bn_json *v = NULL;
    bn_clear_error();
    bn_status s = parse(text, &v);
    if (s != BN_ERR_DATA || v != NULL || !strstr(bn_last_error(), needle)) {
        fprintf(stderr, "    %s -> status %d, message \"%s\" (wanted \"%s\")\n", text, (int)s,
                bn_last_error(), needle);
        bn_json_free(v);
        return 0;
    }
    return 1;
}

BN_TEST(json_parses_nested_document)
{
    bn_json *v;
    CHECK_OK(parse(" {\"a\": [1, -2.5, true, false, null], \"b\": {\"c\": \"x\"}, \"e\": {}, \"f\": []}\n", &v));
    CHECK(v->type == BN_JSON_OBJECT && v->count == 4);
    CHECK(v->offset == 1);
    const bn_json *a = bn_json_get(v, "a");
    CHECK(a && a->type == BN_JSON_ARRAY && a->count == 5);
    CHECK(a->items[0]->type == BN_JSON_NUMBER && a->items[0]->number == 1.0);
    CHECK(a->items[1]->number == -2.5);
    CHECK(a->items[2]->type == BN_JSON_BOOL && a->items[2]->boolean == 1);
    CHECK(a->items[3]->type == BN_JSON_BOOL && a->items[3]->boolean == 0);
    CHECK(a->items[4]->type == BN_JSON_NULL);
    CHECK(a->items[1]->offset == 11);
    const bn_json *c = bn_json_get(bn_json_get(v, "b"), "c");
    CHECK(c && c->type == BN_JSON_STRING && strcmp(c->text, "x") == 0 && c->len == 1);
    CHECK(bn_json_get(v, "e")->type == BN_JSON_OBJECT && bn_json_get(v, "e")->count == 0);
    CHECK(bn_json_get(v, "f")->type == BN_JSON_ARRAY && bn_json_get(v, "f")->count == 0);
    CHECK(bn_json_get(v, "missing") == NULL);
    CHECK(bn_json_get(a, "a") == NULL); /* not an object */
    CHECK(strcmp(v->keys[1]->text, "b") == 0 && v->items[1] == bn_json_get(v, "b"));
    bn_json_free(v);

    CHECK_OK(parse("\"top\"", &v)); /* any value may be the document */
    CHECK(v->type == BN_JSON_STRING && strcmp(v->text, "top") == 0);
    bn_json_free(v);
    bn_json_free(NULL);
    return BN_PASS;
}

BN_TEST(json_decodes_escapes_and_utf8)
{
    bn_json *v;
    CHECK_OK(parse("\"q\\\" b\\\\ s\\/ \\b\\f\\n\\r\\t\"", &v));
    CHECK(strcmp(v->text, "q\" b\\ s/ \b\f\n\r\t") == 0);
    bn_json_free(v);
    /* \u escapes: ASCII, 2- and 3-byte UTF-8, a surrogate pair (U+1F600) and a NUL. */
    CHECK_OK(parse("\"\\u0041\\u00e9\\u20AC\\ud83d\\ude00\\u0000z\"", &v));
    const char want[] = "A\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\0z";
    CHECK(v->len == sizeof want - 1);
    CHECK(memcmp(v->text, want, sizeof want) == 0);
    bn_json_free(v);
    /* Raw UTF-8 passes through unchanged. */
    CHECK_OK(parse("\"caf\xC3\xA9 \xF0\x9F\x98\x80\"", &v));
    CHECK(strcmp(v->text, "caf\xC3\xA9 \xF0\x9F\x98\x80") == 0);
    bn_json_free(v);
    /* A key with an embedded NUL is not the same key as its prefix. */
    CHECK_OK(parse("{\"a\\u0000b\": 1, \"a\": 2}", &v));
    CHECK(bn_json_get(v, "a")->number == 2.0);
    bn_json_free(v);

    CHECK(rejects("\"\\x\"", "invalid escape"));
    CHECK(rejects("\"\\u12G4\"", "four hex digits"));
    CHECK(rejects("\"\\u12\"", "four hex digits"));
    CHECK(rejects("\"\\ud83d\"", "not followed by a low one"));
    CHECK(rejects("\"\\ud83dx\\ude00\"", "not followed by a low one"));
    CHECK(rejects("\"\\ude00\"", "lone low surrogate"));
    CHECK(rejects("\"tab\there\"", "control character 0x09"));
    CHECK(rejects("\"\xC3\"", "invalid UTF-8"));
    CHECK(rejects("\"\xC0\xAF\"", "invalid UTF-8"));         /* overlong '/' */
    CHECK(rejects("\"\xED\xA0\x80\"", "invalid UTF-8"));     /* encoded surrogate */
    CHECK(rejects("\"\xF4\x90\x80\x80\"", "invalid UTF-8")); /* past U+10FFFF */
    CHECK(rejects("\"abc", "byte 0: unterminated string"));
    CHECK(rejects("\"abc\\\"", "unterminated string"));
    return BN_PASS;
}

BN_TEST(json_numbers_and_exact_integers)
{
    bn_json *v;
    CHECK_OK(parse("[0, -0, 12, 3.25, -1e3, 2E-2, 1.5e+2, 18446744073709551615, 18446744073709551616, 9007199254740993]", &v));
    CHECK(v->count == 10);
    double want[] = {0, 0, 12, 3.25, -1000, 0.02, 150};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK_MSG(v->items[i]->number == want[i], "item %zu is %g", i, v->items[i]->number);
    uint64_t u;
    CHECK(bn_json_u64(v->items[2], &u) && u == 12);
    CHECK(bn_json_u64(v->items[0], &u) && u == 0);
    CHECK(!bn_json_u64(v->items[1], &u)); /* "-0" has a sign */
    CHECK(!bn_json_u64(v->items[3], &u)); /* fraction */
    CHECK(!bn_json_u64(v->items[4], &u)); /* negative */
    CHECK(!bn_json_u64(v->items[6], &u)); /* exponent */
    CHECK(bn_json_u64(v->items[7], &u) && u == UINT64_MAX);
    CHECK(!bn_json_u64(v->items[8], &u)); /* one past 64 bits */
    CHECK(bn_json_u64(v->items[9], &u) && u == 9007199254740993ULL); /* 2^53 + 1: beyond a double */
    CHECK(strcmp(v->items[5]->text, "2E-2") == 0);
    CHECK(!bn_json_u64(NULL, &u));
    bn_json_free(v);

    CHECK(rejects("01", "leading zero"));
    CHECK(rejects("-", "needs a digit"));
    CHECK(rejects("1.", "needs a digit after '.'"));
    CHECK(rejects(".5", "expected a value"));
    CHECK(rejects("1e", "exponent needs a digit"));
    CHECK(rejects("+1", "expected a value"));
    CHECK(rejects("1e999", "out of range"));
    CHECK(rejects("[1,]", "byte 3: expected a value, found ']'"));
    return BN_PASS;
}

BN_TEST(json_rejects_truncated_input_and_trailing_garbage)
{
    CHECK(rejects("", "byte 0: expected a value, found end of input"));
    CHECK(rejects("   ", "expected a value"));
    CHECK(rejects("{\"a\": [1, 2", "byte 11: expected ',' or ']', found end of input"));
    CHECK(rejects("{\"a\": 1", "expected ',' or '}'"));
    CHECK(rejects("{\"a\"", "expected ':' after the key"));
    CHECK(rejects("{\"a\" 1}", "byte 5: expected ':' after the key, found '1'"));
    CHECK(rejects("{1: 2}", "expected a string key"));
    CHECK(rejects("{\"a\": 1,}", "expected a string key"));
    CHECK(rejects("tru", "expected a value"));
    CHECK(rejects("nul", "expected a value"));
    CHECK(rejects("{} {}", "byte 3: expected end of input after the value, found '{'"));
    CHECK(rejects("[1] x", "expected end of input"));
    CHECK(rejects("truex", "expected end of input"));
    CHECK(rejects("{\"a\":1,\"b\":2,\"a\":3}", "byte 13: duplicate key \"a\""));
    /* Only the given length counts: the parser never reads the NUL or anything past it. */
    bn_json *v;
    CHECK_OK(bn_json_parse("[7]garbage", 3, &v));
    CHECK(v->count == 1 && v->items[0]->number == 7.0);
    bn_json_free(v);
    bn_clear_error();
    v = NULL;
    CHECK(bn_json_parse("[1]\0", 4, &v) == BN_ERR_DATA && v == NULL);
    CHECK(strstr(bn_last_error(), "byte 3: expected end of input after the value, found byte 0x00"));
    return BN_PASS;
}

static char *nested(int depth, char open, char close)
{
    char *s = malloc(2 * (size_t)depth + 1);
    if (!s) return NULL;
    for (int i = 0; i < depth; i++) s[i] = open, s[depth + i] = close;
    s[2 * depth] = '\0';
    return s;
}

BN_TEST(json_limits_nesting_depth)
{
    bn_json *v;
    char *ok = nested(BN_JSON_MAX_DEPTH, '[', ']');
    CHECK(ok);
    bn_status s = parse(ok, &v);
    free(ok);
    CHECK_OK(s);
    const bn_json *inner = v;
    int depth = 1;
    while (inner->count) inner = inner->items[0], depth++;
    CHECK(depth == BN_JSON_MAX_DEPTH);
    bn_json_free(v);

    char *deep = nested(BN_JSON_MAX_DEPTH + 1, '[', ']');
    CHECK(deep);
    int r = rejects(deep, "byte 32: nesting deeper than 32 levels");
    free(deep);
    CHECK(r);
    /* A huge depth fails just as fast: the parser stops at the limit, it does not recurse on. */
    char *huge = nested(1000000, '[', ']');
    CHECK(huge);
    r = rejects(huge, "nesting deeper");
    free(huge);
    CHECK(r);
    CHECK(rejects("{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":"
                  "{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":"
                  "{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}",
                  "nesting deeper"));
    return BN_PASS;
}

BN_TEST(json_quote_round_trips_through_parser)
{
    const char *samples[] = {"plain", "", "quote \" and backslash \\", "line\nbreak\ttab\r\b\f",
                             "\x01\x1f ctl", "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", "/path/to/model.cfg"};
    for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
        char buf[128];
        size_t n = bn_json_quote(buf, sizeof buf, samples[i]);
        CHECK(n == strlen(buf));
        bn_json *v;
        CHECK_OK(bn_json_parse(buf, n, &v));
        CHECK_MSG(v->type == BN_JSON_STRING && strcmp(v->text, samples[i]) == 0, "sample %zu: %s", i, buf);
        bn_json_free(v);
    }
    char buf[64];
    CHECK(bn_json_quote(buf, sizeof buf, "a\"b\n\x01") == 14);
    CHECK(strcmp(buf, "\"a\\\"b\\n\\u0001\"") == 0);
    /* Bytes that are not UTF-8 become U+FFFD, so the output always parses. */
    CHECK(bn_json_quote(buf, sizeof buf, "x\xFFy\xC3") == 16);
    CHECK(strcmp(buf, "\"x\\ufffdy\\ufffd\"") == 0);
    /* Like snprintf: the full length comes back, the buffer is cut and terminated. */
    CHECK(bn_json_quote(buf, 4, "abcdef") == 8);
    CHECK(strcmp(buf, "\"ab") == 0);
    CHECK(bn_json_quote(NULL, 0, "abc") == 5);
    return BN_PASS;
}
