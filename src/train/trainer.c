#include "trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/nvtx.h"
#include "core/timeline.h"
#include "gpu/graph.h"
#include "numerics.h"
#include "step.h"

unsigned long long bn_epoch_seed(unsigned long long seed, int epoch)
{
    return seed * 0x9e3779b97f4a7c15ULL + (unsigned long long)epoch + 1;
}

/* A loss seen after step `last`, the loss having last been seen finite before step `first`:
 * when it is not finite, names those steps and the first layer that holds a non-finite value
 * (a host scan, made once, at failure). */
static bn_status check_finite(bn_net *net, double loss, long first, long last)
{
    if (isfinite(loss)) return BN_OK;
    char where[384], found[448], steps[64];
    if (bn_numerics_locate(net, where, sizeof where)) {
        snprintf(found, sizeof found, "first non-finite value: %s", where);
    } else {
        /* Every blob is finite: the loss itself overflowed, on finite inputs. */
        const bn_layer *l = bn_net_loss_layer(net);
        snprintf(found, sizeof found, "every value is finite: layer %s (%s) overflowed", l->name, l->ops->type);
    }
    if (first >= last) snprintf(steps, sizeof steps, "at step %ld", last);
    else snprintf(steps, sizeof steps, "between steps %ld and %ld", first, last);
    return bn_error(BN_ERR_NUMERIC, "the training loss became %s %s; %s; lower the learning rate",
                    isnan(loss) ? "NaN" : "infinite", steps, found);
}

/* A CSV row for one logged step: that batch's loss and accuracy (reads them to the host). */
static bn_status log_step(const bn_trainer_opts *opts, bn_net *net, int epoch, long step, double lr, double t0)
{
    /* A read waits for the queued steps: on several GPUs, with the deadline, since a step whose
     * peer died never ends. */
    if (opts->dist) BN_TRY(bn_dist_wait(opts->dist, net->pass.ctx));
    const float *m = bn_blob_host_rd(net->metrics);
    if (!m) return bn_last_status();
    return bn_metrics_log_row(opts->log, "%d,%ld,%.9g,%.9g,%.9g,,,%.3f,%s\n", epoch, step, lr,
                              (double)m[0] / net->batch, (double)m[1] / net->batch, bn_clock_seconds() - t0,
                              opts->log->no_holdout_columns ? "" : ",,");
}

static bn_status log_epoch(const bn_trainer_opts *opts, const bn_epoch_report *r, long step)
{
    char val[64] = "";
    if (!opts->log->no_holdout_columns && r->has_val) snprintf(val, sizeof val, ",%.9g,%.9g", r->val_loss, r->val_acc);
    else if (!opts->log->no_holdout_columns) snprintf(val, sizeof val, ",,");
    return bn_metrics_log_row(opts->log, "%d,%ld,%.9g,%.9g,%.9g,%.9g,%.9g,%.3f,%.1f%s\n", r->epoch, step, r->lr,
                              r->train_loss, r->train_acc, r->test_loss, r->test_acc, r->seconds, r->images_per_s,
                              val);
}

bn_status bn_step_running_metrics(const bn_step_info *info, double *loss, double *acc)
{
    if (info->dist) BN_TRY(bn_dist_wait(info->dist, bn_ctx_current()));
    const float *sums = bn_blob_host_rd(info->sums);
    if (!sums) return bn_last_status();
    long covered = info->sums_seen > 0 ? info->sums_seen : info->seen;
    double seen = covered > 0 ? (double)covered : 1.0;
    *loss = sums[0] / seen;
    *acc = sums[1] / seen;
    return BN_OK;
}

/* The training step's captured graphs, each for one size of the global batch: full batches (the
 * capacity; a rank trains its share), and the epoch's last, shorter batch, whose size recurs every
 * epoch (on several GPUs the host queues only a few steps ahead of its device, so a short step run
 * kernel by kernel left the GPUs idle at every epoch's end). Keyed by the global size, not a
 * rank's share: a share of a short batch can have a full batch's share's size (9 on 3 ranks: 3, 3,
 * 3; 10: 3, 3, 4) while its weight in the sum (its share of the batch) and its place differ. A size
 * replays once one eager step of it has made every layer's per-shape choices. */
typedef struct step_graphs {
    bn_step_graph full, last;
    bn_step_graph group; /* group_size full steps one after another (group_steps) */
    int group_size;      /* the steps group holds; 0 before it is first captured */
    int warm;   /* an eager full step ran */
    int last_n; /* the size of the last eager short step; 0 for none */
} step_graphs;

static void step_graphs_free(step_graphs *g)
{
    bn_step_graph_free(&g->full);
    bn_step_graph_free(&g->last);
    bn_step_graph_free(&g->group);
}

/* The graph of g a pass over n examples may replay (full: a full batch's), or NULL: on the GPU,
 * with capturable layers, once an eager pass of that shape ran (step_graphs_ran). */
static bn_step_graph *step_graphs_pick(step_graphs *g, const bn_net *net, int n, int full)
{
    if (!g || !net->pass.ctx || n <= 0 || !bn_net_graph_safe(net)) return NULL;
    if (n == full) return g->warm ? &g->full : NULL;
    return n == g->last_n ? &g->last : NULL;
}

