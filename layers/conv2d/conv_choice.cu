/* conv_choice.cu - conv2d's choice among the runners that may run a pass (conv_plan.cu says which),
 * through the chooser (gpu/chooser.h): each runner timed alike on scratch buffers of the layer's
 * sizes, the fastest taken by the chooser's tie rule, and the choice kept in the kernel cache under
 * the chooser's key and read back through it. Every family of the table (conv_family.h) is timed
 * and named through the table; cuDNN's legacy algorithms are chosen in conv2d.cu
 * (bn_conv_cudnn_algorithms). A timed pick is checked against the rule's runner on random inputs
 * before it is taken (agree_trial): every family and cuDNN are tested against the CPU, so the
 * rule's runner is the reference here. */
#include <stdio.h>
#include <string.h>

#include "conv2d_gpu.cuh"
#include "conv_cudnn.cuh"
#include "core/device.h"
#include "gpu/chooser.h"
#include "gpu/compare.h"
#include "gpu/cuda_check.h"

/* Runner names in the cache's choices: "cudnn", or a family's name (bn_conv_family.name); cuDNN's
 * carry the algorithm, "cudnn:1", or "cudnn:g" for its graph API (whose engine the cache keeps
 * under the pass's own key). */
static const char *cached_name(int by)
{
    return by == BY_CUDNN ? "cudnn" : runner_family(by)->name;
}

/* Whether runner `by` reads dy only through a fused pooling (its filter pass). */
static bool needs_pooled(int by)
{
    return by > BY_CUDNN && runner_family(by)->needs_pooled;
}

/* Scratch buffers of the layer's sizes for timing the passes. */
typedef struct scratch {
    float *x, *dx, *y, *w, *dw, *b, *db, *parts;
    size_t in, out, wts, bias; /* the elements of x (and dx), y, w (and dw), b (and db) */
    bn_pooled_dy pooled; /* a pooled gradient and mask of zeros, for a family that reads dy only
                            through a pooling (needs_pooled) */
} scratch;

/* One call of a pass on scratch buffers (blobnet's filter passes on scratch partial sums, so
 * that the workspace is not touched). `beside` >= 0: the data pass runs as the backward pass
 * runs it, with the filter pass by `beside` (bn_conv_both_passes), so that every data candidate is
 * timed with the same filter work; with `defer` the filter pass's join is left pending, as the net
 * leaves it to the end of its backward pass. */
static bn_status run_pass(int pass, int by, int beside, bool defer, const conv_gpu *g, const conv_plan *plan,
                          bn_ctx *ctx, cudnnTensorDescriptor_t xd, cudnnTensorDescriptor_t yd, const scratch *m)
{
    if (pass == 0) return bn_conv_forward_pass(by, g, plan, ctx, xd, yd, m->x, m->w, m->b, m->y, NULL, NULL, 0);
    if (pass == 2)
        return bn_conv_filter_pass(by, g, plan, ctx, (cudaStream_t)ctx->stream, xd, yd, m->x, m->y,
                                   needs_pooled(by) ? &m->pooled : NULL, m->dw, m->db, m->parts, false);
    if (beside < 0) return bn_conv_data_pass(by, g, plan, ctx, xd, yd, m->y, NULL, m->w, m->dx, NULL, false);
    return bn_conv_both_passes(beside, by, g, plan, ctx, xd, xd, yd, m->x, m->y, NULL,
                               needs_pooled(beside) ? &m->pooled : NULL, m->w, m->dw, m->db, m->dx, NULL, m->parts,
                               defer);
}

/* count floats rounded up to a multiple of 64 (256 bytes). */
static size_t round_up(size_t count)
{
    return (count + 63) / 64 * 64;
}

/* The partial sums blobnet's filter pass needs, in bytes: the most any family needs. */
static size_t own_parts(const conv_plan *plan)
{
    size_t most = 0;
    for (int f = 1; f <= BN_CONV_FAMILY_COUNT; f++) {
        const size_t bytes = runner_family(f)->workspace(&plan->fam[f - 1]);
        if (bytes > most) most = bytes;
    }
    return most;
}

