# shellcheck shell=bash
# bench_common.sh - what tools/bench.sh, tools/scale.sh and tools/multinode_sim.sh share; sourced,
# not run.

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

# A key's value in a model file's [SECTION] sections, the last one naming it (DEFAULT when none
# does): file, section, key, default.
model_key() {
    awk -F= -v sec="[$2]" -v key="$3" -v dflt="$4" '
        /^\[/ { inside = $0 == sec }
        inside && $1 ~ "^ *" key " *$" { gsub(/ /, "", $2); v = $2 }
        END { print v != "" ? v : dflt }' "$1"
}

# The batch of a model file's [train] section (64 when it names none).
model_batch() { model_key "$1" train batch 64; }

# blobnet's epoch lines: milliseconds of each epoch after the first. The line gives seconds to
# the millisecond, 2.6% of LeNet's epoch at 256, so each is taken instead as the epoch's training
# images (the log's first line) over its images a second, which the line gives to seven figures;
# from the seconds where the log names no training images.
blobnet_ms() {
    awk '/^blobnet: training .* train \/ / {
             for (i = 1; i <= NF; i++) if ($i == "train" && $(i + 1) == "/") n = $(i - 1) }
         /^epoch/ && $2 !~ /^1\// { for (i = 1; i <= NF; i++) if ($i == "img/s") {
             if (n > 0 && $(i - 1) > 0) printf "%.2f\n", 1000 * n / $(i - 1)
             else for (j = 1; j < i; j++) if ($j == "s") print $(j - 1) * 1000
             break } }' "$1" | median
}

# The final test accuracy (%) a run's log reports last: blobnet's "final test accuracy: X%", a
# PyTorch peer's "... final test accuracy X%, ..."; empty when it reports none.
final_accuracy() {
    awk '/final test accuracy/ { for (i = 1; i < NF; i++) if ($i ~ /^accuracy:?$/) { x = $(i + 1); sub("[%,]+$", "", x); v = x } }
         END { print v }' "$1"
}

# "ms images_per_s" of a blobnet log: medians over the epoch lines after the first. The seconds
# stand before the word "s", the total images/s before the first "img/s" (a multi-GPU line
# follows it with the per-GPU figure).
blobnet_times() {
    local ms ips
    ms=$(awk '/^epoch/ && $2 !~ /^1\// { for (i = 1; i <= NF; i++) if ($i == "s") { print $(i - 1) * 1000; break } }' "$1" | median)
    ips=$(awk '/^epoch/ && $2 !~ /^1\// { for (i = 1; i <= NF; i++) if ($i == "img/s") { print $(i - 1); break } }' "$1" | median)
    echo "$ms $ips"
}

# The model suite of tools/bench.sh and tools/recipes.sh: name, model file, dataset, batch (-: the
# model's own). cifar10 reads Fashion-MNIST written out as CIFAR-10 records (suite_data).
suite=(
    "lenet           models/lenet.cfg            mnist         64"
    "lenet256        models/lenet.cfg            mnist         256"
    "mlp             models/mlp.cfg              mnist         -"
    "mlp_wide        models/mlp_wide.cfg         mnist         -"
    "vgg_fashion     models/vgg_fashion.cfg      fashion-mnist -"
    "strided_fashion models/strided_fashion.cfg  fashion-mnist -"
    "resnet_mini     models/resnet_mini.cfg      fashion-mnist -"
    "resnet_fashion  models/resnet_fashion.cfg   fashion-mnist -"
    "resnet_odd      models/resnet_odd.cfg       fashion-mnist -"
    "inception       models/inception_fashion.cfg fashion-mnist -"
    "narrow_chain    models/narrow_chain.cfg     fashion-mnist -"
    "cifar10_resnet  models/cifar10_resnet.cfg   cifar10       -"
    "lenet5_tanh     models/lenet5_tanh.cfg      mnist         -"
    "mlp_bn          models/mlp_bn.cfg           mnist         -"
    "densenet        models/densenet_fashion.cfg fashion-mnist -"
    "window7         models/window7_fashion.cfg  fashion-mnist -"
    "batch32         models/batch32_fashion.cfg  fashion-mnist -"
    "allconv_leaky   models/allconv_leaky.cfg    cifar10       -"
    "mlp_elu         models/mlp_elu.cfg          mnist         -"
    "cifar_dropout   models/cifar_dropout.cfg    cifar10       -"
    "photo64         models/photo64.cfg          npz           -"
    "bottleneck64    models/bottleneck64.cfg     npz           -"
    "vgg48x64        models/vgg48x64.cfg         npz           -"
    "wide_shallow    models/wide_shallow.cfg     fashion-mnist -"
    "stem7           models/stem7.cfg            fashion-mnist -"
    "overlap_pool    models/overlap_pool.cfg     mnist         -"
    "mlp_odd         models/mlp_odd.cfg          mnist         -"
    "dcgan_disc      models/dcgan_disc.cfg       fashion-mnist -"
    "patch4          models/patch4.cfg           fashion-mnist -"
)