/* An eager pass over n examples made that shape's plans: the next one of its shape may capture. */
static void step_graphs_ran(step_graphs *g, int n, int full)
{
    if (!g || n <= 0) return;
    if (n == full) {
        g->warm = 1;
    } else if (n != g->last_n) {
        bn_step_graph_free(&g->last);
        g->last_n = n;
    }
}

/* The graph a training step of n examples may replay, or NULL; none in a profiler capture range
 * (its NVTX ranges are per step). */
static bn_step_graph *replay_graph(step_graphs *g, const bn_net *net, const bn_trainer_opts *opts, int n, int full)
{
    return opts->no_graph || opts->profile_first ? NULL : step_graphs_pick(g, net, n, full);
}

/* Says once, on stderr, which layer keeps the training steps from replaying a CUDA graph when
 * they otherwise would: a user's type that leaves graph_safe unset trains slower without
 * telling why. */
static void note_no_replay(const bn_net *net, const bn_trainer_opts *opts)
{
    if (!net->pass.ctx || opts->no_graph || opts->profile_first) return;
    const bn_layer *l = bn_net_graph_blocker(net);
    if (!l) return;
    fprintf(stderr, "blobnet: note: layer %s (%s) %s, so every training step launches its kernels instead of "
            "replaying a CUDA graph\n", l->name, l->ops->type,
            l->ops->graph_safe ? "has no GPU pass" : "leaves graph_safe unset");
}

/* A replayed graph skipped the body's host side: the loader's cursor moves on, and every blob
 * it wrote on the device (the network's and `sums`) is marked device-newer, so that the next
 * host read transfers. */
static void note_replay(bn_loader *ld, bn_net *net, int n, bn_blob *sums)
{
    ld->host_cursor += ld->stride ? ld->stride : n;
    bn_net_mark_device_written(net);
    bn_blob_mark_device_written(sums);
}

/* The host's side of `steps` training steps a graph replayed: the loader's cursor, the network's
 * and the sums' blobs (note_replay), the optimizer's iteration and its state. */
static void note_step_replays(bn_step_body *b, int steps)
{
    for (int i = 0; i < steps; i++) note_replay(b->ld, b->net, b->n, b->acc);
    b->opt->iter += steps;
    for (int k = 0; k < b->opt->num_state; k++) bn_blob_mark_device_written(b->opt->state[k]);
}

/* One training step of a global batch of n (this rank's share b->n) out of the capacity `batch`. */
static bn_status train_step(bn_step_body *b, step_graphs *graphs, int n, int batch, const bn_trainer_opts *opts,
                            long step)
{
    char range[48];
    snprintf(range, sizeof range, "step %ld", step + 1);
    bn_nvtx_push(range, BN_NVTX_STEP);
    b->net->pass.step = (unsigned long long)step;
    bn_status s;
    bn_step_graph *graph = b->n > 0 ? replay_graph(graphs, b->net, opts, n, batch) : NULL;
    if (graph) {
        int replayed;
        /* Evaluation may have left other shapes on the blobs; the graph has its own. */
        BN_TRY(bn_net_set_batch(b->net, b->n));
        bn_step_body_mark(b);
        s = bn_step_graph_run(graph, b->net->pass.ctx, bn_step_body_run, bn_step_body_rewind, b, &replayed);
        if (s == BN_OK && replayed) note_step_replays(b, 1);
    } else {
        s = bn_step_body_run(b);
        if (s == BN_OK && b->n > 0) step_graphs_ran(graphs, n, batch);
    }
    bn_nvtx_pop();
    return s;
}

/* Full steps that one graph holds where nothing on the host comes between them: the GPU's gap
 * between one graph's end and the next one's start (2.6-3.3 us on an H200), and the gather of
 * the group's first batch at the head of its first step, then come once a group instead of once a
 * step. Eight: mlp 2.5% and LeNet at 64 0.6% faster than four, no suite row measured slower beyond
 * its spread (docs/performance.md, version 84); sixteen gained mlp another 1% and left up to 15
 * steps an epoch outside any group. Where the host reads every few steps, four can leave fewer
 * heads (bn_trainer_group_size). */
#define GROUP_STEPS 8

int bn_trainer_group_size(long log_every, long checkpoint_every, long numerics_every)
{
    const long every[] = {log_every, checkpoint_every, numerics_every};
    long c = 0;
    for (int i = 0; i < 3; i++)
        if (every[i] > 0 && (c == 0 || every[i] < c)) c = every[i];
    if (c == 0) return GROUP_STEPS;
    const int half = GROUP_STEPS / 2;
    /* Between two reads c steps apart: the groups' first steps and the steps outside a group. */
    const long heads = c / GROUP_STEPS + c % GROUP_STEPS, heads_half = c / half + c % half;
    return heads <= heads_half ? GROUP_STEPS : half;
}

/* This run's group size, from the cadences its options read at (logs_after, saves_after,
 * prints_numerics_after). */
static int run_group_size(const bn_trainer_opts *opts)
{
    return bn_trainer_group_size(opts->log ? opts->log_every : 0,
                                 opts->save_path || opts->dist ? opts->checkpoint_every : 0, opts->debug_numerics);
}

/* What the host reads after step `step` (counted from 1), each asked for every so many steps: a
 * row of the metrics log, a checkpoint (on several GPUs every rank joins its collectives), the
 * numerics' table. The loop and after_step act on them; group_steps keeps them out of a group. */
