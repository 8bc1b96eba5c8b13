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
#define MAX_PARTS 32
/* The rule takes the kernel where c * k * filters is at most this (what its first version, a
 * thread per filter, input channel and window row, held in one block): the first layers of
 * networks on images, where it is the fastest of the families. */
#define CLAIM_LIMIT 1024

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
    const long long pp = (long long)p->ph * p->pw, kk = (long long)g->k * g->k;
    if (g->c > MAX_THREADS || pp > (1 << 20)) return;
    /* A thread per (filter, input channel): every filter in one block where MAX_THREADS allow,
     * else blocks along the filters. */
    long long fb = MAX_THREADS / g->c;
    if (fb > filters) fb = filters;
    p->fb = (int)fb;
    p->groups = (filters + p->fb - 1) / p->fb;
    p->items = (int)(fb * g->c);
    long long parts = AIM_THREADS / p->items;
    if (parts > MAX_PARTS) parts = MAX_PARTS;
    if (parts > pp) parts = pp;
    if (parts < 1) parts = 1;
    p->parts = (int)parts;
    p->threads = (int)(((long long)p->items * p->parts + 31) / 32 * 32);
    if (p->threads > MAX_THREADS) return;
    /* The rows and columns a window at a maximum can reach, in planes whose rows, planes and
     * copies start at even floats (8-byte loads); a plane of an odd number of float pairs puts
     * the channels of one filter on different banks, and the shifted copy starts 16 banks on. */
    p->hp = 2 * p->ph + g->k - 1, p->wv = 2 * p->pw + g->k - 1;
    p->wp = (p->wv + 1) / 2 * 2;
    p->plane = p->hp * p->wp;
    if ((p->plane / 2) % 2 == 0) p->plane += 2;
    const long long planes = (long long)g->c * p->plane;
    p->xb = (int)(planes + ((16 - planes % 32) + 32) % 32);
    p->xsize = round4((size_t)p->xb + (size_t)planes);
    /* A filter's gradients at an odd stride (the filters of a warp's lanes on different banks);
     * its masks at a stride of an odd number of 4-byte words, copied by words where they can be. */
    p->gp = (int)(pp | 1);
    p->gsize = round4((size_t)p->fb * p->gp);
    p->mask_words = pp % 4 == 0;
    p->mp = p->mask_words ? (int)((pp / 4) % 2 ? pp : pp + 4) : (int)(pp | 1);
    p->stage = p->xsize + p->gsize + round4(((size_t)p->fb * p->mp + 3) / 4);
    p->rs = (int)((kk + 1) % 2 ? kk + 1 : kk + 2);
    const size_t red = (size_t)p->parts * p->items * p->rs;
    const size_t buffers = 2 * p->stage;
    p->smem = (buffers > red ? buffers : red) * sizeof(float);
    if (p->smem > ARGMAX_SMEM) return;
    /* Spans: about one wave of blocks, partial sums kept small. */
    int resident = 2048 / p->threads;
    const int by_smem = (int)((228 * 1024) / (p->smem + 1024));
    if (by_smem < resident) resident = by_smem;
    if (resident < 1) resident = 1;
    const size_t count = (size_t)filters * ((size_t)g->c * kk + 1);
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

/* Through a max pooling, the rule takes the argmax kernel for the filter pass where c * k *
 * filters is at most CLAIM_LIMIT (LeNet's conv1: 11.6 us against the row tiles' 21.3 at batch 256
 * in its first version, the epoch 44 -> 41 ms; LeNet's conv2, at 5,000, measured 2-4x slower
 * than the tensor cores with 8 filters a thread). Its claim outranks the tensor cores'. */
static int rule_claim(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass)
{
    const long long size = (long long)s->g.c * s->g.k * s->filters;
    return pass == BN_CONV_FILTER && p->argmax.ok && size <= CLAIM_LIMIT ? 2 : 0;
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
