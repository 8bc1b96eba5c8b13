#include "layercheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/registry.h"
#include "layercheck_kit.h"

/* A backward run twice must give exactly twice the parameter gradients; this allows for a
 * layer that sums in a different order the second time. */
#define ACCUMULATE_TOL 1e-6

static const char *const check_names[BN_CHECK_COUNT] = {
    "shapes", "writes", "gradient", "accumulates", "evaluation", "determinism cpu", "cpu vs gpu", "determinism gpu",
};

bn_layercheck_opts bn_layercheck_defaults(void)
{
    return (bn_layercheck_opts){.input = {5, 7, 9}, .batch = 3, .device_tolerance = 1e-4, .eval_tolerance = 0.02,
                                .seed = 1, .grad = bn_gradcheck_defaults()};
}

const bn_layercheck_shape bn_layercheck_shapes[BN_LAYERCHECK_SHAPES] = {
    {"small", {5, 7, 9}, 3},
    {"realistic", {20, 13, 11}, 10},
};

const char *bn_check_outcome_name(bn_check_outcome c)
{
    return c == BN_CHECK_PASS ? "pass" : c == BN_CHECK_FAIL ? "FAIL" : "skip";
}

/* ---- the checks; an error returned from one marks it failed with the message ---- */

static int same_shape(const bn_blob *a, const bn_blob *b)
{
    return a->c == b->c && a->h == b->h && a->w == b->w;
}

static bn_status check_shapes(bn_kit *k, bn_check *c)
{
    bn_layer *l1 = bn_kit_under(k->one);
    bn_status s = bn_kit_build(k, k->o->batch, NULL, &k->cpu);
    if (s != BN_OK) {
        bn_kit_set(c, BN_CHECK_FAIL, "set up for 1 example, but not for %d: %s", k->o->batch, bn_last_error());
        return BN_OK;
    }
    bn_layer *ln = bn_kit_under(k->cpu);
    bn_blob *o1 = l1->out, *on = ln->out;
    if (o1->c <= 0 || o1->h <= 0 || o1->w <= 0) {
        bn_kit_set(c, BN_CHECK_FAIL, "output shape %dx%dx%d is not positive", o1->c, o1->h, o1->w);
        return BN_OK;
    }
    if (!same_shape(o1, on) || l1->num_params != ln->num_params) {
        bn_kit_set(c, BN_CHECK_FAIL, "setup depends on the batch: output %dx%dx%d with %d params at batch 1, "
            "%dx%dx%d with %d at batch %d", o1->c, o1->h, o1->w, l1->num_params, on->c, on->h, on->w,
            ln->num_params, k->o->batch);
        return BN_OK;
    }
    char params[160] = "no parameters";
    size_t len = 0;
    for (int i = 0; i < l1->num_params; i++) {
        const bn_blob *p1 = l1->params[i].value, *pn = ln->params[i].value;
        if (p1->n <= 0 || p1->c <= 0 || p1->h <= 0 || p1->w <= 0) {
            bn_kit_set(c, BN_CHECK_FAIL, "parameter %s has shape %dx%dx%dx%d", l1->params[i].name, p1->n, p1->c, p1->h,
                p1->w);
            return BN_OK;
        }
        if (p1->n != pn->n || !same_shape(p1, pn) || strcmp(l1->params[i].name, ln->params[i].name) != 0) {
            bn_kit_set(c, BN_CHECK_FAIL, "setup depends on the batch: parameter %d is %s %dx%dx%dx%d at batch 1, %s "
                "%dx%dx%dx%d at batch %d", i, l1->params[i].name, p1->n, p1->c, p1->h, p1->w, ln->params[i].name,
                pn->n, pn->c, pn->h, pn->w, k->o->batch);
            return BN_OK;
        }
        if (len < sizeof params)
            len += (size_t)snprintf(params + len, sizeof params - len, "%s%s %dx%dx%dx%d", i ? ", " : "",
                                    l1->params[i].name, p1->n, p1->c, p1->h, p1->w);
    }
    char ins[128] = "";
    size_t at = 0;
    for (int j = 0; j < l1->num_inputs && at < sizeof ins; j++) {
        bn_shape in = l1->input_shapes[j];
        at += (size_t)snprintf(ins + at, sizeof ins - at, "%s%dx%dx%d", j ? " + " : "", in.c, in.h, in.w);
    }
    bn_kit_set(c, BN_CHECK_PASS, "%s -> %dx%dx%d at batch 1 and %d; %s", ins, o1->c, o1->h, o1->w, k->o->batch, params);
    return BN_OK;
}

