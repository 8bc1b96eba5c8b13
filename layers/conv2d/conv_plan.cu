/* conv_plan.cu - conv2d's plan for one batch size: every family's launch shapes (conv_family.h),
 * who may run each pass, and who was chosen. The layer's engine key says which runners may run a
 * pass; among them a plan chooses (choice_mode):
 *
 * - by the fixed rule, blobnet's kernels wherever they apply in a fixed order of preference
 *   (cuDNN where none does), in a deterministic context and for the shapes the rule was
 *   measured on (rule_measured: LeNet's), so that those pick the same kernels every run and
 *   time nothing at start-up;
 * - with --autotune, whichever runner was fastest when timed (conv_choice.cu);
 * - by default elsewhere, the timed choice taken from the kernel cache (gpu/kernel_cache.h),
 *   keyed by the device, the libraries and the layer's shape; a shape the cache lacks is timed
 *   as --autotune times it, once, and its choice is kept there for every later layer and run. */
#include "conv2d_gpu.cuh"
#include "core/device.h"
#include "gpu/cuda_check.h"
#include "gpu/chooser.h"

/* Forced by bn_conv2d_gpu_force_own: 0, or the family (BN_CONV_FAMILY_*) that every new plan
 * takes for the passes blobnet runs and the family can run. */
static int force_family = 0;

extern "C" void bn_conv2d_gpu_force_own(int family)
{
    force_family = family > BY_CUDNN && family < BN_CONV_RUNNERS ? family : 0;
}

/* The layer shapes at which the rule's order of preference was measured against the timed
 * choice, in whole training steps: LeNet's two convolutions, each read by a 2x2 max pooling, at
 * batches 64 and 256 (docs/performance.md, versions 12-21; 83 against 89 ms per epoch at batch
 * 64, 38 against 39 at 256 on an H200). Elsewhere the rule's families were never measured
 * against the others: VGG-style 3x3 layers of 32-64 filters ran 1.34x slower by the rule than
 * timed, a strided and 1x1 network 1.79x (version 24). Input channels, size, window, stride,
 * padding, filters. */
static const struct {
    int c, h, w, k, stride, pad, filters;
} rule_measured[] = {{1, 28, 28, 5, 1, 0, 20}, {20, 12, 12, 5, 1, 0, 50}};

static bool rule_was_measured(const conv_priv *c)
{
    if (!c->pool_after) return false;
    for (size_t i = 0; i < sizeof rule_measured / sizeof rule_measured[0]; i++) {
        const bn_conv_geom *g = &c->g;
        if (g->c == rule_measured[i].c && g->h == rule_measured[i].h && g->w == rule_measured[i].w &&
            g->k == rule_measured[i].k && g->stride == rule_measured[i].stride && g->pad == rule_measured[i].pad &&
            c->filters == rule_measured[i].filters)
            return true;
    }
    return false;
}

/* How the plan's runners are chosen (bn_chooser_mode); a family forced for tests keeps the
 * rule, or timing with --autotune, and no cache. */
static int choice_mode(const conv_priv *c, const bn_ctx *ctx)
{
    return bn_chooser_mode(ctx, force_family || rule_was_measured(c));
}

/* Who may run each pass (forward, data, filter) of the plan: can[i][r] for runner r, ask[i]
 * when cuDNN is among them (its algorithm is then chosen too). By the rule, one runner each. */
static void runners(const conv_priv *c, const conv_plan *plan, bool by_rule, bool can[3][BN_CONV_RUNNERS], bool ask[3])
{
    const bool needed[3] = {true, plan->with_data != 0, true};
    for (int i = 0; i < 3; i++) {
        const bool mine = needed[i] && c->engine != BN_CONV_ENGINE_CUDNN;
        for (int r = 1; r < BN_CONV_RUNNERS; r++) {
            const bn_conv_family *f = runner_family(r);
            const char *why = NULL;
            /* A family not offered for a pass runs it only when forced (tests). */
            can[i][r] = mine && bn_conv_family_applies(f, &plan->fam[r - 1], &plan->shape, i, &why) &&
                        ((f->offered & (1u << i)) || force_family == r);
        }
        if (force_family && can[i][force_family])
            for (int r = 1; r < BN_CONV_RUNNERS; r++)
                if (r != force_family) can[i][r] = false;
        bool own = false;
        for (int r = 1; r < BN_CONV_RUNNERS; r++) own = own || can[i][r];
        /* blobnet's kernels settle the pass: cuDNN is not asked or timed. */
        const bool settled =
            own && (c->engine == BN_CONV_ENGINE_BLOBNET || (c->engine == BN_CONV_ENGINE_AUTO && by_rule));
        ask[i] = needed[i] && !settled;
        can[i][BY_CUDNN] = ask[i];
        if (!by_rule || !settled) continue;
        /* The rule takes one family by a fixed order of preference (the table's ranks), so that
         * every run picks the same kernels and none is timed, the faster ones at LeNet's sizes
         * first (docs/performance.md): the tensor-core kernels for the forward and data passes,
         * the row tiles for the filter pass (conv1's, where they beat the tensor cores most), then
         * the row tiles, the implicit GEMM for the filter pass and the direct kernels for the
         * others; a family's rule_claim (the argmax kernel's and the tensor cores' for the filter
         * pass) goes before that order. */
        int keep = -1, claim = 0;
        for (int r = 1; r < BN_CONV_RUNNERS; r++) {
            const bn_conv_family *f = runner_family(r);
            const int strength = can[i][r] && f->rule_claim ? f->rule_claim(&plan->fam[r - 1], &plan->shape, i) : 0;
            if (strength > claim) keep = r, claim = strength;
        }
        int order[BN_CONV_FAMILY_COUNT];
        bn_conv_family_order(i, order);
        for (int k = 0; k < BN_CONV_FAMILY_COUNT && keep < 0; k++)
            if (can[i][order[k]]) keep = order[k];
        for (int r = 1; r < BN_CONV_RUNNERS; r++)
            if (r != keep) can[i][r] = false;
    }
}

