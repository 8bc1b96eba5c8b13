#!/usr/bin/env bash
# How blobnet's data-parallel training scales from 1 GPU to 2 (docs/multi-gpu.md), beside
# PyTorch DDP on the same model file (tools/pytorch_peer.py --ddp 2), in one run.
#
#   tools/scale.sh MNIST_DIR [MODEL...]
#
# For LeNet (MNIST) and the suite's largest models, resnet_fashion and vgg_fashion (Fashion-MNIST
# from $FASHION, default /usr/share/datasets/fashion-mnist), at the model's batch B (LeNet: 64):
#   1 GPU at B        the baseline;
#   2 GPUs at B       the same training, B/2 per GPU: speedup over the baseline / 2 is the scaling
#                     efficiency;
#   2 GPUs at 2B      B per GPU: images/s over twice the baseline's is the efficiency;
#   1 GPU at B/2      the per-GPU batch of the 2-GPU run at B: each rank runs half of the epoch's
#                     steps at it, so half of this epoch is a rank's work alone, and what the 2-GPU
#                     run takes more is what the all-reduces and the ranks' waits for each other
#                     cost (for 2 GPUs at 2B, against half of the baseline's epoch).
# Each run is $SCALE_EPOCHS epochs (default 2); a time is the median of epochs 2.. (the first holds
# the kernel timing, the graph capture and NCCL's set-up), as tools/bench.sh measures. The PyTorch
# column is the peer's CUDA-graph variant on as many GPUs at the same batch (DDP for 2).
# BENCH_LOGS=DIR keeps every run's log in DIR; BENCH_PEER=0 leaves PyTorch out. About 6 minutes
# on 2 H200s.
set -uo pipefail
mnist=${1:?usage: tools/scale.sh MNIST_DIR [MODEL...]}
shift
fashion=${FASHION:-/usr/share/datasets/fashion-mnist}
epochs=${SCALE_EPOCHS:-2}
source "$(dirname "$0")/bench_common.sh"
bench_logs

# name, model file, dataset, batch (-: the model's)
suite=(
    "lenet          models/lenet.cfg          mnist         64"
    "resnet_fashion models/resnet_fashion.cfg fashion-mnist -"
    "vgg_fashion    models/vgg_fashion.cfg    fashion-mnist -"
)

need_cuda_build tools/scale.sh "scaling"
gpus=$(nvidia-smi -L | grep -c '^GPU')
if [ "$gpus" -lt 2 ]; then
    echo "tools/scale.sh: needs 2 GPUs, this machine has $gpus" >&2
    exit 2
fi

# "ms images_per_s" of a blobnet log: medians over the epoch lines after the first. The seconds
# stand before the word "s", the total images/s before the first "img/s" (a multi-GPU line
# follows it with the per-GPU figure).
blobnet_times() {
    local ms ips
    ms=$(awk '/^epoch/ && $2 !~ /^1\// { for (i = 1; i <= NF; i++) if ($i == "s") { print $(i - 1) * 1000; break } }' "$1" | median)
    ips=$(awk '/^epoch/ && $2 !~ /^1\// { for (i = 1; i <= NF; i++) if ($i == "img/s") { print $(i - 1); break } }' "$1" | median)
    echo "$ms $ips"
}

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
    local ddp=() label=graph
    [ "$n" -gt 1 ] && { ddp=(--ddp "$n"); label=graph-ddp$n; }
    if ! python3 tools/pytorch_peer.py "$@" --epochs "$epochs" --variant graph "${ddp[@]}" >"$log" 2>&1; then
        echo "pytorch peer $* ${ddp[*]} failed:" >&2
        tail -3 "$log" >&2
        echo -
        return
    fi
    awk -v v="pytorch $label:" 'index($0, v) == 1 && /per epoch/ { print $3 }' "$log" | grep . || echo -
}

num() { [[ $1 =~ ^[0-9]+([.][0-9]*)?$ ]]; }

# Scaling efficiency: (images/s of the run) / (GPUs * images/s of the 1-GPU run at B).
efficiency() { # ips n base_ips
    if num "$1" && num "$3"; then awk -v a="$1" -v n="$2" -v b="$3" 'BEGIN { printf "%.2f", a / (n * b) }'
    else echo -; fi
}

# What the 2-GPU run takes over the same per-GPU work on one GPU: "+X ms (Y%)". Each rank runs
# half the epoch's steps at the per-GPU batch, so its work alone is half of a whole 1-GPU epoch at
# that batch (ms_alone).
overhead() { # ms ms_alone
    if num "$1" && num "$2"; then
        awk -v a="$1" -v b="$2" 'BEGIN { b /= 2; printf "%+.1f ms (%+.0f%%)", a - b, 100 * (a - b) / a }'
    else echo -; fi
}

rows=()
for entry in "${suite[@]}"; do
    read -r name model dataset batch <<<"$entry"
    if [ $# -gt 0 ] && [[ " $* " != *" $name "* ]]; then continue; fi
    data=$mnist
    [ "$dataset" = mnist ] || data=$fashion
    [ "$batch" = - ] && batch=$(model_batch "$model")
    half=$((batch / 2)) double=$((batch * 2))
    echo "== $name (batch $batch)" >&2
    args=("$model" --dataset "$dataset" --data "$data")
    peer_args=("$model" --data "$data")
    read -r ms1 ips1 < <(run_blobnet "$logs/$name-1gpu-b$batch.log" 1 "${args[@]}" --batch "$batch")
    read -r ms2 ips2 < <(run_blobnet "$logs/$name-2gpu-b$batch.log" 2 "${args[@]}" --batch "$batch")
    read -r ms2d ips2d < <(run_blobnet "$logs/$name-2gpu-b$double.log" 2 "${args[@]}" --batch "$double")
    read -r msh ipsh < <(run_blobnet "$logs/$name-1gpu-b$half.log" 1 "${args[@]}" --batch "$half")
    pt1=$(run_peer "$logs/$name-pytorch-1gpu-b$batch.log" 1 "${peer_args[@]}" --batch "$batch")
    pt2=$(run_peer "$logs/$name-pytorch-2gpu-b$batch.log" 2 "${peer_args[@]}" --batch "$batch")
    pt2d=$(run_peer "$logs/$name-pytorch-2gpu-b$double.log" 2 "${peer_args[@]}" --batch "$double")
    pth=$(run_peer "$logs/$name-pytorch-1gpu-b$half.log" 1 "${peer_args[@]}" --batch "$half")
    rows+=("| $name | $batch | 1 | $ms1 | $ips1 | 1.00 | - | $pt1 |")
    rows+=("| $name | $batch | 2 | $ms2 | $ips2 | $(efficiency "$ips2" 2 "$ips1") | $(overhead "$ms2" "$msh") | $pt2 |")
    rows+=("| $name | $double | 2 | $ms2d | $ips2d | $(efficiency "$ips2d" 2 "$ips1") | $(overhead "$ms2d" "$ms1") | $pt2d |")
    rows+=("| $name | $half | 1 | $msh | $ipsh | - | - | $pth |")
done

echo
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sort | uniq -c
echo "ms per epoch and images/s: medians of epochs 2-$epochs; efficiency: images/s / (GPUs x 1-GPU images/s at the"
echo "model's batch); communication: the 2-GPU run's ms over one rank's work alone (half a 1-GPU epoch at the"
echo "per-GPU batch), as a share of the 2-GPU epoch; PyTorch: tools/pytorch_peer.py's CUDA graph, DDP on 2 GPUs"
echo
echo "| model | batch | GPUs | ms/epoch | images/s | scaling efficiency | communication overhead | PyTorch (DDP) ms/epoch |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