static bn_status check_writes(bn_kit *k, bn_check *c)
{
    bn_net *net = k->cpu;
    bn_layer *l = bn_kit_under(net);
    bn_status s = BN_OK;
    BN_TRY(bn_kit_feed(k, net));
    BN_TRY(bn_kit_poison(l->out));
    BN_TRY(bn_kit_poison(net->input_grad));
    BN_TRY(bn_net_zero_grad(net));
    BN_TRY(bn_kit_arm_guards(net));
    BN_TRY(bn_net_forward(net, 1));
    size_t bad_out = bn_kit_count_nonfinite(l->out, &s);
    BN_TRY(s);
    BN_TRY(bn_kit_backward(k, net));
    BN_TRY(bn_kit_inspect_guards(k, net));
    size_t bad_in = bn_kit_count_nonfinite(net->input_grad, &s), bad_param = 0;
    for (int i = 0; i < l->num_params; i++) bad_param += bn_kit_count_nonfinite(l->params[i].grad, &s);
    BN_TRY(s);
    size_t n_out = bn_blob_count(l->out), n_in = bn_blob_count(net->input_grad);
    if (bad_out || bad_in || bad_param)
        bn_kit_set(c, BN_CHECK_FAIL, "NaN or infinity after the pass (filled with NaN before): %zu of %zu outputs, "
            "%zu of %zu input-gradient elements, %zu parameter-gradient elements", bad_out, n_out, bad_in, n_in,
            bad_param);
    else
        bn_kit_set(c, BN_CHECK_PASS, "all %zu outputs and %zu input-gradient elements written; parameter gradients "
            "finite; nothing past their ends", n_out, n_in);
    return BN_OK;
}

static bn_status check_gradient(bn_kit *k, bn_check *c)
{
    BN_TRY(bn_kit_feed(k, k->cpu));
    bn_gradcheck_result res;
    BN_TRY(bn_gradcheck_net(k->cpu, &k->o->grad, &res));
    bn_kit_set(c, BN_CHECK_PASS, "%ld coordinates, worst relative error %.2g (tolerance %g), %ld on kinks skipped, "
        "rounding floor %.2g", res.checked, res.worst_rel_error, k->o->grad.tolerance, res.kinks_skipped, res.floor);
    return BN_OK;
}

/* A pass, then a second backward without zeroing, on net: *worst receives how far the second
 * left the parameter gradients from twice the first, *nonzero whether the first gave any. */
static bn_status accumulate(const bn_kit *k, bn_net *net, bn_kit_gap *worst, int *nonzero, bn_kit_snapshot *once,
                            bn_kit_snapshot *twice)
{
    BN_TRY(bn_kit_pass_snapshot(k, net, 1, once));
    BN_TRY(bn_kit_arm_guards(net));
    BN_TRY(bn_kit_backward(k, net));
    BN_TRY(bn_kit_inspect_guards(k, net));
    BN_TRY(bn_kit_take(net, twice));
    /* The parameter gradients follow the output and the input gradient in a snapshot. */
    *worst = (bn_kit_gap){0};
    *nonzero = 0;
    for (int i = 2; i < 2 + bn_kit_under(net)->num_params; i++) {
        bn_kit_part *p = &once->parts[i];
        for (size_t j = 0; j < p->n; j++) {
            *nonzero |= p->v[j] != 0.0f;
            p->v[j] *= 2.0f;
        }
        bn_kit_widen(worst, p, &twice->parts[i]);
    }
    return BN_OK;
}