/* Zeroed scratch buffers of the layer's sizes in *m, one device allocation in *buf. */
static bn_status scratch_make(const conv_priv *c, const conv_plan *plan, scratch *m, float **buf)
{
    const bn_conv_shape *d = &plan->shape;
    const bn_conv_geom *g = &c->g;
    /* The plane a fused 2x2 pooling's gradient would have. */
    const int ph = g->oh / 2, pw = g->ow / 2;
    /* Every buffer starts 256-byte aligned, as cudaMalloc's do: cuDNN's vector loads need it. */
    size_t in = round_up((size_t)d->n * g->c * g->h * g->w), out = round_up((size_t)d->n * c->filters * g->oh * g->ow);
    size_t wts = round_up((size_t)c->filters * g->c * g->k * g->k), parts = round_up(own_parts(plan) / sizeof(float));
    size_t bias = round_up((size_t)c->filters);
    size_t pooled = round_up((size_t)d->n * c->filters * ph * pw);
    size_t total = 2 * in + out + 2 * wts + 2 * bias + parts + pooled + pooled / 4;
    BN_TRY(bn_device_alloc((void **)buf, total * sizeof(float)));
    m->x = *buf, m->dx = m->x + in, m->y = m->dx + in, m->w = m->y + out, m->dw = m->w + wts, m->b = m->dw + wts;
    m->db = m->b + bias, m->parts = m->db + bias;
    m->pooled.dy = m->parts + parts;
    m->pooled.mask = (const unsigned char *)(m->pooled.dy + pooled);
    m->pooled.ph = ph, m->pooled.pw = pw;
    m->in = (size_t)d->n * g->c * g->h * g->w, m->out = (size_t)d->n * c->filters * g->oh * g->ow;
    m->wts = (size_t)c->filters * g->c * g->k * g->k, m->bias = (size_t)c->filters;
    return bn_device_zero(*buf, total * sizeof(float));
}

/* The chooser's view of one pass's runners while they are timed and checked: run_pass's
 * arguments, and the reference's outputs set aside by the first check (NULL before it). */
typedef struct trial {
    int pass, beside;
    bool defer; /* the filter pass beside a data pass left pending (run_pass) */
    const conv_gpu *g;
    const conv_plan *plan;
    bn_ctx *ctx;
    cudnnTensorDescriptor_t xd, yd;
    const scratch *m;
    float *ref;
} trial;

/* One call of runner `by` (bn_chooser_run): every runner that is a candidate runs. */
static bn_status run_trial(void *env, int by, int warm, int *ok)
{
    const trial *t = (const trial *)env;
    *ok = 1;
    return run_pass(t->pass, by, t->beside, t->defer, t->g, t->plan, t->ctx, t->xd, t->yd, t->m);
}

/* Joins the filter passes that deferred data-pass runs left on the side stream (bn_chooser_settle). */
static bn_status settle_trial(void *env)
{
    return bn_ctx_join_side(((const trial *)env)->ctx);
}

/* The outputs of t's pass among the scratch buffers (the filter pass writes two: dw and db) into
 * out and their elements into count; returns how many. */
static int outputs(const trial *t, float **out, size_t *count)
{
    const scratch *m = t->m;
    if (t->pass == 0) out[0] = m->y, count[0] = m->out;
    if (t->pass == 1) out[0] = m->dx, count[0] = m->in;
    if (t->pass != 2) return 1;
    out[0] = m->dw, count[0] = m->wts;
    out[1] = m->db, count[1] = m->bias;
    return 2;
}

/* Runner `by` once with t's outputs zeroed first (a filter pass adds into its gradients). */
static bn_status run_fresh(const trial *t, int by)
{
    float *out[2] = {NULL, NULL};
    size_t count[2] = {0, 0};
    const int outs = outputs(t, out, count);
    for (int k = 0; k < outs; k++)
        BN_CUDA(cudaMemsetAsync(out[k], 0, count[k] * sizeof(float), (cudaStream_t)t->ctx->stream));
    return run_pass(t->pass, by, t->beside, t->defer, t->g, t->plan, t->ctx, t->xd, t->yd, t->m);
}