static int logs_after(const bn_trainer_opts *opts, long step)
{
    return opts->log && opts->log_every > 0 && step % opts->log_every == 0;
}

static int saves_after(const bn_trainer_opts *opts, long step)
{
    return (opts->save_path || opts->dist) && opts->checkpoint_every > 0 && step % opts->checkpoint_every == 0;
}

static int prints_numerics_after(const bn_trainer_opts *opts, long step)
{
    return opts->debug_numerics > 0 && step % opts->debug_numerics == 0;
}

/* How many steps to launch from the batch at `start` on: the run's group size where they are all
 * full, the single step's graph has been captured (so every plan is made), one process trains
 * them, and no step but the group's last is one after which the host reads or saves (a logged
 * row, a checkpoint, the numerics' table, a stop asked for already); else 1. */
static int group_steps(const step_graphs *g, const bn_trainer_opts *opts, const bn_train_state *st, int start,
                       int count, int batch)
{
    if (opts->dist || opts->no_graph || opts->profile_first || !g->full.exec || g->group.failed) return 1;
    const int size = run_group_size(opts);
    if (count - start < size * batch || (opts->stop && *opts->stop)) return 1;
    for (long done = st->step + 1; done < st->step + size; done++)
        if (logs_after(opts, done) || saves_after(opts, done) || prints_numerics_after(opts, done)) return 1;
    return size;
}

typedef struct group_body {
    bn_step_body *b;
    long step;   /* the first step's number */
    int size;    /* its steps */
    int staging; /* each step but the last stages the next one's batch */
} group_body;

/* The group's steps; each but the last gathers the next one's batch beside its own forward pass
 * (bn_loader_stage), and each but the first reads its batch where the step before gathered it
 * (bn_loader_take), so that only the first step's gather stands at the head of its step and no
 * copy stands at the others'. */
static bn_status run_group_body(void *arg)
{
    group_body *g = arg;
    bn_status s = BN_OK;
    for (int i = 0; i < g->size && s == BN_OK; i++) {
        g->b->net->pass.step = (unsigned long long)(g->step + i);
        g->b->take_staged = i > 0 && g->staging;
        g->b->stage_next = i + 1 < g->size && g->staging;
        s = bn_step_body_run(g->b);
    }
    g->b->take_staged = g->b->stage_next = 0;
    bn_loader_read_own(g->b->ld, g->b->net); /* the last step read the batch where it was staged */
    bn_loader_unstage(g->b->ld); /* a batch staged by a step that failed after it */
    return s;
}

/* What the group's steps did on the host before their capture failed, undone (graph.h). */
static void rewind_group_body(void *arg)
{
    bn_step_body_rewind(((group_body *)arg)->b);
}

/* `size` full steps from step `step` on, replayed as one graph (captured the first time; a run's
 * groups all have one size, but a graph of another size is never replayed for them). */
static bn_status train_group(bn_step_body *b, step_graphs *graphs, long step, int size)
{
    char range[64];
    snprintf(range, sizeof range, "steps %ld-%ld", step + 1, step + size);
    bn_nvtx_push(range, BN_NVTX_STEP);
    if (graphs->group_size != size) {
        bn_step_graph_free(&graphs->group);
        graphs->group_size = size;
    }
    /* The stage is made here, outside the capture. */
    group_body g = {b, step, size, b->net->pass.ctx->side_stream != NULL};
    int replayed = 0;
    bn_status s = g.staging ? bn_loader_reserve_stage(b->ld, b->net, b->n) : BN_OK;
    if (s == BN_OK) s = bn_net_set_batch(b->net, b->n);
    if (s == BN_OK) {
        bn_step_body_mark(b);
        s = bn_step_graph_run(&graphs->group, b->net->pass.ctx, run_group_body, rewind_group_body, &g, &replayed);
    }
    if (s == BN_OK && replayed) {
        note_step_replays(b, size);
    } else if (s == BN_OK && !graphs->group.failed) {
        /* At every capture (a replaced buffer of the step's can make one again), not only the first. */
        bn_timeline_mark("a group of steps captured");
    }
    bn_nvtx_pop();
    return s;
}

/* Several GPUs: the ranks agree on a stop every this many steps (and at every epoch's end). An
 * agreement queued after step k is read after step k + STOP_EVERY (agree_stop_ahead); how far
 * the host queues ahead of its device is bn_dist_pace's bound, a few steps. */
#define STOP_EVERY 20

/* Before the host reads what the device holds: with several GPUs, a wait with the group's
 * deadline, so that a dead rank ends the run instead of hanging it. */
static bn_status settle_group(const bn_trainer_opts *opts, bn_net *net)
{
    return opts->dist ? bn_dist_wait(opts->dist, net->pass.ctx) : BN_OK;
}

/* Several GPUs: every rank's share of [loss sum, correct] added up. */
static bn_status sum_group(const bn_trainer_opts *opts, bn_net *net, double *loss_sum, double *correct)
{
    if (!opts->dist) return BN_OK;
    double v[2] = {*loss_sum, *correct};
    BN_TRY(bn_dist_sum(opts->dist, net->pass.ctx, v, 2));
    *loss_sum = v[0];
    *correct = v[1];
    return BN_OK;
}

