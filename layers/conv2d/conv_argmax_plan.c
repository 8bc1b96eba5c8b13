/* conv_argmax_plan.c - the argmax filter kernel's plan (conv_argmax.h): its launch shape for one
 * batch size, or that it cannot run. Host code with no device work, so that a build without CUDA
 * can say where the family applies. */
#include <stdbool.h>
#include <string.h>

#include "conv_argmax.h"
#include "conv_argmax_limits.h"
#include "conv_family.h"
#include "core/layer.h"

/* Threads a block aims for. */
#define AIM_THREADS 512
/* Partial sums are kept below this many bytes. */
#define PARTS_LIMIT ((size_t)4 << 20)
/* Cell groups at most. */
#define MAX_PARTS 16

/* How many ways the lanes of the plan's warps meet in one shared-memory bank when all read the
 * same cell of the same filter (the most distinct addresses on one bank, over the first warps of
 * group 0). */
static int bank_ways(const bn_argmax_plan *p, int wp, int plane)
{
    const int C = p->g.c, K = p->g.k;
    int worst = 0;
    for (int w0 = 0; w0 < p->items && w0 < 8 * 32; w0 += 32) {
        int addr[32], n = 0, ways[32] = {0};
        for (int it = w0; it < w0 + 32 && it < p->items; it++) {
            const int c = it % C, ky = (it / C) % K, a = c * plane + ky * wp;
            bool seen = false;
            for (int j = 0; j < n && !seen; j++) seen = addr[j] == a;
            if (seen) continue;
            addr[n++] = a;
            if (++ways[a & 31] > worst) worst = ways[a & 31];
        }
    }
    return worst;
}

static size_t round4(size_t v)
{
    return (v + 3) / 4 * 4;
}

void bn_argmax_plan_make(bn_argmax_plan *p, const bn_conv_geom *g, int filters, int n, int sms)
{
    memset(p, 0, sizeof *p);
    p->n = n, p->filters = filters, p->g = *g;
    if (g->stride != 1 || g->k < 1 || g->k > 7 || g->pad < 0 || g->c < 1 || filters < 1 || n < 1) return;
    p->ph = g->oh / 2, p->pw = g->ow / 2;
    if (p->ph < 1 || p->pw < 1) return;
    const long long pp = (long long)p->ph * p->pw, ck = (long long)g->c * g->k;
    if (ck > MAX_THREADS || pp > (1 << 20)) return;
    /* A thread per (filter, window row, input channel): every filter in one block where
     * MAX_THREADS allow, else blocks along the filters. */
    long long fb = MAX_THREADS / ck;
    if (fb > filters) fb = filters;
    p->fb = (int)fb;
    p->groups = (filters + p->fb - 1) / p->fb;
    p->items = (int)(fb * ck);
    long long parts = AIM_THREADS / p->items;
    if (parts > MAX_PARTS) parts = MAX_PARTS;
    if (parts > pp) parts = pp;
    if (parts < 1) parts = 1;
    p->parts = (int)parts;
    long long threads = (long long)p->items * p->parts;
    if (threads < (long long)p->fb * p->parts) threads = (long long)p->fb * p->parts; /* the bias's threads */
    if (threads > MAX_THREADS) return;
    p->threads = (int)((threads + 31) / 32 * 32);
    /* The rows and columns a window at a maximum can reach. */
    p->hp = 2 * p->ph + g->k - 1, p->wv = 2 * p->pw + g->k - 1;
    /* Strides with the fewest lanes on one bank, the smaller on a tie. */
    int best = -1;
    for (int wp = p->wv; wp < p->wv + 8 && best != 1; wp++)
        for (int extra = 0; extra < 32 && best != 1; extra++) {
            const int plane = p->hp * wp + extra, ways = bank_ways(p, wp, plane);
            if (best < 0 || ways < best) best = ways, p->wp = wp, p->plane = plane;
        }
    p->xsize = round4((size_t)g->c * p->plane);
    p->psize = pooled_stage_bytes(p->fb * (int)pp) / sizeof(float);
    const size_t buffers = 2 * p->xsize + 2 * p->psize + 2 * (size_t)p->fb * pp;

    const size_t red = p->parts > 1 ? (size_t)p->parts * ((size_t)p->items * g->k + p->fb) : 0;
    p->smem = (buffers > red ? buffers : red) * sizeof(float);
    if (p->smem > ARGMAX_SMEM) return;
    /* Spans: about one wave of blocks, partial sums kept small. */
    int resident = 2048 / p->threads;
    const int by_smem = (int)((228 * 1024) / (p->smem + 1024));
    if (by_smem < resident) resident = by_smem;
    if (resident < 1) resident = 1;
    const size_t count = (size_t)filters * ((size_t)g->c * g->k * g->k + 1);
    long long spans = ((long long)sms * resident + p->groups - 1) / p->groups;
    const long long most = (long long)(PARTS_LIMIT / (count * sizeof(float)));
    if (spans > most) spans = most;
    if (spans > n) spans = n;
    if (spans < 1) spans = 1;
    p->span = (int)((n + spans - 1) / spans);
    p->spans = (n + p->span - 1) / p->span;
    if (p->spans > 65535 || p->groups > 65535) return;
    p->workspace = (size_t)p->spans * count * sizeof(float);
    p->ok = 1;
}

static void plan(bn_conv_family_plan *p, const bn_conv_shape *s)
{
    bn_argmax_plan_make(&p->argmax, &s->g, s->filters, s->n, s->sms);
}

static const char *refuses(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass)
{
    if (p->argmax.ok) return NULL;
    if (s->g.stride != 1) return "stride 1 only";
    if (s->g.k > 7) return "windows up to 7 only";
    return "shape outside its kernel's limits";
}

static size_t workspace(const bn_conv_family_plan *p)
{
    return p->argmax.workspace;
}

static int reads_pooled(const bn_conv_family_plan *p, int pass)
{
    return pass == BN_CONV_FILTER && p->argmax.ok;
}

/* Through a max pooling, the rule takes the argmax kernel for the filter pass where one block
 * holds a thread for every filter, input channel and window row (LeNet's conv1: 11.6 us against
 * the row tiles' 21.3 at batch 256, the epoch 44 -> 41 ms; LeNet's conv2 needs 5000 such
 * threads, and a version with 8 filters per thread measured 2-4x slower than the tensor cores).
 * Its claim outranks the tensor cores'. */
static int rule_claim(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass)
{
    return pass == BN_CONV_FILTER && p->argmax.groups == 1 ? 2 : 0;
}

const bn_conv_family bn_conv_family_argmax = {
    .name = "argmax",
    .serves = 1u << BN_CONV_FILTER,
    .offered = 1u << BN_CONV_FILTER,
    .rank = {4, 4, 4},
    .needs_pooled = 1,
    .plan = plan,
    .refuses = refuses,
    .workspace = workspace,
    .reads_pooled = reads_pooled,
    .rule_claim = rule_claim,
    .run = BN_GPU(bn_conv_run_argmax),
};
