#!/usr/bin/env bash
# How blobnet's data-parallel training scales over 1, 2, 4 and 8 GPUs of this machine
# (docs/multi-gpu.md), beside PyTorch DDP on the same model file (tools/pytorch_peer.py --ddp N
# --variant graph-fp32), in one run.
#
#   tools/scale.sh MNIST_DIR [MODEL...]
#
# MODEL: lenet, mlp, mlp_wide (MNIST), resnet_fashion, vgg_fashion, strided_fashion, resnet_mini,
# resnet_odd, inception_fashion, narrow_chain (Fashion-MNIST from $FASHION, default
# /usr/share/datasets/fashion-mnist); lenet, resnet_fashion and vgg_fashion when none is named. For each global batch B
# ($SCALE_BATCH: one or more, "-" for the model's own; default "-", LeNet's 64):
#   strong scaling  B on 1, 2, 4, 8 GPUs (B/N per GPU): what a user does to finish the same training
#                   sooner. Speedup: the 1-GPU epoch's time over the N-GPU epoch's.
#   weak scaling    B per GPU on N GPUs (N x B in all). Efficiency: images/s over N x the images/s of
#                   one GPU at B; 1 - it is what the all-reduces and the ranks' waits for each other
#                   cost, as a share of the epoch.
# A run that two settings share (2 GPUs at 256 is B=128's weak run and B=256's strong one) runs
# once and is one row, with every figure its runs allow. SCALE_WEAK=0 leaves out the weak-scaling
# runs that no strong-scaling setting makes. SCALE_SHARES=1 also runs one GPU at each strong
# row's per-GPU batch, so that those rows get a weak-scaling efficiency too: it splits what the
# same global batch on N GPUs loses into the smaller per-GPU batch (each GPU less busy: the 1-GPU
# run at B/N against B) and the communication and waits (1 - the efficiency).
#
# GPU counts come from $SCALE_GPUS (default "1 2 4 8"); counts above what `nvidia-smi -L` lists
# are skipped, saying so. Each run is $SCALE_EPOCHS epochs (default 2); a time is the median of
# epochs 2.. (the first holds the kernel timing, the graph capture and NCCL's set-up), as
# tools/bench.sh measures. The PyTorch columns are the peer's CUDA-graph variant at the same
# global batch on as many GPUs (DDP from 2): graph-fp32 (TF32 off, the same FP32 arithmetic as
# blobnet's default), or $SCALE_PEER_VARIANT (graph: PyTorch's defaults, cuDNN on TF32). BENCH_LOGS=DIR keeps every run's log in DIR;
# BENCH_PEER=0 leaves PyTorch out. Each row is also printed to stderr as it is measured.
set -uo pipefail
mnist=${1:?usage: tools/scale.sh MNIST_DIR [MODEL...]}
shift
fashion=${FASHION:-/usr/share/datasets/fashion-mnist}
epochs=${SCALE_EPOCHS:-2}
batches=${SCALE_BATCH:--}
wanted_gpus=${SCALE_GPUS:-1 2 4 8}
source "$(dirname "$0")/bench_common.sh"

