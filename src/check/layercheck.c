#include "layercheck.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/net.h"
#include "core/registry.h"
#include "core/rng.h"

/* Streams of the seed for the kit's own draws. */
enum { STREAM_INPUT = 21, STREAM_LABELS = 22, STREAM_OUT_GRAD = 23 };

/* Inputs lie in (-INPUT_RANGE / 2, INPUT_RANGE / 2) whatever their number, so the values a
 * layer sees, and with them the rounding floor of the gradient check, do not grow with the
 * shape. As many as fit are spaced SPACING_EPS eps apart; more are drawn at random in the
 * range, at least MARGIN_EPS eps away from zero (see feed). */
#define SPACING_EPS 2.5
#define MARGIN_EPS 1.25
#define INPUT_RANGE 6.0

/* Guard zones (see arm_guards): the kit's networks hold one example more than they run, and
 * that row, after every output and gradient of a row per example, is the guard; each parameter
 * gradient is followed by GRAD_GUARD free elements of the gradient slab (bn_net.grad_guard).
 * Every guard element holds GUARD_BITS (a NaN no arithmetic produces) before a pass. */
#define GRAD_GUARD 16
#define GUARD_BITS 0x7fa5c3e1u

/* A backward run twice must give exactly twice the parameter gradients; this allows for a
 * layer that sums in a different order the second time. */
#define ACCUMULATE_TOL 1e-6

/* One blob's values at the end of a pass. */
typedef struct part {
    char name[80];
    float *v;
    size_t n;
} part;

/* Output, input gradient, every parameter gradient and, for a loss layer, the metrics. */
typedef struct snapshot {
    part parts[3 + BN_MAX_PARAMS];
    int count;
} snapshot;

typedef struct kit {
    const bn_layercheck_opts *o;
    bn_layercheck_report *rep;
    char *text;        /* the one-layer model */
    bn_net *one;       /* set up for 1 example on the CPU */
    bn_net *cpu;       /* set up for o->batch on the CPU (by the shapes check) */
    bn_net *gpu;       /* the same on o->ctx (by the device check) */
    float *out_grad;   /* the output gradient fed to a layer that is not a loss */
} kit;

static const char *const check_names[BN_CHECK_COUNT] = {
    "shapes", "writes", "gradient", "accumulates", "evaluation", "determinism cpu", "cpu vs gpu", "determinism gpu",
};

bn_layercheck_opts bn_layercheck_defaults(void)
{
    return (bn_layercheck_opts){.input = {3, 8, 8}, .batch = 3, .device_tolerance = 1e-4, .eval_tolerance = 0.02,
                                .seed = 1, .grad = bn_gradcheck_defaults()};
}

const bn_layercheck_shape bn_layercheck_shapes[BN_LAYERCHECK_SHAPES] = {
    {"small", {3, 8, 8}, 3},
    {"realistic", {20, 12, 12}, 16},
};

const char *bn_check_outcome_name(bn_check_outcome c)
{
    return c == BN_CHECK_PASS ? "pass" : c == BN_CHECK_FAIL ? "FAIL" : "skip";
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void set(bn_check *c, bn_check_outcome r, const char *fmt, ...)
{
    c->outcome = r;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->detail, sizeof c->detail, fmt, ap);
    va_end(ap);
}

/* ---- the network and what it is fed ---- */

/* The layer under test: the network's last layer (after the slices that feed a type of
 * several inputs). */
static bn_layer *under(bn_net *net)
{
    return net->layers[net->num_layers - 1];
}

/* A layer type of several inputs gets them as slices of one data input: `checkkit_slice`
 * passes on `count` = channels x height x width elements of each example starting at
 * `offset`, and in backward writes the data's whole gradient, zero outside its slice, so that
 * the network's sum over the slices is the layer's input gradients laid end to end. The data
 * then holds distinct values across all inputs and the gradient check perturbs each input. */
typedef struct slice_priv {
    int offset;
    bn_shape shape;
} slice_priv;

static bn_status slice_parse(bn_layer *l, bn_options *o)
{
    slice_priv s;
    BN_TRY(bn_opt_int_required(o, "offset", 0, 1 << 30, &s.offset));
    BN_TRY(bn_opt_int_required(o, "channels", 1, 1 << 16, &s.shape.c));
    BN_TRY(bn_opt_int_required(o, "height", 1, 1 << 16, &s.shape.h));
    BN_TRY(bn_opt_int_required(o, "width", 1, 1 << 16, &s.shape.w));
    if (!(l->priv = malloc(sizeof s))) return bn_error(BN_ERR_NOMEM, "check-layer: out of host memory");
    *(slice_priv *)l->priv = s;
    return BN_OK;
}

static bn_status slice_setup(bn_layer *l, bn_shape in, bn_shape *out)
{
    const slice_priv *s = l->priv;
    if ((long)s->offset + (long)s->shape.c * s->shape.h * s->shape.w > (long)in.c * in.h * in.w)
        return bn_layer_error(l, "slice past the data");
    /* It has no GPU passes on purpose: on a device it runs on the host, without the warning. */
    l->fallback_warned = 1;
    *out = s->shape;
    return BN_OK;
}