/* Several GPUs: each rank normalised its own share, so the running statistics differ; their
 * mean is what an evaluation or a checkpoint uses. */
static bn_status average_buffers(const bn_trainer_opts *opts, bn_net *net)
{
    if (!opts->dist || !net->buffers || !bn_blob_count(net->buffers)) return BN_OK;
    float *b = bn_blob_dev_wr(net->buffers);
    if (!b) return bn_last_status();
    return bn_dist_average(opts->dist, net->pass.ctx, b, bn_blob_count(net->buffers));
}

/* Several GPUs: the ranks' parameters must be bit-identical after `step`. Hashed where they are,
 * on the device (FNV-1a over a copy on the host took 6.4 ms an epoch for vgg_fashion's 3.5 MB). */
static bn_status check_same_params(const bn_trainer_opts *opts, bn_net *net, long step)
{
    if (!opts->dist || !net->params) return BN_OK;
    BN_TRY(settle_group(opts, net));
    const float *w = bn_blob_dev_rd(net->params);
    if (!w) return bn_last_status();
    uint64_t h;
    BN_TRY(bn_gpu_hash_words(w, bn_blob_count(net->params), &h, net->pass.ctx));
    return bn_dist_check_same(opts->dist, net->pass.ctx, h, step);
}

/* This process's stop request: the signal that asked for it, 0 for none. */
static int stop_asked(const bn_trainer_opts *opts)
{
    int mine = opts->stop ? (int)*opts->stop : 0;
    return mine < 0 ? 1 : mine;
}

/* A rank stopped by another's request takes its stop value, the largest asked for. */
static void take_agreed(const bn_trainer_opts *opts, int agreed, int *stop)
{
    if (agreed > 0 && opts->stop) *opts->stop = (sig_atomic_t)agreed;
    *stop = agreed != 0;
}

/* Whether a stop was asked for: on several GPUs, on any rank (all of them ask together). */
static bn_status agree_stop(const bn_trainer_opts *opts, bn_net *net, int *stop)
{
    if (!opts->dist) {
        *stop = stop_asked(opts) != 0;
        return BN_OK;
    }
    int agreed = 0;
    BN_TRY(bn_dist_max(opts->dist, net->pass.ctx, stop_asked(opts), &agreed));
    take_agreed(opts, agreed, stop);
    return BN_OK;
}

/* agree_stop within an epoch on several GPUs, without draining the devices: reads the agreement
 * queued STOP_EVERY steps ago, which the devices reach while the steps queued since keep them
 * busy, and queues the next one. Waiting for the whole queue instead would leave each GPU idle
 * for the host's round trip, every STOP_EVERY steps. Every rank reads the same agreement after
 * the same step, so all stop together, up to 2 x STOP_EVERY steps after the signal. */
static bn_status agree_stop_ahead(const bn_trainer_opts *opts, bn_net *net, int *stop)
{
    int agreed = 0;
    BN_TRY(bn_dist_max_end(opts->dist, net->pass.ctx, &agreed));
    if (agreed == 0) BN_TRY(bn_dist_max_begin(opts->dist, net->pass.ctx, stop_asked(opts)));
    take_agreed(opts, agreed, stop);
    return BN_OK;
}

/* BLOBNET_RANK_WEIGHTS=DIR: every rank also writes its final weights to DIR/rank<R>.safetensors,
 * so that a test can compare them. */
static bn_status write_rank_weights(const bn_trainer_opts *opts, bn_net *net)
{
    if (!opts->dist) return BN_OK;
    const char *dir = getenv("BLOBNET_RANK_WEIGHTS");
    if (!dir || !dir[0]) return BN_OK;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/rank%d.safetensors", dir, opts->dist->rank) >= (int)sizeof path)
        return bn_error(BN_ERR_USAGE, "BLOBNET_RANK_WEIGHTS=%s: the folder's name is too long", dir);
    return bn_checkpoint_save(path, net, NULL, NULL);
}

static bn_status interrupted(const bn_trainer_opts *opts, const bn_train_state *st)
{
    if (opts->save_path)
        return bn_error(BN_ERR_INTERRUPTED, "interrupted at step %ld; checkpoint saved to %s", st->step,
                        opts->save_path);
    return bn_error(BN_ERR_INTERRUPTED, "interrupted at step %ld; nothing was saved (no --save FILE)", st->step);
}

/* Between two steps: the CPU's loss check, the numerics table, a checkpoint every
 * checkpoint_every steps (the epoch's last step excepted: its end saves anyway) and a stop on
 * request. *checked is the last step whose loss was seen finite. */
