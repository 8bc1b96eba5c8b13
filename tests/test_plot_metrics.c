/* test_plot_metrics.c - tools/plot_metrics.py draws a PNG from sample metrics logs, overlaid,
 * and refuses a file that is not a log. Skipped where no python3 has matplotlib. */
#include "testing.h"

#include <stdlib.h>

#include "io/image.h"

static char out[1 << 14];

/* A python3 that imports matplotlib: the one on PATH, else Debian's. NULL when none. */
static const char *python_with_matplotlib(void)
{
    static const char *const candidates[] = {"python3", "/usr/bin/python3"};
    for (int i = 0; i < 2; i++) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "%s -c 'import matplotlib' >/dev/null 2>&1", candidates[i]);
        if (system(cmd) == 0) return candidates[i];
    }
    return NULL;
}

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

#define HEADER "epoch,step,lr,train_loss,train_acc,test_loss,test_acc,seconds,images_per_s\n"

BN_TEST(plot_metrics_draws_loss_and_accuracy_png)
{
    const char *python = python_with_matplotlib();
    if (!python) BN_SKIP_TEST("no python3 with matplotlib (Debian: python3-matplotlib)");
    char a[512], b[512], png[512], bad[512], cmd[4096];
    snprintf(a, sizeof a, "%s/run_a.csv", bn_test_tmpdir());
    snprintf(b, sizeof b, "%s/run_b.csv", bn_test_tmpdir());
    snprintf(png, sizeof png, "%s/curves.png", bn_test_tmpdir());
    snprintf(bad, sizeof bad, "%s/not_a_log.csv", bn_test_tmpdir());
    /* a: step rows and epoch rows; b: epoch rows only. */
    CHECK(write_text(a, HEADER "1,5,0.01,2.3,0.1,,,0.5,\n1,10,0.0099,0.9,0.7,,,1.0,\n"
                        "1,10,0.0099,1.6,0.4,0.5,0.85,1.0,640\n2,15,0.0098,0.4,0.88,,,1.5,\n"
                        "2,20,0.0097,0.3,0.9,,,2.0,\n2,20,0.0097,0.35,0.89,0.3,0.91,1.0,640\n") == 0);
    CHECK(write_text(b, HEADER "1,10,0.01,1.2,0.6,0.6,0.8,1.0,640\n2,20,0.01,0.5,0.85,0.4,0.88,1.0,640\n") == 0);
    snprintf(cmd, sizeof cmd, "%s tools/plot_metrics.py %s %s %s", python, a, b, png);
    int rc = bn_test_run(cmd, out, sizeof out);
    CHECK_MSG(rc == 0 && strstr(out, "wrote "), "exit %d: %s", rc, out);
    bn_image img;
    CHECK_OK(bn_image_read(png, 255, &img));
    CHECK_MSG(img.width == 800 && img.height == 320, "%dx%d", img.width, img.height); /* 10x4 in at 80 dpi */
    long dark = 0;
    for (long i = 0; i < (long)img.width * img.height; i++) dark += img.pixels[i] < 128;
    bn_image_free(&img);
    CHECK_MSG(dark > 2000, "only %ld dark pixels: an empty plot?", dark); /* axes, text and curves */

    CHECK(write_text(bad, "step,loss\n1,2\n") == 0);
    snprintf(cmd, sizeof cmd, "%s tools/plot_metrics.py %s %s", python, bad, png);
    rc = bn_test_run(cmd, out, sizeof out);
    CHECK_MSG(rc == 1 && strstr(out, "not_a_log.csv: not a blobnet metrics log"), "exit %d: %s", rc, out);
    snprintf(cmd, sizeof cmd, "%s tools/plot_metrics.py %s", python, png);
    CHECK(bn_test_run(cmd, out, sizeof out) == 2);
    return BN_PASS;
}

/* Where the python3 that runs the script lacks matplotlib: another python3 that has it runs it
 * (here the first python3 on PATH is a virtual environment without it), and where none has
 * it, one line says how to get it, with no traceback. */
BN_TEST(plot_metrics_finds_matplotlib_or_says_how_to_get_it)
{
    char log[512], png[512], fake[512], cmd[4096];
    snprintf(log, sizeof log, "%s/run.csv", bn_test_tmpdir());
    snprintf(png, sizeof png, "%s/rerun.png", bn_test_tmpdir());
    CHECK(write_text(log, HEADER "1,10,0.01,1.2,0.6,0.6,0.8,1.0,640\n2,20,0.01,0.5,0.85,0.4,0.88,1.0,640\n") == 0);
    /* A matplotlib that cannot be imported, first on every interpreter's path. */
    snprintf(fake, sizeof fake, "%s/no-matplotlib/matplotlib", bn_test_tmpdir());
    snprintf(cmd, sizeof cmd, "mkdir -p %s && echo 'raise ImportError(\"matplotlib hidden by the test\")' > %s/__init__.py",
             fake, fake);
    CHECK(bn_test_run(cmd, out, sizeof out) == 0);
    snprintf(cmd, sizeof cmd, "PYTHONPATH=%s/no-matplotlib python3 tools/plot_metrics.py %s %s", bn_test_tmpdir(), log,
             png);
    int rc = bn_test_run(cmd, out, sizeof out);
    CHECK_MSG(rc == 1 && !strstr(out, "Traceback") && strstr(out, "plot_metrics.py: error: no python3 here has matplotlib") &&
                  strstr(out, "apt-get install python3-matplotlib") && strchr(out, '\n') == out + strlen(out) - 1,
              "exit %d: %s", rc, out);

    const char *python = python_with_matplotlib();
    if (!python) BN_SKIP_TEST("no python3 with matplotlib (Debian: python3-matplotlib)");
    snprintf(cmd, sizeof cmd, "python3 -m venv --without-pip %s/venv >/dev/null 2>&1", bn_test_tmpdir());
    if (bn_test_run(cmd, out, sizeof out) != 0) BN_SKIP_TEST("python3 cannot make a virtual environment (python3-venv)");
    snprintf(cmd, sizeof cmd, "PATH=%s/venv/bin:$PATH:/usr/bin tools/plot_metrics.py %s %s", bn_test_tmpdir(), log, png);
    rc = bn_test_run(cmd, out, sizeof out);
    CHECK_MSG(rc == 0 && strstr(out, "wrote "), "exit %d: %s", rc, out);
    return BN_PASS;
}
