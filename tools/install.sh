#!/usr/bin/env bash
# install.sh install ROOT REL=SRC...   copies each SRC to ROOT/REL
# install.sh uninstall ROOT            removes what was installed into ROOT
#
# `make install` and `make uninstall` call this. Install records in the manifest
# ROOT/share/blobnet/install-manifest.txt every file it wrote ("file REL") and every
# directory it had to create ("dir REL"), relative to ROOT, so the prefix can move with
# DESTDIR. Uninstall removes exactly the files listed, then the listed directories that
# are left empty, deepest first; anything else under ROOT stays. Installing again over an
# earlier install keeps the earlier manifest's entries that still exist.
set -euo pipefail

usage() { echo "usage: $0 install ROOT REL=SRC... | $0 uninstall ROOT" >&2; exit 2; }
[ $# -ge 2 ] || usage
mode=$1
root=${2%/}
[ -n "$root" ] || root=/
shift 2
manifest_rel=share/blobnet/install-manifest.txt
manifest=$root/$manifest_rel

# A manifest entry must stay inside ROOT.
safe_rel() {
    case "/$1/" in
        *//* | */../* | */./*) return 1 ;;
    esac
    return 0
}

declare -A files=() dirs=()

read_manifest() {
    [ -f "$manifest" ] || return 0
    local kind rel
    while read -r kind rel; do
        safe_rel "$rel" || { echo "install.sh: $manifest: refusing entry '$rel'" >&2; exit 1; }
        case "$kind" in
            file) files[$rel]=1 ;;
            dir) dirs[$rel]=1 ;;
            *) echo "install.sh: $manifest: unknown entry '$kind'" >&2; exit 1 ;;
        esac
    done < "$manifest"
}

# Creates the directories leading to REL that are missing, remembering each one made.
make_parents() {
    local path="" part
    local IFS=/
    for part in $(dirname "$1"); do
        [ "$part" = . ] && continue
        path=${path:+$path/}$part
        if [ ! -d "$root/$path" ]; then
            mkdir -- "$root/$path"
            dirs[$path]=1
        fi
    done
}

do_install() {
    [ $# -gt 0 ] || usage
    mkdir -p -- "$root"
    read_manifest
    local item rel src perm
    for item in "$@"; do
        rel=${item%%=*}
        src=${item#*=}
        safe_rel "$rel" || { echo "install.sh: bad destination '$rel'" >&2; exit 1; }
        make_parents "$rel"
        perm=644
        [ -x "$src" ] && perm=755
        install -m "$perm" -- "$src" "$root/$rel"
        files[$rel]=1
        echo "installed $root/$rel"
    done
    make_parents "$manifest_rel"
    files[$manifest_rel]=1
    {
        for rel in "${!files[@]}"; do
            # Entries of an earlier install that are gone are forgotten.
            if [ -e "$root/$rel" ] || [ "$rel" = "$manifest_rel" ]; then echo "file $rel"; fi
        done | sort
        for rel in "${!dirs[@]}"; do
            if [ -d "$root/$rel" ]; then echo "dir $rel"; fi
        done | sort
    } > "$manifest.tmp"
    mv -f -- "$manifest.tmp" "$manifest"
    echo "recorded in $manifest"
}

do_uninstall() {
    if [ ! -f "$manifest" ]; then
        echo "install.sh: nothing to uninstall: $manifest not found" >&2
        exit 1
    fi
    read_manifest
    local rel
    for rel in "${!files[@]}"; do
        if [ -f "$root/$rel" ] || [ -L "$root/$rel" ]; then
            rm -f -- "$root/$rel"
            echo "removed $root/$rel"
        fi
    done
    # Deepest first, so a directory's own created subdirectories go before it.
    [ ${#dirs[@]} -gt 0 ] || return 0
    printf '%s\n' "${!dirs[@]}" | awk -F/ '{ print NF "\t" $0 }' | sort -rn | cut -f2- |
        while IFS= read -r rel; do
            if [ -d "$root/$rel" ] && rmdir -- "$root/$rel" 2>/dev/null; then echo "removed $root/$rel/"; fi
        done
}

case "$mode" in
    install) do_install "$@" ;;
    uninstall) do_uninstall ;;
    *) usage ;;
esac