static bn_status slice_pass(bn_layer *l, const bn_pass *p, int backward)
{
    const slice_priv *s = l->priv;
    size_t per = bn_blob_count(l->out) / (size_t)l->out->n, total = bn_blob_count(l->in) / (size_t)l->in->n;
    if (backward) {
        if (!l->in_grad) return BN_OK;
        BN_HOST_RD(dy, l->out_grad);
        BN_HOST_WR(dx, l->in_grad);
        memset(dx, 0, bn_blob_count(l->in_grad) * sizeof *dx);
        for (int n = 0; n < l->out->n; n++) memcpy(dx + n * total + s->offset, dy + n * per, per * sizeof *dx);
        return BN_OK;
    }
    BN_HOST_RD(x, l->in);
    BN_HOST_WR(y, l->out);
    for (int n = 0; n < l->out->n; n++) memcpy(y + n * per, x + n * total + s->offset, per * sizeof *y);
    return BN_OK;
}

static bn_status slice_forward(bn_layer *l, const bn_pass *p)
{
    return slice_pass(l, p, 0);
}

static bn_status slice_backward(bn_layer *l, const bn_pass *p)
{
    return slice_pass(l, p, 1);
}

static const bn_layer_ops slice_ops = {
    .type = "checkkit_slice",
    .help = "check-layer's own: one input of a layer under test, a slice of the data (keys offset, channels, "
            "height, width)",
    .kind = BN_NVTX_LAYER_OTHER,
    .parse = slice_parse,
    .setup = slice_setup,
    .forward_cpu = slice_forward,
    .backward_cpu = slice_backward,
};

int bn_layercheck_inputs(const bn_layercheck_opts *o)
{
    if (o->num_inputs > 0) return o->num_inputs;
    const bn_layer_ops *ops = bn_find_layer(o->type);
    return ops && ops->min_inputs > 1 ? ops->min_inputs : 1;
}

/* The shape of input j. */
static bn_shape input_shape(const bn_layercheck_opts *o, int j)
{
    bn_shape s = j == 0 ? o->input : o->more_inputs[j - 1];
    return s.c > 0 ? s : o->input;
}

/* "[input] ... [TYPE] key = value ..." from the options; for a type of several inputs, the data
 * holds them all and a slice layer passes on each. *out is freed by the caller. */
static bn_status model_text(const bn_layercheck_opts *o, char **out)
{
    int inputs = bn_layercheck_inputs(o);
    const bn_layer_ops *ops = bn_find_layer(o->type);
    int lo = ops && ops->min_inputs > 0 ? ops->min_inputs : 1, hi = ops && ops->max_inputs > 0 ? ops->max_inputs : 1;
    if (ops && hi == 1 && inputs != 1)
        return bn_error(BN_ERR_USAGE, "check-layer: %s takes one input, not %d (--inputs)", o->type, inputs);
    if (ops && (inputs < lo || inputs > hi))
        return bn_error(BN_ERR_USAGE, "check-layer: %s takes %d to %d inputs, not %d (--inputs)", o->type, lo, hi,
                        inputs);
    if (inputs > 1 && !bn_find_layer(slice_ops.type)) BN_TRY(bn_register_layer(&slice_ops));
    bn_options opts = {0};
    bn_status s = o->options ? bn_options_parse_inline(&opts, o->options) : BN_OK;
    size_t cap = 256 + strlen(o->type) + (size_t)inputs * 160;
    for (int i = 0; i < opts.count; i++) cap += strlen(opts.items[i].key) + strlen(opts.items[i].value) + 8;
    char *text = s == BN_OK ? malloc(cap) : NULL;
    if (text && inputs == 1) {
        size_t len = (size_t)snprintf(text, cap, "[input]\nchannels = %d\nheight = %d\nwidth = %d\n[%s]\n",
                                      o->input.c, o->input.h, o->input.w, o->type);
        for (int i = 0; i < opts.count; i++)
            len += (size_t)snprintf(text + len, cap - len, "%s = %s\n", opts.items[i].key, opts.items[i].value);
        *out = text;
    } else if (text) {
        long total = 0;
        for (int j = 0; j < inputs; j++) total += (long)input_shape(o, j).c * input_shape(o, j).h * input_shape(o, j).w;
        size_t len = (size_t)snprintf(text, cap, "[input]\nchannels = 1\nheight = 1\nwidth = %ld\n", total);
        long offset = 0;
        for (int j = 0; j < inputs; j++) {
            bn_shape sh = input_shape(o, j);
            len += (size_t)snprintf(text + len, cap - len, "[%s]\nname = in%d\ninput = input\noffset = %ld\n"
                                    "channels = %d\nheight = %d\nwidth = %d\n", slice_ops.type, j + 1, offset, sh.c,
                                    sh.h, sh.w);
            offset += (long)sh.c * sh.h * sh.w;
        }
        len += (size_t)snprintf(text + len, cap - len, "[%s]\ninput = ", o->type);
        for (int j = 0; j < inputs; j++) len += (size_t)snprintf(text + len, cap - len, "%sin%d", j ? ", " : "", j + 1);
        len += (size_t)snprintf(text + len, cap - len, "\n");
        for (int i = 0; i < opts.count; i++)
            len += (size_t)snprintf(text + len, cap - len, "%s = %s\n", opts.items[i].key, opts.items[i].value);
        *out = text;
    } else if (s == BN_OK) {
        s = bn_error(BN_ERR_NOMEM, "check-layer: out of host memory");
    }
    bn_options_clear(&opts);
    return s;
}

/* The network is parsed from text the kit wrote, so a parse error's "check-layer:LINE:" points
 * at a line the user never saw; the rest of the message names the section and key, which is
 * what came from --options. */
