/* parallel.h - the CPU path's threads: one pool of workers per process that runs the tasks of
 * a pass (a convolution's chunks of images, an elementwise layer's ranges), and the scratch
 * buffers those tasks borrow.
 *
 * Results never depend on the number of threads: a pass cuts its work into tasks by its shapes
 * alone, each task writes what only it writes, and sums over tasks are added in task order
 * after the tasks end. OpenBLAS is held to one thread of its own while the pool runs, so its
 * threads do not spin against the pool's. */
#ifndef BN_PARALLEL_H
#define BN_PARALLEL_H

#include <stddef.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most threads a pool takes. */
#define BN_CPU_MAX_THREADS 256

/* Sets the pool's size: n threads (1..BN_CPU_MAX_THREADS; the caller's thread is one of them),
 * or 0 for the default, the CPUs this process may run on ($BLOBNET_THREADS where set). A pool
 * already started is rebuilt at its next use. */
bn_status bn_cpu_threads_set(int n);

/* The number of threads the pool runs with (the default where none was set). */
int bn_cpu_threads(void);

/* One task of a parallel run: task in [0, tasks), worker in [0, bn_cpu_threads()) (the index
 * of the thread running it, for its scratch). */
typedef void (*bn_task_fn)(void *arg, int task, int worker);

/* Runs fn for every task on the pool, the caller's thread taking part, and returns when all
 * have ended. Called from inside a task, or where the pool's threads cannot be started, the
 * tasks run in turn on the calling thread. */
void bn_parallel_run(int tasks, bn_task_fn fn, void *arg);

/* A range [lo, hi) of an elementwise pass. */
typedef void (*bn_range_fn)(void *arg, size_t lo, size_t hi);

/* Cuts [0, count) into pieces of at least grain items (about 64 KiB of floats where grain is
 * 0) and runs fn on each as a task. */
void bn_parallel_ranges(size_t count, size_t grain, bn_range_fn fn, void *arg);

/* Scratch for the passes that need it: slot s (0..BN_CPU_SCRATCH_SLOTS-1) of each worker grown
 * to at least floats floats. The buffers are the pool's; a pass borrows them between
 * bn_cpu_scratch_reserve and its last task, under bn_cpu_lock. */
#define BN_CPU_SCRATCH_SLOTS 4
bn_status bn_cpu_scratch_reserve(int slot, size_t floats);
float *bn_cpu_scratch(int slot, int worker);

/* Shared buffer s (0..BN_CPU_SCRATCH_SLOTS-1) of at least floats floats, which every task of a
 * pass may read or write parts of, under bn_cpu_lock as above; NULL (with the error set) where
 * it cannot be had. */
float *bn_cpu_shared_scratch(int slot, size_t floats);

/* Holds the pool and its scratch for one pass: two threads of a program running passes on two
 * networks at once take turns. Recursive. */
void bn_cpu_lock(void);
void bn_cpu_unlock(void);

/* OpenBLAS picks its GEMM kernels from the CPU model when it loads, and falls back to its slowest
 * x86-64 kernels on processors it does not recognise, as virtual CPUs often report themselves.
 * The name of OpenBLAS's core (its OPENBLAS_CORETYPE) whose kernels this CPU's instruction sets
 * can run, where the kernels OpenBLAS loaded are of a lesser class: "SkylakeX" with AVX-512,
 * "Haswell" with AVX2 and FMA; NULL where they are of that class already, or off x86-64. The CLI
 * restarts itself once with that choice (cli/main.c). */
const char *bn_blas_core_wanted(void);

#ifdef __cplusplus
}
#endif
#endif
