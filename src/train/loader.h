/* loader.h - feeds batches of a dataset into a network's input and label blobs. On the
 * CPU it gathers on the host; on the GPU the dataset is uploaded once as uint8 and each
 * batch is gathered and scaled by a kernel, from an order uploaded once per epoch. Training
 * batches are augmented in the same gather (core/augment.h), with the same arithmetic on both
 * paths, so that they give the same bits. */
#ifndef BN_LOADER_H
#define BN_LOADER_H

#include "core/device.h"
#include "core/net.h"
#include "dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bn_loader {
    const bn_dataset *data;
    int *order;            /* the epoch's order of examples (host) */
    bn_ctx *ctx;           /* NULL on the CPU path */
    void *dev_pixels;      /* the dataset's values as the device reads them: a copy in device memory,
                            * or (streamed) the host's own buffer, pinned and mapped */
    int streamed;          /* 1: the set was past the data budget and stays in host memory */
    void *pinned_copy;     /* streamed from a copy in pinned memory where its own buffer could not
                            * be pinned; NULL otherwise */
    void *dev_labels;
    void *dev_order;
    int *dev_cursor;       /* GPU: first example of the next bn_loader_fill_next batch */
    int host_cursor;       /* the same on the CPU path */
    unsigned long long *dev_step;  /* GPU: [0] the training step of the next training batch, [1]
                                      the step of the batch in the input's own buffer, [2] the
                                      step of the batch in the stage (bn_pass.dev_step points at
                                      the slot of the batch the net reads) */
    unsigned long long host_step;  /* the same on the CPU path (the GPU path reads only dev_step) */
    int stride;            /* bn_loader_fill_next moves the cursor this many examples on (0: by the
                              batch's size); a data-parallel rank skips the other ranks' shares */
    int prepared;          /* the order in place is the shuffle of prepared_seed, made ahead by
                              bn_loader_prepare_order and not yet taken by bn_loader_set_order */
    unsigned long long prepared_seed;
    bn_upload_buf order_up; /* GPU: the pinned buffer a prepared order is uploaded through */
    void *dev_stage;       /* GPU: a training batch gathered a step ahead, its labels after it */
    size_t stage_bytes;    /* dev_stage's size (bn_loader_reserve_stage) */
    int staged;            /* a batch of `staged_n` is queued and not taken */
    int staged_n;
    int staged_own;        /* the staged batch went into the input's and labels' own buffers (it was
                              staged while the net read the stage), not into dev_stage */
    int reading_stage;     /* the net's input and labels read dev_stage (bn_loader_take) */
    void *own_x;           /* while reading_stage: the input's and labels' own device buffers */
    void *own_y;
} bn_loader;

/* Prepares a loader for data (which must outlive it); with ctx, uploads the dataset. */
bn_status bn_loader_init(bn_loader *ld, const bn_dataset *data, bn_ctx *ctx);

/* Sets the order of examples: shuffled from seed, or 0..count-1 when shuffle is 0. */
bn_status bn_loader_set_order(bn_loader *ld, int shuffle, unsigned long long seed);

/* Shuffles the order from seed ahead of its epoch, while the steps before it may still be
 * queued: on the GPU the upload is queued after them, not waited for. A later
 * bn_loader_set_order(ld, 1, seed) with the same seed then finds it in place. Only where no
 * step still to be queued reads the order on the host (after an epoch's last step). */
bn_status bn_loader_prepare_order(bn_loader *ld, unsigned long long seed);

/* Puts examples order[start .. start+n) into net's input (standardised with the model's
 * [input] mean and std; never augmented) and labels, and sets the batch to n. */
bn_status bn_loader_fill(bn_loader *ld, bn_net *net, int start, int n);

/* Sets where bn_loader_fill_next starts (an example index into the order). */
bn_status bn_loader_set_cursor(bn_loader *ld, int start);

/* Sets the training step of the next training batch (the step of the run, counted from its
 * start): the augmentation's draws depend on it. */
bn_status bn_loader_set_step(bn_loader *ld, unsigned long long step);