static bn_status after_step(bn_net *net, bn_optimizer *opt, bn_blob *acc, bn_train_state *st,
                            const bn_trainer_opts *opts, long *checked, int last_of_epoch)
{
    if (!net->pass.ctx) {
        /* On the CPU the step's loss is on the host already: checking every step costs nothing. */
        const float *m = bn_blob_host_rd(net->metrics);
        if (!m) return bn_last_status();
        BN_TRY(check_finite(net, m[0], st->step, st->step));
        *checked = st->step;
    }
    if (prints_numerics_after(opts, st->step)) {
        if (opts->dist) BN_TRY(bn_dist_wait(opts->dist, net->pass.ctx));
        BN_TRY(bn_numerics_print(net, stderr, st->step));
    }
    int stop = 0;
    if (!opts->dist) stop = opts->stop && *opts->stop;
    else if (last_of_epoch) BN_TRY(agree_stop(opts, net, &stop));
    else if (st->step % STOP_EVERY == 0) BN_TRY(agree_stop_ahead(opts, net, &stop));
    int periodic = saves_after(opts, st->step) && !last_of_epoch;
    /* Only rank 0 has a save path, but every rank joins the collectives of a save. */
    if ((opts->save_path || opts->dist) && (stop || periodic)) {
        /* The epoch's running sums go into the checkpoint, so that a resume continues them. */
        BN_TRY(settle_group(opts, net));
        const float *sums = bn_blob_host_rd(acc);
        if (!sums) return bn_last_status();
        double loss_sum = sums[0], correct = sums[1];
        BN_TRY(sum_group(opts, net, &loss_sum, &correct));
        st->epoch_loss_sum = loss_sum;
        st->epoch_correct = correct;
        BN_TRY(check_finite(net, st->epoch_loss_sum, *checked + 1, st->step));
        *checked = st->step;
        BN_TRY(average_buffers(opts, net));
        BN_TRY(check_same_params(opts, net, st->step));
        if (opts->save_path) BN_TRY(bn_checkpoint_save(opts->save_path, net, opt, st));
        /* A stop asked for during this save finds the checkpoint up to date already (with several
         * GPUs, the next agreement sees it). */
        if (!opts->dist) stop = opts->stop && *opts->stop;
    }
    return stop ? interrupted(opts, st) : BN_OK;
}

/* The steps of batch examples that cover count examples. */
static long steps_for(long count, int batch)
{
    return (count + batch - 1) / batch;
}

/* The next epoch's order and learning rates, made after this epoch's last step is queued: the
 * host shuffles while the device still runs the steps, and the uploads follow them on the
 * stream, so that the next epoch's first step is queued at once instead of after the shuffle
 * and the uploads, with the device idle (0.5 ms an epoch on an H200, Fashion-MNIST's 60,000
 * examples). */
static bn_status prepare_next_epoch(bn_net *net, bn_optimizer *opt, bn_loader *ld, const bn_train_state *st, int count,
                                    int batch)
{
    BN_TRY(bn_loader_prepare_order(ld, bn_epoch_seed(st->seed, st->epoch + 1)));
    return net->pass.ctx ? bn_optimizer_schedule_ahead(opt, opt->iter, steps_for(count, batch)) : BN_OK;
}

/* Trains the rest of the current epoch, from example st->epoch_seen of its order (a resumed run
 * may have another batch size than the run it resumes: the place is kept in examples, not
 * batches); sums of loss and correct answers go into st. */
