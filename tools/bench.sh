#!/usr/bin/env bash
# The model suite on the GPU, blobnet beside its PyTorch peer (tools/pytorch_peer.py, built from
# the same model file), in one run.
#
#   tools/bench.sh MNIST_DIR FASHION_DIR [MODEL...]
#
# For every suite model (or the named ones: lenet, lenet256, mlp, mlp_wide, vgg_fashion,
# strided_fashion, resnet_mini, resnet_fashion, resnet_odd, inception, narrow_chain, cifar10_resnet
# on Fashion-MNIST written out as CIFAR-10 records, lenet5_tanh, mlp_bn, densenet, window7, batch32,
# allconv_leaky and cifar_dropout on the same records, mlp_elu, photo64 and bottleneck64 on
# Fashion-MNIST written out as an image folder and fitted to their 64x64 colour input, vgg48x64 on
# the same fitted to 48x64, wide_shallow, stem7, overlap_pool, mlp_odd, dcgan_disc and patch4)
# blobnet trains it with the default kernel choice, with --tf32, with --precision bf16 where the
# blobnet binary has that option, and with --autotune, and the peer trains it eager, as a whole-step
# CUDA graph under PyTorch's defaults (cuDNN's convolutions may use TF32), as the same graph with
# TF32 off (FP32 math throughout, as blobnet's default) and as a CUDA graph under bf16 autocast.
# Each run is $BENCH_EPOCHS epochs (default 3); a time is the median epoch time of epochs 2.. (the
# first holds start-up work: kernel timing, graph capture, cuDNN's autotuner). One table follows:
# milliseconds per epoch, the default against --autotune, the default run's first epoch in seconds
# with its kernels timed into an empty kernel cache and again with them read from the cache,
# PyTorch's times, how many times faster blobnet is than PyTorch at the same precision (the default
# against PyTorch's graph with TF32 off, --tf32 against PyTorch's default graph, bf16 against
# PyTorch's bf16 graph), peak device memory without the datasets and test accuracy after the run
# (the default's and PyTorch's TF32-off graph's, then --precision bf16's and PyTorch's bf16
# graph's). Last, LeNet from process start to 99% test accuracy: to the epoch line that reports it,
# and to the process's end.
#
# blobnet's timed kernel choices go to a kernel cache of the bench's own that starts empty, so
# the first run of each model measures as a first run on a new machine does.
# BENCH_LOGS=DIR keeps every run's log (and that cache) in DIR; BENCH_PEER=0 leaves PyTorch out
# (its columns then show "-"). Each row is also printed to stderr as it is measured, so that a run
# cut short (a time limit, Ctrl-C) still shows the models it finished. BENCH_GPUS=N spreads the
# models over N GPUs of the machine, one model at a time on each (each GPU's runs alone on it,
# their kernel choices timed into a cache of that GPU's own), the next model going to the first
# GPU free; the table keeps the suite's order, and LeNet's start to 99% runs last, alone. The
# suite takes about 20 minutes on one H200, and half or a quarter of that on two or four.
set -uo pipefail
mnist=${1:?usage: tools/bench.sh MNIST_DIR FASHION_DIR [MODEL...]}
fashion=${2:?usage: tools/bench.sh MNIST_DIR FASHION_DIR [MODEL...]}
shift 2
epochs=${BENCH_EPOCHS:-3}
source "$(dirname "$0")/bench_common.sh"
check_model_names tools/bench.sh "$(printf '%s\n' "${suite[@]}" | awk '{ print $1 }' | xargs)" \
    "a suite model (tools/bench_common.sh)" "$@"
bench_logs

need_cuda_build tools/bench.sh "the bench"
gpus=$(gpus_asked tools/bench.sh BENCH_GPUS "${BENCH_GPUS:-1}") || exit 2
has_bf16=$(./blobnet train --help 2>&1 | grep -c -- '--precision')

# Seconds of a blobnet log's first epoch, or "-".
first_epoch() {
    awk '/^epoch +1\// && !t { for (i = 1; i <= NF; i++) if ($i == "s") t = $(i - 1) } END { print t ? t : "-" }' "$1"
}

