/* layercheck_eval.c - the evaluation check of the layer contract (layercheck.h). Its parts
 * return 1 when they passed, and 0 when they failed the check (its detail says why) or *s holds
 * an error, so that the first part to fail ends the check. */
#include "layercheck_kit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Training passes on one batch until the running statistics stop moving by more than this part
 * of their largest value, at most SETTLE_PASSES of them. */
#define SETTLE_CHANGE 1e-7
#define SETTLE_PASSES 2000
#define SETTLE_BATCH 64

/* A layer without buffers that draws no random numbers computes the same in both modes; sums
 * taken in another order may differ by this much. */
#define SAME_MODE_TOL 1e-6

/* A copy of the network's buffer slab (n elements; NULL when it has none). */
typedef struct buffers {
    float *v;
    size_t n;
} buffers;

static bn_status save_buffers(bn_net *net, buffers *b)
{
    b->n = net->buffers ? bn_blob_count(net->buffers) : 0;
    b->v = NULL;
    if (!b->n) return BN_OK;
    const float *v = bn_blob_host_rd(net->buffers);
    if (!v) return bn_last_status();
    if (!(b->v = malloc(b->n * sizeof *b->v))) return bn_error(BN_ERR_NOMEM, "check-layer: out of host memory");
    memcpy(b->v, v, b->n * sizeof *b->v);
    return BN_OK;
}

static bn_status load_buffers(bn_net *net, const buffers *b)
{
    if (!b->n) return BN_OK;
    float *v = bn_blob_host_wr(net->buffers);
    if (!v) return bn_last_status();
    memcpy(v, b->v, b->n * sizeof *v);
    return BN_OK;
}

/* The buffer (as "name[index]") that holds slab element i of the layer under test. */
static void buffer_element(bn_net *net, size_t i, char *out, size_t cap)
{
    bn_layer *l = bn_kit_under(net);
    for (int k = 0; k < l->num_buffers; k++) {
        size_t n = bn_blob_count(l->buffers[k].value);
        if (i < n) {
            snprintf(out, cap, "%s[%zu]", l->buffers[k].name, i);
            return;
        }
        i -= n;
    }
    snprintf(out, cap, "buffer element %zu", i);
}

/* The first element where the slab differs from b bit for bit, or b->n when none does. */
static size_t first_change(bn_net *net, const buffers *b, bn_status *s)
{
    if (!b->n) return 0;
    const float *v = bn_blob_host_rd(net->buffers);
    if (!v) {
        *s = bn_last_status();
        return 0;
    }
    size_t i = 0;
    while (i < b->n && memcmp(&v[i], &b->v[i], sizeof *v) == 0) i++;
    return i;
}

/* The largest change of the slab from b relative to the largest |b|. */
static double buffer_change(bn_net *net, const buffers *b, bn_status *s)
{
    const float *v = b->n ? bn_blob_host_rd(net->buffers) : NULL;
    if (b->n && !v) {
        *s = bn_last_status();
        return 0.0;
    }
    double scale = 0.0, worst = 0.0;
    for (size_t i = 0; i < b->n; i++) scale = fmax(scale, fabs(b->v[i]));
    for (size_t i = 0; i < b->n; i++) worst = fmax(worst, fabs((double)v[i] - b->v[i]));
    return scale > 0.0 ? worst / scale : worst;
}

/* An evaluation pass on net with the output filled with NaN first and the guards checked,
 * copied into *out. Fails the check (returning 0) when an output is left unwritten or a
 * buffer changed. */
static int eval_pass(bn_kit *k, bn_net *net, bn_check *c, bn_kit_part *out, bn_status *s)
{
    const char *side = net == k->gpu ? "gpu" : "cpu";
    buffers before = {0};
    out->v = NULL;
    if ((*s = save_buffers(net, &before)) != BN_OK || (*s = bn_kit_poison(bn_kit_under(net)->out)) != BN_OK ||
        (*s = bn_kit_arm_guards(net)) != BN_OK || (*s = bn_net_forward(net, 0)) != BN_OK ||
        (*s = bn_kit_inspect_guards(k, net)) != BN_OK) {
        free(before.v);
        return 0;
    }
    size_t bad = bn_kit_count_nonfinite(bn_kit_under(net)->out, s);
    size_t changed = *s == BN_OK ? first_change(net, &before, s) : 0;
    int ok = 0;
    if (*s == BN_OK && bad) {
        bn_kit_set(c, BN_CHECK_FAIL, "on the %s the evaluation pass left %zu of %zu outputs NaN or infinite (filled "
            "with NaN before): it must write every output", side, bad, bn_blob_count(bn_kit_under(net)->out));
    } else if (*s == BN_OK && changed < before.n) {
        char name[96];
        buffer_element(net, changed, name, sizeof name);
        bn_kit_set(c, BN_CHECK_FAIL, "on the %s the evaluation pass changed %s from %.7g: buffers change only in "
            "training", side, name, (double)before.v[changed]);
    } else if (*s == BN_OK) {
        bn_kit_snapshot one = {0};
        *s = bn_kit_add_part(&one, "evaluation output", bn_kit_under(net)->out);
        if (*s == BN_OK) {
            *out = one.parts[0];
            ok = 1;
        }
    }
    free(before.v);
    return ok;
}