/* On the CPU, and on the device when the device check set one up. */
static bn_status check_accumulates(bn_kit *k, bn_check *c)
{
    if (bn_kit_under(k->cpu)->num_params == 0) {
        bn_kit_set(c, BN_CHECK_SKIP, "no parameters");
        return BN_OK;
    }
    bn_net *nets[2] = {k->cpu, k->gpu};
    bn_status s = BN_OK;
    int all_zero = 1;
    for (int i = 0; i < 2 && nets[i] && s == BN_OK && c->outcome != BN_CHECK_FAIL; i++) {
        bn_kit_snapshot once = {0}, twice = {0};
        bn_kit_gap worst;
        int nonzero = 0;
        s = accumulate(k, nets[i], &worst, &nonzero, &once, &twice);
        all_zero &= !nonzero;
        if (s == BN_OK && nonzero && !(worst.rel <= ACCUMULATE_TOL)) {
            bn_kit_set(c, BN_CHECK_FAIL, "on the %s a second backward left %s[%zu] at %.6g instead of %.6g (twice the "
                "first): backward must add into parameter gradients, not overwrite them", i ? "gpu" : "cpu",
                worst.where->name, worst.index, (double)worst.b, (double)worst.a);
        }
        bn_kit_drop(&once);
        bn_kit_drop(&twice);
    }
    if (s != BN_OK || c->outcome == BN_CHECK_FAIL) return s;
    if (all_zero)
        bn_kit_set(c, BN_CHECK_SKIP, "the parameter gradients are all zero at this input");
    else
        bn_kit_set(c, BN_CHECK_PASS, "a second backward doubled the parameter gradients (%s)",
                   k->gpu ? "cpu and gpu" : "cpu");
    return BN_OK;
}

/* Two identical passes on net, compared bit for bit. */
static bn_status check_determinism(bn_kit *k, bn_net *net, bn_check *c)
{
    bn_kit_snapshot a = {0}, b = {0};
    bn_status s = bn_kit_pass_snapshot(k, net, 1, &a);
    if (s == BN_OK) s = bn_kit_pass_snapshot(k, net, 1, &b);
    if (s == BN_OK) {
        bn_kit_set(c, BN_CHECK_PASS, "two passes bit-identical: output, input gradient, %d parameter gradient%s%s",
            bn_kit_under(net)->num_params, bn_kit_under(net)->num_params == 1 ? "" : "s",
            bn_kit_under(net)->ops->is_loss ? ", metrics" : "");
        for (int i = 0; i < a.count; i++) {
            const bn_kit_part *pa = &a.parts[i], *pb = &b.parts[i];
            size_t j = 0;
            while (j < pa->n && memcmp(&pa->v[j], &pb->v[j], sizeof(float)) == 0) j++;
            if (j < pa->n) {
                bn_kit_set(c, BN_CHECK_FAIL, "%s[%zu] is %.9g, then %.9g in the same pass repeated", pa->name, j,
                    (double)pa->v[j], (double)pb->v[j]);
                break;
            }
        }
    }
    bn_kit_drop(&a);
    bn_kit_drop(&b);
    return s;
}

static const char *no_device_reason(void)
{
    if (!bn_device_compiled()) return "this build has no CUDA support";
    if (bn_device_count() == 0) return "no CUDA device";
    return "no device chosen (CPU only)";
}

/* The same pass on the CPU and on the device (its outputs and input gradient filled with NaN
 * first); *worst receives the largest relative difference. */
