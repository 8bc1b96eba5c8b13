#!/usr/bin/env bash
# Several machines simulated on one (docs/multi-gpu.md, "Several machines, simulated"): the ranks
# of one run started by hand over --rendezvous, as two "nodes", with NCCL's traffic on the socket
# path it takes between machines, against the same run over NCCL's default transports.
#
#   tools/multinode_sim.sh MNIST_DIR [MODEL...]
#
# MODEL: lenet, mlp, mlp_wide (MNIST), resnet_fashion, vgg_fashion, strided_fashion, resnet_mini,
# resnet_odd, inception_fashion, narrow_chain (Fashion-MNIST from $FASHION, default
# /usr/share/datasets/fashion-mnist); lenet, resnet_fashion and vgg_fashion when none is named. With 4 GPUs or more the world
# is 4 ranks, nodes a (GPUs 0, 1) and b (GPUs 2, 3); with 2 or 3, 2 ranks, one a node. Each rank is
#   blobnet train MODEL ... --rank R --world N --rendezvous 127.0.0.1:PORT --device gpu:R
# as it would be started on its machine, in these modes:
#   default  as a run on one machine is (the gradients summed through the GPUs' memory of each
#            other, docs/multi-gpu.md; NCCL's NVLink or PCIe peer copies for the rest);
#   socket   NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1, and NCCL_HOSTID set per node
#            so that NCCL also plans for two hosts: every byte crosses TCP, as between two machines
#            joined by Ethernet (here through the loopback: no wire's bandwidth or latency);
#   hosts    (2 ranks a node only) NCCL_HOSTID per node alone: peer copies inside a node, the
#            socket between the nodes, as two machines of 2 GPUs each.
# For each model and mode: the median epoch time of epochs 2.. ($SIM_EPOCHS epochs, default 2) at
# the model's batch ($SIM_BATCH for another global batch), the transports NCCL's log names, and
# whether every rank's final weights (BLOBNET_RANK_WEIGHTS) equal rank 0's byte for byte (cmp),
# and the run's wall seconds from the ranks' start to the last one's end (start-up included).
# Then a socket-path run of the first model is stopped by SIGKILL to the last rank once it has
# logged 25 steps: every other rank must end on its own, with a non-zero exit and an error line,
# within the deadline (BLOBNET_DIST_TIMEOUT=$SIM_TIMEOUT, default 20 s) plus NCCL's abort (10 s) and
# 20 s of margin; how long each took is reported. SIM_HOSTID=0 leaves NCCL_HOSTID out (NCCL then
# sees one host, its traffic still on the socket path). NCCL_NVLS_ENABLE=0 in every mode.
# BENCH_LOGS=DIR keeps every log (NCCL's too) in DIR. Exits 1 when a run fails, ranks differ or
# a rank outlives the deadline.
set -uo pipefail
mnist=${1:?usage: tools/multinode_sim.sh MNIST_DIR [MODEL...]}
shift
fashion=${FASHION:-/usr/share/datasets/fashion-mnist}
epochs=${SIM_EPOCHS:-2}
deadline=${SIM_TIMEOUT:-20}
source "$(dirname "$0")/bench_common.sh"
check_scale_models tools/multinode_sim.sh "$@"
[ $# -gt 0 ] || set -- "${scale_default[@]}"
for v in "$epochs" "$deadline" "${SIM_BATCH:-1}"; do
    if ! [[ $v =~ ^[1-9][0-9]*$ ]]; then
        echo "tools/multinode_sim.sh: SIM_EPOCHS, SIM_TIMEOUT and SIM_BATCH are positive whole numbers, not $v" >&2
        exit 2
    fi
done
need_cuda_build tools/multinode_sim.sh "training on several GPUs"
have=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$have" -lt 2 ]; then
    echo "tools/multinode_sim.sh: needs 2 GPUs, this machine has $have" >&2
    exit 2
fi
per_node=1
[ "$have" -ge 4 ] && per_node=2
world=$((2 * per_node))
bench_logs
export NCCL_NVLS_ENABLE=0

# Each mode's NCCL environment; NODE stands for the rank's node name.
hostid="NCCL_HOSTID=blobnet-sim-NODE"
[ "${SIM_HOSTID:-1}" = 0 ] && hostid=
modes=(default socket)
declare -A mode_env=([default]="" [socket]="NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 $hostid")
if [ "$per_node" -gt 1 ] && [ -n "$hostid" ]; then
    modes+=(hosts)
    mode_env[hosts]=$hostid
fi
node_names=(a b)

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
        echo $((20000 + RANDOM % 20000))
}