/* Fails the check unless two parts are the same bits; `what` says what was repeated. */
static int same_bits(bn_check *c, const bn_kit_part *a, const bn_kit_part *b, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a->v[i], &b->v[i], sizeof(float)) != 0) {
            bn_kit_set(c, BN_CHECK_FAIL, "evaluation output[%zu] is %.9g, then %.9g %s", i, (double)a->v[i],
                (double)b->v[i], what);
            return 0;
        }
    return 1;
}

/* Example 0's evaluation output must not move when every other example of the batch changes. */
static int examples_independent(bn_kit *k, bn_check *c, const bn_kit_part *first, bn_status *s)
{
    bn_net *net = k->cpu;
    size_t per = bn_blob_count(net->input) / (size_t)net->batch;
    float *x = bn_blob_host_wr(net->input);
    if (!x) {
        *s = bn_last_status();
        return 0;
    }
    for (size_t i = per; i < per * (size_t)net->batch; i++) x[i] = -0.5f * x[i] + 0.25f;
    bn_kit_part again;
    if (!eval_pass(k, net, c, &again, s)) return 0;
    size_t out_per = first->n / (size_t)net->batch;
    int ok = same_bits(c, first, &again, out_per, "when the other examples of the batch changed: an example's "
                       "evaluation output must not depend on the rest of its batch (batch statistics?)");
    free(again.v);
    if (ok) *s = bn_kit_feed(k, net);
    return ok && *s == BN_OK;
}

/* One training pass must move a layer's buffers, by the same amounts on both devices. */
static int training_moves_buffers(bn_kit *k, bn_check *c, bn_status *s)
{
    bn_net *net = k->cpu;
    buffers start = {0}, on_cpu = {0}, on_gpu = {0};
    int ok = 0;
    if ((*s = save_buffers(net, &start)) != BN_OK || (*s = bn_net_forward(net, 1)) != BN_OK) goto done;
    size_t moved = first_change(net, &start, s);
    if (*s != BN_OK) goto done;
    if (moved == start.n) {
        bn_kit_set(c, BN_CHECK_FAIL, "a training pass left every buffer as it was: running statistics are never "
            "updated, so evaluation uses their initial values");
        goto done;
    }
    ok = 1;
    if (k->gpu && (*s = load_buffers(k->gpu, &start)) == BN_OK && (*s = bn_kit_feed(k, k->gpu)) == BN_OK &&
        (*s = bn_net_forward(k->gpu, 1)) == BN_OK && (*s = save_buffers(net, &on_cpu)) == BN_OK &&
        (*s = save_buffers(k->gpu, &on_gpu)) == BN_OK) {
        bn_kit_gap worst = {0};
        bn_kit_part pc = {.v = on_cpu.v, .n = on_cpu.n}, pg = {.v = on_gpu.v, .n = on_gpu.n};
        bn_kit_widen(&worst, &pc, &pg);
        if (worst.rel > k->o->device_tolerance) {
            char name[96];
            buffer_element(net, worst.index, name, sizeof name);
            bn_kit_set(c, BN_CHECK_FAIL, "after one training pass %s is %.7g on the cpu, %.7g on the gpu (difference "
                "%.2g of the largest > %g): the gpu updates the buffers differently", name, (double)worst.a,
                (double)worst.b, worst.rel, k->o->device_tolerance);
            ok = 0;
        }
    }
done:
    if (*s == BN_OK) *s = load_buffers(net, &start);
    free(start.v);
    free(on_cpu.v);
    free(on_gpu.v);
    return ok && *s == BN_OK;
}