/* The reference's outputs on random inputs into t->ref: the scratch inputs (x, w, b and the
 * output gradient in y) filled with fixed uniform values in [-1, 1], which have no kinks for two
 * runners to fall on different sides of (the passes run here fuse no ReLU), then the reference
 * run and its outputs copied aside. */
static bn_status reference_outputs(trial *t, int reference)
{
    const scratch *m = t->m;
    float *out[2] = {NULL, NULL};
    size_t count[2] = {0, 0};
    const int outs = outputs(t, out, count);
    BN_TRY(bn_device_alloc((void **)&t->ref, (count[0] + count[1]) * sizeof(float)));
    BN_TRY(bn_gpu_fill_uniform(m->x, m->in, 1, t->ctx));
    BN_TRY(bn_gpu_fill_uniform(m->w, m->wts, 2, t->ctx));
    BN_TRY(bn_gpu_fill_uniform(m->b, m->bias, 3, t->ctx));
    BN_TRY(bn_gpu_fill_uniform(m->y, m->out, 4, t->ctx));
    BN_TRY(run_fresh(t, reference));
    size_t at = 0;
    for (int k = 0; k < outs; at += count[k], k++)
        BN_CUDA(cudaMemcpyAsync(t->ref + at, out[k], count[k] * sizeof(float), cudaMemcpyDeviceToDevice,
                                (cudaStream_t)t->ctx->stream));
    return BN_OK;
}

/* Whether runner `by` computes what the rule's runner computes (bn_chooser_agree), on the same
 * random inputs; FP32 runners differ by the order of their sums alone (a few 1e-6 of the
 * output's scale), TF32 products (--tf32) by about 1e-3, hence the bounds (conv_reference.cu
 * gives the same for cuDNN's graph engines). */
static bn_status agree_trial(void *env, int by, int reference, double *err, double *tol, int *agrees)
{
    trial *t = (trial *)env;
    *tol = t->ctx->tf32 ? 1e-2 : 1e-3;
    *err = 0.0;
    *agrees = 1;
    /* A family whose filter pass reads dy only through a fused pooling (needs_pooled) reads the
     * pooled gradient and its mask, not dy: beside one that reads dy it computes another thing
     * from these buffers, so the two are not compared. */
    if (t->pass == 2 && needs_pooled(by) != needs_pooled(reference)) return BN_OK;
    if (!t->ref) BN_TRY(reference_outputs(t, reference));
    BN_TRY(run_fresh(t, by));
    float *out[2] = {NULL, NULL};
    size_t count[2] = {0, 0};
    const int outs = outputs(t, out, count);
    size_t at = 0;
    for (int k = 0; k < outs; at += count[k], k++) {
        double e = 0.0;
        BN_TRY(bn_gpu_relative_error(out[k], t->ref + at, count[k], t->ctx, &e));
        if (e > *err) *err = e;
    }
    *agrees = *err <= *tol;
    return BN_OK;
}

/* Each runner measured alike (the workspace already reserved for all): after 2 calls to warm up,
 * the least of 3 means of 4 calls each. */
static const bn_chooser_timing TIMING = {2, 3, 4};

/* The data pass's runners whose pair times (each beside the chosen filter pass, to the end of
 * both: ms) tie with the fastest's, timed again to the end of the data pass alone, the filter pass
 * left running beside it; the tie rule then takes among those times (*pick: its pick, or as it was
 * where none of them ran). Of runners that cost the GPU alike, that is the one that hands the input
 * gradient on sooner: the next layer's passes wait for it, while the net joins the filter pass only
 * at the end of its backward pass. lenet5_tanh's c3 drew the direct kernels, within 5% of the fma
 * family beside the tensor cores' filter pass, in three runs of six, and trained 7% slower for
 * them: in the step the fma data pass took 10.3 us and the direct one 15.3. The time to the data
 * pass's end as the only measure took slower runners where the pair's time is what counts
 * (resnet_odd and cifar10_resnet 4-5% slower: performance.md, version 85). */