# Every rank process this script started and has not reaped, so that none outlives it.
pids=()
stop_ranks() {
    local p
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    pids=()
}
trap 'stop_ranks' EXIT

# Starts the world's ranks in the background: folder of the run's logs, the mode, environment
# words for every rank, then blobnet's arguments. NCCL logs its set-up to DIR/nccl.*.log.
start_ranks() {
    local dir=$1 mode=$2 common=$3 port r node words
    shift 3
    port=$(free_port)
    mkdir -p "$dir"
    for ((r = 0; r < world; r++)); do
        node=${node_names[$((r / per_node))]}
        read -ra words <<<"${mode_env[$mode]//NODE/$node} $common"
        env "${words[@]}" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET NCCL_DEBUG_FILE="$dir/nccl.%p.log" \
            ./blobnet train "$@" --rendezvous "127.0.0.1:$port" --rank "$r" --world "$world" --device "gpu:$r" \
            >"$dir/rank$r.log" 2>&1 &
        pids+=($!)
    done
}

# The transports NCCL's logs in a folder name ("via P2P/CUMEM/read" -> P2P/CUMEM), or "?".
transports() {
    local t
    t=$(cat "$1"/nccl.*.log 2>/dev/null | grep -o 'via [A-Za-z0-9_/]*' | awk -F'[ /]' '{ print $2 "/" $3 }' |
        sort -u | paste -sd, -)
    echo "${t:-?}"
}

# 1 when every rank's weights in a folder equal rank 0's byte for byte.
ranks_equal() {
    local r
    for ((r = 1; r < world; r++)); do
        cmp -s "$1/rank0.safetensors" "$1/rank$r.safetensors" || { echo 0; return; }
    done
    [ -s "$1/rank0.safetensors" ] && echo 1 || echo 0
}

# A note for the summary, also printed now (a run cut short keeps what it had found).
note() {
    notes+=("$1")
    echo "$1" >&2
}

