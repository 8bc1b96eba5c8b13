/* test_util_multigpu.c - what the tests of training on several GPUs share (multigpu_testing.h). */
#include "multigpu_testing.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/device.h"
#include "dist/dist.h"
#include "io/safetensors.h"
#include "testing.h"

const char *mg_cannot_run(void)
{
    static char why[256];
    if (!bn_dist_compiled()) {
        snprintf(why, sizeof why, "%s", bn_dist_missing());
        return why;
    }
    int n = bn_device_count();
    if (n < 2) {
        snprintf(why, sizeof why, "needs 2 CUDA devices, this machine has %d", n);
        return why;
    }
    if (!bn_test_data_dir()) return "BLOBNET_TEST_DATA not set";
    return NULL;
}

int mg_train(const char *env, const char *args, char *out, size_t cap)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "env %s %s train %s --data %s", env, bn_test_cli(), args, bn_test_data_dir());
    return bn_test_run(cmd, out, cap);
}

int mg_files_equal(const char *a, const char *b)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
    return system(cmd) == 0;
}

/* ---- comparing weight files ---- */

/* The dots in a tensor's name: a parameter's has one. */
static int dots(const char *s, size_t len)
{
    int n = 0;
    for (size_t i = 0; i < len; i++) n += s[i] == '.';
    return n;
}

/* Finds the entry of b named like ea; 0 when there is one. */
static int find_entry(const bn_safetensors *b, const bn_safetensors_entry *ea, bn_safetensors_entry *eb)
{
    for (size_t j = 0; j < b->num_tensors; j++) {
        if (bn_safetensors_check_entry(b, j, eb) != BN_OK) return -1;
        if (eb->name_len == ea->name_len && memcmp(eb->name, ea->name, ea->name_len) == 0) return 0;
    }
    return -1;
}

/* Compares one pair of equally named tensors into d; -1 with a message when they cannot be. */
static int diff_tensor(const bn_safetensors *a, const bn_safetensors_entry *ea, const bn_safetensors *b,
                       const bn_safetensors_entry *eb, mg_weight_diff *d)
{
    if (ea->count != eb->count || ea->count == 0) {
        fprintf(stderr, "    %.*s: %llu values against %llu\n", (int)ea->name_len, ea->name,
                (unsigned long long)ea->count, (unsigned long long)eb->count);
        return -1;
    }
    float *va = malloc(ea->count * sizeof *va), *vb = malloc(eb->count * sizeof *vb);
    int ok = va && vb && bn_safetensors_read_f32(a, ea, va) == BN_OK && bn_safetensors_read_f32(b, eb, vb) == BN_OK;
    if (ok) {
        double big = 0, diff = 0;
        for (uint64_t i = 0; i < ea->count; i++) {
            big = fmax(big, fabs(va[i]));
            diff = fmax(diff, fabs((double)va[i] - vb[i]));
        }
        /* An all-zero tensor (a bias that never moved) compares absolutely. */
        double rel = big > 0 ? diff / big : diff;
        if (rel >= d->worst) {
            d->worst = rel;
            snprintf(d->where, sizeof d->where, "%.*s", (int)ea->name_len, ea->name);
        }
        d->tensors++;
    } else {
        fprintf(stderr, "    %.*s: %s\n", (int)ea->name_len, ea->name, bn_last_error());
    }
    free(va);
    free(vb);
    return ok ? 0 : -1;
}

/* Opens both files; -1 with a message (and nothing left open) when either cannot be. */
static int open_pair(const char *pa, bn_safetensors *a, const char *pb, bn_safetensors *b)
{
    if (bn_safetensors_open(pa, a) != BN_OK) {
        fprintf(stderr, "    %s\n", bn_last_error());
        bn_safetensors_close(a);
        return -1;
    }
    if (bn_safetensors_open(pb, b) != BN_OK) {
        fprintf(stderr, "    %s\n", bn_last_error());
        bn_safetensors_close(a);
        bn_safetensors_close(b);
        return -1;
    }
    return 0;
}

/* Compares the parameter tensors of the weight files a and b; -1 with a message when either
 * cannot be read or their tensors do not match by name and size. */
