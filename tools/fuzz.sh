#!/usr/bin/env bash
# Builds and runs one of blobnet's libFuzzer targets (tests/fuzz/fuzz_TARGET.c) with
# AddressSanitizer and UndefinedBehaviorSanitizer, then prints its executions, coverage and
# findings.
#
#   tools/fuzz.sh TARGET SECONDS    TARGET: idx, npz, model, checkpoint, image, cifar or datacache
#   tools/fuzz.sh seeds             rewrites the binary seeds under tests/fuzz/corpus
#
# Needs clang with its runtime libraries (Debian: clang, libclang-rt-14-dev or the
# libclang-rt-dev of the clang version). The library is compiled for the CPU only into
# $FUZZ_BUILD (default build-fuzz); the run's corpus grows in $FUZZ_BUILD/corpus/TARGET,
# seeded from tests/fuzz/corpus/TARGET, and a crashing input is saved as
# $FUZZ_BUILD/artifacts/TARGET-crash-<sha1> (add it to the seed corpus once fixed).
# Extra libFuzzer flags can be passed in $FUZZ_FLAGS. The targets' scratch files live in one
# folder in /dev/shm (else $TMPDIR or /tmp), removed when the run ends, however it ends.
set -euo pipefail
cd "$(dirname "$0")/.."

CLANG=${CLANG:-clang}
build=${FUZZ_BUILD:-build-fuzz}
usage() { echo "usage: tools/fuzz.sh idx|npz|model|checkpoint|image|cifar|datacache SECONDS | tools/fuzz.sh seeds" >&2; exit 2; }
[ $# -ge 1 ] || usage
target=$1

command -v "$CLANG" >/dev/null || { echo "fuzz.sh: $CLANG not found (apt-get install clang)" >&2; exit 1; }
blas_inc=$(ls -d /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas 2>/dev/null | head -1 || true)
cflags=(-std=c11 -O1 -g -fno-omit-frame-pointer -Wall -Wextra -Wshadow -Wno-unused-parameter
        -fsanitize=address,undefined -fno-sanitize-recover=undefined -D_POSIX_C_SOURCE=200809L
        -Isrc -Ilayers -Idatasets -Itests/fuzz ${blas_inc:+-I$blas_inc})
libs=(-lopenblas -lpng -lz -lm -lpthread -ldl)
# JPEG as the Makefile finds it: libjpeg-turbo's header, else a build that refuses JPEG files.
if [ -f /usr/include/jpeglib.h ] || [ -f /usr/local/include/jpeglib.h ]; then libs+=(-ljpeg); else cflags+=(-DBN_NO_JPEG); fi

# The library as the Makefile builds it for CPU_ONLY=1, less the CLI, instrumented for
# coverage; an object is rebuilt when its source or any header is newer.
mkdir -p "$build/obj"
srcs=()
for f in src/*/*.c src/*/*/*.c layers/*.c layers/*/*.c datasets/*.c; do
    case $f in src/cli/*|layers/examples/*) continue ;; esac
    srcs+=("$f")
done
newest_header=$(ls -t src/*.h src/*/*.h src/*/*/*.h layers/*.h layers/*/*.h datasets/*.h tests/fuzz/*.h | head -1)
objs=()
for f in "${srcs[@]}"; do
    o="$build/obj/$(echo "${f%.c}" | tr / _).o"
    objs+=("$o")
    if [ ! -f "$o" ] || [ "$f" -nt "$o" ] || [ "$newest_header" -nt "$o" ]; then
        echo "$CLANG -c $f"
        "$CLANG" "${cflags[@]}" -fsanitize=fuzzer-no-link -c "$f" -o "$o" &
        while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do wait -n; done
    fi
done
wait
lib="$build/libblobnet-fuzz.a"
rm -f "$lib"
ar rcs "$lib" "${objs[@]}"

if [ "$target" = seeds ]; then
    "$CLANG" "${cflags[@]}" -Itests tests/fuzz/make_seeds.c tests/test_util_images.c "$lib" "${libs[@]}" \
        -o "$build/make_seeds"
    mkdir -p tests/fuzz/corpus/idx tests/fuzz/corpus/npz tests/fuzz/corpus/checkpoint tests/fuzz/corpus/image \
             tests/fuzz/corpus/cifar tests/fuzz/corpus/datacache
    "$build/make_seeds" tests/fuzz/corpus
    ls -l tests/fuzz/corpus/idx tests/fuzz/corpus/npz tests/fuzz/corpus/checkpoint tests/fuzz/corpus/image \
          tests/fuzz/corpus/cifar tests/fuzz/corpus/datacache
    exit 0
fi

[ $# -eq 2 ] || usage
seconds=$2
[ -f "tests/fuzz/fuzz_$target.c" ] || usage
bin="$build/fuzz_$target"
"$CLANG" "${cflags[@]}" -fsanitize=fuzzer "tests/fuzz/fuzz_$target.c" "$lib" "${libs[@]}" -o "$bin"

mkdir -p "$build/corpus/$target" "$build/artifacts"
shm=/dev/shm
[ -d "$shm" ] && [ -w "$shm" ] || shm=${TMPDIR:-/tmp}
scratch=$(mktemp -d "$shm/blobnet-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
export BLOBNET_FUZZ_SCRATCH=$scratch
log="$build/fuzz_$target.log"
echo "fuzzing $target for $seconds s (log: $log)"
set +e
# -timeout: an input that runs 10 s is a hang. libFuzzer's default memory limits stand
# (2 GB of RSS, no single allocation over 2 GB).
"$bin" -max_total_time="$seconds" -timeout=10 -print_final_stats=1 -artifact_prefix="$build/artifacts/$target-" \
    ${FUZZ_FLAGS:-} "$build/corpus/$target" "tests/fuzz/corpus/$target" >"$log" 2>&1
rc=$?
set -e
last=$(grep -E '^#[0-9]+' "$log" | tail -1)
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
echo "$target: ${execs:-?} executions (${rate:-?}/s), $(echo "$last" | grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[^ ]+')"
if [ $rc -ne 0 ]; then
    echo "$target: FINDING (libFuzzer exit $rc):"
    grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$log" | head -10
    exit 1
fi
echo "$target: no findings"
