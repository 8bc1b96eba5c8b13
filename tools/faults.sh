#!/usr/bin/env bash
# Fault runs of `blobnet train` on the CPU path, with their figures; each exits non-zero when
# a run broke its promise.
#
#   tools/faults.sh kill [N]   N (20) kills -9 at random moments of LeNet runs that save a
#                              checkpoint after every step: every checkpoint left behind must
#                              resume to the final checkpoint of an uninterrupted run, byte for
#                              byte, and the resumed run's saves must remove the temporary file a
#                              kill inside a save left.
#   tools/faults.sh full       the disk filling up, on a tmpfs of 8 KiB, 2 MiB and 6 MiB (so that
#                              the log, the first checkpoint and the second one in turn do not
#                              fit): the run must end with exit 1 and an error naming the file,
#                              every line of the log whole, no temporary file left, and the
#                              checkpoint saved before the disk filled intact: resumed elsewhere,
#                              it ends where a run with room ends, byte for byte.
#
# Needs ./blobnet (make) and MNIST in $DATA (default data/mnist: make train fetches it). The
# tmpfs is mounted by root, or by anyone inside `unshare -rm` where the kernel allows user
# namespaces. Work files go to $FAULT_DIR (default a new directory under /tmp), removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

data=${DATA:-data/mnist}
usage() { echo "usage: tools/faults.sh kill [N] | tools/faults.sh full" >&2; exit 2; }
[ $# -ge 1 ] || usage
[ -x ./blobnet ] || { echo "faults.sh: ./blobnet not built (make)" >&2; exit 1; }
[ -d "$data" ] || { echo "faults.sh: no MNIST in $data (set DATA=dir)" >&2; exit 1; }

# 400 images in batches of 20: 20 steps an epoch, each followed by a 3.4 MB checkpoint.
train=(./blobnet train models/lenet.cfg --device cpu --data "$data" --train-limit 400 --batch 20 --quiet)

# The step a checkpoint was saved at, from its header.
ckpt_step() { head -c 4096 "$1" | tr ',' '\n' | sed -n 's/^"step":"\([0-9]*\)"$/\1/p'; }

# Lines of a CSV log that are not whole rows: unterminated, or not as many fields as its header.
broken_rows() { awk -F, 'NR == 1 { want = NF } NF != want { n++ } END { print n + 0 }' "$1"; if [ -s "$1" ] && [ -n "$(tail -c 1 "$1")" ]; then echo "    (no newline at the end)"; fi; }

kill_runs() {
    local n=$1 dir=$2 failures=0 inside=0 steps=()
    # Kills fall anywhere between a run's first checkpoint and its end: that span, in ms, as this
    # machine takes it.
    "${train[@]}" --epochs 2 --checkpoint-every 1 --save "$dir/reference.safetensors" >/dev/null &
    local pid=$!
    until [ -e "$dir/reference.safetensors" ] || ! kill -0 "$pid" 2>/dev/null; do sleep 0.01; done
    local start=$(date +%s%N)
    wait "$pid"
    local span=$((($(date +%s%N) - start) / 1000000))
    for ((i = 1; i <= n; i++)); do
        rm -f "$dir"/ck.safetensors*
        "${train[@]}" --epochs 2 --checkpoint-every 1 --save "$dir/ck.safetensors" >/dev/null &
        pid=$!
        until [ -e "$dir/ck.safetensors" ] || ! kill -0 "$pid" 2>/dev/null; do sleep 0.01; done
        local ms=$(((RANDOM * 32768 + RANDOM) % span))
        sleep "$((ms / 1000)).$(printf %03d $((ms % 1000)))"
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        local temps step
        temps=$(find "$dir" -name 'ck.safetensors.tmp.*' | wc -l)
        step=$(ckpt_step "$dir/ck.safetensors")
        inside=$((inside + (temps > 0)))
        steps+=("$step")
        if ! "${train[@]}" --epochs 2 --resume "$dir/ck.safetensors" --save "$dir/ck.safetensors" >/dev/null; then
            echo "kill $i: the checkpoint of step $step did not resume" >&2
            failures=$((failures + 1))
        elif ! cmp -s "$dir/ck.safetensors" "$dir/reference.safetensors"; then
            echo "kill $i: resumed from step $step, the final checkpoint differs from the uninterrupted run's" >&2
            failures=$((failures + 1))
        elif [ "$(find "$dir" -name 'ck.safetensors.tmp.*' | wc -l)" != 0 ]; then
            echo "kill $i: the resumed run's saves left the killed save's temporary file" >&2
            failures=$((failures + 1))
        fi
    done
    echo "kill -9: $n kills in the ${span} ms from a run's first checkpoint to its end ($inside inside a save);"
    echo "    checkpoints left at steps ${steps[*]}"
    echo "kill -9: $((n - failures)) of $n resumed to the uninterrupted run's final checkpoint byte for byte, no temporary file left"
    return $((failures > 0))
}

# 4000 images in batches of 20: 200 steps an epoch, a log row after each, checkpoints at the end
# of epoch 1 (step 200) and at step 300.
full_train=(--train-limit 4000 --batch 20 --epochs 2 --checkpoint-every 300)

# One disk-full run on a tmpfs of $size at $mnt; $expect names the file whose write must fail.
full_run() {
    local size=$1 mnt=$2 dir=$3 expect=$4 failures=0
    mount -t tmpfs -o "size=$size" tmpfs "$mnt"
    local rc=0
    "${train[@]}" "${full_train[@]}" --log "$mnt/log.csv" --log-every 1 --save "$mnt/ck.safetensors" \
        >"$dir/out.txt" 2>&1 || rc=$?
    local rows broken temps step=none
    rows=$(($(wc -l <"$mnt/log.csv") - 1))
    broken=$(broken_rows "$mnt/log.csv")
    temps=$(find "$mnt" -name 'ck.safetensors.tmp.*' | wc -l)
    [ -e "$mnt/ck.safetensors" ] && step=$(ckpt_step "$mnt/ck.safetensors")
    echo "disk full at $size: exit $rc; $(tail -1 "$dir/out.txt")"
    echo "    log: $rows rows, $broken not whole; temporary files left: $temps; checkpoint: step $step"
    [ "$rc" = 1 ] && grep -q "$mnt/$expect" "$dir/out.txt" || { echo "    expected exit 1 naming $expect" >&2; failures=1; }
    [ "$broken" = 0 ] && [ "$temps" = 0 ] || failures=1
    if [ "$step" != none ]; then
        # The checkpoint the disk kept resumes, off the full disk, to the end of the run.
        cp "$mnt/ck.safetensors" "$dir/kept.safetensors"
        if "${train[@]}" "${full_train[@]}" --resume "$dir/kept.safetensors" --save "$dir/kept.safetensors" >/dev/null &&
            cmp -s "$dir/kept.safetensors" "$dir/reference.safetensors"; then
            echo "    the checkpoint of step $step resumes to the final checkpoint of a run with room, byte for byte"
        else
            echo "    the checkpoint of step $step does not resume to the final checkpoint of a run with room" >&2
            failures=1
        fi
    fi
    umount "$mnt"
    return "$failures"
}

full_runs() {
    local dir=$1 mnt=$1/mnt failures=0
    mkdir -p "$mnt"
    "${train[@]}" "${full_train[@]}" --save "$dir/reference.safetensors" >/dev/null
    full_run 8k "$mnt" "$dir" log.csv || failures=1
    full_run 2m "$mnt" "$dir" ck.safetensors || failures=1
    full_run 6m "$mnt" "$dir" ck.safetensors || failures=1
    return "$failures"
}

dir=${FAULT_DIR:-$(mktemp -d /tmp/blobnet-faults.XXXXXX)}
mkdir -p "$dir"
trap 'umount "$dir/mnt" 2>/dev/null || true; rm -rf "$dir"' EXIT
case $1 in
kill) kill_runs "${2:-20}" "$dir" ;;
full)
    if [ "$(id -u)" = 0 ]; then
        full_runs "$dir"
    else
        # A mount namespace of our own, where an unprivileged user may mount a tmpfs.
        unshare -rm bash -c "$(declare -p train full_train data); $(declare -f ckpt_step broken_rows full_run full_runs);
                             full_runs '$dir'"
    fi
    ;;
*) usage ;;
esac