int mg_diff_weights(const char *pa, const char *pb, mg_weight_diff *d)
{
    memset(d, 0, sizeof *d);
    bn_safetensors a, b;
    if (open_pair(pa, &a, pb, &b) != 0) return -1;
    int ok = 1;
    for (size_t i = 0; ok && i < a.num_tensors; i++) {
        bn_safetensors_entry ea, eb;
        ok = bn_safetensors_check_entry(&a, i, &ea) == BN_OK;
        if (!ok || dots(ea.name, ea.name_len) != 1) continue;
        ok = find_entry(&b, &ea, &eb) == 0;
        if (!ok) fprintf(stderr, "    %s has no tensor %.*s of %s\n", pb, (int)ea.name_len, ea.name, pa);
        ok = ok && diff_tensor(&a, &ea, &b, &eb, d) == 0;
    }
    bn_safetensors_close(&a);
    bn_safetensors_close(&b);
    return ok && d->tensors > 0 ? 0 : -1;
}

/* The epoch row's training loss of a metrics log (epoch,step,lr,train_loss,...) for the last
 * epoch it holds, or NAN. */
static double last_epoch_loss(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return NAN;
    char line[512];
    double loss = NAN;
    while (fgets(line, sizeof line, f)) {
        int epoch;
        long step;
        char lr[64], v[64], acc[64], test_loss[64];
        /* Step rows leave the test fields empty, so only an epoch row fills all six. */
        if (sscanf(line, "%d,%ld,%63[^,],%63[^,],%63[^,],%63[^,]", &epoch, &step, lr, v, acc, test_loss) == 6)
            loss = atof(v);
    }
    fclose(f);
    return loss;
}

/* Fails unless the weights at pa and pb agree to WEIGHT_TOL and, when both logs are given, the
 * last epochs' training losses agree to LOSS_TOL relative; prints what was observed. */
int mg_check_same_training(const char *what, const char *pa, const char *pb, const char *log_a,
                               const char *log_b)
{
    mg_weight_diff d;
    CHECK_MSG(mg_diff_weights(pa, pb, &d) == 0, "%s: cannot compare %s and %s", what, pa, pb);
    printf("    %s: largest weight difference %.3g of the tensor's largest weight (%s, %d tensors)\n", what, d.worst,
           d.where, d.tensors);
    CHECK_MSG(d.worst <= WEIGHT_TOL, "%s: %s differs by %.3g of its largest weight (tolerance %g)", what, d.where,
              d.worst, WEIGHT_TOL);
    if (log_a) {
        double la = last_epoch_loss(log_a), lb = last_epoch_loss(log_b);
        printf("    %s: training loss %.7g against %.7g\n", what, la, lb);
        CHECK_MSG(la > 0 && lb > 0, "%s: no epoch row in %s or %s", what, log_a, log_b);
        CHECK_MSG(fabs(la - lb) <= LOSS_TOL * la, "%s: training loss %.7g against %.7g (tolerance %g relative)", what,
                  la, lb, LOSS_TOL);
    }
    return BN_PASS;
}

/* Fails unless training moved every parameter tensor of path away from init by more than
 * 10 x WEIGHT_TOL: a run that never trained (or trained on zero gradients) cannot pass the
 * comparisons above. */
int mg_check_trained(const char *path, const char *init)
{
    bn_safetensors a, b;
    CHECK_MSG(open_pair(path, &a, init, &b) == 0, "cannot read %s or %s", path, init);
    double least = INFINITY;
    char where[128] = "";
    int ok = 1;
    for (size_t i = 0; ok && i < a.num_tensors; i++) {
        bn_safetensors_entry ea, eb;
        ok = bn_safetensors_check_entry(&a, i, &ea) == BN_OK;
        if (!ok || dots(ea.name, ea.name_len) != 1) continue;
        mg_weight_diff d = {0};
        ok = find_entry(&b, &ea, &eb) == 0 && diff_tensor(&a, &ea, &b, &eb, &d) == 0;
        if (ok && d.worst < least) {
            least = d.worst;
            snprintf(where, sizeof where, "%s", d.where);
        }
    }
    bn_safetensors_close(&a);
    bn_safetensors_close(&b);
    CHECK_MSG(ok && least < INFINITY, "cannot compare %s with the initial weights %s", path, init);
    CHECK_MSG(least > 10 * WEIGHT_TOL, "%s: %s moved only %.3g of its largest weight from its initial value", path,
              where, least);
    return BN_PASS;
}