static bn_status break_data_tie(const bn_layer *l, trial *t, const bn_candidates *cands, const float *ms,
                                int *pick)
{
    bool tied[BN_CONV_RUNNERS];
    if (bn_chooser_tied(cands, ms, BN_CHOOSER_TIE, tied) < 2) return BN_OK;
    bn_candidates own = *cands;
    own.applicable = tied;
    own.settle = settle_trial;
    char label[160];
    snprintf(label, sizeof label, "conv2d %s n=%d backward-data to its end", l->name, t->plan->n);
    const bn_chooser chooser = {TIMING, BN_CHOOSER_TIE, BN_CONV_VERBOSE, label};
    float own_ms[BN_CONV_RUNNERS];
    int own_pick = -1;
    t->defer = true;
    bn_status s = bn_chooser_timed(&chooser, &own, own_ms, &own_pick);
    t->defer = false;
    /* The checks' runs (agree_trial) leave their filter passes pending too. */
    const bn_status joined = bn_ctx_join_side(t->ctx);
    BN_TRY(s);
    BN_TRY(joined);
    if (own_pick >= 0) *pick = own_pick;
    return BN_OK;
}

/* Pass i's runner among can into *by: the only one, untimed, or of those timed within the tie
 * (BN_CHOOSER_TIE) of the fastest the first in the rule's order (bn_conv_family_order), cuDNN after
 * blobnet's families; BY_CUDNN where none can (a pass the layer does not need). Taking the fastest
 * alone was not reproducible: two runs of it gave strided_fashion 205 and 228 ms per epoch
 * (docs/performance.md, version 24). This way runs agree where runners are that close, and a tie
 * goes to blobnet's kernels, whose gradients overlap on the side stream and which take a max
 * pooling's passes, which the timing of a pass alone does not see. `beside`: as for run_pass. */
static bn_status choose_pass(const bn_layer *l, const conv_priv *c, bn_ctx *ctx, const conv_plan *plan, int i,
                             int beside, const bool can[BN_CONV_RUNNERS], cudnnTensorDescriptor_t xd,
                             cudnnTensorDescriptor_t yd, int *by)
{
    int order[BN_CONV_RUNNERS], candidates = 0;
    bn_conv_family_order(i, order);
    order[BN_CONV_FAMILY_COUNT] = BY_CUDNN;
    const char *names[BN_CONV_RUNNERS];
    for (int r = 0; r < BN_CONV_RUNNERS; r++) {
        names[r] = cached_name(r);
        candidates += can[r];
    }
    /* Scratch only where the chooser times: with two candidates or more. */
    scratch m = {};
    float *buf = NULL;
    if (candidates > 1) {
        bn_status s = scratch_make(c, plan, &m, &buf);
        if (s != BN_OK) {
            bn_device_free(buf);
            return s;
        }
    }
    trial t = {i, beside, false, c->gpu, plan, ctx, xd, yd, &m, NULL};
    bn_candidates cands = {BN_CONV_RUNNERS, names, can, order, BN_CONV_RUNNERS, run_trial, &t, -1, agree_trial, NULL};
    cands.reference = bn_chooser_rule(&cands);
    char label[160];
    snprintf(label, sizeof label, "conv2d %s n=%d %s", l->name, plan->n, bn_conv_pass_name(i));
    const bn_chooser chooser = {TIMING, BN_CHOOSER_TIE, BN_CONV_VERBOSE, label};
    float ms[BN_CONV_RUNNERS];
    int pick = -1;
    bn_status s = bn_chooser_timed(&chooser, &cands, ms, &pick);
    if (s == BN_OK && i == 1 && beside >= 0 && pick >= 0) s = break_data_tie(l, &t, &cands, ms, &pick);
    bn_device_free(t.ref);
    bn_device_free(buf);
    BN_TRY(s);
    *by = pick >= 0 ? pick : BY_CUDNN;
    return BN_OK;
}

