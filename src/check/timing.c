#include "timing.h"

#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/rng.h"

/* A point in time on the path the net runs on: an event on the GPU, the clock on the CPU. */
typedef struct stamp {
    void *event;
    double seconds;
} stamp;

typedef struct clocks {
    int gpu;
    int hold;      /* GPU: each step is queued behind a hold of the stream (core/device.h) */
    stamp *marks;  /* 2 per layer forward, 2 per layer backward, 2 for the update, 2 for the step */
    int count;
} clocks;

static bn_status mark(clocks *c, int i)
{
    if (c->gpu) return bn_event_record(c->marks[i].event);
    c->marks[i].seconds = bn_clock_seconds();
    return BN_OK;
}

static bn_status elapsed_ms(clocks *c, int from, double *ms)
{
    if (!c->gpu) {
        *ms = (c->marks[from + 1].seconds - c->marks[from].seconds) * 1e3;
        return BN_OK;
    }
    float f;
    BN_TRY(bn_event_elapsed_ms(c->marks[from].event, c->marks[from + 1].event, &f));
    *ms = f;
    return BN_OK;
}

static bn_status clocks_init(clocks *c, int gpu, int count)
{
    c->gpu = gpu;
    c->hold = gpu;
    c->count = count;
    c->marks = calloc((size_t)count, sizeof *c->marks);
    if (!c->marks) return bn_error(BN_ERR_NOMEM, "out of host memory for timing");
    for (int i = 0; gpu && i < count; i++) BN_TRY(bn_event_create(&c->marks[i].event));
    return BN_OK;
}

static void clocks_free(clocks *c)
{
    for (int i = 0; c->marks && i < c->count; i++) bn_event_destroy(c->marks[i].event);
    free(c->marks);
}

static bn_status random_batch(bn_net *net, int classes)
{
    bn_rng r;
    bn_rng_seed(&r, 12345, 0);
    BN_HOST_WR(x, net->input);
    BN_HOST_WR(y, net->labels);
    for (size_t i = 0; i < bn_blob_count(net->input); i++) x[i] = (float)bn_rng_uniform(&r);
    for (int i = 0; i < net->batch; i++) y[i] = (float)bn_rng_below(&r, (uint64_t)classes);
    return BN_OK;
}

/* One step with a mark around every layer pass; mark indices: layer i forward 4i, backward
 * 4i+2, update 4L, the whole step 4L+2. */
static bn_status step_marked(bn_net *net, bn_optimizer *opt, clocks *c)
{
    int L = net->num_layers;
    BN_TRY(mark(c, 4 * L + 2));
    BN_TRY(bn_net_zero_grad(net));
    net->pass.train = 1;
    for (int i = 0; i < L; i++) {
        BN_TRY(mark(c, 4 * i));
        BN_TRY(bn_layer_forward(net->layers[i], &net->pass));
        BN_TRY(mark(c, 4 * i + 1));
    }
    for (int i = L - 1; i >= 0; i--) {
        BN_TRY(mark(c, 4 * i + 2));
        BN_TRY(bn_net_backward_layer(net, i)); /* with the sum of its output's readers' gradients */
        BN_TRY(mark(c, 4 * i + 3));
    }
    BN_TRY(mark(c, 4 * L));
    if (opt) BN_TRY(bn_optimizer_step(opt, net));
    BN_TRY(mark(c, 4 * L + 1));
    return mark(c, 4 * L + 3);
}

/* A step on the GPU is queued behind a hold of the stream and released when queued, so that its
 * passes run back to back and each mark reads the device's time, not how long the host took to
 * launch a layer's kernels (a small layer's launches outlast its run). A step that waits for the
 * device on the way waits out the hold: when queueing it took that long, it is run again
 * without one, and so is every later step. *redo says to run it again. */
static bn_status timed_step(bn_net *net, bn_optimizer *opt, clocks *c, int *redo)
{
    bn_held_span held;
    bn_status s = bn_held_begin(&held, c->hold);
    if (s == BN_OK) s = step_marked(net, opt, c);
    *redo = bn_held_end(&held) && s == BN_OK;
    if (*redo) c->hold = 0;
    return s;
}

static bn_status accumulate(bn_net *net, clocks *c, bn_time_report *r)
{
    int L = net->num_layers;
    double ms;
    for (int i = 0; i < L; i++) {
        BN_TRY(elapsed_ms(c, 4 * i, &ms));
        r->layers[i].forward_ms += ms;
        BN_TRY(elapsed_ms(c, 4 * i + 2, &ms));
        r->layers[i].backward_ms += ms;
    }
    BN_TRY(elapsed_ms(c, 4 * L, &ms));
    r->update_ms += ms;
    BN_TRY(elapsed_ms(c, 4 * L + 2, &ms));
    r->step_ms += ms;
    return BN_OK;
}

static bn_status run(bn_net *net, bn_optimizer *opt, int warmup, int iters, clocks *c, bn_time_report *r)
{
    bn_layer *loss = bn_net_loss_layer(net);
    BN_TRY(random_batch(net, loss ? loss->in->c * loss->in->h * loss->in->w : 1));
    if (!loss) BN_TRY(bn_blob_zero(net->layers[net->num_layers - 1]->out_grad));
    /* The first step uploads what the host wrote (the batch) and waits for it: it runs without a
     * hold, so that only a step that waits every time loses the hold. */
    int redo, hold = c->hold;
    c->hold = 0;
    if (warmup > 0) BN_TRY(timed_step(net, opt, c, &redo));
    c->hold = hold;
    for (int i = 1; i < warmup; i++) BN_TRY(timed_step(net, opt, c, &redo));
    for (int i = 0; i < iters; i++) {
        BN_TRY(timed_step(net, opt, c, &redo));
        if (redo) BN_TRY(timed_step(net, opt, c, &redo));
        BN_TRY(accumulate(net, c, r));
    }
    for (int i = 0; i < net->num_layers; i++) {
        r->layers[i].forward_ms /= iters;
        r->layers[i].backward_ms /= iters;
    }
    r->update_ms /= iters;
    r->step_ms /= iters;
    r->held = c->hold;
    return BN_OK;
}

bn_status bn_time_net(bn_net *net, bn_optimizer *opt, int warmup, int iters, bn_time_report *out)
{
    memset(out, 0, sizeof *out);
    if (iters <= 0) return bn_error(BN_ERR_USAGE, "timing needs at least one iteration");
    out->layers = calloc((size_t)net->num_layers, sizeof *out->layers);
    if (!out->layers) return bn_error(BN_ERR_NOMEM, "out of host memory for timing");
    out->num_layers = net->num_layers;
    out->batch = net->batch;
    out->iters = iters;
    clocks c = {0};
    bn_status s = clocks_init(&c, net->pass.ctx != NULL, 4 * net->num_layers + 4);
    if (s == BN_OK) s = run(net, opt, warmup, iters, &c, out);
    clocks_free(&c);
    if (s != BN_OK) bn_time_report_free(out);
    return s;
}

void bn_time_report_free(bn_time_report *r)
{
    free(r->layers);
    memset(r, 0, sizeof *r);
}
