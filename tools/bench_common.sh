# bench_common.sh - what tools/bench.sh and tools/scale.sh share; sourced, not run.

# The scratch folder of a benchmark's logs: $BENCH_LOGS (kept) or a temporary one (removed at
# exit). The run's timed kernel choices go to a cache of its own in it, so that the first run of
# each model measures as a first run on a new machine does. Sets `logs`.
bench_logs() {
    logs=${BENCH_LOGS:-$(mktemp -d)}
    mkdir -p "$logs" || exit 1
    [ -n "${BENCH_LOGS:-}" ] || trap 'rm -rf "$logs"' EXIT
    export BLOBNET_KERNEL_CACHE=$logs/kernel-cache
}

# Exits unless ./blobnet is a CUDA build: tool, what needs it.
need_cuda_build() {
    if ! ./blobnet --version | grep -q CUDA; then
        echo "$1: ./blobnet is a CPU-only build; $2 needs the CUDA build" >&2
        exit 2
    fi
}

# The median of the numbers on stdin (the mean of the middle two for an even count), or "-".
median() {
    sort -g | awk '{ v[NR] = $1 } END { if (!NR) print "-"; else if (NR % 2) print v[(NR + 1) / 2];
                                        else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# The batch of a model file's [train] section (64 when it names none).
model_batch() {
    awk -F= '/^\[/ { in_train = $0 ~ /^\[train\]/ } in_train && $1 ~ /^ *batch *$/ { gsub(/ /, "", $2); b = $2 }
             END { print b ? b : 64 }' "$1"
}