/* Chooses who runs each pass for the current batch size (see the engine key and choice_mode)
 * and cuDNN's algorithm for the passes cuDNN runs, and grows the shared workspace to what they
 * need. Runs once per batch size: cudnnFind* and the timing synchronise and allocate. */
extern "C" bn_status bn_conv_make_plan(bn_layer *l, conv_priv *c, bn_ctx *ctx, conv_plan *plan)
{
    conv_gpu *g = c->gpu;
    int n = l->in->n, k, oh, ow;
    /* The blobs' descriptors are BF16 ones for an own-only plan, which never calls cuDNN. */
    if (!plan->own_only) {
        BN_TENSOR_DESC(x, l->in);
        BN_TENSOR_DESC(y, l->out);
        BN_CUDNN(cudnnGetConvolution2dForwardOutputDim(g->conv_desc, x, g->w_desc, &n, &k, &oh, &ow));
        if (n != l->in->n || k != c->filters || oh != c->g.oh || ow != c->g.ow)
            return bn_error(BN_ERR_INTERNAL,
                            "layer %s: cuDNN computes a %dx%dx%dx%d output where blobnet has %dx%dx%dx%d", l->name, n,
                            k, oh, ow, l->in->n, c->filters, c->g.oh, c->g.ow);
    }
    plan->n = n;
    plan->with_data = l->in_grad != NULL;
    int sms = 0;
    BN_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, ctx->device));
    bn_conv_shape *s = &plan->shape;
    s->g = c->g, s->filters = c->filters, s->n = n, s->sms = sms, s->tf32 = ctx->tf32;
    s->pooled = c->pool_after != NULL;
    for (int f = 1; f <= BN_CONV_FAMILY_COUNT; f++) {
        const bn_conv_family *fam = runner_family(f);
        fam->plan(&plan->fam[f - 1], s);
        const size_t scratch = fam->scratch ? fam->scratch(&plan->fam[f - 1]) : 0;
        if (scratch > plan->scratch_bytes) plan->scratch_bytes = scratch;
    }
    const int mode = choice_mode(c, ctx);
    bool can[3][BN_CONV_RUNNERS], ask[3];
    runners(c, plan, mode == BN_CHOOSE_RULE, can, ask);
    if (plan->own_only) {
        /* blobnet's kernels alone: without one for a needed pass the FP32 copies cannot serve. */
        const bool needed[3] = {true, plan->with_data != 0, true};
        plan->own_ok = 1;
        for (int i = 0; i < 3; i++) {
            ask[i] = false;
            can[i][BY_CUDNN] = false;
            bool any = false;
            for (int r = 1; r < BN_CONV_RUNNERS; r++) any = any || can[i][r];
            if (needed[i] && !any) plan->own_ok = 0;
        }
        if (!plan->own_ok) return BN_OK;
    }
    /* Timed choices are kept in the kernel cache, except those of a forced family. */
    char key[BN_KERNEL_KEY_MAX] = "";
    if (mode != BN_CHOOSE_RULE && !force_family) BN_TRY(bn_conv_cache_key(l, c, ctx, plan, key, sizeof key));
    if (mode == BN_CHOOSE_CACHED) {
        bool hit = false;
        BN_TRY(bn_conv_from_cache(l, c, ctx, plan, key, can, &hit));
        if (hit) return BN_OK;
    }
    /* The graph API's engines under --tf32 only: the FP32-exact default keeps the legacy
     * algorithms (on LeNet's conv2 shape at 20x24x24 one graph engine without any note of
     * reduced precision gave a filter gradient 0.7% of its scale off the CPU's). */
    BN_TRY(bn_conv_choose_runners(l, c, ctx, plan, can, ask, mode != BN_CHOOSE_RULE && ctx->tf32));
    char choice[BN_KERNEL_CHOICE_MAX];
    bn_conv_cache_choice(plan, choice, sizeof choice);
    return bn_chooser_keep(key, choice);
}
