/* test_conv_reference.c - the check of a timed kernel choice against a reference
 * (layers/conv2d/conv_reference.cu, gpu/compare.cu and the chooser's agree step), on a device
 * (skipped without one): the reference convolution against a plain loop on the host for the
 * three passes in NCHW FP32 and NHWC BF16 on a non-square shape with stride 2 and padding 1; the
 * comparison taking the right output and refusing one with an element 5% of the scale off; and
 * timed choices (cuDNN's graph engines, conv2d's runners and dense's products) that drop nothing
 * where every candidate is right. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv2d/conv2d.h"
#include "gpu/chooser.h"
#include "gpu_testing.h"
#include "layer_testing.h"
#include "testing.h"

#ifdef BN_WITH_CUDA
#include "conv2d/conv_reference.h"

/* The shape: 2 images of 3 channels, 7 x 9, 4 filters of 3 x 3, stride 2, padding 1: 4 x 5 out. */
enum { N = 2, C = 3, H = 7, W = 9, K = 4, R = 3, STRIDE = 2, PAD = 1 };
enum { OH = (H + 2 * PAD - R) / STRIDE + 1, OW = (W + 2 * PAD - R) / STRIDE + 1 };

/* Host tensors in N, C, H, W order (K, C, R, S for the filter); values k / 64, |k| <= 64, which
 * BF16 holds exactly and whose sums of products here FP32 holds exactly, so that the reference
 * and the loop below agree to the last bit. */
typedef struct host_conv {
    float x[N * C * H * W], w[K * C * R * R], y[N * K * OH * OW];
} host_conv;

static float grid_value(uint64_t *state)
{
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((int)((*state >> 33) % 129) - 64) / 64.0f;
}

/* The pass computed by plain loops over the three tensors' indices: the output (the one of x, w, y
 * the pass writes) overwritten from the other two. */
static void host_pass(int pass, host_conv *t)
{
    float *out = pass == BN_CG_FORWARD ? t->y : pass == BN_CG_DATA ? t->x : t->w;
    const size_t count = pass == BN_CG_FORWARD ? sizeof t->y : pass == BN_CG_DATA ? sizeof t->x : sizeof t->w;
    double *sum = calloc(count / sizeof(float), sizeof(double));
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++)
                    for (int c = 0; c < C; c++)
                        for (int r = 0; r < R; r++)
                            for (int s = 0; s < R; s++) {
                                const int ih = oh * STRIDE - PAD + r, iw = ow * STRIDE - PAD + s;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                const int xi = ((n * C + c) * H + ih) * W + iw, wi = ((k * C + c) * R + r) * R + s;
                                const int yi = ((n * K + k) * OH + oh) * OW + ow;
                                if (pass == BN_CG_FORWARD) sum[yi] += (double)t->x[xi] * t->w[wi];
                                if (pass == BN_CG_DATA) sum[xi] += (double)t->y[yi] * t->w[wi];
                                if (pass == BN_CG_FILTER) sum[wi] += (double)t->x[xi] * t->y[yi];
                            }
    for (size_t i = 0; i < count / sizeof(float); i++) out[i] = (float)sum[i];
    free(sum);
}

/* The nearest BF16 (ties to even) of f, as its 16 bits. */
static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* The bytes tensor t spans. */
static size_t span(const bn_cg_tensor *t)
{
    int64_t last = 0;
    for (int i = 0; i < 4; i++) last += (t->dims[i] - 1) * t->strides[i];
    return (size_t)(last + 1) * (t->type == CUDNN_DATA_BFLOAT16 ? 2 : 4);
}