/* Fills the next n examples from the cursor and advances it. With train, the examples are
 * augmented as net->augment says, drawn from (net->pass.seed, the loader's step, position in the
 * global batch: net->pass.offset plus the position in this share), and the step advances by one.
 * On the GPU the cursor and the step live on the device, so a captured step replays with the
 * following batch and draws each time. */
bn_status bn_loader_fill_next(bn_loader *ld, bn_net *net, int n, int train);

/* A training batch gathered a step ahead, on the GPU: bn_loader_stage queues the gather of the
 * next n examples, as bn_loader_fill_next(.., 1) would fill them (the cursor, the step and the
 * draws move on alike), on the context's side stream beside what the stream queues next: after
 * the side stream's last fork where one is pending (a step's start, where the gradients' zeroing
 * forks it), else after what the stream holds (the side stream is left pending: the stream joins
 * it before the backward pass, core/device.h). bn_loader_take, in a later step, makes it the
 * step's batch without copying it. The batches take turns between two places: a stage of the
 * loader's, and the input's and labels' own buffers. A batch staged while the net reads its own
 * buffers goes into the stage, and its take points the input, the labels and the step's draws
 * (bn_pass.dev_step) at the stage; one staged while the net reads the stage goes into the own
 * buffers, and its take points them back.
 * So the batch a step reads stays in place through its backward pass while the next one is
 * gathered beside it. bn_loader_read_own points them back where a run of such steps ends; it must
 * come before the net is freed or fills a batch any other way. The stage holds one batch;
 * bn_loader_reserve_stage makes it, outside a captured step, for batches of up to n and never
 * smaller than the net's capacity, since the net reads it as its input. A step graph
 * replays with the batches that follow where it starts and ends reading the own buffers (an even
 * number of takes, or ending with bn_loader_read_own) with nothing staged or a batch staged in
 * the stage. */
bn_status bn_loader_reserve_stage(bn_loader *ld, const bn_net *net, int n);
bn_status bn_loader_stage(bn_loader *ld, bn_net *net, int n);
bn_status bn_loader_take(bn_loader *ld, bn_net *net, int n);
void bn_loader_read_own(bn_loader *ld, bn_net *net);
/* Forgets a staged batch that no step will take. */
void bn_loader_unstage(bn_loader *ld);

/* The host's side of where the loader stands (cursor, step, staged batch): taken before a step
 * that may be captured and put back where its capture failed (bn_step_graph_run's rewind), whose
 * host side moved it while the device work that moves the device's copies never ran. */
typedef struct bn_loader_mark {
    int cursor, staged, staged_n, staged_own;
    unsigned long long step;
} bn_loader_mark;
bn_loader_mark bn_loader_marked(const bn_loader *ld);
void bn_loader_rewind(bn_loader *ld, const bn_loader_mark *m);

void bn_loader_free(bn_loader *ld);

/* The device memory a dataset may take to stay resident: $BLOBNET_DATA_BUDGET (bytes, or with a
 * K, M or G suffix), else half of the device's free memory. A set past it is streamed: its
 * buffer is pinned and mapped, and each batch's gather reads its examples over the bus. */
bn_status bn_loader_data_budget(size_t free_bytes, size_t *budget);

/* Device halves (loader_gpu.cu). */
bn_status bn_loader_upload(bn_loader *ld);
void bn_loader_release_pixels(bn_loader *ld);
bn_status bn_loader_upload_order(bn_loader *ld);
bn_status bn_loader_fill_gpu(bn_loader *ld, bn_net *net, int start, int n);
bn_status bn_loader_fill_next_gpu(bn_loader *ld, bn_net *net, int n);
bn_status bn_loader_fill_train_gpu(bn_loader *ld, bn_net *net, int n);
bn_status bn_loader_reserve_stage_gpu(bn_loader *ld, const bn_net *net, int n);
bn_status bn_loader_stage_gpu(bn_loader *ld, bn_net *net, int n);
bn_status bn_loader_take_gpu(bn_loader *ld, bn_net *net, int n);
void bn_loader_read_own_gpu(bn_loader *ld, bn_net *net);

#ifdef __cplusplus
}
#endif
#endif
