#!/usr/bin/env bash
# Profiles a short LeNet run on the GPU with Nsight Systems (when installed) and the
# kernels of one layer's NVTX range with Nsight Compute.
#
#   tools/profile.sh [DATA_DIR] [RANGE] [OUT_DIR]
#
# RANGE is an NVTX range of the blobnet domain, e.g. conv1/forward (default) or
# ip1/backward. Reports land in OUT_DIR (default profile-out).
set -euo pipefail
data=${1:-${BLOBNET_DATA:-data/mnist}}
range=${2:-conv1/forward}
out=${3:-profile-out}
model=${MODEL:-models/lenet.cfg}
mkdir -p "$out"
run=(./blobnet train "$model" --device gpu --epochs 1 --train-limit 6400 --data "$data" --quiet)

if command -v nsys >/dev/null; then
    # Steps 50..59 only: the capture range skips start-up and cuDNN's algorithm search.
    nsys profile --trace=cuda,nvtx,cublas,cudnn --capture-range=cudaProfilerApi \
        --output "$out/lenet" --force-overwrite true "${run[@]}" --profile-steps 50:59
    nsys stats --report nvtx_sum,cuda_gpu_kern_sum "$out/lenet.nsys-rep" | tee "$out/nsys-summary.txt"
else
    echo "nsys not found: skipping the timeline (Nsight Systems)"
fi

if command -v ncu >/dev/null; then
    # NVTX ranges are matched as domain@range, and only inside the captured steps.
    ncu --nvtx --nvtx-include "blobnet@$range/" --profile-from-start off --section SpeedOfLight \
        --launch-count 20 --csv --page details "${run[@]}" --profile-steps 50:51 | tee "$out/ncu-${range//\//-}.csv"
else
    echo "ncu not found: skipping the kernel report (Nsight Compute)"
fi
