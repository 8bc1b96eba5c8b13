/* parallel.c - the CPU pool: workers that wait for a run to be published, then take tasks
 * from a shared counter until none are left.
 *
 * `gen` numbers the runs, two apart: odd while the caller writes a run's fields (fn, arg,
 * tasks, the counters), even once they are published. A worker counts itself `inside` and then
 * reads gen again, and runs the tasks only when it has not moved; the caller makes gen odd and
 * then waits until no worker is inside before it writes. Either the caller sees the worker
 * inside and waits, or the worker sees gen move and backs off (both sides' atomics are
 * sequentially consistent), so no worker ever reads a run's fields half written or runs a task
 * of one run with the fields of the next.
 * Workers spin a little before they sleep: the passes of a step follow each other within
 * microseconds, and a futex wake-up costs tens of them. */
#define _GNU_SOURCE
#include "parallel.h"

#include <cblas.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <strings.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* Pauses a worker spends looking for the next run before it sleeps (about 100 us). */
#define SPIN_ROUNDS 4000

typedef struct worker_slot {
    float *buf[BN_CPU_SCRATCH_SLOTS];
    size_t cap[BN_CPU_SCRATCH_SLOTS];
} worker_slot;

static struct {
    pthread_mutex_t lock; /* guards gen changes for sleepers, and quit */
    pthread_cond_t wake;
    pthread_mutex_t pass; /* bn_cpu_lock: recursive */
    int want;    /* threads asked for; 0: the default */
    int threads; /* threads of the running pool (1: none started) */
    int started; /* workers started */
    pthread_t ids[BN_CPU_MAX_THREADS];
    int quit;
    atomic_uint gen;
    atomic_int inside;
    atomic_int next, done;
    bn_task_fn fn;
    void *arg;
    int tasks;
    worker_slot slots[BN_CPU_MAX_THREADS];
    float *shared[BN_CPU_SCRATCH_SLOTS];
    size_t shared_cap[BN_CPU_SCRATCH_SLOTS];
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

static _Thread_local int in_task, my_worker;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void make_pass_lock(void)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&pool.pass, &a);
    pthread_mutexattr_destroy(&a);
}

void bn_cpu_lock(void)
{
    pthread_once(&once, make_pass_lock);
    pthread_mutex_lock(&pool.pass);
}

void bn_cpu_unlock(void)
{
    pthread_mutex_unlock(&pool.pass);
}

static int count_default_threads(void)
{
    const char *env = getenv("BLOBNET_THREADS");
    if (env && *env) {
        char *end;
        errno = 0;
        long v = strtol(env, &end, 10);
        if (!errno && !*end && v >= 1 && v <= BN_CPU_MAX_THREADS) return (int)v;
    }
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n >= 1) return n < BN_CPU_MAX_THREADS ? n : BN_CPU_MAX_THREADS;
    }
    return 1;
}

/* $BLOBNET_THREADS, else the CPUs this process may run on; worked out once, since every run
 * asks (sched_getaffinity is a system call). */
static int default_threads(void)
{
    static int known;
    if (!known) known = count_default_threads();
    return known;
}

int bn_cpu_threads(void)
{
    return pool.want ? pool.want : default_threads();
}

/* Runs tasks of the current run until none are left. */
static void take_tasks(int worker)
{
    int t;
    while ((t = atomic_fetch_add(&pool.next, 1)) < pool.tasks) {
        pool.fn(pool.arg, t, worker);
        atomic_fetch_add(&pool.done, 1);
    }
}

/* Whether gen names a published run the worker has not run yet. */
static int fresh(unsigned g, unsigned seen)
{
    return g != seen && !(g & 1u);
}

static void *worker_main(void *p)
{
    int me = (int)(size_t)p;
    unsigned seen = atomic_load(&pool.gen), g;
    in_task = 1;
    my_worker = me;
    for (;;) {
        int spins = 0;
        while (!fresh(g = atomic_load(&pool.gen), seen) && spins++ < SPIN_ROUNDS) cpu_relax();
        if (!fresh(g, seen)) {
            pthread_mutex_lock(&pool.lock);
            while (!fresh(g = atomic_load(&pool.gen), seen) && !pool.quit) pthread_cond_wait(&pool.wake, &pool.lock);
            pthread_mutex_unlock(&pool.lock);
        }
        if (pool.quit) return NULL;
        atomic_fetch_add(&pool.inside, 1);
        if (atomic_load(&pool.gen) == g) {
            seen = g;
            take_tasks(me);
        }
        atomic_fetch_sub(&pool.inside, 1);
    }
}

static void stop_workers(void)
{
    if (pool.started == 0) return;
    pthread_mutex_lock(&pool.lock);
    pool.quit = 1;
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    for (int i = 1; i <= pool.started; i++) pthread_join(pool.ids[i], NULL);
    pool.started = 0;
    pool.quit = 0;
    pool.threads = 1;
}

/* A forked child has the caller's thread only: it starts its own workers when it needs them. */
static void after_fork_child(void)
{
    pool.started = 0;
    pool.threads = 1;
    pool.quit = 0;
    atomic_store(&pool.inside, 0);
    atomic_store(&pool.gen, 0); /* even: the caller may have forked between its two moves */
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    make_pass_lock();
}

static void at_exit_stop(void)
{
    /* Ends the workers so that tools watching the exit (valgrind) see every thread joined. */
    if (pool.started) stop_workers();
}

