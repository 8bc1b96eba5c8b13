/* host_memory.h - how much host memory this process may still take: what the machine has
 * available, and what is left under the memory limits of its cgroup and the cgroup's
 * ancestors (cgroup v2 or v1), whichever is least. Setup refuses a network that needs more,
 * before allocating, since past it the kernel kills the process without a word. */
#ifndef BN_HOST_MEMORY_H
#define BN_HOST_MEMORY_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bn_host_memory {
    double bytes;       /* what may still be taken; negative when nothing could be read */
    char source[320];   /* what the figure is, for messages: "the 15.8 GB available on this
                         * machine (MemAvailable in /proc/meminfo)" */
} bn_host_memory;

/* The figure for this process on this machine. */
void bn_host_memory_available(bn_host_memory *out);

/* The same read under root, a folder standing for / that holds proc/self/{mountinfo,cgroup},
 * proc/meminfo and the cgroup files (for tests); "" is the machine itself. */
void bn_host_memory_available_at(const char *root, bn_host_memory *out);

#ifdef __cplusplus
}
#endif
#endif