/* Grows the layer's scratch (zeroed) to what the plan's families need. */
static bn_status reserve_scratch(conv_gpu *g, const conv_plan *plan)
{
    if (plan->scratch_bytes <= g->scratch_bytes) return BN_OK;
    /* A step graph captured before keeps replaying on the old buffer, retired until it goes. */
    bn_device_retire(g->scratch);
    g->scratch = NULL;
    g->scratch_bytes = 0;
    BN_TRY(bn_device_alloc(&g->scratch, plan->scratch_bytes));
    g->scratch_bytes = plan->scratch_bytes;
    return bn_device_zero(g->scratch, g->scratch_bytes);
}

/* Reserves the shared workspace (need bytes) and, when blobnet's kernels may run a pass, the
 * layer's partial sums and scratch, before anything is timed or run: every runner then runs as
 * it will in the steps. */
static bn_status reserve(conv_priv *c, bn_ctx *ctx, const conv_plan *plan, size_t need, bool own)
{
    BN_TRY(bn_ctx_reserve_workspace(ctx, need));
    conv_gpu *g = c->gpu;
    if (own) BN_TRY(reserve_scratch(g, plan));
    if (!own || own_parts(plan) <= g->parts_bytes) return BN_OK;
    /* A captured step graph holds the old buffer's address: retired, it stays its own until the
     * graph goes (a pass queued before still finishes on it), so the graph need not be captured
     * again. */
    bn_device_retire(g->parts);
    g->parts = NULL;
    g->parts_bytes = 0;
    BN_TRY(bn_device_alloc((void **)&g->parts, own_parts(plan)));
    g->parts_bytes = own_parts(plan);
    return BN_OK;
}

/* Chooses the runners among can and ask: cuDNN's algorithms for the passes it may run (measured,
 * or in a deterministic context by its heuristics; with `graph`, its graph-API engines too where
 * they were timed faster than the legacy algorithm: bn_conv_cudnn_algorithms), then, where several
 * runners remain, the one timed fastest (choose_pass): forward and filter first, then the data pass
 * timed beside the chosen filter pass, as the backward pass runs the two. */
extern "C" bn_status bn_conv_choose_runners(bn_layer *l, conv_priv *c, bn_ctx *ctx, conv_plan *plan,
                                            const bool can[3][BN_CONV_RUNNERS], const bool ask[3], bool graph)
{
    conv_gpu *g = c->gpu;
    BN_TENSOR_DESC(x, l->in);
    BN_TENSOR_DESC(y, l->out);
    size_t need = 0;
    BN_TRY(bn_conv_cudnn_algorithms(l, ctx, graph, g, x, y, ask, plan, &need));
    bool own = false;
    for (int i = 0; i < 3; i++)
        for (int r = 1; r < BN_CONV_RUNNERS; r++) own = own || can[i][r];
    BN_TRY(reserve(c, ctx, plan, need, own));
    static const int order[3] = {0, 2, 1};
    for (int o = 0; o < 3; o++) {
        const int i = order[o];
        const int beside = i == 1 && plan->with_data ? plan->by[2] : -1;
        /* The data pass is timed beside the chosen filter pass, as the step runs them. */
        if (i == 1) BN_TRY(bn_conv_reserve_beside(plan, ctx));
        BN_TRY(choose_pass(l, c, ctx, plan, i, beside, can[i], x, y, &plan->by[i]));
    }
    return BN_OK;
}

/* The kernel cache's key for the plan (bn_chooser_key): the device's scope, then everything the
 * candidates and their timing depend on; " own" for an own-only plan. */
extern "C" bn_status bn_conv_cache_key(const bn_layer *l, const conv_priv *c, const bn_ctx *ctx, const conv_plan *plan,
                                       char *key, size_t cap)
{
    static const char *const engines[] = {"", " engine=cudnn", " engine=blobnet"};
    const bn_conv_geom *g = &c->g;
    return bn_chooser_key(ctx, key, cap, "conv2d %dx%dx%d k%d s%d p%d f%d n%d%s%s%s%s%s", g->c, g->h, g->w, g->k,
                          g->stride, g->pad, c->filters, plan->n, l->in_grad ? " data" : "",
                          c->pool_after ? " pooled" : "", ctx->tf32 ? " tf32" : "", engines[c->engine],
                          plan->own_only ? " own" : "");
}