# The data of a suite model's dataset (mnist, fashion-mnist, cifar10 or npz): the MNIST or the
# Fashion-MNIST folder given; for cifar10 Fashion-MNIST written out as CIFAR-10 records (centred
# on 32x32, the gray channel repeated: blobnet data --write); for npz Fashion-MNIST written out as
# an image folder of PNGs, read back as a user's pictures are (fitted to the model's input: resized
# to cover it and centre-cropped, the gray channel repeated) and kept as a NumPy archive, one for
# each input shape (models/photo64.cfg's 3x64x64 where no model is given). Written into $logs once a
# run; call it outside parallel jobs: the first call writes the files.
suite_data() { # dataset mnist_dir fashion_dir [model]
    case $1 in
        mnist) echo "$2" ;;
        fashion-mnist) echo "$3" ;;
        cifar10)
            local dir=$logs/fashion-cifar10
            if [ ! -f "$dir/test_batch.bin" ]; then
                ./blobnet data --dataset fashion-mnist --data "$3" --write "cifar10:$dir" >&2 || return 1
            fi
            echo "$dir" ;;
        npz)
            local model=${4:-models/photo64.cfg} c h w
            c=$(model_key "$model" input channels 1)
            h=$(model_key "$model" input height 0)
            w=$(model_key "$model" input width 0)
            local png=$logs/fashion-png npz=$logs/fashion-${c}x${h}x${w}.npz
            if [ ! -f "$npz" ]; then
                if [ ! -d "$png/test" ]; then
                    ./blobnet data --dataset fashion-mnist --data "$3" --write "folder:$png" >&2 || return 1
                fi
                ./blobnet data "$model" --data "$png" --write "npz:$npz" >&2 || return 1
            fi
            echo "$npz" ;;
        *) echo "suite_data: no data for the dataset '$1'" >&2; return 1 ;;
    esac
}

# The models of the multi-GPU tools (scale.sh, multinode_sim.sh): name, model file, dataset, batch
# (-: the model's own). The Fashion-MNIST ones read $FASHION.
scale_models=(
    "lenet             models/lenet.cfg             mnist         64"
    "resnet_fashion    models/resnet_fashion.cfg    fashion-mnist -"
    "vgg_fashion       models/vgg_fashion.cfg       fashion-mnist -"
    "mlp               models/mlp.cfg               mnist         -"
    "mlp_wide          models/mlp_wide.cfg          mnist         -"
    "strided_fashion   models/strided_fashion.cfg   fashion-mnist -"
    "resnet_mini       models/resnet_mini.cfg       fashion-mnist -"
    "resnet_odd        models/resnet_odd.cfg        fashion-mnist -"
    "inception_fashion models/inception_fashion.cfg fashion-mnist -"
    "narrow_chain      models/narrow_chain.cfg      fashion-mnist -"
)
# The models tools/scale.sh and tools/multinode_sim.sh run when none is named.
scale_default=(lenet resnet_fashion vgg_fashion)

# Exits unless every name after the first three is one of `allowed`: tool, allowed (names separated
# by spaces), what they are (for the error), names...
check_model_names() {
    local tool=$1 allowed=$2 what=$3 m
    shift 3
    for m in "$@"; do
        if [[ " $allowed " != *" $m "* ]]; then
            echo "$tool: model $m: not $what" >&2
            exit 2
        fi
    done
}

# Exits unless every name after the tool's names a model of scale_models: tool, names...
check_scale_models() {
    local tool=$1
    shift
    local names
    names=$(printf '%s\n' "${scale_models[@]}" | awk '{ print $1 }' | xargs)
    check_model_names "$tool" "$names" "one of ${names// /, }" "$@"
}

# The number of GPUs a tool's variable asks for: tool, variable name, its value (empty: 1). Exits
# with a one-line error unless it is a positive whole number no larger than the GPUs visible
# (nvidia-smi's list, or CUDA_VISIBLE_DEVICES's where that is set).
gpus_asked() {
    local tool=$1 var=$2 n=${3:-1} have
    if ! [[ $n =~ ^[1-9][0-9]*$ ]]; then
        echo "$tool: $var=$n: not a positive whole number of GPUs" >&2
        exit 2
    fi
    [ "$n" -eq 1 ] && { echo 1; return; }
    if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
        have=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .)
    else
        have=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    fi
    if [ "$n" -gt "$have" ]; then
        echo "$tool: $var=$n: this machine shows $have GPU(s)" >&2
        exit 2
    fi
    echo "$n"
}

# Runs `fn ITEM` once for each ITEM on `workers` workers at a time, worker w on GPU w % gpus (the
# w % gpus-th entry of CUDA_VISIBLE_DEVICES where that is set, else that index): each worker takes
# the next item not yet taken as soon as it is free, so that long items do not hold short ones
# behind them. fn sees CUDA_VISIBLE_DEVICES set to its one GPU and BENCH_WORKER to its worker's
# number. Returns when every item has run. Usage: spread_over_gpus workers gpus fn item...
spread_over_gpus() {
    local workers=$1 gpus=$2 fn=$3 w list next
    shift 3
    local -a items=("$@") visible=()
    [ -n "${CUDA_VISIBLE_DEVICES:-}" ] && IFS=, read -ra visible <<<"$CUDA_VISIBLE_DEVICES"
    next=$(mktemp) || return 1
    echo 0 >"$next"
    for ((w = 0; w < workers; w++)); do
        list=$((w % gpus))
        [ ${#visible[@]} -gt 0 ] && list=${visible[$((w % gpus))]}
        (
            export CUDA_VISIBLE_DEVICES=$list BENCH_WORKER=$w
            while :; do
                # The queue's next index, read and moved on under a lock on its file.
                i=$(flock "$next" bash -c 'i=$(cat "$1"); echo $((i + 1)) >"$1"; echo "$i"' _ "$next")
                [ "$i" -lt ${#items[@]} ] || break
                "$fn" "${items[$i]}"
            done
        ) &
    done
    wait
    rm -f "$next"
}
