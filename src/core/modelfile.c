#include "modelfile.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "regular_file.h"

/* The most of a malformed line an error message repeats: enough to find it, not a binary
 * file's worth. */
#define ECHO_MAX 60

/* What follows the first ECHO_MAX bytes of s in a message. */
static const char *cut_mark(const char *s)
{
    return strlen(s) > ECHO_MAX ? "..." : "";
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    char *end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1])) *--end = '\0';
    return s;
}

static int is_name(const char *s)
{
    if (!*s) return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-' && *s != '.') return 0;
    return 1;
}

static bn_status add_section(bn_modelfile *m, const char *name, const char *section, int line)
{
    bn_options *grown = realloc(m->sections, (size_t)(m->count + 1) * sizeof *grown);
    if (!grown) return bn_error(BN_ERR_NOMEM, "out of host memory reading %s", name);
    m->sections = grown;
    bn_options *o = &m->sections[m->count];
    memset(o, 0, sizeof *o);
    o->file = name;
    o->line = line;
    o->section = strdup(section);
    if (!o->section) return bn_error(BN_ERR_NOMEM, "out of host memory reading %s", name);
    m->count++;
    return BN_OK;
}

static bn_status parse_line(bn_modelfile *m, char *raw, const char *name, int line)
{
    char *cut = strpbrk(raw, "#;");
    if (cut) *cut = '\0';
    char *s = trim(raw);
    if (!*s) return BN_OK;
    if (*s == '[') {
        char *close = strchr(s, ']');
        if (!close || trim(close + 1)[0] != '\0')
            return bn_error(BN_ERR_USAGE, "%s:%d: section header '%.*s%s' must look like [name]", name, line,
                            ECHO_MAX, s, cut_mark(s));
        *close = '\0';
        char *section = trim(s + 1);
        if (!is_name(section))
            return bn_error(BN_ERR_USAGE, "%s:%d: '[%.*s%s]' is not a valid section name", name, line, ECHO_MAX,
                            section, cut_mark(section));
        return add_section(m, name, section, line);
    }
    char *eq = strchr(s, '=');
    if (!eq)
        return bn_error(BN_ERR_USAGE, "%s:%d: expected 'key = value' or '[section]', got '%.*s%s'", name, line,
                        ECHO_MAX, s, cut_mark(s));
    *eq = '\0';
    char *key = trim(s), *value = trim(eq + 1);
    if (!is_name(key))
        return bn_error(BN_ERR_USAGE, "%s:%d: '%.*s%s' is not a valid key", name, line, ECHO_MAX, key, cut_mark(key));
    if (!*value) return bn_error(BN_ERR_USAGE, "%s:%d: key '%s' has no value", name, line, key);
    if (m->count == 0)
        return bn_error(BN_ERR_USAGE, "%s:%d: key '%s' appears before any [section]", name, line, key);
    return bn_options_add(&m->sections[m->count - 1], key, value, line);
}

/* Editors on Windows start UTF-8 files with a byte-order mark; it is not part of the text. */
static const char *skip_bom(const char *text)
{
    return strncmp(text, "\xEF\xBB\xBF", 3) == 0 ? text + 3 : text;
}

bn_status bn_modelfile_parse(const char *text, const char *name, bn_modelfile *out)
{
    memset(out, 0, sizeof *out);
    char *copy = strdup(skip_bom(text));
    if (!copy) return bn_error(BN_ERR_NOMEM, "out of host memory reading %s", name);
    bn_status s = BN_OK;
    int line = 1;
    for (char *p = copy; s == BN_OK && p;) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = '\0';
        s = parse_line(out, p, name, line++);
        p = nl ? nl + 1 : NULL;
    }
    free(copy);
    if (s != BN_OK) bn_modelfile_free(out);
    return s;
}

bn_status bn_read_text_file(const char *path, size_t max_bytes, char **out)
{
    *out = NULL;
    BN_TRY(bn_check_regular_file(path, BN_ERR_USAGE));
    FILE *f = fopen(path, "rb");
    if (!f) return bn_error(BN_ERR_USAGE, "%s: cannot open: %s", path, strerror(errno));
    char *buf = malloc(max_bytes + 1);
    if (!buf) {
        fclose(f);
        return bn_error(BN_ERR_NOMEM, "%s: out of host memory", path);
    }
    size_t len = fread(buf, 1, max_bytes + 1, f);
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return bn_error(BN_ERR_USAGE, "%s: read error", path);
    }
    if (len > max_bytes) {
        free(buf);
        return bn_error(BN_ERR_USAGE, "%s: larger than %zu bytes; not a model file", path, max_bytes);
    }
    if (memchr(buf, '\0', len)) {
        free(buf);
        return bn_error(BN_ERR_USAGE, "%s: contains NUL bytes; not a text model file", path);
    }
    buf[len] = '\0';
    *out = buf;
    return BN_OK;
}

void bn_modelfile_free(bn_modelfile *m)
{
    for (int i = 0; i < m->count; i++) bn_options_clear(&m->sections[i]);
    free(m->sections);
    m->sections = NULL;
    m->count = 0;
}