/* The plan's runners as a cache choice: "fwd=tensor data=cudnn:1 filter=rows" ("data=-" for a
 * layer without an input gradient). */
extern "C" void bn_conv_cache_choice(const conv_plan *plan, char *buf, size_t cap)
{
    const int algo[3] = {(int)plan->fwd, (int)plan->bwd_data, (int)plan->bwd_filter};
    char pass[3][24];
    for (int i = 0; i < 3; i++) {
        if (i == 1 && !plan->with_data) snprintf(pass[i], sizeof pass[i], "-");
        else if (plan->by[i] == BY_CUDNN && plan->cg[i]) snprintf(pass[i], sizeof pass[i], "cudnn:g");
        else if (plan->by[i] == BY_CUDNN) snprintf(pass[i], sizeof pass[i], "cudnn:%d", algo[i]);
        else snprintf(pass[i], sizeof pass[i], "%s", cached_name(plan->by[i]));
    }
    snprintf(buf, cap, "fwd=%s data=%s filter=%s", pass[0], pass[1], pass[2]);
}

/* One pass's runner in a cache choice: *by and, for cuDNN, *algo (below `count`, or -1 for its
 * graph API); "-" gives *by = -1. 0 when the text is none of these. */
static int read_runner(const char *text, int count, int *by, int *algo)
{
    *by = -1;
    *algo = 0;
    if (strcmp(text, "-") == 0) return 1;
    if (strcmp(text, "cudnn:g") == 0) {
        *by = BY_CUDNN;
        *algo = -1;
        return 1;
    }
    for (int r = 1; r < BN_CONV_RUNNERS; r++)
        if (strcmp(text, cached_name(r)) == 0) {
            *by = r;
            return 1;
        }
    int used = 0;
    if (sscanf(text, "cudnn:%d%n", algo, &used) != 1 || text[used] || *algo < 0 || *algo >= count) return 0;
    *by = BY_CUDNN;
    return 1;
}

/* What read_choice reads a cached choice into, and what it checks it against. */
typedef struct cached {
    bn_layer *l;
    conv_priv *c;
    bn_ctx *ctx;
    conv_plan *plan;
    const bool (*can)[BN_CONV_RUNNERS];
} cached;

/* A cached choice read into the plan (bn_choice_reader): taken, with the runners set in the plan,
 * cuDNN's algorithms with their workspace and the buffers reserved; stale where some pass cannot
 * take it (another engine, an algorithm this context does not allow or cuDNN cannot run on this
 * shape); unreadable where it is none of the choices bn_conv_cache_choice writes. */