/* The packed N, C, H, W values v laid out as t says, in a fresh device buffer *dev. */
static bn_status upload(const bn_cg_tensor *t, const float *v, void **dev)
{
    const size_t bytes = span(t);
    unsigned char *host = calloc(1, bytes);
    if (!host) return bn_error(BN_ERR_NOMEM, "test: out of host memory");
    const int64_t *d = t->dims, *s = t->strides;
    size_t i = 0;
    for (int64_t a = 0; a < d[0]; a++)
        for (int64_t b = 0; b < d[1]; b++)
            for (int64_t c = 0; c < d[2]; c++)
                for (int64_t e = 0; e < d[3]; e++, i++) {
                    const int64_t at = a * s[0] + b * s[1] + c * s[2] + e * s[3];
                    if (t->type == CUDNN_DATA_BFLOAT16) {
                        const uint16_t h = to_bf16(v[i]);
                        memcpy(host + at * 2, &h, 2);
                    } else {
                        memcpy(host + at * 4, &v[i], 4);
                    }
                }
    bn_status st = bn_device_alloc(dev, bytes);
    if (st == BN_OK) st = bn_device_h2d(*dev, host, bytes);
    free(host);
    return st;
}

/* One pass of one layout and type: the reference against the host loop, then the comparison of
 * the host's output (as the pass writes it) with the reference, taken, and refused once one
 * element is 5% of the scale off. */
static int one_pass(int pass, bool nhwc, cudnnDataType_t type, bn_ctx *ctx)
{
    bn_cg_tensor (*make)(int, int, int, int, cudnnDataType_t) = nhwc ? bn_cg_nhwc : bn_cg_nchw;
    bn_cg_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.pass = pass;
    spec.pad = PAD;
    spec.stride = STRIDE;
    spec.beta = pass == BN_CG_FILTER ? 1.0f : 0.0f;
    spec.x = make(N, C, H, W, type);
    spec.w = make(K, C, R, R, type);
    spec.y = make(N, K, OH, OW, type);
    static host_conv t, want;
    uint64_t state = 1234 + (uint64_t)pass;
    for (size_t i = 0; i < sizeof t.x / sizeof(float); i++) t.x[i] = grid_value(&state);
    for (size_t i = 0; i < sizeof t.w / sizeof(float); i++) t.w[i] = grid_value(&state);
    for (size_t i = 0; i < sizeof t.y / sizeof(float); i++) t.y[i] = grid_value(&state);
    want = t;
    host_pass(pass, &want);
    const float *out = pass == BN_CG_FORWARD ? want.y : pass == BN_CG_DATA ? want.x : want.w;
    const size_t count = bn_cg_written_count(&spec);
    CHECK(count == (pass == BN_CG_FORWARD ? sizeof t.y : pass == BN_CG_DATA ? sizeof t.x : sizeof t.w) / 4);

    void *x = NULL, *w = NULL, *y = NULL, *wrong = NULL;
    float *ref = NULL, *got = malloc(count * sizeof(float));
    bn_status st = got ? BN_OK : bn_error(BN_ERR_NOMEM, "test: out of host memory");
    if (st == BN_OK) st = upload(&spec.x, t.x, &x);
    if (st == BN_OK) st = upload(&spec.w, t.w, &w);
    if (st == BN_OK) st = upload(&spec.y, t.y, &y);
    if (st == BN_OK) st = bn_device_alloc((void **)&ref, count * sizeof(float));
    if (st == BN_OK) st = bn_cg_reference(ctx, &spec, x, w, y, ref);
    if (st == BN_OK) st = bn_device_d2h(got, ref, count * sizeof(float));
    double worst = 0.0, scale = 0.0, err = -1.0, tol = 0.0, err_wrong = -1.0, tol_wrong = 0.0;
    int agrees = 0, agrees_wrong = 1;
    size_t at = 0;
    for (size_t i = 0; st == BN_OK && i < count; i++) {
        if (fabs(got[i] - out[i]) > worst) worst = fabs(got[i] - out[i]);
        if (fabs(out[i]) > scale) scale = fabs(out[i]), at = i;
    }
    /* The host's output as the pass writes it, right, then with its largest element 5% of the
     * scale off. */
    const bn_cg_tensor *written = pass == BN_CG_FORWARD ? &spec.y : pass == BN_CG_DATA ? &spec.x : &spec.w;
    float *off = malloc(count * sizeof(float));
    if (st == BN_OK && !off) st = bn_error(BN_ERR_NOMEM, "test: out of host memory");
    void *right = NULL;
    if (st == BN_OK) st = upload(written, out, &right);
    if (st == BN_OK) st = bn_cg_check_output(ctx, &spec, ref, right, &err, &tol, &agrees);
    if (st == BN_OK) {
        memcpy(off, out, count * sizeof(float));
        off[at] += (float)(0.05 * scale);
        st = upload(written, off, &wrong);
    }
    if (st == BN_OK) st = bn_cg_check_output(ctx, &spec, ref, wrong, &err_wrong, &tol_wrong, &agrees_wrong);
    bn_device_free(x);
    bn_device_free(w);
    bn_device_free(y);
    bn_device_free(ref);
    bn_device_free(right);
    bn_device_free(wrong);
    free(got);
    free(off);
    CHECK_OK(st);
    const char *what = type == CUDNN_DATA_BFLOAT16 ? "bf16" : "f32";
    CHECK_MSG(scale > 0.5, "pass %d %s: the output's scale %g is too small to test", pass, what, scale);
    CHECK_MSG(worst == 0.0, "pass %d %s %s: the reference is %g off the host's loop", pass, nhwc ? "nhwc" : "nchw",
              what, worst);
    const double want_tol = type == CUDNN_DATA_BFLOAT16 ? 2e-2 : 1e-3;
    CHECK_MSG(tol == want_tol && tol_wrong == want_tol, "tolerance %g", tol);
    /* The right output: exact in FP32; in BF16 off by its rounding alone (an 8-bit significand). */
    CHECK_MSG(agrees && err <= (type == CUDNN_DATA_BFLOAT16 ? 1.0 / 256 : 0.0), "pass %d %s: err %g", pass, what,
              err);
    CHECK_MSG(!agrees_wrong && err_wrong > 0.04 && err_wrong < 0.06, "pass %d %s: a 5%% error read as %g (agrees %d)",
              pass, what, err_wrong, agrees_wrong);
    return BN_PASS;
}
#endif

