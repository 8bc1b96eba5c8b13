#include "layercheck_kit.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/registry.h"
#include "core/rng.h"

/* Streams of the seed for the kit's own draws. */
enum { STREAM_INPUT = 21, STREAM_LABELS = 22, STREAM_OUT_GRAD = 23 };

/* Inputs lie in (-INPUT_RANGE / 2, INPUT_RANGE / 2) whatever their number, so the values a
 * layer sees, and with them the rounding floor of the gradient check, do not grow with the
 * shape. As many as fit are spaced SPACING_EPS eps apart; more are drawn at random in the
 * range, at least MARGIN_EPS eps away from zero (see bn_kit_feed). */
#define SPACING_EPS 2.5
#define MARGIN_EPS 1.25
#define INPUT_RANGE 6.0

/* Guard zones (see arm_guards): the kit's networks hold one example more than they run, and
 * that row, after every output and gradient of a row per example, is the guard; each parameter
 * gradient is followed by GRAD_GUARD free elements of the gradient slab (bn_net.grad_guard).
 * Every guard element holds GUARD_BITS (a NaN no arithmetic produces) before a pass. */
#define GRAD_GUARD 16
#define GUARD_BITS 0x7fa5c3e1u

void bn_kit_set(bn_check *c, bn_check_outcome r, const char *fmt, ...)
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
bn_layer *bn_kit_under(bn_net *net)
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
bn_status bn_kit_model_text(const bn_layercheck_opts *o, char **out)
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

/* The network is parsed from text the bn_kit wrote, so a parse error's "check-layer:LINE:" points
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
bn_status bn_kit_build(const bn_kit *k, int batch, bn_ctx *ctx, bn_net **out)
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
bn_status bn_kit_feed(const bn_kit *k, bn_net *net)
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
    bn_layer *l = bn_kit_under(net);
    if (!l->ops->is_loss) return BN_OK;
    uint64_t classes = (uint64_t)l->out->c * l->out->h * l->out->w;
    float *y = bn_blob_host_wr(net->labels);
    if (!y) return bn_last_status();
    bn_rng_seed(&r, k->o->seed, STREAM_LABELS);
    for (int i = 0; i < net->batch; i++) y[i] = (float)bn_rng_below(&r, classes);
    return BN_OK;
}

bn_status bn_kit_make_out_grad(bn_kit *k)
{
    bn_blob *g = bn_kit_under(k->cpu)->out_grad;
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
bn_status bn_kit_backward(const bn_kit *k, bn_net *net)
{
    bn_blob *g = bn_kit_under(net)->out_grad;
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
    bn_layer *l = bn_kit_under(net);
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
bn_status bn_kit_arm_guards(bn_net *net)
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
bn_status bn_kit_inspect_guards(const bn_kit *k, bn_net *net)
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
static bn_status run_pass(const bn_kit *k, bn_net *net, int train)
{
    BN_TRY(bn_kit_feed(k, net));
    BN_TRY(bn_net_zero_grad(net));
    BN_TRY(bn_kit_arm_guards(net));
    BN_TRY(bn_net_forward(net, train));
    BN_TRY(bn_kit_backward(k, net));
    return bn_kit_inspect_guards(k, net);
}

bn_status bn_kit_poison(bn_blob *b)
{
    if (!b) return BN_OK;
    float *v = bn_blob_host_wr(b);
    if (!v) return bn_last_status();
    for (size_t i = 0; i < bn_blob_count(b); i++) v[i] = NAN;
    return BN_OK;
}

/* ---- snapshots and comparisons ---- */

bn_status bn_kit_add_part(bn_kit_snapshot *s, const char *name, bn_blob *b)
{
    bn_kit_part *p = &s->parts[s->count];
    const float *v = bn_blob_host_rd(b);
    if (!v) return bn_last_status();
    snprintf(p->name, sizeof p->name, "%s", name);
    p->n = bn_blob_count(b);
    if (!(p->v = malloc(p->n * sizeof *p->v))) return bn_error(BN_ERR_NOMEM, "check-layer: out of host memory");
    memcpy(p->v, v, p->n * sizeof *p->v);
    s->count++;
    return BN_OK;
}