static bn_status options_error(bn_status s)
{
    const char *msg = bn_last_error(), *prefix = "check-layer:";
    size_t at = strlen(prefix);
    if (strncmp(msg, prefix, at) != 0 || msg[at] < '0' || msg[at] > '9') return s;
    while (msg[at] >= '0' && msg[at] <= '9') at++;
    if (msg[at] != ':') return s;
    char rest[512];
    snprintf(rest, sizeof rest, "%s", msg + at + 1 + (msg[at + 1] == ' '));
    return bn_error(s, "check-layer: --options: %s", rest);
}

/* Set up for one example more than it runs: the spare row is the guard of every blob with a
 * row per example, in the buffers the network allocates anyway (core/blob.c stays as the
 * trainer uses it); the parameter gradients get theirs from grad_guard. */
static bn_status build(const kit *k, int batch, bn_ctx *ctx, bn_net **out)
{
    bn_status s = bn_net_from_text(k->text, "check-layer", out);
    if (s != BN_OK) return options_error(s);
    (*out)->grad_guard = GRAD_GUARD;
    s = bn_net_setup(*out, batch + 1, ctx, 1, k->o->seed);
    if (s == BN_OK) s = bn_net_set_batch(*out, batch);
    if (s != BN_OK) {
        bn_net_free(*out);
        *out = NULL;
    }
    return s;
}

/* Inputs in a fixed range (see layercheck.h) in random order and, for a loss layer, labels.
 * When the range holds count values SPACING_EPS eps apart they are that grid, symmetric about
 * zero, so no perturbation crosses a kink; past that, values drawn uniformly in the range
 * keep clear of zero, and the rare near-tie of a max is a kink the gradient check skips. */
static bn_status feed(const kit *k, bn_net *net)
{
    size_t count = bn_blob_count(net->input);
    float *x = bn_blob_host_wr(net->input);
    if (!x) return bn_last_status();
    double eps = k->o->grad.eps, spacing = INPUT_RANGE / count, margin = MARGIN_EPS * eps;
    bn_rng r;
    bn_rng_seed(&r, k->o->seed, STREAM_INPUT);
    if (spacing >= SPACING_EPS * eps) {
        for (size_t i = 0; i < count; i++) x[i] = (float)(((double)i - (double)(count / 2) + 0.5) * spacing);
    } else {
        for (size_t i = 0; i < count; i++) {
            double v = margin + bn_rng_uniform(&r) * (INPUT_RANGE / 2 - margin);
            x[i] = (float)(i % 2 ? v : -v);
        }
    }
    for (size_t i = count; i > 1; i--) {
        size_t j = (size_t)bn_rng_below(&r, i);
        float t = x[i - 1];
        x[i - 1] = x[j];
        x[j] = t;
    }
    bn_layer *l = under(net);
    if (!l->ops->is_loss) return BN_OK;
    uint64_t classes = (uint64_t)l->out->c * l->out->h * l->out->w;
    float *y = bn_blob_host_wr(net->labels);
    if (!y) return bn_last_status();
    bn_rng_seed(&r, k->o->seed, STREAM_LABELS);
    for (int i = 0; i < net->batch; i++) y[i] = (float)bn_rng_below(&r, classes);
    return BN_OK;
}

static bn_status make_out_grad(kit *k)
{
    bn_blob *g = under(k->cpu)->out_grad;
    if (!g) return BN_OK;
    size_t count = bn_blob_count(g);
    if (!(k->out_grad = malloc(count * sizeof *k->out_grad)))
        return bn_error(BN_ERR_NOMEM, "check-layer: out of host memory");
    bn_rng r;
    bn_rng_seed(&r, k->o->seed, STREAM_OUT_GRAD);
    for (size_t i = 0; i < count; i++) k->out_grad[i] = (float)bn_rng_normal(&r);
    return BN_OK;
}

/* Backward from the loss layer's own gradient, or from the fixed output gradient. */
static bn_status backward(const kit *k, bn_net *net)
{
    bn_blob *g = under(net)->out_grad;
    if (g) {
        float *d = bn_blob_host_wr(g);
        if (!d) return bn_last_status();
        memcpy(d, k->out_grad, bn_blob_count(g) * sizeof *d);
    }
    return bn_net_backward(net);
}

/* ---- guard zones ---- */

/* The blobs the layer under test writes: its output, its input gradients and its parameter
 * gradients, into b; returns how many. */
static int written_blobs(bn_net *net, bn_blob **b)
{
    bn_layer *l = under(net);
    int n = 0;
    b[n++] = l->out;
    for (int j = 0; j < l->num_inputs; j++)
        if (l->input_grads[j]) b[n++] = l->input_grads[j];
    for (int i = 0; i < l->num_params; i++) b[n++] = l->params[i].grad;
    return n;
}

/* Elements after b's last one that belong to its guard: the rest of a root's capacity (the
 * spare example and whatever the buffer holds beyond), or GRAD_GUARD after a gradient view. */
static size_t guard_length(const bn_blob *b)
{
    return b->root == b ? b->capacity - bn_blob_count(b) : GRAD_GUARD;
}

/* Fills every guard with GUARD_BITS; call after the gradients were zeroed, which clears the
 * parameter gradients' guards with the slab. */
static bn_status arm_guards(bn_net *net)
{
    bn_blob *b[2 + BN_MAX_INPUTS + BN_MAX_PARAMS];
    int n = written_blobs(net, b);
    uint32_t bits = GUARD_BITS;
    for (int i = 0; i < n; i++) {
        float *v = bn_blob_host_wr(b[i]);
        if (!v) return bn_last_status();
        for (size_t j = bn_blob_count(b[i]), end = j + guard_length(b[i]); j < end; j++) memcpy(&v[j], &bits, sizeof bits);
    }
    return BN_OK;
}