static bn_status compare_devices(bn_kit *k, int train, bn_kit_gap *worst, bn_kit_snapshot *cpu, bn_kit_snapshot *gpu)
{
    bn_layer *l = bn_kit_under(k->gpu);
    BN_TRY(bn_kit_pass_snapshot(k, k->cpu, train, cpu));
    BN_TRY(bn_kit_poison(l->out));
    BN_TRY(bn_kit_poison(k->gpu->input_grad));
    BN_TRY(bn_kit_pass_snapshot(k, k->gpu, train, gpu));
    *worst = (bn_kit_gap){0};
    for (int i = 0; i < cpu->count; i++) bn_kit_widen(worst, &cpu->parts[i], &gpu->parts[i]);
    return BN_OK;
}

static bn_status check_devices(bn_kit *k, bn_check *c)
{
    const bn_layercheck_opts *o = k->o;
    if (!o->ctx) {
        bn_kit_set(c, BN_CHECK_SKIP, "%s", no_device_reason());
        return BN_OK;
    }
    BN_TRY(bn_kit_build(k, o->batch, o->ctx, &k->gpu));
    const bn_layer_ops *ops = bn_kit_under(k->gpu)->ops;
    const char *fallback = ops->forward_gpu && ops->backward_gpu ? ""
                           : ops->forward_gpu || ops->backward_gpu ? "; one pass has no GPU function and ran on the CPU"
                                                                   : "; no GPU functions: both passes ran on the CPU";
    bn_kit_snapshot cpu = {0}, gpu = {0};
    bn_kit_gap worst;
    bn_status s = compare_devices(k, !o->stochastic, &worst, &cpu, &gpu);
    if (s == BN_OK && worst.rel <= o->device_tolerance) {
        const char *mode = o->stochastic ? "evaluation" : "training";
        if (!worst.where)
            bn_kit_set(c, BN_CHECK_PASS, "%s mode: the same bits on both%s", mode, fallback);
        else
            bn_kit_set(c, BN_CHECK_PASS, "%s mode: largest difference %.2g of the blob's largest value (%s), "
                "tolerance %g%s", mode, worst.rel, worst.where->name, o->device_tolerance, fallback);
    } else if (s == BN_OK) {
        bn_kit_set(c, BN_CHECK_FAIL, "%s[%zu]: cpu %.7g, gpu %.7g, difference %.2g of the blob's scale > %g%s",
            worst.where->name, worst.index, (double)worst.a, (double)worst.b, worst.rel, o->device_tolerance,
            fallback);
        if (!o->stochastic) {
            /* Randomness in training legitimately differs between the devices: say so when the
             * evaluation passes agree and the layer draws random numbers. In a layer that draws
             * none one device's training pass is wrong, which --stochastic would hide. */
            bn_kit_snapshot ce = {0}, ge = {0};
            bn_kit_gap eval;
            int random = 0;
            s = compare_devices(k, 0, &eval, &ce, &ge);
            if (s == BN_OK && eval.rel <= o->device_tolerance &&
                (s = bn_kit_draws_random(k, k->cpu, &random)) == BN_OK) {
                size_t len = strlen(c->detail);
                snprintf(c->detail + len, sizeof c->detail - len, random
                         ? " (training mode; in evaluation mode the devices agree: a layer that draws random numbers "
                           "in training is checked with --stochastic)"
                         : " (training mode; in evaluation mode the devices agree, and the layer draws no random "
                           "numbers: one device's training pass is wrong)");
            }
            bn_kit_drop(&ce);
            bn_kit_drop(&ge);
        }
    }
    bn_kit_drop(&cpu);
    bn_kit_drop(&gpu);
    return s;
}

static bn_status check_determinism_cpu(bn_kit *k, bn_check *c)
{
    return check_determinism(k, k->cpu, c);
}

static bn_status check_determinism_gpu(bn_kit *k, bn_check *c)
{
    if (!k->o->ctx) {
        bn_kit_set(c, BN_CHECK_SKIP, "%s", no_device_reason());
        return BN_OK;
    }
    if (!k->gpu) {
        bn_kit_set(c, BN_CHECK_SKIP, "the network could not be set up on the device");
        return BN_OK;
    }
    return check_determinism(k, k->gpu, c);
}

