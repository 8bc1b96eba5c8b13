/* param_update.cuh - an optimizer's update of parameter slab elements on the device (the update
 * described by core/optimizers/update_args.h): the element's segment, the step's rates and the
 * rule of core/optimizers/, read and written in two halves, so that a kernel can read an
 * element's weight and state before its gradient is known. The update kernels
 * (train/optimizer_gpu.cu) and the pushed gradient sum (dist/peer_sum.cu) both run it, so their
 * updates are the same arithmetic. For .cu files only. */
#ifndef BN_PARAM_UPDATE_CUH
#define BN_PARAM_UPDATE_CUH

#include <cuda_bf16.h>

#include "core/optimizers/optimizers.h"
#include "core/optimizers/update_args.h"
#include "gpu/bf16.cuh"

/* An optimizer's rule for one element (core/optimizers/optimizer_type.h). */
typedef void (*bn_rule_fn)(float *w, float g, float *s, float rate, float decay, bn_step_rates r, bn_rule_consts k);

/* The index, among the range's segments, of the one that holds element i: the last that starts at
 * or before it. Up to BN_UPDATE_NEAR_SEGS are the arguments' own (a compare each, no memory read);
 * more, a bisection of the device table. */
static __device__ __forceinline__ int bn_update_seg(const bn_update_args &u, size_t i)
{
    int a = 0;
    if (u.nseg <= BN_UPDATE_NEAR_SEGS) {
#pragma unroll
        for (int m = 1; m < BN_UPDATE_NEAR_SEGS; m++)
            if (m < u.nseg && u.near[m].offset <= i) a = m;
        return a;
    }
    int b = u.nseg - 1;
    while (a < b) {
        const int m = (a + b + 1) / 2;
        if (u.segs[m].offset <= i) a = m;
        else b = m - 1;
    }
    return a;
}

/* Segment s's multipliers. */
static __device__ __forceinline__ void bn_update_mults(const bn_update_args &u, int s, float *lr_mult,
                                                       float *decay_mult)
{
    if (u.nseg <= BN_UPDATE_NEAR_SEGS) {
        *lr_mult = u.near[0].lr_mult, *decay_mult = u.near[0].decay_mult;
#pragma unroll
        for (int m = 1; m < BN_UPDATE_NEAR_SEGS; m++)
            if (m == s) *lr_mult = u.near[m].lr_mult, *decay_mult = u.near[m].decay_mult;
        return;
    }
    *lr_mult = u.segs[s].lr_mult, *decay_mult = u.segs[s].decay_mult;
}

/* The schedule's index of this step (0 without a schedule), and the rates at it: u.r where no
 * schedule covers the step. Apart, so that a kernel can read the index early and the rates later.
 * The cursor stands one past the index: the step moved it on at its start. */
static __device__ __forceinline__ int bn_update_cursor(const bn_update_args &u)
{
    return u.schedule ? *u.cursor - 1 : 0;
}

static __device__ __forceinline__ bn_step_rates bn_update_rates_at(const bn_update_args &u, int at)
{
    return u.schedule ? u.schedule[at] : u.r;
}

/* One element's weight, state and multipliers, read before its gradient is. */
template <int N>
struct bn_update_slot {
    float w;
    float s[N > 0 ? N : 1];
    float lr_mult, decay_mult;
};

template <int N>
static __device__ __forceinline__ void bn_update_read(const bn_update_args &u, size_t i, bn_update_slot<N> *v)
{
    bn_update_mults(u, bn_update_seg(u, i), &v->lr_mult, &v->decay_mult);
    v->w = u.w[i];
    for (int j = 0; j < N; j++) v->s[j] = u.state[j][i];
}

/* The updated weight written back; under --precision bf16 (W16) also its BF16 copy, which the
 * layers' products read. */
template <bool W16>
static __device__ __forceinline__ void bn_store_weight(const bn_update_args &u, size_t i, float wi)
{
    u.w[i] = wi;
    if (W16) bn_st_bf16((__nv_bfloat16 *)u.w16 + i, wi);
}

/* Element i's rule applied to gradient g and the slot read before; the weight and state written. */
template <bn_rule_fn Rule, int N, bool W16>
static __device__ __forceinline__ void bn_update_write(const bn_update_args &u, bn_step_rates r, size_t i, float g,
                                                       bn_update_slot<N> &v)
{
    Rule(&v.w, g, v.s, r.lr * v.lr_mult, u.wd * v.decay_mult, r, u.k);
    for (int j = 0; j < N; j++) u.state[j][i] = v.s[j];
    bn_store_weight<W16>(u, i, v.w);
}

#endif