/* An error naming the first guard element a pass changed: the blob, the side and how far past
 * its end. The host copy is read, which brings the device's back when the device wrote last. */
static bn_status inspect_guards(const kit *k, bn_net *net)
{
    bn_blob *b[2 + BN_MAX_INPUTS + BN_MAX_PARAMS];
    int n = written_blobs(net, b);
    for (int i = 0; i < n; i++) {
        const float *v = bn_blob_host_rd(b[i]);
        if (!v) return bn_last_status();
        size_t count = bn_blob_count(b[i]);
        for (size_t j = count, end = j + guard_length(b[i]); j < end; j++) {
            uint32_t bits;
            memcpy(&bits, &v[j], sizeof bits);
            if (bits != GUARD_BITS)
                return bn_error(BN_ERR_NUMERIC, "wrote past the end of %s on the %s: element %zu after its last "
                                "(of %zu) holds %.6g", b[i]->name, net == k->gpu ? "gpu" : "cpu", j - count + 1,
                                count, (double)v[j]);
        }
    }
    return BN_OK;
}

/* Fresh inputs, zeroed parameter gradients, armed guards, forward in the given mode, backward,
 * and the guards inspected. */
static bn_status run_pass(const kit *k, bn_net *net, int train)
{
    BN_TRY(feed(k, net));
    BN_TRY(bn_net_zero_grad(net));
    BN_TRY(arm_guards(net));
    BN_TRY(bn_net_forward(net, train));
    BN_TRY(backward(k, net));
    return inspect_guards(k, net);
}

static bn_status poison(bn_blob *b)
{
    if (!b) return BN_OK;
    float *v = bn_blob_host_wr(b);
    if (!v) return bn_last_status();
    for (size_t i = 0; i < bn_blob_count(b); i++) v[i] = NAN;
    return BN_OK;
}

/* ---- snapshots and comparisons ---- */

static bn_status add_part(snapshot *s, const char *name, bn_blob *b)
{
    part *p = &s->parts[s->count];
    const float *v = bn_blob_host_rd(b);
    if (!v) return bn_last_status();
    snprintf(p->name, sizeof p->name, "%s", name);
    p->n = bn_blob_count(b);
    if (!(p->v = malloc(p->n * sizeof *p->v))) return bn_error(BN_ERR_NOMEM, "check-layer: out of host memory");
    memcpy(p->v, v, p->n * sizeof *p->v);
    s->count++;
    return BN_OK;
}

static void drop(snapshot *s)
{
    for (int i = 0; i < s->count; i++) free(s->parts[i].v);
    s->count = 0;
}

static bn_status take(bn_net *net, snapshot *s)
{
    bn_layer *l = under(net);
    s->count = 0;
    BN_TRY(add_part(s, "output", l->out));
    BN_TRY(add_part(s, "input gradient", net->input_grad));
    for (int k = 0; k < l->num_params; k++) {
        char name[64];
        snprintf(name, sizeof name, "%s gradient", l->params[k].name);
        BN_TRY(add_part(s, name, l->params[k].grad));
    }
    if (l->ops->is_loss) BN_TRY(add_part(s, "metrics", net->metrics));
    return BN_OK;
}

/* One forward and backward in `train` mode, copied out. */
static bn_status pass_snapshot(const kit *k, bn_net *net, int train, snapshot *s)
{
    BN_TRY(run_pass(k, net, train));
    bn_status st = take(net, s);
    if (st != BN_OK) drop(s);
    return st;
}

/* The largest |b - a| of one blob relative to max |a|, and where it is. */
typedef struct gap {
    double rel;
    const part *where;
    size_t index;
    float a, b;
} gap;

static void widen(gap *g, const part *pa, const part *pb)
{
    double scale = 0.0;
    for (size_t i = 0; i < pa->n; i++) scale = fmax(scale, fabs(pa->v[i]));
    if (scale == 0.0) scale = 1.0; /* an all-zero blob is compared in absolute terms */
    for (size_t i = 0; i < pa->n; i++) {
        double rel = fabs((double)pb->v[i] - pa->v[i]) / scale;
        if (!(rel <= g->rel)) { /* NaN, the mark of an unwritten element, always wins */
            *g = (gap){.rel = isnan(rel) ? INFINITY : rel, .where = pa, .index = i, .a = pa->v[i], .b = pb->v[i]};
            if (isinf(g->rel)) return;
        }
    }
}

/* ---- the checks; an error returned from one marks it failed with the message ---- */

static int same_shape(const bn_blob *a, const bn_blob *b)
{
    return a->c == b->c && a->h == b->h && a->w == b->w;
}