failed=0
rows=() notes=()
declare -A ms=()
kill_model=
for entry in "${scale_models[@]}"; do
    read -r name model dataset batch <<<"$entry"
    if [ $# -gt 0 ] && [[ " $* " != *" $name "* ]]; then continue; fi
    data=$mnist
    [ "$dataset" = mnist ] || data=$fashion
    [ "$batch" = - ] && batch=$(model_batch "$model")
    batch=${SIM_BATCH:-$batch}
    args=("$model" --dataset "$dataset" --data "$data" --batch "$batch")
    [ -n "$kill_model" ] || kill_model=$name
    for mode in "${modes[@]}"; do
        dir=$logs/$name-$mode
        echo "== $name, $mode: $world ranks" >&2
        began=$SECONDS
        start_ranks "$dir" "$mode" "BLOBNET_RANK_WEIGHTS=$dir BLOBNET_DIST_TIMEOUT=60" "${args[@]}" --epochs "$epochs"
        bad=
        for ((r = 0; r < world; r++)); do
            wait "${pids[$r]}" || bad+=" rank $r exited $?;"
        done
        pids=()
        if [ -n "$bad" ]; then
            failed=1
            note "$name, $mode: FAILED:$bad see $dir"
            tail -3 "$dir"/rank*.log >&2
            rows+=("| $name | $batch | $mode | $(transports "$dir") | - | - | - | - | $((SECONDS - began)) |")
            echo "${rows[-1]}" >&2
            continue
        fi
        read -r t ips < <(blobnet_times "$dir/rank0.log")
        ms[$name:$mode]=$t
        first=$(awk '/^epoch +1\// { for (i = 1; i <= NF; i++) if ($i == "s") print $(i - 1) }' "$dir/rank0.log")
        equal=no
        [ "$(ranks_equal "$dir")" = 1 ] && equal=yes
        [ "$equal" = yes ] || { failed=1; note "$name, $mode: the ranks' final weights differ ($dir)"; }
        rows+=("| $name | $batch | $mode | $(transports "$dir") | $t | $ips | ${first:--} | $equal | $((SECONDS - began)) |")
        echo "${rows[-1]}" >&2
    done
    for mode in "${modes[@]}"; do
        [ "$mode" = default ] && continue
        a=${ms[$name:default]:-} b=${ms[$name:$mode]:-}
        if [[ $a =~ ^[0-9.]+$ && $b =~ ^[0-9.]+$ ]]; then
            note "$(awk -v n="$name" -v m="$mode" -v a="$a" -v b="$b" \
                'BEGIN { printf "%s: the %s path takes %+.1f ms an epoch over the default transports (x%.2f)", n, m, b - a, b / a }')"
        fi
    done
done

# A rank killed in the middle of a socket-path run: the others must end by the deadline.
kill_check() {
    local name=$1 model dataset batch data dir csv victim started killed now r code took line bound steps left state
    read -r _ model dataset batch < <(printf '%s\n' "${scale_models[@]}" | awk -v n="$name" '$1 == n')
    data=$mnist
    [ "$dataset" = mnist ] || data=$fashion
    [ "$batch" = - ] && batch=$(model_batch "$model")
    batch=${SIM_BATCH:-$batch}
    dir=$logs/$name-kill
    csv=$dir/steps.csv
    mkdir -p "$dir"
    rm -f "$csv"
    echo "== $name, socket: $world ranks, the last one killed after 25 steps" >&2
    # Only rank 0 writes the log; every rank gets the same arguments, as the fingerprint wants.
    start_ranks "$dir" socket "BLOBNET_DIST_TIMEOUT=$deadline" "$model" --dataset "$dataset" --data "$data" \
        --batch "$batch" --epochs 50 --log "$csv" --log-every 1
    victim=$((world - 1))
    started=$(date +%s.%N)
    # 26 lines: the header and 25 steps.
    until [ -f "$csv" ] && [ "$(wc -l <"$csv")" -ge 26 ]; do
        if ! kill -0 "${pids[0]}" 2>/dev/null || [ "$(awk -v s="$started" -v n="$(date +%s.%N)" 'BEGIN { print (n - s > 300) }')" = 1 ]; then
            note "kill check: $name never logged 25 steps on the socket path (see $dir)"
            failed=1
            stop_ranks
            return
        fi
        sleep 0.2
    done
    kill -9 "${pids[$victim]}"
    killed=$(date +%s.%N)
    steps=$(($(wc -l <"$csv") - 1))
    bound=$((deadline + 10 + 20))
    declare -A ended=()
    while :; do
        now=$(date +%s.%N)
        left=0
        for ((r = 0; r < victim; r++)); do
            [ -n "${ended[$r]:-}" ] && continue
            # A rank that has ended but is not yet reaped is a zombie ("Z" in /proc/PID/stat).
            state=$(awk '{ print $3 }' "/proc/${pids[$r]}/stat" 2>/dev/null)
            if [ -n "$state" ] && [ "$state" != Z ]; then
                left=1
            else
                ended[$r]=$(awk -v a="$killed" -v b="$now" 'BEGIN { printf "%.1f", b - a }')
            fi
        done
        [ "$left" = 0 ] && break
        if [ "$(awk -v a="$killed" -v b="$now" -v m="$bound" 'BEGIN { print (b - a > m) }')" = 1 ]; then break; fi
        sleep 0.1
    done
    note "kill check: $name on the socket path, rank $victim (node ${node_names[$((victim / per_node))]}) killed after step $steps, $(awk -v a="$started" -v b="$killed" 'BEGIN { printf "%.0f", b - a }') s after the ranks started; deadline $deadline s"
    for ((r = 0; r < victim; r++)); do
        took=${ended[$r]:-}
        if [ -z "$took" ]; then
            state=$(awk '{ print $3 }' "/proc/${pids[$r]}/stat" 2>/dev/null)
            note "  rank $r: still running ${bound} s after the kill (process state ${state:-?}), last line: $(tail -1 "$dir/rank$r.log" | cut -c1-120): FAILED (killed now)"
            failed=1
            continue
        fi
        wait "${pids[$r]}"
        code=$?
        line=$(grep -m1 'error' "$dir/rank$r.log" | cut -c1-160)
        if [ "$code" -eq 0 ] || [ "$code" -ge 128 ] || [ -z "$line" ]; then
            failed=1
            note "  rank $r: exit $code after $took s, ${line:-no error line}: FAILED (wanted an error exit and line)"
        else
            note "  rank $r: exit $code after $took s: $line"
        fi
    done
    stop_ranks
}
[ -n "$kill_model" ] && kill_check "$kill_model"

echo
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sort | uniq -c
version=$(cat "$logs"/*/nccl.*.log 2>/dev/null | grep -o 'NCCL version [^ ]*' | head -1)
echo "simulated nodes: 2 x $per_node rank(s) on $world GPUs; ${version:-NCCL version not logged}; epochs $epochs,"
echo "ms per epoch and images/s the medians of epochs 2-$epochs on rank 0; first epoch (s) holds NCCL's set-up"
echo
echo "| model | global batch | mode | NCCL transports | ms/epoch | images/s | first epoch s | ranks bit-identical | run s |"
echo "|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
printf '%s\n' "${notes[@]}"
exit "$failed"