/* Training passes on one batch until the buffers settle, then the evaluation output against
 * the training output: what the running statistics say. The batch holds at least
 * SETTLE_BATCH examples, so that an unbiased running variance (m / (m - 1) times the batch's)
 * stays within a percent of the variance training normalizes with. */
static int evaluation_follows_statistics(bn_kit *k, bn_check *c, int *passes, double *gap_rel, bn_status *s)
{
    bn_net *net = NULL;
    int batch = k->o->batch > SETTLE_BATCH ? k->o->batch : SETTLE_BATCH;
    if ((*s = bn_kit_build(k, batch, NULL, &net)) != BN_OK) return 0;
    buffers prev = {0};
    bn_kit_snapshot trained = {0};
    bn_kit_part evaluated = {0};
    double change = 1.0;
    int ok = 0;
    if ((*s = bn_kit_feed(k, net)) != BN_OK || (*s = bn_net_forward(net, 1)) != BN_OK) goto done;
    for (*passes = 1; *passes < SETTLE_PASSES && change > SETTLE_CHANGE; ++*passes) {
        free(prev.v);
        if ((*s = save_buffers(net, &prev)) != BN_OK || (*s = bn_net_forward(net, 1)) != BN_OK) goto done;
        change = buffer_change(net, &prev, s);
        if (*s != BN_OK) goto done;
    }
    if ((*s = bn_kit_add_part(&trained, "training output", bn_kit_under(net)->out)) != BN_OK) goto done;
    if (!eval_pass(k, net, c, &evaluated, s)) goto done;
    bn_kit_gap g = {0};
    bn_kit_widen(&g, &trained.parts[0], &evaluated);
    *gap_rel = g.rel;
    ok = g.rel <= k->o->eval_tolerance;
    if (!ok)
        bn_kit_set(c, BN_CHECK_FAIL, "after %d training passes on one batch of %d (the buffers settled to %.1g) the "
            "evaluation output[%zu] is %.6g where training gives %.6g (difference %.2g of the largest > %g): "
            "evaluation does not compute what the running statistics say", *passes, batch, change, g.index,
            (double)g.b, (double)g.a, g.rel, k->o->eval_tolerance);
done:
    free(prev.v);
    free(evaluated.v);
    bn_kit_drop(&trained);
    bn_net_free(net);
    return ok;
}

/* Why a layer without buffers computes something else in evaluation than in training, for the
 * evaluation check's message: a parameter the training pass moved (running statistics kept as
 * a parameter), random numbers (then --stochastic applies), or state kept out of the kit's
 * sight. `before` holds the layer's parameters as they were before that training pass. */
static bn_status mode_gap_hint(bn_kit *k, const bn_kit_snapshot *before, char *hint, size_t cap)
{
    bn_layer *l = bn_kit_under(k->cpu);
    for (int i = 0; i < before->count; i++) {
        const float *v = bn_blob_host_rd(l->params[i].value);
        if (!v) return bn_last_status();
        const bn_kit_part *p = &before->parts[i];
        for (size_t j = 0; j < p->n; j++)
            if (memcmp(&v[j], &p->v[j], sizeof *v) != 0) {
                snprintf(hint, cap, "a training pass changed parameter %s[%zu]: running statistics belong in "
                         "buffers (bn_layer_add_buffer), not parameters", p->name, j);
                return BN_OK;
            }
    }
    int random = 0;
    BN_TRY(bn_kit_draws_random(k, k->cpu, &random));
    if (random)
        snprintf(hint, cap, "its training output changes with the step and seed: a layer that draws random "
                 "numbers is checked with --stochastic");
    else
        snprintf(hint, cap, "it draws no random numbers (its training output is the same at any step and seed): "
                 "state evaluation reads, such as running statistics, belongs in buffers (bn_layer_add_buffer)");
    return BN_OK;
}