static bn_status check_shapes(kit *k, bn_check *c)
{
    bn_layer *l1 = under(k->one);
    bn_status s = build(k, k->o->batch, NULL, &k->cpu);
    if (s != BN_OK) {
        set(c, BN_CHECK_FAIL, "set up for 1 example, but not for %d: %s", k->o->batch, bn_last_error());
        return BN_OK;
    }
    bn_layer *ln = under(k->cpu);
    bn_blob *o1 = l1->out, *on = ln->out;
    if (o1->c <= 0 || o1->h <= 0 || o1->w <= 0) {
        set(c, BN_CHECK_FAIL, "output shape %dx%dx%d is not positive", o1->c, o1->h, o1->w);
        return BN_OK;
    }
    if (!same_shape(o1, on) || l1->num_params != ln->num_params) {
        set(c, BN_CHECK_FAIL, "setup depends on the batch: output %dx%dx%d with %d params at batch 1, "
            "%dx%dx%d with %d at batch %d", o1->c, o1->h, o1->w, l1->num_params, on->c, on->h, on->w,
            ln->num_params, k->o->batch);
        return BN_OK;
    }
    char params[160] = "no parameters";
    size_t len = 0;
    for (int i = 0; i < l1->num_params; i++) {
        const bn_blob *p1 = l1->params[i].value, *pn = ln->params[i].value;
        if (p1->n <= 0 || p1->c <= 0 || p1->h <= 0 || p1->w <= 0) {
            set(c, BN_CHECK_FAIL, "parameter %s has shape %dx%dx%dx%d", l1->params[i].name, p1->n, p1->c, p1->h,
                p1->w);
            return BN_OK;
        }
        if (p1->n != pn->n || !same_shape(p1, pn) || strcmp(l1->params[i].name, ln->params[i].name) != 0) {
            set(c, BN_CHECK_FAIL, "setup depends on the batch: parameter %d is %s %dx%dx%dx%d at batch 1, %s "
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
    set(c, BN_CHECK_PASS, "%s -> %dx%dx%d at batch 1 and %d; %s", ins, o1->c, o1->h, o1->w, k->o->batch, params);
    return BN_OK;
}

static size_t count_nonfinite(bn_blob *b, bn_status *s)
{
    size_t bad = 0;
    if (!b) return 0;
    const float *v = bn_blob_host_rd(b);
    if (!v) {
        *s = bn_last_status();
        return 0;
    }
    for (size_t i = 0; i < bn_blob_count(b); i++) bad += !isfinite(v[i]);
    return bad;
}

static bn_status check_writes(kit *k, bn_check *c)
{
    bn_net *net = k->cpu;
    bn_layer *l = under(net);
    bn_status s = BN_OK;
    BN_TRY(feed(k, net));
    BN_TRY(poison(l->out));
    BN_TRY(poison(net->input_grad));
    BN_TRY(bn_net_zero_grad(net));
    BN_TRY(arm_guards(net));
    BN_TRY(bn_net_forward(net, 1));
    size_t bad_out = count_nonfinite(l->out, &s);
    BN_TRY(s);
    BN_TRY(backward(k, net));
    BN_TRY(inspect_guards(k, net));
    size_t bad_in = count_nonfinite(net->input_grad, &s), bad_param = 0;
    for (int i = 0; i < l->num_params; i++) bad_param += count_nonfinite(l->params[i].grad, &s);
    BN_TRY(s);
    size_t n_out = bn_blob_count(l->out), n_in = bn_blob_count(net->input_grad);
    if (bad_out || bad_in || bad_param)
        set(c, BN_CHECK_FAIL, "NaN or infinity after the pass (filled with NaN before): %zu of %zu outputs, "
            "%zu of %zu input-gradient elements, %zu parameter-gradient elements", bad_out, n_out, bad_in, n_in,
            bad_param);
    else
        set(c, BN_CHECK_PASS, "all %zu outputs and %zu input-gradient elements written; parameter gradients "
            "finite; nothing past their ends", n_out, n_in);
    return BN_OK;
}

static bn_status check_gradient(kit *k, bn_check *c)
{
    BN_TRY(feed(k, k->cpu));
    bn_gradcheck_result res;
    BN_TRY(bn_gradcheck_net(k->cpu, &k->o->grad, &res));
    set(c, BN_CHECK_PASS, "%ld coordinates, worst relative error %.2g (tolerance %g), %ld on kinks skipped, "
        "rounding floor %.2g", res.checked, res.worst_rel_error, k->o->grad.tolerance, res.kinks_skipped, res.floor);
    return BN_OK;
}

/* A pass, then a second backward without zeroing, on net: *worst receives how far the second
 * left the parameter gradients from twice the first, *nonzero whether the first gave any. */
static bn_status accumulate(const kit *k, bn_net *net, gap *worst, int *nonzero, snapshot *once, snapshot *twice)
{
    BN_TRY(pass_snapshot(k, net, 1, once));
    BN_TRY(arm_guards(net));
    BN_TRY(backward(k, net));
    BN_TRY(inspect_guards(k, net));
    BN_TRY(take(net, twice));
    /* The parameter gradients follow the output and the input gradient in a snapshot. */
    *worst = (gap){0};
    *nonzero = 0;
    for (int i = 2; i < 2 + under(net)->num_params; i++) {
        part *p = &once->parts[i];
        for (size_t j = 0; j < p->n; j++) {
            *nonzero |= p->v[j] != 0.0f;
            p->v[j] *= 2.0f;
        }
        widen(worst, p, &twice->parts[i]);
    }
    return BN_OK;
}

/* On the CPU, and on the device when the device check set one up. */
static bn_status check_accumulates(kit *k, bn_check *c)
{
    if (under(k->cpu)->num_params == 0) {
        set(c, BN_CHECK_SKIP, "no parameters");
        return BN_OK;
    }
    bn_net *nets[2] = {k->cpu, k->gpu};
    bn_status s = BN_OK;
    int all_zero = 1;
    for (int i = 0; i < 2 && nets[i] && s == BN_OK && c->outcome != BN_CHECK_FAIL; i++) {
        snapshot once = {0}, twice = {0};
        gap worst;
        int nonzero = 0;
        s = accumulate(k, nets[i], &worst, &nonzero, &once, &twice);
        all_zero &= !nonzero;
        if (s == BN_OK && nonzero && !(worst.rel <= ACCUMULATE_TOL)) {
            set(c, BN_CHECK_FAIL, "on the %s a second backward left %s[%zu] at %.6g instead of %.6g (twice the "
                "first): backward must add into parameter gradients, not overwrite them", i ? "gpu" : "cpu",
                worst.where->name, worst.index, (double)worst.b, (double)worst.a);
        }
        drop(&once);
        drop(&twice);
    }
    if (s != BN_OK || c->outcome == BN_CHECK_FAIL) return s;
    if (all_zero)
        set(c, BN_CHECK_SKIP, "the parameter gradients are all zero at this input");
    else
        set(c, BN_CHECK_PASS, "a second backward doubled the parameter gradients (%s)", k->gpu ? "cpu and gpu" : "cpu");
    return BN_OK;
}

/* Two identical passes on net, compared bit for bit. */
static bn_status check_determinism(kit *k, bn_net *net, bn_check *c)
{
    snapshot a = {0}, b = {0};
    bn_status s = pass_snapshot(k, net, 1, &a);
    if (s == BN_OK) s = pass_snapshot(k, net, 1, &b);
    if (s == BN_OK) {
        set(c, BN_CHECK_PASS, "two passes bit-identical: output, input gradient, %d parameter gradient%s%s",
            under(net)->num_params, under(net)->num_params == 1 ? "" : "s",
            under(net)->ops->is_loss ? ", metrics" : "");
        for (int i = 0; i < a.count; i++) {
            const part *pa = &a.parts[i], *pb = &b.parts[i];
            size_t j = 0;
            while (j < pa->n && memcmp(&pa->v[j], &pb->v[j], sizeof(float)) == 0) j++;
            if (j < pa->n) {
                set(c, BN_CHECK_FAIL, "%s[%zu] is %.9g, then %.9g in the same pass repeated", pa->name, j,
                    (double)pa->v[j], (double)pb->v[j]);
                break;
            }
        }
    }
    drop(&a);
    drop(&b);
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
static bn_status compare_devices(kit *k, int train, gap *worst, snapshot *cpu, snapshot *gpu)
{
    bn_layer *l = under(k->gpu);
    BN_TRY(pass_snapshot(k, k->cpu, train, cpu));
    BN_TRY(poison(l->out));
    BN_TRY(poison(k->gpu->input_grad));
    BN_TRY(pass_snapshot(k, k->gpu, train, gpu));
    *worst = (gap){0};
    for (int i = 0; i < cpu->count; i++) widen(worst, &cpu->parts[i], &gpu->parts[i]);
    return BN_OK;
}

static bn_status check_devices(kit *k, bn_check *c)
{
    const bn_layercheck_opts *o = k->o;
    if (!o->ctx) {
        set(c, BN_CHECK_SKIP, "%s", no_device_reason());
        return BN_OK;
    }
    BN_TRY(build(k, o->batch, o->ctx, &k->gpu));
    const bn_layer_ops *ops = under(k->gpu)->ops;
    const char *fallback = ops->forward_gpu && ops->backward_gpu ? ""
                           : ops->forward_gpu || ops->backward_gpu ? "; one pass has no GPU function and ran on the CPU"
                                                                   : "; no GPU functions: both passes ran on the CPU";
    snapshot cpu = {0}, gpu = {0};
    gap worst;
    bn_status s = compare_devices(k, !o->stochastic, &worst, &cpu, &gpu);
    if (s == BN_OK && worst.rel <= o->device_tolerance) {
        const char *mode = o->stochastic ? "evaluation" : "training";
        if (!worst.where)
            set(c, BN_CHECK_PASS, "%s mode: the same bits on both%s", mode, fallback);
        else
            set(c, BN_CHECK_PASS, "%s mode: largest difference %.2g of the blob's largest value (%s), "
                "tolerance %g%s", mode, worst.rel, worst.where->name, o->device_tolerance, fallback);
    } else if (s == BN_OK) {
        set(c, BN_CHECK_FAIL, "%s[%zu]: cpu %.7g, gpu %.7g, difference %.2g of the blob's scale > %g%s",
            worst.where->name, worst.index, (double)worst.a, (double)worst.b, worst.rel, o->device_tolerance,
            fallback);
        if (!o->stochastic) {
            /* Randomness in training legitimately differs between the devices: say so when the
             * evaluation passes agree. */
            snapshot ce = {0}, ge = {0};
            gap eval;
            s = compare_devices(k, 0, &eval, &ce, &ge);
            if (s == BN_OK && eval.rel <= o->device_tolerance) {
                size_t len = strlen(c->detail);
                snprintf(c->detail + len, sizeof c->detail - len, " (training mode; in evaluation mode the devices "
                         "agree: a layer that draws random numbers in training is checked with --stochastic)");
            }
            drop(&ce);
            drop(&ge);
        }
    }
    drop(&cpu);
    drop(&gpu);
    return s;
}

static bn_status check_determinism_cpu(kit *k, bn_check *c)
{
    return check_determinism(k, k->cpu, c);
}

static bn_status check_determinism_gpu(kit *k, bn_check *c)
{
    if (!k->o->ctx) {
        set(c, BN_CHECK_SKIP, "%s", no_device_reason());
        return BN_OK;
    }
    if (!k->gpu) {
        set(c, BN_CHECK_SKIP, "the network could not be set up on the device");
        return BN_OK;
    }
    return check_determinism(k, k->gpu, c);
}

/* ---- the evaluation check ----
 * Its parts return 1 when they passed, and 0 when they failed the check (its detail says why)
 * or *s holds an error, so that the first part to fail ends the check. */

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
    bn_layer *l = under(net);
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
static int eval_pass(kit *k, bn_net *net, bn_check *c, part *out, bn_status *s)
{
    const char *side = net == k->gpu ? "gpu" : "cpu";
    buffers before = {0};
    out->v = NULL;
    if ((*s = save_buffers(net, &before)) != BN_OK || (*s = poison(under(net)->out)) != BN_OK ||
        (*s = arm_guards(net)) != BN_OK || (*s = bn_net_forward(net, 0)) != BN_OK ||
        (*s = inspect_guards(k, net)) != BN_OK) {
        free(before.v);
        return 0;
    }
    size_t bad = count_nonfinite(under(net)->out, s);
    size_t changed = *s == BN_OK ? first_change(net, &before, s) : 0;
    int ok = 0;
    if (*s == BN_OK && bad) {
        set(c, BN_CHECK_FAIL, "on the %s the evaluation pass left %zu of %zu outputs NaN or infinite (filled with "
            "NaN before): it must write every output", side, bad, bn_blob_count(under(net)->out));
    } else if (*s == BN_OK && changed < before.n) {
        char name[96];
        buffer_element(net, changed, name, sizeof name);
        set(c, BN_CHECK_FAIL, "on the %s the evaluation pass changed %s from %.7g: buffers change only in "
            "training", side, name, (double)before.v[changed]);
    } else if (*s == BN_OK) {
        snapshot one = {0};
        *s = add_part(&one, "evaluation output", under(net)->out);
        if (*s == BN_OK) {
            *out = one.parts[0];
            ok = 1;
        }
    }
    free(before.v);
    return ok;
}

/* Fails the check unless two parts are the same bits; `what` says what was repeated. */
static int same_bits(bn_check *c, const part *a, const part *b, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a->v[i], &b->v[i], sizeof(float)) != 0) {
            set(c, BN_CHECK_FAIL, "evaluation output[%zu] is %.9g, then %.9g %s", i, (double)a->v[i],
                (double)b->v[i], what);
            return 0;
        }
    return 1;
}

/* Example 0's evaluation output must not move when every other example of the batch changes. */
static int examples_independent(kit *k, bn_check *c, const part *first, bn_status *s)
{
    bn_net *net = k->cpu;
    size_t per = bn_blob_count(net->input) / (size_t)net->batch;
    float *x = bn_blob_host_wr(net->input);
    if (!x) {
        *s = bn_last_status();
        return 0;
    }
    for (size_t i = per; i < per * (size_t)net->batch; i++) x[i] = -0.5f * x[i] + 0.25f;
    part again;
    if (!eval_pass(k, net, c, &again, s)) return 0;
    size_t out_per = first->n / (size_t)net->batch;
    int ok = same_bits(c, first, &again, out_per, "when the other examples of the batch changed: an example's "
                       "evaluation output must not depend on the rest of its batch (batch statistics?)");
    free(again.v);
    if (ok) *s = feed(k, net);
    return ok && *s == BN_OK;
}

/* One training pass must move a layer's buffers, by the same amounts on both devices. */
static int training_moves_buffers(kit *k, bn_check *c, bn_status *s)
{
    bn_net *net = k->cpu;
    buffers start = {0}, on_cpu = {0}, on_gpu = {0};
    int ok = 0;
    if ((*s = save_buffers(net, &start)) != BN_OK || (*s = bn_net_forward(net, 1)) != BN_OK) goto done;
    size_t moved = first_change(net, &start, s);
    if (*s != BN_OK) goto done;
    if (moved == start.n) {
        set(c, BN_CHECK_FAIL, "a training pass left every buffer as it was: running statistics are never "
            "updated, so evaluation uses their initial values");
        goto done;
    }
    ok = 1;
    if (k->gpu && (*s = load_buffers(k->gpu, &start)) == BN_OK && (*s = feed(k, k->gpu)) == BN_OK &&
        (*s = bn_net_forward(k->gpu, 1)) == BN_OK && (*s = save_buffers(net, &on_cpu)) == BN_OK &&
        (*s = save_buffers(k->gpu, &on_gpu)) == BN_OK) {
        gap worst = {0};
        part pc = {.v = on_cpu.v, .n = on_cpu.n}, pg = {.v = on_gpu.v, .n = on_gpu.n};
        widen(&worst, &pc, &pg);
        if (worst.rel > k->o->device_tolerance) {
            char name[96];
            buffer_element(net, worst.index, name, sizeof name);
            set(c, BN_CHECK_FAIL, "after one training pass %s is %.7g on the cpu, %.7g on the gpu (difference %.2g "
                "of the largest > %g): the gpu updates the buffers differently", name, (double)worst.a,
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
static int evaluation_follows_statistics(kit *k, bn_check *c, int *passes, double *gap_rel, bn_status *s)
{
    bn_net *net = NULL;
    int batch = k->o->batch > SETTLE_BATCH ? k->o->batch : SETTLE_BATCH;
    if ((*s = build(k, batch, NULL, &net)) != BN_OK) return 0;
    buffers prev = {0};
    snapshot trained = {0};
    part evaluated = {0};
    double change = 1.0;
    int ok = 0;
    if ((*s = feed(k, net)) != BN_OK || (*s = bn_net_forward(net, 1)) != BN_OK) goto done;
    for (*passes = 1; *passes < SETTLE_PASSES && change > SETTLE_CHANGE; ++*passes) {
        free(prev.v);
        if ((*s = save_buffers(net, &prev)) != BN_OK || (*s = bn_net_forward(net, 1)) != BN_OK) goto done;
        change = buffer_change(net, &prev, s);
        if (*s != BN_OK) goto done;
    }
    if ((*s = add_part(&trained, "training output", under(net)->out)) != BN_OK) goto done;
    if (!eval_pass(k, net, c, &evaluated, s)) goto done;
    gap g = {0};
    widen(&g, &trained.parts[0], &evaluated);
    *gap_rel = g.rel;
    ok = g.rel <= k->o->eval_tolerance;
    if (!ok)
        set(c, BN_CHECK_FAIL, "after %d training passes on one batch of %d (the buffers settled to %.1g) the "
            "evaluation output[%zu] is %.6g where training gives %.6g (difference %.2g of the largest > %g): "
            "evaluation does not compute what the running statistics say", *passes, batch, change, g.index,
            (double)g.b, (double)g.a, g.rel, k->o->eval_tolerance);
done:
    free(prev.v);
    free(evaluated.v);
    drop(&trained);
    bn_net_free(net);
    return ok;
}

/* A layer without buffers or randomness computes the same in both modes. */
static int modes_agree(kit *k, bn_check *c, const part *evaluated, bn_status *s)
{
    snapshot trained = {0};
    if ((*s = bn_net_forward(k->cpu, 1)) != BN_OK || (*s = add_part(&trained, "training output", under(k->cpu)->out)) != BN_OK)
        return 0;
    gap g = {0};
    widen(&g, &trained.parts[0], evaluated);
    drop(&trained);
    if (g.rel <= SAME_MODE_TOL) return 1;
    set(c, BN_CHECK_FAIL, "evaluation output[%zu] is %.7g, training gives %.7g (difference %.2g of the largest), "
        "though the layer keeps no buffers (a layer that draws random numbers in training is checked with "
        "--stochastic)", g.index,
        (double)g.b, (double)g.a, g.rel);
    return 0;
}

/* The evaluation pass on the device, from the CPU's buffers: it writes every output, leaves the
 * buffers, repeats bit for bit and agrees with the CPU's. */
static int eval_on_device(kit *k, bn_check *c, const part *on_cpu, double *rel, bn_status *s)
{
    buffers b = {0};
    if ((*s = save_buffers(k->cpu, &b)) != BN_OK) return 0;
    *s = load_buffers(k->gpu, &b);
    free(b.v);
    if (*s != BN_OK || (*s = feed(k, k->gpu)) != BN_OK) return 0;
    part first, again;
    if (!eval_pass(k, k->gpu, c, &first, s)) return 0;
    int ok = 0;
    if (eval_pass(k, k->gpu, c, &again, s)) {
        ok = same_bits(c, &first, &again, first.n, "in the same evaluation pass repeated on the gpu");
        free(again.v);
    }
    if (ok) {
        gap g = {0};
        widen(&g, on_cpu, &first);
        *rel = g.rel;
        if (g.rel > k->o->device_tolerance) {
            set(c, BN_CHECK_FAIL, "evaluation output[%zu]: cpu %.7g, gpu %.7g, difference %.2g of the blob's scale "
                "> %g", g.index, (double)g.a, (double)g.b, g.rel, k->o->device_tolerance);
            ok = 0;
        }
    }
    free(first.v);
    return ok;
}

static bn_status check_evaluation(kit *k, bn_check *c)
{
    bn_net *net = k->cpu;
    bn_layer *l = under(net);
    bn_status s = feed(k, net);
    part first = {0}, again = {0};
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
        set(c, BN_CHECK_PASS, "writes all %zu outputs, repeats bit for bit, leaves the buffers%s%s%s", first.n,
            independent ? ", examples independent" : "", buffer_note, device_note);
    free(first.v);
    return s;
}

typedef bn_status (*check_fn)(kit *k, bn_check *c);

static void run_check(kit *k, bn_check_id id, check_fn fn)
{
    bn_check *c = &k->rep->checks[id];
    bn_clear_error();
    bn_status s = fn(k, c);
    if (s != BN_OK) set(c, BN_CHECK_FAIL, "%s", bn_last_error());
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
        set(&report->checks[i], BN_CHECK_SKIP, "not run: the shapes check failed");
    }
    BN_TRY(validate(o));
    kit k = {.o = o, .rep = report};
    bn_status s = model_text(o, &k.text);
    if (s == BN_OK) s = build(&k, 1, NULL, &k.one);
    if (s == BN_OK) {
        /* Deterministic cuDNN algorithms during the kit, so that cuDNN-based layers repeat exactly. */
        int saved_deterministic = o->ctx ? o->ctx->deterministic : 0;
        if (o->ctx) o->ctx->deterministic = 1;
        run_check(&k, BN_CHECK_SHAPES, check_shapes);
        if (report->checks[BN_CHECK_SHAPES].outcome == BN_CHECK_PASS && (s = make_out_grad(&k)) == BN_OK) {
            run_check(&k, BN_CHECK_WRITES, check_writes);
            run_check(&k, BN_CHECK_GRADIENT, check_gradient);
            run_check(&k, BN_CHECK_DETERMINISM_CPU, check_determinism_cpu);
            run_check(&k, BN_CHECK_DEVICES, check_devices);
            run_check(&k, BN_CHECK_DETERMINISM_GPU, check_determinism_gpu);
            run_check(&k, BN_CHECK_EVALUATION, check_evaluation);
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
