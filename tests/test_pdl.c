/* test_pdl.c - the contract of programmatic dependent launch (src/gpu/pdl.cuh): a kernel launched
 * early runs beside the end of the kernel before it, so it must wait (bn_early_entry()) before it
 * touches memory. Every kernel of the library launches that way, so every kernel's first statement
 * is that wait, but for the few named below that never run in a training step. A new kernel
 * without it fails here, on any machine, instead of racing on a GPU now and then. */
#include "testing.h"

#include <string.h>
#include <sys/stat.h>

#include "file_testing.h"

/* Kernels launched the ordinary way, outside the step: reference checks and the chooser's tools. */
static const char *const ordinary[] = {
    "reference_kernel",    /* layers/conv2d/conv_reference.cu */
    "gather_kernel",       /* layers/conv2d/conv_reference.cu */
    "fill_uniform_kernel", /* src/gpu/compare.cu */
    "largest_kernel",      /* src/gpu/compare.cu */
    "fill_kernel",         /* src/gpu/kernels.cu: the tests' fills */
    "hash_words_kernel",   /* src/gpu/kernels.cu: the ranks' parameter check, after a wait */
};

typedef struct scan {
    int kernels;    /* definitions seen */
    char bad[4096]; /* "file: kernel" lines of those that break the contract */
    int bad_count;
} scan;

/* Past spaces and comments. */
static const char *skip_blank(const char *p)
{
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (p[0] == '/' && p[1] == '*') {
            const char *e = strstr(p + 2, "*/");
            p = e ? e + 2 : p + strlen(p);
        } else if (p[0] == '/' && p[1] == '/') {
            while (*p && *p != '\n') p++;
        } else {
            return p;
        }
    }
}

/* The character after the parenthesis that closes the one at p. */
static const char *past_parens(const char *p)
{
    int depth = 0;
    for (; *p; p++) {
        if (*p == '(') depth++;
        else if (*p == ')' && --depth == 0) return p + 1;
    }
    return p;
}

static int is_ordinary(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof ordinary / sizeof *ordinary; i++)
        if (strlen(ordinary[i]) == len && strncmp(ordinary[i], name, len) == 0) return 1;
    return 0;
}

static void note_bad(scan *s, const char *path, const char *name, size_t len)
{
    size_t used = strlen(s->bad);
    snprintf(s->bad + used, sizeof s->bad - used, "%s: %.*s\n", path, (int)len, name);
    s->bad_count++;
}

/* Every __global__ definition in text: its first statement must be bn_early_entry();. */
static void check_text(scan *s, const char *path, const char *text)
{
    for (const char *p = strstr(text, "__global__"); p; p = strstr(p, "__global__")) {
        const char *q = skip_blank(p + strlen("__global__"));
        if (strncmp(q, "void", 4) != 0) {
            p = q;
            continue;
        }
        q = skip_blank(q + 4);
        if (strncmp(q, "__launch_bounds__", 17) == 0) q = skip_blank(past_parens(q + 17));
        const char *name = q;
        while ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '_') q++;
        size_t len = (size_t)(q - name);
        q = skip_blank(q);
        p = q;
        if (!len || *q != '(') continue;
        q = skip_blank(past_parens(q));
        if (*q != '{') continue; /* a declaration */
        s->kernels++;
        if (is_ordinary(name, len)) continue;
        if (strncmp(skip_blank(q + 1), "bn_early_entry();", 17) != 0) note_bad(s, path, name, len);
    }
}

/* A .cu or .cuh file, but layers/examples' (the guide's own kernels, kept plain): its kernels. */
static void check_file(const char *path, const char *name, void *user)
{
    static char text[1 << 17]; /* a source file is at most 800 lines of 120 columns */
    const size_t n = strlen(name);
    const int cuda = (n > 3 && strcmp(name + n - 3, ".cu") == 0) || (n > 4 && strcmp(name + n - 4, ".cuh") == 0);
    if (!cuda || strncmp(path, "layers/examples/", 16) == 0) return;
    if (ft_read_text(path, text, sizeof text) == 0) check_text(user, path, text);
}

BN_TEST(pdl_every_kernel_waits_before_it_touches_memory)
{
    struct stat st;
    if (stat("src/gpu/pdl.cuh", &st) != 0) BN_SKIP_TEST("src/gpu/pdl.cuh not found (not run from the repository's root)");
    static scan s;
    memset(&s, 0, sizeof s);
    ft_each_file("src", check_file, &s);
    ft_each_file("layers", check_file, &s);
    CHECK_MSG(s.kernels >= 50, "found only %d kernel definitions under src and layers", s.kernels);
    CHECK_MSG(s.bad_count == 0, "%d kernels do not start with bn_early_entry() (pdl.cuh):\n%s", s.bad_count, s.bad);
    return BN_PASS;
}

/* The scanner itself: a kernel without the wait is found, with it or declared only is not. */
BN_TEST(pdl_scanner_finds_a_kernel_without_the_wait)
{
    static scan s;
    memset(&s, 0, sizeof s);
    check_text(&s, "a.cu",
               "template <int N> static __global__ void __launch_bounds__(256, 2)\n    good(int *x)\n{\n"
               "    bn_early_entry(); /* pdl.cuh */\n    x[0] = N;\n}\n"
               "static __global__ void declared(int *x);\n"
               "__global__ void bad(float *__restrict__ y, int n)\n{ /* no wait */\n    y[0] = (float)n;\n}\n"
               "static __global__ void reference_kernel(int *x) { x[0] = 1; }\n");
    CHECK_MSG(s.kernels == 3, "definitions: %d, want 3", s.kernels);
    CHECK_MSG(s.bad_count == 1 && strcmp(s.bad, "a.cu: bad\n") == 0, "flagged %d: %s", s.bad_count, s.bad);
    return BN_PASS;
}