static bn_status train_epoch(bn_net *net, bn_optimizer *opt, bn_loader *ld, bn_blob *acc, bn_train_state *st,
                             const bn_trainer_opts *opts, step_graphs *graphs, long *checked, bn_schedule *sched)
{
    double t0 = bn_clock_seconds();
    int count = ld->data->count, batch = net->capacity;
    if (st->epoch_seen < 0 || st->epoch_seen > count)
        return bn_error(BN_ERR_INTERNAL, "resuming at example %ld of an epoch of %d examples", st->epoch_seen, count);
    int first = (int)st->epoch_seen;
    bn_dist *dist = opts->dist;
    int world = dist ? dist->world : 1, rank = dist ? dist->rank : 0;
    /* A rank trains positions [off, off + mine) of each global batch; [full_off, ..) of a full one. */
    int full_off, full_count;
    bn_dist_share(batch, world, rank, &full_off, &full_count);
    bn_step_info info = {.epoch = st->epoch + 1, .epochs = opts->epochs, .batches = (int)steps_for(count, batch),
                         .count = count, .sums = acc, .gpus = world, .dist = dist};
    BN_TRY(bn_loader_set_order(ld, 1, bn_epoch_seed(st->seed, st->epoch)));
    BN_TRY(bn_loader_set_step(ld, (unsigned long long)st->step));
    float *a = bn_blob_host_wr(acc);
    if (!a) return bn_last_status();
    /* The sums of a resumed epoch are the whole group's: one rank carries them on. */
    a[0] = rank == 0 ? (float)st->epoch_loss_sum : 0.0f;
    a[1] = rank == 0 ? (float)st->epoch_correct : 0.0f;
    long sums_seen = rank == 0 ? first : 0;
    /* A replayed graph adds into the device copy without a transfer: make it the newest now. */
    if (net->pass.ctx && !bn_blob_dev_wr(acc)) return bn_last_status();
    BN_TRY(bn_loader_set_cursor(ld, first + full_off));
    /* The order and the schedule may be in place already, queued behind the last epoch's last
     * step (prepare_next_epoch): set_order and schedule then take them as they are. */
    if (net->pass.ctx) BN_TRY(bn_optimizer_schedule(opt, net, opt->iter, steps_for(count - first, batch)));
    /* The passes that draw read each step's number where the gather leaves it (bn_pass.dev_step). */
    net->pass.dev_step = ld->dev_step ? ld->dev_step + 1 : NULL;
    if (sched) bn_schedule_epoch(sched);
    int queued = 0;       /* steps of a group launched and not yet counted */
    long iter_at = 0;     /* the optimizer's iteration of the step counted next, within a group */
    long group_seen = 0;  /* the examples of the epoch a group's launch leaves in the sums */
    for (int start = first; start < count; start += batch) {
        int n = count - start < batch ? count - start : batch;
        int off = 0, mine = n;
        if (dist) {
            bn_dist_share(n, world, rank, &off, &mine);
            /* Only a short last batch moves a share's start off the loader's stride. */
            if (ld->host_cursor != start + off) BN_TRY(bn_loader_set_cursor(ld, start + off));
            net->pass.offset = off;
        }
        if (!queued) iter_at = opt->iter;
        double lr = bn_optimizer_lr(opt, iter_at++);
        if (opts->profile_first && st->step + 1 == opts->profile_first) BN_TRY(bn_profiler_start());
        if (!queued) {
            bn_step_body body = {.net = net, .opt = opt, .ld = ld, .acc = acc, .n = mine, .dist = dist,
                                 .weight = (double)mine / n, .bucket_bytes = dist ? dist->bucket_bytes : 0,
                                 .pend_first = -1, .pend_last = -1, .sched = sched};
            queued = group_steps(graphs, opts, st, start, count, batch);
            group_seen = st->epoch_seen + (long)queued * n;
            if (queued > 1) BN_TRY(train_group(&body, graphs, st->step, queued));
            else BN_TRY(train_step(&body, graphs, n, batch, opts, st->step));
        }
        queued--;
        if (dist) BN_TRY(bn_dist_pace(dist, net->pass.ctx));
        if (sched) {
            /* A changed way of running the all-reduces is captured again at the next full step. */
            int changed;
            BN_TRY(bn_schedule_step(sched, dist, net->pass.ctx, n == batch, opts->out, &changed));
            if (changed) step_graphs_free(graphs);
        }
        /* The run's first steps make the plans (the first) and capture the graph (the second). */
        static int marked;
        if (bn_timeline_asked() && marked < 2) {
            if (net->pass.ctx) BN_TRY(bn_device_sync());
            bn_timeline_mark(marked++ ? "the second step (graph captured)" : "the first step (plans made)");
        }
        /* An empty share drew no batch, so the loader's step did not move with the others'. */
        if (mine == 0) BN_TRY(bn_loader_set_step(ld, (unsigned long long)st->step + 1));
        if (opts->profile_first && st->step + 1 == opts->profile_last) BN_TRY(bn_profiler_stop());
        st->step++;
        if (logs_after(opts, st->step)) BN_TRY(log_step(opts, net, st->epoch + 1, st->step, lr, t0));
        st->batch_in_epoch++;
        st->epoch_seen += n;
        if (opts->progress) {
            info.batch = info.batches - (int)steps_for(count - st->epoch_seen, batch);
            info.seen = st->epoch_seen;
            info.images += n;
            sums_seen += mine;
            /* Read within a group, the sums already hold its later steps. */
            info.sums_seen = dist ? sums_seen : queued ? group_seen : 0;
            info.seconds = bn_clock_seconds() - t0;
            BN_TRY(opts->progress(opts->progress_user, BN_PROGRESS_STEP, &info));
        }
        const int last_of_epoch = start + n >= count;
        if (last_of_epoch && st->epoch + 1 < opts->epochs) BN_TRY(prepare_next_epoch(net, opt, ld, st, count, batch));
        /* Within a group the device is steps ahead of the count: a stop or a save waits for its end. */
        if (!queued) BN_TRY(after_step(net, opt, acc, st, opts, checked, last_of_epoch));
    }
    BN_TRY(settle_group(opts, net));
    const float *sums = bn_blob_host_rd(acc);
    if (!sums) return bn_last_status();
    double loss_sum = sums[0], correct = sums[1];
    BN_TRY(sum_group(opts, net, &loss_sum, &correct));
    st->epoch_loss_sum = loss_sum;
    st->epoch_correct = correct;
    BN_TRY(check_finite(net, st->epoch_loss_sum, *checked + 1, st->step));
    *checked = st->step;
    return BN_OK;
}

/* One evaluation batch from the loader's cursor, as one function for graph capture. */
typedef struct eval_body {
    bn_net *net;
    bn_loader *ld;
    bn_blob *sum;
    int n;
    bn_loader_mark mark; /* the loader's place before the batch, for a capture that fails */
} eval_body;

static bn_status run_eval_body(void *arg)
{
    eval_body *b = arg;
    int fused = bn_net_fuse_loss(b->net, b->sum, 0);
    bn_status s = bn_loader_fill_next(b->ld, b->net, b->n, 0);
    if (s == BN_OK) s = bn_net_forward(b->net, 0);
    if (s == BN_OK && !fused) s = bn_step_accumulate_metrics(b->net, b->sum);
    if (fused) bn_net_unfuse_loss(b->net);
    return s;
}

static void rewind_eval_body(void *arg)
{
    eval_body *b = arg;
    bn_loader_rewind(b->ld, &b->mark);
}

/* Evaluation over a loader in its natural order, summing into sum (a 2-float scratch blob).
 * With graphs (GPU), a batch replays a captured forward pass once one of its size ran eagerly, in
 * this evaluation or an earlier one over the same loader. With dist, this rank evaluates its share
 * of the dataset and the sums are the whole group's. */
