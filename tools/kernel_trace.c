/* kernel_trace.c - every kernel, copy and fill a CUDA process runs, with its start and end on
 * the GPU, written to a CSV file: a timeline where Nsight Systems is not installed. Kernels that
 * a CUDA graph replays are recorded one by one too.
 *
 * Built as a CUDA injection library (make trace: $(BUILD)/tools/libkernel_trace.so) on CUPTI,
 * which comes with the CUDA toolkit. The driver loads it into any CUDA program at cuInit:
 *
 *   CUDA_INJECTION64_PATH=$PWD/build/tools/libkernel_trace.so BLOBNET_KERNEL_TRACE=trace.%p.csv \
 *       ./blobnet train models/lenet.cfg --epochs 1
 *
 * BLOBNET_KERNEL_TRACE names the file (%p: the process id, so that the ranks of a run on several
 * GPUs write one file each; default kernel_trace.%p.csv). Lines: kind (kernel, memcpy, memset),
 * device, stream, start and end in ns (CUPTI's clock: the same for every process of a machine),
 * then the kernel's name or the bytes. tools/kernel_trace.py summarises a file. */
#define _GNU_SOURCE
#include <cupti.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BUFFER_BYTES (16u << 20)

static FILE *out;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(8, BUFFER_BYTES);
    *size = *buffer ? BUFFER_BYTES : 0;
    *max_records = 0;
}

/* A kernel's name as one CSV field: quoted, a double quote in it made a single one. */
static void put_name(FILE *f, const char *name)
{
    fputc('"', f);
    for (const char *p = name ? name : "?"; *p; p++) fputc(*p == '"' ? '\'' : *p, f);
    fputs("\"\n", f);
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *rec = NULL;
    pthread_mutex_lock(&out_lock);
    while (out && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        case CUPTI_ACTIVITY_KIND_KERNEL: {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
            fprintf(out, "kernel,%u,%u,%llu,%llu,", k->deviceId, k->streamId, (unsigned long long)k->start,
                    (unsigned long long)k->end);
            put_name(out, k->name);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
            fprintf(out, "memcpy,%u,%u,%llu,%llu,%llu\n", m->deviceId, m->streamId, (unsigned long long)m->start,
                    (unsigned long long)m->end, (unsigned long long)m->bytes);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
            fprintf(out, "memset,%u,%u,%llu,%llu,%llu\n", m->deviceId, m->streamId, (unsigned long long)m->start,
                    (unsigned long long)m->end, (unsigned long long)m->bytes);
            break;
        }
        default: break;
        }
    }
    pthread_mutex_unlock(&out_lock);
    free(buffer);
}

static void finish(void)
{
    cuptiActivityFlushAll(1);
    pthread_mutex_lock(&out_lock);
    if (out) fclose(out);
    out = NULL;
    pthread_mutex_unlock(&out_lock);
}

/* The file name with %p replaced by the process id. */
static void trace_path(char *path, size_t cap)
{
    const char *pattern = getenv("BLOBNET_KERNEL_TRACE");
    if (!pattern || !*pattern) pattern = "kernel_trace.%p.csv";
    size_t n = 0;
    for (const char *p = pattern; *p && n + 24 < cap; p++) {
        if (p[0] == '%' && p[1] == 'p') {
            n += (size_t)snprintf(path + n, cap - n, "%ld", (long)getpid());
            p++;
        } else {
            path[n++] = *p;
        }
    }
    path[n] = '\0';
}

/* Called by the CUDA driver when it loads this library (CUDA_INJECTION64_PATH), at cuInit. */
int InitializeInjection(void)
{
    char path[4096];
    trace_path(path, sizeof path);
    out = fopen(path, "w");
    if (!out) {
        fprintf(stderr, "kernel_trace: cannot write %s\n", path);
        return 0;
    }
    fputs("kind,device,stream,start_ns,end_ns,what\n", out);
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) != CUPTI_SUCCESS) {
        fprintf(stderr, "kernel_trace: CUPTI refused to record activity\n");
        fclose(out);
        out = NULL;
        return 0;
    }
    atexit(finish);
    return 1;
}