typedef bn_status (*check_fn)(bn_kit *k, bn_check *c);

static void run_check(bn_kit *k, bn_check_id id, check_fn fn)
{
    bn_check *c = &k->rep->checks[id];
    bn_clear_error();
    bn_status s = fn(k, c);
    if (s != BN_OK) bn_kit_set(c, BN_CHECK_FAIL, "%s", bn_last_error());
}

static void tally(bn_layercheck_report *r)
{
    r->passed = r->failed = r->skipped = 0;
    for (int i = 0; i < BN_CHECK_COUNT; i++) {
        bn_check_outcome o = r->checks[i].outcome;
        r->passed += o == BN_CHECK_PASS;
        r->failed += o == BN_CHECK_FAIL;
        r->skipped += o == BN_CHECK_SKIP;
    }
}

static bn_status validate(const bn_layercheck_opts *o)
{
    if (!o->type || !bn_find_layer(o->type))
        return bn_error(BN_ERR_USAGE, "check-layer: unknown layer type '%s' (a plugin's types are known once "
                        "it is loaded)", o->type ? o->type : "");
    bn_shape in = o->input;
    if (in.c <= 0 || in.h <= 0 || in.w <= 0)
        return bn_error(BN_ERR_USAGE, "check-layer: input shape %dx%dx%d is not positive", in.c, in.h, in.w);
    if (o->batch <= 0) return bn_error(BN_ERR_USAGE, "check-layer: batch %d is not positive", o->batch);
    if (!(o->device_tolerance > 0.0))
        return bn_error(BN_ERR_USAGE, "check-layer: device tolerance %g is not positive", o->device_tolerance);
    if (!(o->eval_tolerance > 0.0))
        return bn_error(BN_ERR_USAGE, "check-layer: evaluation tolerance %g is not positive", o->eval_tolerance);
    return BN_OK;
}

bn_status bn_layercheck_run(const bn_layercheck_opts *o, bn_layercheck_report *report)
{
    memset(report, 0, sizeof *report);
    for (int i = 0; i < BN_CHECK_COUNT; i++) {
        report->checks[i].name = check_names[i];
        bn_kit_set(&report->checks[i], BN_CHECK_SKIP, "not run: the shapes check failed");
    }
    BN_TRY(validate(o));
    bn_kit k = {.o = o, .rep = report};
    bn_status s = bn_kit_model_text(o, &k.text);
    if (s == BN_OK) s = bn_kit_build(&k, 1, NULL, &k.one);
    if (s == BN_OK) {
        /* Deterministic cuDNN algorithms during the kit, so that cuDNN-based layers repeat exactly. */
        int saved_deterministic = o->ctx ? o->ctx->deterministic : 0;
        if (o->ctx) o->ctx->deterministic = 1;
        run_check(&k, BN_CHECK_SHAPES, check_shapes);
        if (report->checks[BN_CHECK_SHAPES].outcome == BN_CHECK_PASS && (s = bn_kit_make_out_grad(&k)) == BN_OK) {
            run_check(&k, BN_CHECK_WRITES, check_writes);
            run_check(&k, BN_CHECK_GRADIENT, check_gradient);
            run_check(&k, BN_CHECK_DETERMINISM_CPU, check_determinism_cpu);
            run_check(&k, BN_CHECK_DEVICES, check_devices);
            run_check(&k, BN_CHECK_DETERMINISM_GPU, check_determinism_gpu);
            run_check(&k, BN_CHECK_EVALUATION, bn_layercheck_evaluation);
            /* After the device check, which sets up the device's network. */
            run_check(&k, BN_CHECK_ACCUMULATES, check_accumulates);
        }
        if (o->ctx) o->ctx->deterministic = saved_deterministic;
    }
    bn_net_free(k.one);
    bn_net_free(k.cpu);
    bn_net_free(k.gpu);
    free(k.out_grad);
    free(k.text);
    tally(report);
    return s;
}