static bn_status evaluate_with(bn_net *net, bn_loader *ld, bn_blob *sum, step_graphs *graphs, bn_dist *dist,
                               double *loss, double *acc)
{
    int count = ld->data->count, batch = net->capacity, first = 0, mine = count;
    if (dist) bn_dist_share(count, dist->world, dist->rank, &first, &mine);
    int end = first + mine;
    BN_TRY(bn_blob_zero(sum));
    if (net->pass.ctx && !bn_blob_dev_rd(sum)) return bn_last_status();
    BN_TRY(bn_loader_set_cursor(ld, first));
    bn_nvtx_push("eval", BN_NVTX_STEP);
    bn_status s = BN_OK;
    for (int start = first; s == BN_OK && start < end; start += batch) {
        eval_body b = {net, ld, sum, end - start < batch ? end - start : batch, bn_loader_marked(ld)};
        bn_step_graph *graph = step_graphs_pick(graphs, net, b.n, batch);
        if (!graph) {
            s = run_eval_body(&b);
            if (s == BN_OK) step_graphs_ran(graphs, b.n, batch);
            continue;
        }
        int replayed;
        s = bn_net_set_batch(net, b.n);
        if (s == BN_OK)
            s = bn_step_graph_run(graph, net->pass.ctx, run_eval_body, rewind_eval_body, &b, &replayed);
        if (s == BN_OK && replayed) note_replay(ld, net, b.n, sum);
    }
    bn_nvtx_pop();
    BN_TRY(s);
    if (dist) BN_TRY(bn_dist_wait(dist, net->pass.ctx));
    const float *m = bn_blob_host_rd(sum);
    if (!m) return bn_last_status();
    if (!dist) {
        /* Float divisions: the outputs of bn_evaluate_each agree with these to the bit. */
        *loss = m[0] / count;
        *acc = m[1] / count;
        return BN_OK;
    }
    double v[2] = {m[0], m[1]};
    BN_TRY(bn_dist_sum(dist, net->pass.ctx, v, 2));
    *loss = v[0] / count;
    *acc = v[1] / count;
    return BN_OK;
}

bn_status bn_evaluate(bn_net *net, const bn_dataset *data, double *loss, double *acc)
{
    bn_loader ld;
    BN_TRY(bn_loader_init(&ld, data, net->pass.ctx));
    bn_blob *sum = bn_blob_new("eval.metrics", 2, 1, 1, 1);
    bn_status s = sum ? evaluate_with(net, &ld, sum, NULL, NULL, loss, acc) : bn_last_status();
    bn_blob_free(sum);
    bn_loader_free(&ld);
    return s;
}

/* The gradient slab the ranks sum (dist.h: through the peers' memory where they can). */
static bn_status attach_grads(bn_net *net, bn_dist *dist)
{
    float *g = net->grads ? bn_blob_dev_wr(net->grads) : NULL;
    if (net->grads && !g) return bn_last_status();
    return bn_dist_attach_grads(dist, net->pass.ctx, g, g ? bn_blob_count(net->grads) : 0);
}

static void print_epoch(FILE *out, const bn_epoch_report *r)
{
    if (!out) return;
    char per_gpu[48] = "", val[32] = "";
    if (r->gpus > 1) snprintf(per_gpu, sizeof per_gpu, " (%.0f per GPU)", r->images_per_s / r->gpus);
    if (r->has_val) snprintf(val, sizeof val, "  val acc %6.2f%%", 100.0 * r->val_acc);
    fprintf(out,
            "epoch %*d/%d  lr %.6f  train loss %.4f  train acc %6.2f%%%s  test acc %6.2f%%  %7.3f s  %8.0f img/s%s"
            "  eval %.1f ms\n",
            r->epochs >= 10 ? 2 : 1, r->epoch, r->epochs, r->lr, r->train_loss, 100.0 * r->train_acc, val,
            100.0 * r->test_acc, r->seconds, r->images_per_s, per_gpu, 1e3 * r->eval_seconds);
    fflush(out);
}