# One blobnet run: name, log, args...; prints "ms peak_mib accuracy" or "- - -".
run_blobnet() {
    local log=$1; shift
    if ! ./blobnet train "$@" --device gpu --epochs "$epochs" >"$log" 2>&1; then
        echo "blobnet $* failed:" >&2
        tail -3 "$log" >&2
        echo "- - -"
        return
    fi
    echo "$(blobnet_ms "$log") $(awk '/^peak device memory/ { print $4 }' "$log") \
$(final_accuracy "$log")"
}

# A field of the peer's summary line for a variant: ms, acc or mem.
peer_field() { # log variant field
    awk -v v="pytorch $2:" -v f="$3" 'index($0, v) == 1 && /per epoch/ {
        if (f == "ms") print $3
        for (i = 1; i <= NF; i++) {
            if (f == "acc" && $i == "accuracy") { x = $(i + 1); sub("[%,]+$", "", x); print x }
            if (f == "mem" && $i == "memory") print $(i + 1)
        }
    }' "$1"
}

# a / b to two places, or "-" unless both are numbers.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { num = "^[0-9]+([.][0-9]*)?$"
                                          if (a !~ num || b !~ num || b == 0) print "-"; else printf "%.2f", a / b }'; }

row='%-16s %5s | %8s %8s %8s %8s %6s | %6s %6s | %8s %8s %8s %8s | %6s %6s %6s | %8s %8s | %6s %6s %6s %6s'

# One suite model's runs and its row, into $logs/rows/K (K its place in the suite) and to stderr:
# "K name model dataset batch data".
bench_one() {
    local k name model dataset batch data
    read -r k name model dataset batch data <<<"$1"
    # Each worker of several GPUs times its choices into a cache of its own, so that every model's
    # first run still starts from an empty one and no two processes write one file.
    [ "$gpus" -gt 1 ] && export BLOBNET_KERNEL_CACHE=$logs/kernel-cache-$BENCH_WORKER
    args=("$model" --dataset "$dataset" --data "$data")
    peer_args=("$model" --dataset "$dataset" --data "$data" --epochs "$epochs")
    if [ "$batch" != - ]; then args+=(--batch "$batch"); peer_args+=(--batch "$batch"); fi
    echo "== $name$([ "$gpus" -gt 1 ] && echo " (GPU $CUDA_VISIBLE_DEVICES)")" >&2
    read -r ms mem acc < <(run_blobnet "$logs/$name-default.log" "${args[@]}")
    # The same again for one epoch: its kernel choices now come from the cache.
    ./blobnet train "${args[@]}" --device gpu --epochs 1 >"$logs/$name-cached.log" 2>&1
    read -r tf32 _ _ < <(run_blobnet "$logs/$name-tf32.log" "${args[@]}" --tf32)
    bf16=n/a bacc=n/a
    [ "$has_bf16" -gt 0 ] && read -r bf16 _ bacc < <(run_blobnet "$logs/$name-bf16.log" "${args[@]}" --precision bf16)
    read -r auto _ _ < <(run_blobnet "$logs/$name-autotune.log" "${args[@]}" --autotune)
    peer=$logs/$name-pytorch.log
    : >"$peer"
    [ "${BENCH_PEER:-1}" = 0 ] || python3 tools/pytorch_peer.py "${peer_args[@]}" --variant eager,graph,graph-fp32,graph-bf16 \
        >"$peer" 2>&1 || { echo "pytorch peer of $name failed:" >&2; tail -3 "$peer" >&2; }
    eager=$(peer_field "$peer" eager ms); graph=$(peer_field "$peer" graph ms); pfp32=$(peer_field "$peer" graph-fp32 ms)
    pbf16=$(peer_field "$peer" graph-bf16 ms); pmem=$(peer_field "$peer" graph-fp32 mem)
    pacc=$(peer_field "$peer" graph-fp32 acc); pbacc=$(peer_field "$peer" graph-bf16 acc)
    printf "$row\n" \
        "$name" "$([ "$batch" != - ] && echo "$batch" || model_batch "$model")" \
        "$ms" "$tf32" "$bf16$(grep -qs 'trains faster in FP32' "$logs/$name-bf16.log" && echo '*')" "$auto" \
        "$(ratio "$ms" "$auto")" \
        "$(first_epoch "$logs/$name-default.log")" "$(first_epoch "$logs/$name-cached.log")" \
        "${eager:--}" "${graph:--}" "${pfp32:--}" "${pbf16:--}" \
        "$(ratio "${pfp32:--}" "$ms")" "$(ratio "${graph:--}" "$tf32")" "$(ratio "${pbf16:--}" "$bf16")" \
        "${mem:--}" "${pmem:--}" "${acc:--}" "${pacc:--}" "${bacc:--}" "${pbacc:--}" >"$logs/rows/$k"
    cat "$logs/rows/$k" >&2
}

