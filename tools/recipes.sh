#!/usr/bin/env bash
# The model suite at each model file's whole recipe, blobnet beside its PyTorch peer, over several
# seeds: the end points of training, where tools/bench.sh's three epochs compare trajectories.
#
#   tools/recipes.sh MNIST_DIR FASHION_DIR [MODEL...]
#
# For every suite model at its own batch (tools/bench_common.sh; lenet256 is the bench's batch
# override and has no recipe of its own), or the named ones, and every seed of $RECIPES_SEEDS
# (default "1 2"): `blobnet train MODEL --seed S` (the default, FP32) and the peer with the same
# seed (PyTorch's generator, so another initial draw): on the GPU `tools/pytorch_peer.py --variant
# graph-fp32` (TF32 off, as blobnet's default), with RECIPES_DEVICE=cpu blobnet's CPU path and
# `tools/pytorch_cpu_peer.py --recipe` (SGD recipes without [augment] only). Each run's final test
# accuracy is printed, or "div" where it diverged: a NaN blobnet stopped on, or a final accuracy
# at chance (at most 100 / classes + 1 %). Then, per model, each side's mean over the runs that
# did not diverge, their difference (blobnet minus PyTorch) and how many diverged.
#
# RECIPES_EPOCHS=N cuts every recipe to N epochs (its schedule then spans N); RECIPES_JOBS=N runs N
# trainings at a time (default 1; on one GPU they share it: the timed kernel choices of a first
# run can differ from a quiet GPU's, the arithmetic of each choice does not); RECIPES_GPUS=N runs
# them on N GPUs of the machine, RECIPES_JOBS at a time on each, the next training going to the
# first one free. BENCH_LOGS=DIR keeps every log in DIR. Exits 1 when a run fails other than by
# diverging.
set -uo pipefail
mnist=${1:?usage: tools/recipes.sh MNIST_DIR FASHION_DIR [MODEL...]}
fashion=${2:?usage: tools/recipes.sh MNIST_DIR FASHION_DIR [MODEL...]}
shift 2
source "$(dirname "$0")/bench_common.sh"
seeds=${RECIPES_SEEDS:-1 2}
jobs=${RECIPES_JOBS:-1}
device=${RECIPES_DEVICE:-gpu}
for v in $seeds $jobs ${RECIPES_EPOCHS:-1}; do
    if ! [[ $v =~ ^[1-9][0-9]*$ ]]; then
        echo "tools/recipes.sh: RECIPES_SEEDS, RECIPES_JOBS and RECIPES_EPOCHS are positive whole numbers, not $v" >&2
        exit 2
    fi
done
gpus=1
case $device in
    gpu) need_cuda_build tools/recipes.sh "RECIPES_DEVICE=gpu"
         gpus=$(gpus_asked tools/recipes.sh RECIPES_GPUS "${RECIPES_GPUS:-1}") || exit 2 ;;
    cpu) ;;
    *) echo "tools/recipes.sh: RECIPES_DEVICE is gpu or cpu, not $device" >&2; exit 2 ;;
esac
check_model_names tools/recipes.sh "$(printf '%s\n' "${suite[@]}" | awk '$1 != "lenet256" { print $1 }' | xargs)" \
    "a suite model with a recipe (tools/bench_common.sh)" "$@"
bench_logs