bn_status bn_train(bn_net *net, bn_optimizer *opt, const bn_dataset *train, const bn_dataset *test,
                   const bn_trainer_opts *opts, bn_train_state *st, bn_epoch_report *last)
{
    if (!bn_net_loss_layer(net))
        return bn_error(BN_ERR_USAGE, "%s: training needs a loss layer (softmax_ce) at the end", net->source);
    if (opts->dist && !net->pass.ctx)
        return bn_error(BN_ERR_USAGE, "rank %d: training on several GPUs needs the GPU path, not the CPU",
                        opts->dist->rank);
    memset(last, 0, sizeof *last);
    long steps_per_epoch = (train->count + net->capacity - 1) / net->capacity;
    opt->max_iter = steps_per_epoch * opts->epochs;
    bn_loader ld, test_ld;
    BN_TRY(bn_loader_init(&ld, train, net->pass.ctx));
    /* Each rank reads its share of every global batch and skips the others'. */
    if (opts->dist) ld.stride = net->capacity;
    bn_loader val_ld = {0};
    bn_status s = bn_loader_init(&test_ld, test, net->pass.ctx);
    if (s == BN_OK && opts->holdout) s = bn_loader_init(&val_ld, opts->holdout, net->pass.ctx);
    bn_timeline_mark("the data's loaders ready");
    bn_blob *acc = s == BN_OK ? bn_blob_new("epoch.metrics", 2, 1, 1, 1) : NULL;
    bn_blob *eval_sum = acc ? bn_blob_new("eval.metrics", 2, 1, 1, 1) : NULL;
    if (s == BN_OK && !eval_sum) s = bn_last_status();
    char range[48];
    step_graphs graphs = {0}, eval_graphs = {0}, val_graphs = {0};
    bn_schedule sched = {0};
    if (s == BN_OK && opts->dist) s = bn_schedule_open(&sched, opts->dist->schedule, net->num_layers);
    if (s == BN_OK && opts->dist) s = attach_grads(net, opts->dist);
    long checked = st->step;
    st->examples = train->count;
    note_no_replay(net, opts);
    while (s == BN_OK && st->epoch < opts->epochs) {
        snprintf(range, sizeof range, "epoch %d", st->epoch + 1);
        bn_nvtx_push(range, BN_NVTX_STEP);
        long seen_before = st->epoch_seen;
        double t0 = bn_clock_seconds();
        s = train_epoch(net, opt, &ld, acc, st, opts, &graphs, &checked, opts->dist ? &sched : NULL);
        if (s == BN_OK && net->pass.ctx) s = opts->dist ? bn_dist_wait(opts->dist, net->pass.ctx) : bn_device_sync();
        double seconds = bn_clock_seconds() - t0;
        bn_nvtx_pop();
        snprintf(range, sizeof range, "epoch %d trained", st->epoch + 1);
        bn_timeline_mark(range);
        bn_step_info info = {.epoch = st->epoch + 1, .epochs = opts->epochs, .seen = st->epoch_seen, .sums = acc};
        if (s == BN_OK && opts->progress) s = opts->progress(opts->progress_user, BN_PROGRESS_EVAL, &info);
        if (s != BN_OK) break;
        bn_epoch_report r = {.epoch = st->epoch + 1, .epochs = opts->epochs, .lr = bn_optimizer_lr(opt, opt->iter - 1),
                             .train_loss = st->epoch_loss_sum / st->epoch_seen,
                             .train_acc = st->epoch_correct / st->epoch_seen, .seconds = seconds,
                             .images_per_s = (st->epoch_seen - seen_before) / (seconds > 0 ? seconds : 1e-9),
                             .gpus = opts->dist ? opts->dist->world : 1};
        double eval_start = bn_clock_seconds();
        s = average_buffers(opts, net);
        if (s == BN_OK)
            s = evaluate_with(net, &test_ld, eval_sum, opts->no_graph ? NULL : &eval_graphs, opts->dist, &r.test_loss,
                              &r.test_acc);
        if (s == BN_OK && opts->holdout) {
            r.has_val = 1;
            s = evaluate_with(net, &val_ld, eval_sum, opts->no_graph ? NULL : &val_graphs, opts->dist, &r.val_loss,
                              &r.val_acc);
        }
        r.eval_seconds = bn_clock_seconds() - eval_start;
        snprintf(range, sizeof range, "epoch %d evaluated", st->epoch + 1);
        bn_timeline_mark(range);
        if (s != BN_OK) break;
        *st = (bn_train_state){.seed = st->seed, .epoch = st->epoch + 1, .step = st->step, .examples = st->examples};
        /* The row before the checkpoint: the log then holds every row up to a checkpoint's step, and
         * a resume from it drops only rows it trains again. */
        if (opts->log) s = log_epoch(opts, &r, st->step);
        if (s == BN_OK && opts->dist) {
            s = check_same_params(opts, net, st->step);
            snprintf(range, sizeof range, "epoch %d compared across the ranks", st->epoch);
            bn_timeline_mark(range);
        }
        if (s == BN_OK && opts->save_path) s = bn_checkpoint_save(opts->save_path, net, opt, st);
        if (opts->progress) {
            bn_status p = opts->progress(opts->progress_user, BN_PROGRESS_DONE, &info);
            if (s == BN_OK) s = p;
        }
        print_epoch(opts->out, &r);
        *last = r;
        int stop = 0;
        if (s == BN_OK) s = agree_stop(opts, net, &stop);
        if (s == BN_OK && stop) s = interrupted(opts, st);
        if (opts->until_accuracy > 0 && r.test_acc >= opts->until_accuracy) break;
    }
    /* The epoch's end compared the parameters already; these are the final weights. */
    if (s == BN_OK) s = write_rank_weights(opts, net);
    /* After a failed collective the device may hold kernels that a lost peer never lets end
     * (NCCL's abort can outlive its wait, comm.cu), and freeing device memory would wait for them
     * without a deadline: nothing is freed, and the caller ends the process (bn_dist_failed). */
    if (opts->dist && bn_dist_failed(opts->dist)) return s;
    bn_schedule_close(&sched);
    step_graphs_free(&graphs);
    step_graphs_free(&eval_graphs);
    step_graphs_free(&val_graphs);
    bn_blob_free(acc);
    bn_blob_free(eval_sum);
    net->pass.dev_step = NULL;
    bn_loader_free(&ld);
    bn_loader_free(&test_ld);
    bn_loader_free(&val_ld);
    return s;
}