BN_TEST(gpu_conv_reference_matches_the_host_and_refuses_a_planted_error)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
#ifdef BN_WITH_CUDA
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    for (int pass = 0; pass < BN_CG_PASSES; pass++) {
        int r = one_pass(pass, false, CUDNN_DATA_FLOAT, ctx);
        if (r == BN_PASS) r = one_pass(pass, true, CUDNN_DATA_BFLOAT16, ctx);
        if (r != BN_PASS) return r;
    }
#endif
    return BN_PASS;
}

#ifdef BN_WITH_CUDA
/* bn_cg_choose timed on zeroed buffers of spec's sizes: a plan must come back, and it must agree
 * with the reference when checked afresh. */
static int chosen_agrees(bn_ctx *ctx, const bn_cg_spec *spec, const char *what)
{
    void *t[3] = {NULL, NULL, NULL};
    const bn_cg_tensor *tensors[3] = {&spec->x, &spec->w, &spec->y};
    bn_status st = BN_OK;
    for (int i = 0; i < 3 && st == BN_OK; i++) {
        st = bn_device_alloc(&t[i], span(tensors[i]));
        if (st == BN_OK) st = bn_device_zero(t[i], span(tensors[i]));
    }
    bn_cg_plan *plan = NULL;
    bn_cg_check *check = NULL;
    double err = -1.0, tol = 0.0;
    int agrees = 0;
    if (st == BN_OK) st = bn_cg_choose(ctx, spec, 0, t[0], t[1], t[2], &plan);
    if (st == BN_OK && plan) st = bn_cg_check_open(ctx, spec, &check);
    if (st == BN_OK && plan) st = bn_cg_check_plan(check, plan, &err, &tol, &agrees);
    const char *name = plan ? bn_cg_name(plan) : "none";
    printf("    %s: %s, %.3g of the scale off (tolerance %g)\n", what, name, err, tol);
    bn_cg_check_close(&check);
    bn_cg_free(&plan);
    for (int i = 0; i < 3; i++) bn_device_free(t[i]);
    CHECK_OK(st);
    CHECK_MSG(err >= 0.0, "%s: no plan came back", what);
    CHECK_MSG(agrees, "%s: the plan taken is %g off (tolerance %g)", what, err, tol);
    return BN_PASS;
}
#endif

