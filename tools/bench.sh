#!/usr/bin/env bash
# LeNet training speed on the GPU, blobnet beside the PyTorch peer, in one run.
#
#   tools/bench.sh DATA_DIR [PEER_SCRIPT]
#
# Prints a table: variant, ms per epoch (median of epochs 2-4, epoch 1 being the warm-up),
# images/s, the ratio to PyTorch's fastest variant, device memory, test accuracy; then the
# time from process start to 99% test accuracy. PEER_SCRIPT defaults to
# ../shared/peer/pytorch_lenet.py (any script printing its lines will do).
set -uo pipefail
data=${1:?usage: tools/bench.sh DATA_DIR [PEER_SCRIPT]}
peer=${2:-../shared/peer/pytorch_lenet.py}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rows=()

# median of the epoch seconds of epochs 2.. in a train log
median_epoch_ms() {
    awk '/^epoch/ && $2 !~ /^1\// { for (i = 1; i <= NF; i++) if ($i == "s") print $(i - 1) * 1000 }' "$1" |
        sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "nan" }'
}

run_blobnet() { # name, extra args...
    local name=$1; shift
    ./blobnet train models/lenet.cfg --device gpu --epochs 4 --data "$data" "$@" >"$work/$name.log" 2>&1 ||
        { echo "$name failed:"; tail -3 "$work/$name.log"; return; }
    local ms mem acc eval
    ms=$(median_epoch_ms "$work/$name.log")
    mem=$(awk '/^peak device memory/ { print $4 }' "$work/$name.log")
    acc=$(awk '/^final test accuracy/ { print $4 }' "$work/$name.log")
    eval=$(awk '/^epoch/ { e = $(NF - 1) } END { print e }' "$work/$name.log")
    rows+=("$(printf '%-34s %9.1f %10.0f %6s %9s MiB %8s  eval %s ms' "blobnet $name" "$ms" \
        "$(awk -v m="$ms" 'BEGIN { print 60000 / (m / 1000) }')" "@" "$mem" "$acc" "$eval")")
    echo "${rows[-1]}"
}

run_blobnet "bs64" --batch 64
run_blobnet "bs64 tf32" --batch 64 --tf32
run_blobnet "bs64 no graph" --batch 64 --no-graph
run_blobnet "bs64 autotune" --batch 64 --autotune
run_blobnet "bs256" --batch 256
run_blobnet "bs256 tf32" --batch 256 --tf32

best=""
if [ -f "$peer" ]; then
    MNIST_DIR=$data python3 "$peer" --epochs 3 >"$work/peer.log" 2>&1 || tail -3 "$work/peer.log"
    head -2 "$work/peer.log"
    while read -r line; do
        name=$(echo "$line" | sed 's/ *epoch median.*//')
        ms=$(echo "$line" | awk '{ for (i = 1; i <= NF; i++) if ($i == "median") print $(i + 1) }')
        acc=$(echo "$line" | awk '{ for (i = 1; i <= NF; i++) if ($i == "acc") print $(i + 1) }')
        rows+=("$(printf '%-34s %9.1f %10.0f %6s %9s     %8s' "pytorch $name" "$ms" "$(awk -v m="$ms" 'BEGIN { print 60000 / (m / 1000) }')" "@" "-" "$acc")")
        if [ -z "$best" ] || awk -v a="$ms" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$ms; fi
    done < <(grep "epoch median" "$work/peer.log")
fi

echo
nvidia-smi --query-gpu=name --format=csv,noheader
printf '%-34s %9s %10s %6s %13s %8s\n' variant "ms/epoch" "images/s" "vs pt" "device mem" "test acc"
for row in "${rows[@]}"; do
    ms=$(echo "$row" | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^[0-9.]+$/) { print $i; exit } }')
    ratio=$([ -n "$best" ] && awk -v b="$best" -v m="$ms" 'BEGIN { printf "%.2fx", b / m }' || echo "-")
    echo "${row/@/$ratio}"
done

echo
start=$(date +%s.%N)
./blobnet train models/lenet.cfg --device gpu --epochs 10 --until-accuracy 99 --data "$data" >"$work/t99.log" 2>&1
end=$(date +%s.%N)
cat "$work/t99.log"
printf 'process start to 99%% test accuracy: %.2f s wall (models/lenet.cfg, --until-accuracy 99)\n' \
    "$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')"