/* Starts the workers the pool lacks; with none to be had, the caller runs every task. */
static void ensure_workers(void)
{
    static int hooks;
    int want = bn_cpu_threads();
    if (pool.threads == want && (want == 1 || pool.started == want - 1)) return;
    stop_workers();
    if (!hooks) {
        hooks = 1;
        pthread_atfork(NULL, NULL, after_fork_child);
        atexit(at_exit_stop);
    }
    /* The pool is the parallelism: OpenBLAS's own threads would spin against its workers. */
    openblas_set_num_threads(1);
    pool.threads = want;
    /* Workers are born with every signal blocked: a signal meant for the process (SIGCHLD that a
     * supervisor waits for with sigtimedwait, SIGINT) must reach the threads that wait for it,
     * not a worker that would take it and drop it. */
    sigset_t all, old;
    sigfillset(&all);
    int masked = pthread_sigmask(SIG_SETMASK, &all, &old) == 0;
    for (int i = 1; i < want; i++) {
        if (pthread_create(&pool.ids[i], NULL, worker_main, (void *)(size_t)i) != 0) break;
        pool.started = i;
    }
    if (masked) pthread_sigmask(SIG_SETMASK, &old, NULL);
    pool.threads = pool.started + 1;
}

bn_status bn_cpu_threads_set(int n)
{
    if (n < 0 || n > BN_CPU_MAX_THREADS)
        return bn_error(BN_ERR_USAGE, "%d threads: the CPU pool takes 1 to %d (0: one per CPU)", n,
                        BN_CPU_MAX_THREADS);
    bn_cpu_lock();
    pool.want = n;
    bn_cpu_unlock();
    return BN_OK;
}

void bn_parallel_run(int tasks, bn_task_fn fn, void *arg)
{
    if (tasks <= 0) return;
    if (in_task) {
        for (int t = 0; t < tasks; t++) fn(arg, t, my_worker);
        return;
    }
    bn_cpu_lock();
    ensure_workers();
    if (pool.started == 0 || tasks == 1) {
        for (int t = 0; t < tasks; t++) fn(arg, t, 0);
        bn_cpu_unlock();
        return;
    }
    atomic_fetch_add(&pool.gen, 1); /* odd: the fields are about to change */
    while (atomic_load(&pool.inside) != 0) cpu_relax();
    pool.fn = fn, pool.arg = arg, pool.tasks = tasks;
    atomic_store(&pool.next, 0);
    atomic_store(&pool.done, 0);
    pthread_mutex_lock(&pool.lock);
    atomic_fetch_add(&pool.gen, 1); /* even: published */
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    in_task = 1;
    take_tasks(0);
    in_task = 0;
    while (atomic_load(&pool.done) != tasks) cpu_relax();
    bn_cpu_unlock();
}

typedef struct ranges {
    size_t count, piece;
    bn_range_fn fn;
    void *arg;
} ranges;

static void range_task(void *p, int task, int worker)
{
    const ranges *r = p;
    size_t lo = (size_t)task * r->piece, hi = lo + r->piece < r->count ? lo + r->piece : r->count;
    r->fn(r->arg, lo, hi);
}

void bn_parallel_ranges(size_t count, size_t grain, bn_range_fn fn, void *arg)
{
    if (count == 0) return;
    if (grain == 0) grain = 16384;
    size_t pieces = (count + grain - 1) / grain;
    /* More pieces than a few per thread only add hand-overs. */
    size_t most = 4 * (size_t)bn_cpu_threads();
    if (pieces > most) pieces = most;
    ranges r = {count, (count + pieces - 1) / pieces, fn, arg};
    bn_parallel_run((int)((count + r.piece - 1) / r.piece), range_task, &r);
}

bn_status bn_cpu_scratch_reserve(int slot, size_t floats)
{
    if (slot < 0 || slot >= BN_CPU_SCRATCH_SLOTS)
        return bn_error(BN_ERR_INTERNAL, "CPU scratch slot %d of %d", slot, BN_CPU_SCRATCH_SLOTS);
    int n = bn_cpu_threads();
    for (int w = 0; w < n; w++) {
        worker_slot *s = &pool.slots[w];
        if (s->cap[slot] >= floats) continue;
        float *grown = realloc(s->buf[slot], floats * sizeof *grown);
        if (!grown)
            return bn_error(BN_ERR_NOMEM, "cannot allocate %zu floats of CPU scratch for each of %d threads", floats,
                            n);
        s->buf[slot] = grown;
        s->cap[slot] = floats;
    }
    return BN_OK;
}

float *bn_cpu_scratch(int slot, int worker)
{
    return pool.slots[worker].buf[slot];
}

float *bn_cpu_shared_scratch(int slot, size_t floats)
{
    if (slot < 0 || slot >= BN_CPU_SCRATCH_SLOTS) {
        bn_error(BN_ERR_INTERNAL, "CPU scratch slot %d of %d", slot, BN_CPU_SCRATCH_SLOTS);
        return NULL;
    }
    if (pool.shared_cap[slot] >= floats) return pool.shared[slot];
    float *grown = realloc(pool.shared[slot], floats * sizeof *grown);
    if (!grown) {
        bn_error(BN_ERR_NOMEM, "cannot allocate %zu floats of CPU scratch", floats);
        return NULL;
    }
    pool.shared[slot] = grown;
    pool.shared_cap[slot] = floats;
    return grown;
}

/* Whether OpenBLAS's loaded core is one of names (NULL-terminated), ignoring case. */
static int blas_core_is(const char *const *names)
{
    const char *now = openblas_get_corename();
    for (int i = 0; now && names[i]; i++)
        if (strcasecmp(now, names[i]) == 0) return 1;
    return 0;
}

const char *bn_blas_core_wanted(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    /* OpenBLAS's names of the cores with AVX-512 kernels, and of those with AVX2 ones at least. */
    static const char *const avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids", NULL};
    static const char *const avx2[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids", NULL};
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return blas_core_is(avx512) ? NULL : "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return blas_core_is(avx2) ? NULL : "Haswell";
#endif
    return NULL;
}
