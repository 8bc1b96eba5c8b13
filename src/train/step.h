/* step.h - one training step's work on this process: the batch's gather, the forward and backward
 * passes, the gradients' all-reduces on several GPUs and the optimizer's updates, as one function
 * that the trainer runs eagerly or captures as a CUDA graph (trainer.c). */
#ifndef BN_STEP_H
#define BN_STEP_H

#include "dist/dist.h"
#include "dist_schedule.h"
#include "loader.h"
#include "optimizer.h"

/* One training step's work, as one function so that it can be captured as a CUDA graph. */
typedef struct bn_step_body {
    bn_net *net;
    bn_optimizer *opt;
    bn_loader *ld;
    bn_blob *acc;
    int n;                  /* this process's examples of the step */
    bn_dist *dist;          /* several GPUs: the group, and this rank's share of the global batch */
    double weight;          /* as a fraction of the global batch (what its gradient counts for) */
    size_t bucket_bytes;    /* several GPUs: gradients gathered for one all-reduce (0: one per layer) */
    int pend_first, pend_last; /* the layers whose gradients wait in the bucket; -1 when none */
    bn_schedule *sched;     /* several GPUs: when the buckets' all-reduces run (dist_schedule.h) */
    int take_staged;        /* the step's batch is the one the step before staged (bn_loader_take) */
    int stage_next;         /* the step stages the next step's batch beside its own passes */
    struct {                /* the host's side before the body ran (bn_step_body_mark) */
        bn_loader_mark ld;
        long iter;
        int held, pend_first, pend_last, queued, take_staged, stage_next;
        unsigned long long step;
    } mark;
} bn_step_body;

/* Notes the host's side of b before its body runs: the loader's place, the optimizer's iteration
 * and held update, the pass's step, the step's own flags and several GPUs' pending buckets. */
void bn_step_body_mark(bn_step_body *b);

/* Puts back what bn_step_body_mark noted (arg: a bn_step_body), after a capture of the body
 * failed (bn_step_graph_run): its host side ran, its device work did not. */
void bn_step_body_rewind(void *arg);

/* Runs the step b describes (arg: a bn_step_body). */
bn_status bn_step_body_run(void *arg);

/* Adds the last batch's [loss sum, correct] into acc without a host round trip on the GPU. */
bn_status bn_step_accumulate_metrics(bn_net *net, bn_blob *acc);

#endif