static bn_status read_choice(void *env, const char *choice, int *verdict)
{
    const cached *in = (const cached *)env;
    bn_layer *l = in->l;
    bn_ctx *ctx = in->ctx;
    conv_plan *plan = in->plan;
    char text[3][24];
    int used = 0;
    static const int counts[3] = {CUDNN_CONVOLUTION_FWD_ALGO_COUNT, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT};
    int by[3], algo[3];
    bool readable = sscanf(choice, "fwd=%23s data=%23s filter=%23s%n", text[0], text[1], text[2], &used) == 3 &&
                    !choice[used];
    for (int i = 0; i < 3 && readable; i++) readable = read_runner(text[i], counts[i], &by[i], &algo[i]);
    *verdict = readable ? BN_CHOICE_STALE : BN_CHOICE_UNREADABLE;
    if (!readable) return BN_OK;
    const bool needed[3] = {true, plan->with_data != 0, true};
    for (int i = 0; i < 3; i++) {
        if (!needed[i]) {
            if (by[i] != -1) return BN_OK;
            continue;
        }
        if (by[i] < 0 || !in->can[i][by[i]]) return BN_OK;
    }
    const cudnnConvolutionFwdAlgo_t fwd = (cudnnConvolutionFwdAlgo_t)algo[0];
    const cudnnConvolutionBwdDataAlgo_t data = (cudnnConvolutionBwdDataAlgo_t)algo[1];
    const cudnnConvolutionBwdFilterAlgo_t filter = (cudnnConvolutionBwdFilterAlgo_t)algo[2];
    if (!ctx->tf32 && ((by[0] == BY_CUDNN && algo[0] >= 0 && !bn_sums_directly(fwd)) ||
                       (by[1] == BY_CUDNN && algo[1] >= 0 && !bn_sums_directly(data)) ||
                       (by[2] == BY_CUDNN && algo[2] >= 0 && !bn_sums_directly(filter))))
        return BN_OK;
    conv_gpu *g = in->c->gpu;
    cudnnHandle_t h = (cudnnHandle_t)ctx->cudnn;
    BN_TENSOR_DESC(x, l->in);
    BN_TENSOR_DESC(y, l->out);
    size_t bytes[3] = {0, 0, 0}, need = 0;
    cudnnStatus_t s[3] = {CUDNN_STATUS_SUCCESS, CUDNN_STATUS_SUCCESS, CUDNN_STATUS_SUCCESS};
    if (by[0] == BY_CUDNN && algo[0] >= 0)
        s[0] = cudnnGetConvolutionForwardWorkspaceSize(h, x, g->w_desc, g->conv_desc, y, fwd, &bytes[0]);
    if (by[1] == BY_CUDNN && algo[1] >= 0)
        s[1] = cudnnGetConvolutionBackwardDataWorkspaceSize(h, g->w_desc, y, g->conv_desc, x, data, &bytes[1]);
    if (by[2] == BY_CUDNN && algo[2] >= 0)
        s[2] = cudnnGetConvolutionBackwardFilterWorkspaceSize(h, x, y, g->conv_desc, g->w_desc, filter, &bytes[2]);
    /* The graph-API passes, from the kernel cache's entries of their own (timed afresh if missing). */
    bn_cg_plan *cg[3] = {NULL, NULL, NULL};
    bool usable = true;
    bn_status st = BN_OK;
    for (int i = 0; i < 3 && st == BN_OK && usable; i++) {
        if (!needed[i] || by[i] != BY_CUDNN || algo[i] >= 0) continue;
        st = bn_conv_graph_plan(l, ctx, i, 1, &cg[i]);
        usable = st == BN_OK && cg[i] != NULL;
        if (usable) bytes[i] = bn_cg_workspace(cg[i]);
    }
    for (int i = 0; i < 3 && usable; i++) {
        if (s[i] != CUDNN_STATUS_SUCCESS || bytes[i] > BN_CONV_WORKSPACE_LIMIT) usable = false;
        if (bytes[i] > need) need = bytes[i];
    }
    if (st != BN_OK || !usable) {
        for (int i = 0; i < 3; i++) bn_cg_free(&cg[i]);
        return st;
    }
    for (int i = 0; i < 3; i++) plan->cg[i] = cg[i];
    plan->fwd = fwd;
    plan->bwd_data = data;
    plan->bwd_filter = filter;
    plan->bwd_data_workspace = bytes[1];
    plan->bwd_filter_workspace = bytes[2];
    for (int i = 0; i < 3; i++) plan->by[i] = needed[i] ? by[i] : BY_CUDNN;
    const bool own = plan->by[0] != BY_CUDNN || plan->by[1] != BY_CUDNN || plan->by[2] != BY_CUDNN;
    BN_TRY(reserve(in->c, ctx, plan, need, own));
    BN_TRY(bn_conv_reserve_beside(plan, ctx));
    *verdict = BN_CHOICE_TAKEN;
    return BN_OK;
}

/* The cache's choice for the plan under key, if it has one that can run (bn_chooser_lookup through
 * read_choice): *hit = true. A stale one is no hit; one that cannot be read is an error naming the
 * cache file and the layer. */
extern "C" bn_status bn_conv_from_cache(bn_layer *l, conv_priv *c, bn_ctx *ctx, conv_plan *plan, const char *key,
                                        const bool can[3][BN_CONV_RUNNERS], bool *hit)
{
    cached in = {l, c, ctx, plan, can};
    char what[80];
    snprintf(what, sizeof what, "layer %s", l->name);
    int taken = 0;
    const bn_status s = bn_chooser_lookup(key, what, read_choice, &in, &taken);
    *hit = taken != 0;
    return s;
}