/* A layer without buffers or randomness computes the same in both modes. */
static int modes_agree(bn_kit *k, bn_check *c, const bn_kit_part *evaluated, bn_status *s)
{
    bn_layer *l = bn_kit_under(k->cpu);
    bn_kit_snapshot params = {0}, trained = {0};
    for (int i = 0; i < l->num_params && *s == BN_OK; i++)
        *s = bn_kit_add_part(&params, l->params[i].name, l->params[i].value);
    if (*s == BN_OK) *s = bn_net_forward(k->cpu, 1);
    if (*s == BN_OK) *s = bn_kit_add_part(&trained, "training output", l->out);
    bn_kit_gap g = {0};
    if (*s == BN_OK) bn_kit_widen(&g, &trained.parts[0], evaluated);
    int ok = *s == BN_OK && g.rel <= SAME_MODE_TOL;
    char hint[200];
    if (*s == BN_OK && !ok && (*s = mode_gap_hint(k, &params, hint, sizeof hint)) == BN_OK)
        bn_kit_set(c, BN_CHECK_FAIL, "evaluation output[%zu] is %.7g, training gives %.7g (difference %.2g of the "
            "largest) though the layer keeps no buffers; %s", g.index, (double)g.b, (double)g.a, g.rel, hint);
    bn_kit_drop(&params);
    bn_kit_drop(&trained);
    return ok;
}

/* The evaluation pass on the device, from the CPU's buffers: it writes every output, leaves the
 * buffers, repeats bit for bit and agrees with the CPU's. */
static int eval_on_device(bn_kit *k, bn_check *c, const bn_kit_part *on_cpu, double *rel, bn_status *s)
{
    buffers b = {0};
    if ((*s = save_buffers(k->cpu, &b)) != BN_OK) return 0;
    *s = load_buffers(k->gpu, &b);
    free(b.v);
    if (*s != BN_OK || (*s = bn_kit_feed(k, k->gpu)) != BN_OK) return 0;
    bn_kit_part first, again;
    if (!eval_pass(k, k->gpu, c, &first, s)) return 0;
    int ok = 0;
    if (eval_pass(k, k->gpu, c, &again, s)) {
        ok = same_bits(c, &first, &again, first.n, "in the same evaluation pass repeated on the gpu");
        free(again.v);
    }
    if (ok) {
        bn_kit_gap g = {0};
        bn_kit_widen(&g, on_cpu, &first);
        *rel = g.rel;
        if (g.rel > k->o->device_tolerance) {
            bn_kit_set(c, BN_CHECK_FAIL, "evaluation output[%zu]: cpu %.7g, gpu %.7g, difference %.2g of the blob's "
                "scale > %g", g.index, (double)g.a, (double)g.b, g.rel, k->o->device_tolerance);
            ok = 0;
        }
    }
    free(first.v);
    return ok;
}

bn_status bn_layercheck_evaluation(bn_kit *k, bn_check *c)
{
    bn_net *net = k->cpu;
    bn_layer *l = bn_kit_under(net);
    bn_status s = bn_kit_feed(k, net);
    bn_kit_part first = {0}, again = {0};
    int ok = s == BN_OK && eval_pass(k, net, c, &first, &s);
    if (ok && (ok = eval_pass(k, net, c, &again, &s)))
        ok = same_bits(c, &first, &again, first.n, "in the same evaluation pass repeated");
    free(again.v);
    int independent = net->batch > 1;
    if (ok && independent) ok = examples_independent(k, c, &first, &s);
    char buffer_note[200] = "";
    if (ok && l->num_buffers) {
        int passes = 0;
        double gap_rel = 0.0;
        ok = training_moves_buffers(k, c, &s) && evaluation_follows_statistics(k, c, &passes, &gap_rel, &s);
        snprintf(buffer_note, sizeof buffer_note, "; buffers moved by training%s, settled after %d passes on one "
                 "batch of %d: evaluation within %.2g of training (tolerance %g)", k->gpu ? " alike on cpu and gpu" : "",
                 passes, k->o->batch > SETTLE_BATCH ? k->o->batch : SETTLE_BATCH, gap_rel, k->o->eval_tolerance);
    } else if (ok && !k->o->stochastic) {
        ok = modes_agree(k, c, &first, &s);
        snprintf(buffer_note, sizeof buffer_note, "; no buffers: the same as training");
    }
    char device_note[96] = "";
    if (ok && k->gpu) {
        double rel = 0.0;
        ok = eval_on_device(k, c, &first, &rel, &s);
        snprintf(device_note, sizeof device_note, "; gpu writes all, repeats, agrees within %.2g", rel);
    }
    if (ok)
        bn_kit_set(c, BN_CHECK_PASS, "writes all %zu outputs, repeats bit for bit, leaves the buffers%s%s%s", first.n,
            independent ? ", examples independent" : "", buffer_note, device_note);
    free(first.v);
    return s;
}
