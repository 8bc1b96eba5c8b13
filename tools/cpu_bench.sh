#!/usr/bin/env bash
# The CPU path beside PyTorch's CPU path, at the same thread count, in one run:
#
#     tools/cpu_bench.sh MNIST_DIR [THREADS] [TRAIN_IMAGES]
#
# For LeNet (batch 64) and resnet_mini (batch 128, on MNIST's shapes: Fashion-MNIST's are the
# same) it trains over the first TRAIN_IMAGES (default 6400) images with blobnet (--device cpu,
# BLOBNET_THREADS=THREADS, default 2) and with tools/pytorch_cpu_peer.py
# (torch.set_num_threads(THREADS); Debian's python3-torch), evaluates the 10,000 test images, and
# prints images per second of both and blobnet's ratio to PyTorch.
#
# Both sides are timed warm: the PyTorch peer leaves its first ten steps out of its clock, and
# blobnet runs two epochs and reports the second (its first step makes plans and takes the
# memory of every blob, about three steps' time).
#
# Timings on a shared machine move by 10% or more from run to run: CPU_BENCH_RUNS=N (default 1)
# runs each side N times, blobnet and PyTorch taking turns, and reports each side's median.
#
# CPU_BENCH_MODELS names other models of 28x28 gray input (default "lenet:64 resnet_mini:128"):
# each NAME is models/NAME.cfg, NAME:BATCH trains it at that batch, NAME alone at its own.
set -euo pipefail
mnist=${1:?usage: tools/cpu_bench.sh MNIST_DIR [THREADS] [TRAIN_IMAGES]}
threads=${2:-2}
images=${3:-6400}
[ -x ./blobnet ] || { echo "cpu_bench.sh: build blobnet first (make)" >&2; exit 2; }
# The first Python that has PyTorch: the one on PATH, else the system's (Debian's python3-torch).
py=
for p in python3 /usr/bin/python3; do "$p" -c 'import torch' 2>/dev/null && { py=$p; break; }; done
[ -n "$py" ] || { echo "cpu_bench.sh: no PyTorch (Debian: python3-torch)" >&2; exit 2; }
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# Images per second of the last epoch line's training and of its evaluation: "train eval".
blobnet_rates() {
    awk -v n="$images" '/^epoch/ {
        for (i = 1; i <= NF; i++) {
            if ($i == "img/s") train = $(i - 1)
            if ($i == "eval") { ms = $(i + 1); sub("ms", "", ms) }
        }
    } END { printf "%.0f %.0f\n", train, (ms > 0 ? 10000 / (ms / 1000) : 0) }' "$1"
}

runs=${CPU_BENCH_RUNS:-1}
case $runs in '' | *[!0-9]* | 0) echo "cpu_bench.sh: CPU_BENCH_RUNS=$runs is not a count of runs" >&2; exit 2 ;; esac
entries=${CPU_BENCH_MODELS:-lenet:64 resnet_mini:128}
for entry in $entries; do
    [ -f "models/${entry%%:*}.cfg" ] || { echo "cpu_bench.sh: CPU_BENCH_MODELS: no models/${entry%%:*}.cfg" >&2; exit 2; }
    case $entry in *:*) case ${entry#*:} in '' | *[!0-9]* | 0)
        echo "cpu_bench.sh: CPU_BENCH_MODELS: $entry: the batch after ':' is not a count" >&2; exit 2 ;; esac ;; esac
done

# The median of the numbers on standard input.
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : int((v[NR / 2] + v[NR / 2 + 1]) / 2)) }'; }

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }

printf '%-12s %6s | %10s %10s %6s | %10s %10s %6s\n' model batch "train" "pt train" "x" "eval" "pt eval" "x"
for entry in $entries; do
    model=${entry%%:*} batch=- batch_arg=()
    case $entry in *:*) batch=${entry#*:} batch_arg=(--batch "$batch") ;; esac
    : >"$logs/rates" && : >"$logs/pt-rates"
    for ((run = 0; run < runs; run++)); do
        BLOBNET_THREADS=$threads ./blobnet train "models/$model.cfg" --device cpu --data "$mnist" --epochs 2 \
            "${batch_arg[@]}" --train-limit "$images" >"$logs/$model.log" 2>&1 || { cat "$logs/$model.log" >&2; exit 1; }
        blobnet_rates "$logs/$model.log" >>"$logs/rates"
        "$py" tools/pytorch_cpu_peer.py "models/$model.cfg" --data "$mnist" --threads "$threads" "${batch_arg[@]}" \
            --train-limit "$images" >"$logs/$model-pt.log" 2>&1 || { cat "$logs/$model-pt.log" >&2; exit 1; }
        awk '{ for (i = 1; i <= NF; i++) { if ($i == "train") t = $(i + 1); if ($i == "evaluate") e = $(i + 1) } }
             END { print t, e }' "$logs/$model-pt.log" >>"$logs/pt-rates"
    done
    train=$(cut -d' ' -f1 "$logs/rates" | median) eval=$(cut -d' ' -f2 "$logs/rates" | median)
    pt_train=$(cut -d' ' -f1 "$logs/pt-rates" | median) pt_eval=$(cut -d' ' -f2 "$logs/pt-rates" | median)
    printf '%-12s %6s | %10s %10s %6s | %10s %10s %6s\n' "$model" "$batch" "$train" "$pt_train" \
        "$(ratio "$train" "$pt_train")" "$eval" "$pt_eval" "$(ratio "$eval" "$pt_eval")"
done
echo "images per second (median of $runs run(s) a side), $threads threads, $(nproc) cores;" \
    "$(grep -m1 'torch' "$logs/$model-pt.log" | sed 's/.*(//; s/)//')"