void bn_kit_drop(bn_kit_snapshot *s)
{
    for (int i = 0; i < s->count; i++) free(s->parts[i].v);
    s->count = 0;
}

bn_status bn_kit_take(bn_net *net, bn_kit_snapshot *s)
{
    bn_layer *l = bn_kit_under(net);
    s->count = 0;
    BN_TRY(bn_kit_add_part(s, "output", l->out));
    BN_TRY(bn_kit_add_part(s, "input gradient", net->input_grad));
    for (int k = 0; k < l->num_params; k++) {
        char name[64];
        snprintf(name, sizeof name, "%s gradient", l->params[k].name);
        BN_TRY(bn_kit_add_part(s, name, l->params[k].grad));
    }
    if (l->ops->is_loss) BN_TRY(bn_kit_add_part(s, "metrics", net->metrics));
    return BN_OK;
}

/* One forward and backward in `train` mode, copied out. */
bn_status bn_kit_pass_snapshot(const bn_kit *k, bn_net *net, int train, bn_kit_snapshot *s)
{
    BN_TRY(run_pass(k, net, train));
    bn_status st = bn_kit_take(net, s);
    if (st != BN_OK) bn_kit_drop(s);
    return st;
}

void bn_kit_widen(bn_kit_gap *g, const bn_kit_part *pa, const bn_kit_part *pb)
{
    double scale = 0.0;
    for (size_t i = 0; i < pa->n; i++) scale = fmax(scale, fabs(pa->v[i]));
    if (scale == 0.0) scale = 1.0; /* an all-zero blob is compared in absolute terms */
    for (size_t i = 0; i < pa->n; i++) {
        double rel = fabs((double)pb->v[i] - pa->v[i]) / scale;
        if (!(rel <= g->rel)) { /* NaN, the mark of an unwritten element, always wins */
            *g = (bn_kit_gap){.rel = isnan(rel) ? INFINITY : rel, .where = pa, .index = i, .a = pa->v[i],
                              .b = pb->v[i]};
            if (isinf(g->rel)) return;
        }
    }
}

/* ---- does the layer draw random numbers? ---- */

/* Copies of the parameter and buffer slabs (those net has) into s, in that order. */
static bn_status keep_state(bn_net *net, bn_kit_snapshot *s)
{
    if (net->params) BN_TRY(bn_kit_add_part(s, "parameters", net->params));
    if (net->buffers) BN_TRY(bn_kit_add_part(s, "buffers", net->buffers));
    return BN_OK;
}

static bn_status restore_state(bn_net *net, const bn_kit_snapshot *s)
{
    bn_blob *slabs[2] = {net->params, net->buffers};
    for (int i = 0, at = 0; i < 2; i++) {
        if (!slabs[i]) continue;
        float *v = bn_blob_host_wr(slabs[i]);
        if (!v) return bn_last_status();
        memcpy(v, s->parts[at].v, s->parts[at].n * sizeof *v);
        at++;
    }
    return BN_OK;
}

bn_status bn_kit_draws_random(const bn_kit *k, bn_net *net, int *random)
{
    bn_kit_snapshot state = {0}, outs = {0};
    bn_pass saved = net->pass;
    bn_status s = keep_state(net, &state);
    for (unsigned long long i = 0; i < 2 && s == BN_OK; i++) {
        net->pass.step = saved.step + i;
        net->pass.seed = saved.seed + i;
        if ((s = bn_kit_feed(k, net)) == BN_OK && (s = bn_net_forward(net, 1)) == BN_OK)
            s = bn_kit_add_part(&outs, "training output", bn_kit_under(net)->out);
        bn_status r = restore_state(net, &state);
        if (s == BN_OK) s = r;
    }
    net->pass = saved;
    *random = s == BN_OK && memcmp(outs.parts[0].v, outs.parts[1].v, outs.parts[0].n * sizeof(float)) != 0;
    bn_kit_drop(&state);
    bn_kit_drop(&outs);
    return s;
}

size_t bn_kit_count_nonfinite(bn_blob *b, bn_status *s)
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
