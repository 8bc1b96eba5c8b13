/* dense_gemm_plan.cu - the plans of blobnet's own GEMM kernels (dense_gemm.cu): how a product is
 * tiled and its inner dimension split in each configuration, the fixed rule's configuration, the
 * counters and partial sums a plan owns, and the configuration forced for tests. Host code; a .cu
 * file because dense_gemm.h is CUDA's. */
#include "dense.h"
#include "dense_gemm.h"

/* The tiles {BM, BN} of each configuration (OWN_FMA64 .. OWN_TC32, dense_gemm.h). */
static const int own_cfg[OWN_CONFIGS][2] = {{64, 64}, {32, 32}, {64, 64}, {32, 32}};
/* At most OWN_MAX_SPLITS inner ranges (OWN_RULE_SPLITS unless forced), at least OWN_MIN_SLICES
 * slices per range (unless forced), and at most OWN_PART_LIMIT bytes of partial sums per plan. */
#define OWN_MAX_SPLITS 32
#define OWN_RULE_SPLITS 16
#define OWN_MIN_SLICES 4
/* The tensor cores' 32 x 32 tiles in a forward or input-gradient product: at least OWN_TC_MIN_SLICES
 * slices a range. */
#define OWN_TC_MIN_SLICES 12
#define OWN_PART_LIMIT ((size_t)32 << 20)

/* Forced by bn_dense_gpu_force_own: -1, or the configuration every new plan takes. Kept here,
 * beside the configurations it names; dense_plan.cu reads it through bn_dense_own_forced. */
static int force_cfg = -1, force_splits = 0;

extern "C" void bn_dense_gpu_force_own(int config, int splits)
{
    force_cfg = config >= 0 && config <= OWN_SKINNY ? config : -1;
    force_splits = splits > 0 ? splits : 0;
}

extern "C" void bn_dense_own_forced(int *config, int *splits)
{
    *config = force_cfg;
    *splits = force_splits;
}

extern "C" void bn_dense_own_free(own_plan *o)
{
    bn_device_free(o->counters);
    bn_device_free(o->part);
    o->counters = NULL;
    o->part = NULL;
}

static size_t own_part_bytes(const own_plan *o)
{
    const int *c = own_cfg[o->cfg];
    return (size_t)o->tiles * o->splits * ((size_t)c[0] * c[1] + c[0]) * sizeof(float);
}

/* The tiling of the product for configuration cfg: inner ranges enough for about two blocks per
 * SM (for the tensor-core kernel too: on an H100, one, four or eight per SM, or ranges of two
 * slices, gave LeNet's epochs no gain or a loss), but none shorter than OWN_MIN_SLICES slices
 * and at most OWN_RULE_SPLITS of them (want_splits > 0 asks for that many instead); one range
 * when `no_alloc` (a plan made during capture cannot allocate counters). A block waits about one
 * memory latency per slice of its range, and the last block of a tile then about one per
 * OWN_TAIL_FLOATS / (TM TN) of the splits it adds up: more, shorter ranges shorten the first part
 * but lengthen the second, so both bounds keep the sum short.
 * The forward and input-gradient products of the tensor cores' 32 x 32 tiles, which the step waits
 * for, take ranges of at least OWN_TC_MIN_SLICES: at batches of 64 and 128 the rule's six to nine
 * ranges spent more on their sum than they saved (LeNet at 64 3.8% faster with four and two, mlp 2.6%,
 * docs/performance.md, version 82). A weight gradient, which runs beside other passes on the side
 * stream, keeps the short ranges that let its blocks fill what those leave. */
extern "C" own_plan bn_dense_own_layout(int kind, int n, int k, int m, int cfg, int sms, int want_splits,
                                        int no_alloc)
{
    own_plan o = {};
    o.cfg = cfg;
    o.rows = kind == GEMM_DW ? m : n;
    o.cols = kind == GEMM_FWD ? m : k;
    o.inner = kind == GEMM_FWD ? k : kind == GEMM_DW ? n : m;
    const int bm = own_cfg[cfg][0], bn = own_cfg[cfg][1];
    o.tiles_n = (o.cols + bn - 1) / bn;
    o.tiles = ((o.rows + bm - 1) / bm) * o.tiles_n;
    int slices = (o.inner + OWN_BK - 1) / OWN_BK;
    long s;
    if (want_splits > 0) s = want_splits;
    else {
        long target = 2L * (sms > 0 ? sms : 1);
        s = (target + o.tiles - 1) / o.tiles;
        const int shortest = cfg == OWN_TC32 && kind != GEMM_DW ? OWN_TC_MIN_SLICES : OWN_MIN_SLICES;
        if (s > slices / shortest) s = slices / shortest;
        if (s > OWN_RULE_SPLITS) s = OWN_RULE_SPLITS;
    }
    if (s > OWN_MAX_SPLITS) s = OWN_MAX_SPLITS;
    if (s > slices) s = slices;
    if (s < 1 || no_alloc) s = 1;
    o.splits = (int)s;
    while (o.splits > 1 && own_part_bytes(&o) > OWN_PART_LIMIT) o.splits--;
    /* Equal ranges, none empty; for the 32 x 32 tensor-core tiles whole slices of own_gemm_tck's
     * (an even count of OWN_BK). */
    o.ktps = (slices + o.splits - 1) / o.splits;
    if (cfg == OWN_TC32 && o.ktps % 2 && o.ktps < slices) o.ktps++;
    o.splits = (slices + o.ktps - 1) / o.ktps;
    return o;
}

extern "C" int bn_dense_gpu_tiling(int kind, int n, int k, int m, int sms, int *splits)
{
    *splits = bn_dense_own_layout(kind, n, k, m, OWN_TC32, sms, 0, 0).splits;
    return 1;
}

/* The configuration the rule takes: the tensor-core kernel's 32x32 tiles where the device has
 * them (measured on an H100 for LeNet's ip1 at batch 64 and 256, they beat the 64x64 tiles in
 * all three products: the larger tiles need more inner ranges to fill the GPU, and a longer
 * reduction after them); otherwise the large FMA tiles when they alone fill the GPU, the small
 * ones (with inner ranges) if not. */
extern "C" int bn_dense_own_rule(int kind, int n, int k, int m, int sms, int tensor_ok)
{
    if (tensor_ok) return OWN_TC32;
    own_plan big = bn_dense_own_layout(kind, n, k, m, OWN_FMA64, sms, 1, 1);
    return big.tiles >= sms ? OWN_FMA64 : OWN_FMA32;
}

extern "C" bn_status bn_dense_own_alloc(own_plan *o)
{
    if (o->splits <= 1) return BN_OK;
    BN_TRY(bn_device_alloc((void **)&o->counters, (size_t)o->tiles * sizeof(unsigned)));
    BN_TRY(bn_device_zero(o->counters, (size_t)o->tiles * sizeof(unsigned)));
    BN_TRY(bn_device_alloc((void **)&o->part, own_part_bytes(o)));
    return BN_OK;
}