BN_TEST(gpu_cg_choose_timed_drops_no_right_engine)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
#ifdef BN_WITH_CUDA
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    const int was_deterministic = ctx->deterministic;
    ctx->deterministic = 0;
    const int before = bn_chooser_rejections();
    static const char *const passes[BN_CG_PASSES] = {"forward", "data", "filter"};
    int r = BN_PASS;
    /* FP32 NCHW exact, FP32 NCHW with TF32 allowed, BF16 NHWC with channels a multiple of 8. */
    for (int kind = 0; kind < 3 && r == BN_PASS; kind++)
        for (int pass = 0; pass < BN_CG_PASSES && r == BN_PASS; pass++) {
            const cudnnDataType_t type = kind == 2 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
            bn_cg_tensor (*make)(int, int, int, int, cudnnDataType_t) = kind == 2 ? bn_cg_nhwc : bn_cg_nchw;
            bn_cg_spec spec;
            memset(&spec, 0, sizeof spec);
            spec.pass = pass;
            spec.pad = 1;
            spec.stride = 1;
            spec.beta = pass == BN_CG_FILTER && kind < 2 ? 1.0f : 0.0f;
            spec.allow_down_convert = kind == 1;
            spec.x = make(8, 16, 12, 10, type);
            spec.w = make(32, 16, 3, 3, type);
            spec.y = make(8, 32, 12, 10, type);
            char what[64];
            snprintf(what, sizeof what, "%s %s", kind == 0 ? "fp32" : kind == 1 ? "tf32" : "bf16 nhwc", passes[pass]);
            r = chosen_agrees(ctx, &spec, what);
        }
    ctx->deterministic = was_deterministic;
    if (r != BN_PASS) return r;
    CHECK_MSG(bn_chooser_rejections() == before, "%d right engines dropped", bn_chooser_rejections() - before);
#endif
    return BN_PASS;
}

/* --autotune on a small conv and dense net (conv2d's runners, cuDNN's algorithms and graph
 * engines under --tf32, cuBLASLt's and blobnet's GEMMs all timed and their picks checked): the
 * results stay near the CPU's and no pick is dropped. */
BN_TEST(gpu_autotuned_net_drops_no_right_kernel)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    static const layer_case cases[] = {
        {"autotuned conv2d 3x11x13 k3s2p1, k3p1; dense 24, 5",
         "[input]\nchannels=3\nheight=11\nwidth=13\n"
         "[conv2d]\nfilters=8\nsize=3\nstride=2\npad=1\n"
         "[conv2d]\nfilters=16\nsize=3\npad=1\n"
         "[dense]\noutputs=24\n[dense]\noutputs=5\n",
         TOL_GEMM, 0, 0, 0, 0, 0, 0},
        {"autotuned cudnn graph conv2d 16x10x12 k3p1 x32 (tf32)",
         "[input]\nchannels=16\nheight=10\nwidth=12\n"
         "[conv2d]\nfilters=32\nsize=3\npad=1\nengine=cudnn\n",
         TOL_TF32, 0, 0, 0, 0, 0, 0},
    };
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    const uint64_t seed = lt_fresh_seed();
    const int was_autotune = ctx->autotune, was_deterministic = ctx->deterministic;
    const int before = bn_chooser_rejections();
    ctx->autotune = 1;
    ctx->deterministic = 0;
    int r = gt_compare_sizes(&cases[0], ctx, seed);
    if (r == BN_PASS) {
        ctx->tf32 = 1;
        bn_conv2d_gpu_force_graph(1);
        r = gt_compare_sizes(&cases[1], ctx, seed);
        bn_conv2d_gpu_force_graph(0);
        ctx->tf32 = 0;
    }
    ctx->autotune = was_autotune;
    ctx->deterministic = was_deterministic;
    if (r != BN_PASS) return r;
    CHECK_MSG(bn_chooser_rejections() == before, "%d right kernels dropped", bn_chooser_rejections() - before);
    return BN_PASS;
}
