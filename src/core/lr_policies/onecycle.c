/* onecycle.c - PyTorch's OneCycleLR (anneal_strategy 'cos', cycle_momentum off, two phases)
 * over the run's T = max_iter steps, at step s (its last_epoch; a step past the run, as in
 * `blobnet time`, which has no run length and takes T = 1, counts as the last, s = T - 1):
 *     initial = lr / div_factor,  final = initial / final_div_factor
 *     phase 1: steps 0 .. e1 = pct_start * T - 1, from initial up to lr
 *     phase 2: steps e1 .. e2 = T - 1, from lr down to final
 *     in the phase from step a to step b, rising or falling from `from` to `to`:
 *         p = (s - a) / (b - a),  rate = to + (from - to) / 2 * (cos(pi * p) + 1)
 * A step belongs to phase 1 while s <= e1. A phase with b = a (pct_start * T = 1, where
 * PyTorch divides by zero) is taken as ended: p = 1. */
#include <math.h>

#include "lr_policies.h"

#define PI 3.14159265358979323846

enum { PCT_START, DIV_FACTOR, FINAL_DIV_FACTOR };

/* PyTorch's defaults. */
static const bn_train_key keys[] = {
    {"pct_start", 0.3, 0.0, 1.0, BN_KEY_REAL},
    {"div_factor", 25.0, 1.0, 1e9, BN_KEY_REAL},
    {"final_div_factor", 1e4, 1.0, 1e12, BN_KEY_REAL},
};

static double rate(const bn_train_config *c, long iter, long max_iter)
{
    double total = max_iter > 0 ? (double)max_iter : 1.0;
    double s = fmin((double)iter, total - 1.0);
    double initial = c->lr / bn_train_key_value(c, &keys[DIV_FACTOR]);
    double final = initial / bn_train_key_value(c, &keys[FINAL_DIV_FACTOR]);
    double e1 = bn_train_key_value(c, &keys[PCT_START]) * total - 1.0, a = 0.0, b = e1, from = initial, to = c->lr;
    if (s > e1) a = e1, b = total - 1.0, from = c->lr, to = final;
    double p = b > a ? (s - a) / (b - a) : 1.0;
    return to + (from - to) / 2.0 * (cos(PI * p) + 1.0);
}

const bn_lr_policy bn_lr_policy_onecycle = {"onecycle", "PyTorch's OneCycleLR, cosine annealing, over the run", keys, 3,
                                            rate};