check_scale_models tools/scale.sh "$@"
[ $# -gt 0 ] || set -- "${scale_default[@]}"
for b in $batches; do
    if [ "$b" != - ] && ! [[ $b =~ ^[1-9][0-9]*$ ]]; then
        echo "tools/scale.sh: SCALE_BATCH=$batches: $b is neither a positive whole number nor -" >&2
        exit 2
    fi
done

need_cuda_build tools/scale.sh "scaling"
have=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
counts=() skipped=()
for n in $wanted_gpus; do
    if ! [[ $n =~ ^[1-9][0-9]*$ ]]; then
        echo "tools/scale.sh: SCALE_GPUS=$wanted_gpus: $n is not a positive whole number" >&2
        exit 2
    fi
    if [ "$n" -le "$have" ]; then counts+=("$n"); else skipped+=("$n"); fi
done
skip_note=
[ ${#skipped[@]} -gt 0 ] && skip_note="${skipped[*]} GPUs skipped: this machine has $have"
[ -n "$skip_note" ] && echo "tools/scale.sh: $skip_note" >&2
if [ ${#counts[@]} -eq 0 ]; then
    echo "tools/scale.sh: no GPU count of SCALE_GPUS=$wanted_gpus fits this machine's $have GPUs" >&2
    exit 2
fi
[[ " ${counts[*]} " == *" 1 "* ]] || counts=(1 "${counts[@]}")
bench_logs

# One blobnet run: log, GPUs, args...; prints "ms images_per_s" or "- -".
run_blobnet() {
    local log=$1 n=$2
    shift 2
    local where=(--device gpu)
    [ "$n" -gt 1 ] && where=(--gpus "$n")
    if ! ./blobnet train "$@" "${where[@]}" --epochs "$epochs" >"$log" 2>&1; then
        echo "blobnet $* ${where[*]} failed:" >&2
        tail -3 "$log" >&2
        echo "- -"
        return
    fi
    blobnet_times "$log"
}

# The peer's median ms per epoch: log, GPUs, args...; "-" when left out or failed.
run_peer() {
    local log=$1 n=$2
    shift 2
    if [ "${BENCH_PEER:-1}" = 0 ]; then echo -; return; fi
    local ddp=() variant=${SCALE_PEER_VARIANT:-graph-fp32}
    local label=$variant
    [ "$n" -gt 1 ] && { ddp=(--ddp "$n"); label=$variant-ddp$n; }
    if ! python3 tools/pytorch_peer.py "$@" --epochs "$epochs" --variant "$variant" "${ddp[@]}" >"$log" 2>&1; then
        echo "pytorch peer $* ${ddp[*]} failed:" >&2
        tail -3 "$log" >&2
        echo -
        return
    fi
    awk -v v="pytorch $label:" 'index($0, v) == 1 && /per epoch/ { print $3 }' "$log" | grep . || echo -
}

num() { [[ ${1:-} =~ ^[0-9]+([.][0-9]*)?$ ]]; }

# a / b to 2 decimals, or "-" unless both are numbers.
ratio() {
    if num "$1" && num "$2"; then awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; else echo -; fi
}

# Weak-scaling efficiency from epoch times: one GPU's epoch at the per-GPU batch over N x the
# N-GPU epoch (the images of an epoch are the same, so this is images/s over N x images/s).
weak() { # ms_alone n ms
    if num "$1" && num "$3"; then awk -v a="$1" -v n="$2" -v m="$3" 'BEGIN { printf "%.2f", a / (n * m) }'
    else echo -; fi
}

# The per-GPU batch of N GPUs at global batch G: G/N, to 3 digits when N does not divide G.
per_gpu() {
    if [ $(($1 % $2)) -eq 0 ]; then echo $(($1 / $2)); else awk -v g="$1" -v n="$2" 'BEGIN { printf "%.3g", g / n }'; fi
}

# Adds a run ("GPUs:global batch") to `runs` unless it is there already.
add_run() { [[ " ${runs[*]} " == *" $1 "* ]] || runs+=("$1"); }

rows=()
for entry in "${scale_models[@]}"; do
    read -r name model dataset own <<<"$entry"
    if [ $# -gt 0 ] && [[ " $* " != *" $name "* ]]; then continue; fi
    data=$mnist
    [ "$dataset" = mnist ] || data=$fashion
    [ "$own" = - ] && own=$(model_batch "$model")
    args=("$model" --dataset "$dataset" --data "$data")
    peer_args=("$model" --data "$data")
    # The runs, as "GPUs:global batch", in the order they are made and without repeats.
    runs=()
    for b in $batches; do
        [ "$b" = - ] && b=$own
        for n in "${counts[@]}"; do add_run "$n:$b"; done
        [ "${SCALE_WEAK:-1}" = 0 ] || for n in "${counts[@]}"; do add_run "$n:$((n * b))"; done
        if [ "${SCALE_SHARES:-0}" = 1 ]; then
            for n in "${counts[@]}"; do [ $((b % n)) -eq 0 ] && add_run "1:$((b / n))"; done
        fi
    done
    declare -A ms=() ips=() pt=()
    for run in "${runs[@]}"; do
        n=${run%%:*} g=${run#*:}
        read -r t_ms t_ips < <(run_blobnet "$logs/$name-${n}gpu-b$g.log" "$n" "${args[@]}" --batch "$g")
        ms[$run]=$t_ms ips[$run]=$t_ips
        pt[$run]=$(run_peer "$logs/$name-pytorch-${n}gpu-b$g.log" "$n" "${peer_args[@]}" --batch "$g")
        echo "$name: $n GPU(s) at global batch $g: ${ms[$run]} ms/epoch, ${ips[$run]} images/s; PyTorch ${pt[$run]} ms" >&2
    done
    # Rows by global batch, then GPUs.
    while read -r run; do
        n=${run%%:*} g=${run#*:}
        one=1:$g alone=-
        [ $((g % n)) -eq 0 ] && alone=1:$((g / n))
        speed=- pt_speed=- eff=- pt_eff=-
        if [ "$n" -gt 1 ]; then
            speed=$(ratio "${ms[$one]:-}" "${ms[$run]}")
            pt_speed=$(ratio "${pt[$one]:-}" "${pt[$run]}")
            eff=$(weak "${ms[$alone]:-}" "$n" "${ms[$run]}")
            pt_eff=$(weak "${pt[$alone]:-}" "$n" "${pt[$run]}")
        fi
        rows+=("| $name | $g | $n | $(per_gpu "$g" "$n") | ${ms[$run]} | ${ips[$run]} | $speed | $eff | ${pt[$run]} | $pt_speed | $pt_eff |")
    done < <(printf '%s\n' "${runs[@]}" | sort -t: -k2,2n -k1,1n)
    unset ms ips pt
done

echo
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sort | uniq -c
[ -n "$skip_note" ] && echo "$skip_note"
echo "ms per epoch and images/s: medians of epochs 2-$epochs. speedup: the 1-GPU epoch at the same global batch over"
echo "this one (strong scaling). weak-scaling efficiency: images/s over GPUs x the images/s of 1 GPU at this per-GPU"
echo "batch. PyTorch: tools/pytorch_peer.py's ${SCALE_PEER_VARIANT:-graph-fp32} variant, DDP from 2 GPUs, the same two ratios from its epochs."
echo
echo "| model | global batch | GPUs | per-GPU batch | ms/epoch | images/s | speedup | weak-scaling efficiency | PyTorch DDP ms/epoch | PyTorch speedup | PyTorch weak-scaling efficiency |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