# The suite's models at their own batch that were asked for: "name model dataset data".
runs=()
for entry in "${suite[@]}"; do
    read -r name model dataset batch <<<"$entry"
    [ "$batch" = - ] || [ "$batch" = "$(model_batch "$model")" ] || continue
    if [ $# -gt 0 ] && [[ " $* " != *" $name "* ]]; then continue; fi
    data=$(suite_data "$dataset" "$mnist" "$fashion" "$model") || exit 1
    runs+=("$name $model $dataset $data")
done

# One training: side (blobnet or pytorch), name, model, dataset, data folder, seed. Writes its log
# and a result file holding the final accuracy, "div" or "failed".
train_one() {
    local side=$1 name=$2 model=$3 dataset=$4 data=$5 seed=$6 log result acc chance
    log=$logs/$name-$side-$seed.log
    result=$logs/$name-$side-$seed.result
    local more=()
    [ -n "${RECIPES_EPOCHS:-}" ] && more=(--epochs "$RECIPES_EPOCHS")
    if [ "$side" = blobnet ]; then
        ./blobnet train "$model" --dataset "$dataset" --data "$data" --seed "$seed" --device "$device" "${more[@]}"
    elif [ "$device" = gpu ]; then
        python3 tools/pytorch_peer.py "$model" --dataset "$dataset" --data "$data" --seed "$seed" \
            --variant graph-fp32 "${more[@]}"
    else
        python3 tools/pytorch_cpu_peer.py "$model" --dataset "$dataset" --data "$data" --threads "$(nproc)" \
            --recipe --seed "$seed" "${more[@]}"
    fi >"$log" 2>&1
    acc=$(final_accuracy "$log")
    [ -z "$acc" ] && [ "$side" = blobnet ] && grep -q 'became NaN' "$log" && acc=div
    # Chance: one in as many classes as the last dense layer has outputs.
    chance=$(awk -v c="$(model_key "$model" dense outputs 10)" 'BEGIN { print 100 / c + 1 }')
    if [[ $acc =~ ^[0-9.]+$ ]] && awk -v a="$acc" -v c="$chance" 'BEGIN { exit !(a <= c) }'; then acc=div; fi
    [[ $acc =~ ^[0-9.]+$ ]] || [ "$acc" = div ] || { acc=failed; echo "$side $name seed $seed failed: $(tail -1 "$log")" >&2; }
    echo "$acc" >"$result"
}

# One training of the queue: "side name model dataset seed data".
train_item() {
    local side name model dataset seed data
    read -r side name model dataset seed data <<<"$1"
    echo "== $name, $side, seed $seed$([ "$gpus" -gt 1 ] && echo " (GPU $CUDA_VISIBLE_DEVICES)")" >&2
    train_one "$side" "$name" "$model" "$dataset" "$data" "$seed"
}

items=()
for entry in "${runs[@]}"; do
    read -r name model dataset data <<<"$entry"
    for seed in $seeds; do
        for side in blobnet pytorch; do items+=("$side $name $model $dataset $seed $data"); done
    done
done
# On one GPU (or the CPU) the same queue: RECIPES_JOBS workers, all on the first device.
spread_over_gpus $((gpus * jobs)) "$gpus" train_item "${items[@]}"

# "mean count diverged" of a model's results on one side; the mean is "-" when none trained.
side_mean() { # name side
    local seed v
    for seed in $seeds; do cat "$logs/$1-$2-$seed.result"; done |
        awk '/^[0-9.]+$/ { s += $1; n++ } $1 == "div" { d++ }
             END { if (n) printf "%.2f %d %d\n", s / n, n, d; else printf "- 0 %d\n", d }'
}

failed=0
echo
echo "final test accuracy (%) at each model file's recipe${RECIPES_EPOCHS:+ (epochs cut to $RECIPES_EPOCHS)}, blobnet's default ($device)"
echo "beside PyTorch's $([ "$device" = gpu ] && echo "FP32 CUDA graph" || echo "CPU path"), seeds $seeds; div: diverged (NaN, or at chance at the end)"
echo "means over the runs that did not diverge; difference: blobnet's mean minus PyTorch's"
header="| model | epochs |"
for seed in $seeds; do header+=" blobnet $seed | PyTorch $seed |"; done
echo "$header blobnet mean | PyTorch mean | difference | diverged (blobnet, PyTorch) |"
for entry in "${runs[@]}"; do
    read -r name model _ <<<"$entry"
    epochs=${RECIPES_EPOCHS:-$(model_key "$model" train epochs 10)}
    line="| $name | $epochs |"
    for seed in $seeds; do
        for side in blobnet pytorch; do
            r=$(cat "$logs/$name-$side-$seed.result")
            [ "$r" = failed ] && failed=1
            line+=" $r |"
        done
    done
    read -r bm _ bd < <(side_mean "$name" blobnet)
    read -r pm _ pd < <(side_mean "$name" pytorch)
    diff=$(awk -v a="$bm" -v b="$pm" 'BEGIN { if (a == "-" || b == "-") print "-"; else printf "%+.2f", a - b }')
    echo "$line $bm | $pm | $diff | $bd, $pd |"
done
exit $failed