# The models asked for, with their data (resolved here, before any worker starts: the first
# cifar10 model writes the records).
todo=()
k=0
for entry in "${suite[@]}"; do
    read -r name model dataset batch <<<"$entry"
    k=$((k + 1))
    if [ $# -gt 0 ] && [[ " $* " != *" $name "* ]]; then continue; fi
    data=$(suite_data "$dataset" "$mnist" "$fashion" "$model") || exit 1
    todo+=("$(printf '%02d' "$k") $name $model $dataset $batch $data")
done
rm -rf "$logs/rows"
mkdir -p "$logs/rows" || exit 1
spread_over_gpus "$gpus" "$gpus" bench_one "${todo[@]}"

echo
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "ms per epoch, median of epochs 2-$epochs (blobnet's: the epoch's training images over its images a"
echo "second);"
echo "pt graph: PyTorch's CUDA graph under its defaults (TF32 allowed in cuDNN);"
echo "pt fp32: the same with TF32 off (FP32 math throughout, as blobnet's default); pt bf16: that graph under bf16 autocast"
echo "fp32 x, tf32 x, bf16 x: PyTorch's time over blobnet's at the same precision: pt fp32 over the default (both without"
echo "TF32; earlier tables' \"x pt\" took pt graph), pt graph over --tf32, pt bf16 over --precision bf16"
echo "1st ep: seconds of the default run's first epoch (its kernels timed into an empty cache); cached: the same from the cache"
echo "MiB, acc: peak device memory and final test accuracy (%) of the default run and pt fp32; bf acc, pt bf: of --precision"
echo "bf16 and pt bf16; bf16 *: --precision bf16 trained that model in FP32, which it timed faster"
printf "$row\n" model batch default tf32 bf16 autotune "def/at" "1st ep" cached "pt eager" "pt graph" "pt fp32" "pt bf16" \
    "fp32 x" "tf32 x" "bf16 x" "MiB" "pt MiB" "acc" "pt acc" "bf acc" "pt bf"
for item in "${todo[@]}"; do
    read -r k name _ <<<"$item"
    if [ -s "$logs/rows/$k" ]; then cat "$logs/rows/$k"; else printf '%-16s (no row: its runs did not finish)\n' "$name"; fi
done

if [ $# -eq 0 ] || [[ " $* " == *" lenet "* ]]; then
    echo
    # The timeline's marks count from the launch: "epoch N evaluated" is the moment epoch N's test
    # accuracy is known; the process ends after that, when the driver has torn its context down.
    # Over several GPUs LeNet's choices went to a worker's cache: one epoch fills the bench's, so
    # that this run reads its choices as on one GPU.
    [ "$gpus" -gt 1 ] && ./blobnet train models/lenet.cfg --device gpu --epochs 1 --data "$mnist" >/dev/null 2>&1
    start=$(date +%s.%N)
    BLOBNET_TIMELINE=$start ./blobnet train models/lenet.cfg --device gpu --epochs 10 --until-accuracy 99 \
        --data "$mnist" >"$logs/t99.log" 2>&1
    end=$(date +%s.%N)
    grep '^epoch' "$logs/t99.log"
    # The time and the epoch: a build whose rounding moves reaches 99% an epoch sooner or later, which
    # moves this figure by a whole epoch's time without any kernel being faster.
    reached=$(awk '/^timeline:.* evaluated$/ { t = $2 } /^epoch/ { for (i = 1; i <= NF; i++) if ($i == "test") { v = $(i + 2); sub("%", "", v); if (v + 0 >= 99.0) { split($2, e, "/"); print t / 1000 " s (epoch " e[1] ", " v "%)"; exit } } }' "$logs/t99.log")
    printf 'process start to 99%% test accuracy: %s to the epoch line that reports it, %.2f s to the process'"'"'s end (models/lenet.cfg, --until-accuracy 99)\n' \
        "${reached:-never}" "$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')"
fi
