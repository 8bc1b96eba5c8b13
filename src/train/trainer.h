/* trainer.h - epochs of shuffled mini-batches, evaluation after each epoch, checkpoints. */
#ifndef BN_TRAINER_H
#define BN_TRAINER_H

#include <signal.h>
#include <stdio.h>

#include "checkpoint.h"
#include "dist/dist.h"
#include "dataset.h"
#include "loader.h"
#include "metrics_log.h"
#include "optimizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bn_epoch_report {
    int epoch;              /* 1-based */
    int epochs;
    double lr;              /* at the epoch's last step */
    double train_loss, train_acc;
    double test_loss, test_acc;
    int has_val;            /* a holdout set was evaluated: val_loss and val_acc are set */
    double val_loss, val_acc;
    double seconds;         /* training time of the epoch, evaluation excluded */
    double eval_seconds;    /* the evaluation of the test set after it */
    double images_per_s;    /* of all GPUs together */
    int gpus;               /* GPUs that trained together (1 on one GPU or the CPU) */
} bn_epoch_report;

/* What a progress hook is told after every training step: counters that cost nothing. */
typedef struct bn_step_info {
    int epoch, epochs;      /* the current epoch (1-based) and the last one of the run */
    int batch, batches;     /* batches of this epoch done, and in all */
    long seen, count;       /* images of this epoch done, and in all */
    long images;            /* images trained since this process began the epoch */
    double seconds;         /* since this process began the epoch */
    bn_blob *sums;          /* the epoch's [loss sum, correct]: read through bn_step_running_metrics */
    int gpus;               /* GPUs that train together; images and seen count all of theirs */
    long sums_seen;         /* the examples sums covers: this GPU's share of seen (0: all of seen) */
    bn_dist *dist;          /* several GPUs: this rank's group, whose deadline bounds every wait on
                             * the device (a read of sums waits for the queued steps); else NULL */
} bn_step_info;

typedef enum bn_progress_event {
    BN_PROGRESS_STEP,       /* a training step has been queued */
    BN_PROGRESS_EVAL,       /* the epoch's training is done; evaluation begins */
    BN_PROGRESS_DONE        /* the epoch is complete; its summary line comes next */
} bn_progress_event;

/* A progress hook: must be cheap, since it runs after every step; a status other than BN_OK
 * stops training with that status. */
typedef bn_status (*bn_progress_fn)(void *user, bn_progress_event event, const bn_step_info *info);

/* The epoch's running mean loss and accuracy. On the GPU this copies the device accumulator
 * to the host, which waits for every queued step: a few calls a second, never every step. */
bn_status bn_step_running_metrics(const bn_step_info *info, double *loss, double *acc);

typedef struct bn_trainer_opts {
    int epochs;             /* train until this many epochs are complete */
    const char *save_path;  /* checkpoint written after every epoch, or NULL */
    FILE *out;              /* epoch lines go here; NULL prints nothing */
    bn_metrics_log *log;    /* the CSV metrics log, open (metrics_log.h), or NULL */
    int log_every;          /* with log: also a row every this many steps (0: epochs only) */
    long profile_first;     /* capture steps profile_first..profile_last (1-based, as the */
    long profile_last;      /* "step <n>" NVTX ranges) for a profiler; 0 captures nothing */
    bn_progress_fn progress; /* called after every step and around evaluation, or NULL */
    void *progress_user;    /* handed to progress */
    int no_graph;           /* GPU: run every step kernel by kernel, never as a CUDA graph */
    double until_accuracy;  /* stop after the first epoch whose test accuracy reaches this
                             * fraction (0: train all epochs) */
    long checkpoint_every;  /* with save_path: also save every this many steps (0: epochs only) */
    long debug_numerics;    /* print bn_numerics_print's table to stderr every this many steps */
    volatile sig_atomic_t *stop; /* when it turns non-zero (a signal handler sets it, e.g. to the
                             * signal's number), training stops after the current step, saves,
                             * and returns BN_ERR_INTERRUPTED; on several GPUs the ranks agree on
                             * the largest value asked for and write it back here on every rank */
    bn_dist *dist;          /* several GPUs: this rank's group, or NULL */
    const bn_dataset *holdout; /* the validation set held out of the training data, evaluated
                             * after every epoch beside the test set; NULL for none */
} bn_trainer_opts;

/* Trains net with opt from state st (zeroed for a fresh run; loaded for a resume) until
 * opts->epochs are complete, evaluating on test after every epoch. With opts->dist, this is one
 * rank of data-parallel training (docs/multi-gpu.md): it trains its share of every global batch
 * (net->capacity examples), the gradients summed across ranks in buckets of whole layers during
 * the backward pass (bn_dist.bucket_bytes); every rank must
 * call it with the same net, settings and state. *last receives the last
 * epoch's report (test_acc is the final accuracy). A loss or parameter that turns NaN or
 * infinite is BN_ERR_NUMERIC naming the steps and the first layer where it shows; no
 * checkpoint is written from then on. After a failed collective (bn_dist_failed) it returns
 * without freeing its device memory, which could wait forever on kernels a lost peer holds:
 * the caller is to end the process. */
bn_status bn_train(bn_net *net, bn_optimizer *opt, const bn_dataset *train, const bn_dataset *test,
                   const bn_trainer_opts *opts, bn_train_state *st, bn_epoch_report *last);

/* The full steps a group replayed as one CUDA graph holds (trainer.c) in a run whose host reads
 * every log_every, checkpoint_every and numerics_every steps (0: never between epochs): eight, or
 * four where the shortest of those cadences leaves fewer steps at the head of a graph with four
 * (a group's first and every step outside a group: 12 steps are one group of eight and four
 * single steps, or three groups of four). */
int bn_trainer_group_size(long log_every, long checkpoint_every, long numerics_every);

/* Mean loss and accuracy of net over the whole dataset, in batches of the net's capacity. */
bn_status bn_evaluate(bn_net *net, const bn_dataset *data, double *loss, double *acc);

/* The seed of the shuffle of epoch `epoch` (0-based) of a run seeded with seed. */
unsigned long long bn_epoch_seed(unsigned long long seed, int epoch);

#ifdef __cplusplus
}
#endif
#endif
