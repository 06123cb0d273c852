#!/bin/bash
# build-release.sh: builds relay-server and relay-client in release mode and
# writes stripped copies to target/dist/ (for machines set up by hand;
# terraform/ uploads scripts/package's .deb packages), with the debug info split off into target/dist/NAME.debug and
# linked from the binary by .gnu_debuglink (gdb and addr2line find it there;
# keep the .debug files to symbolise a crash).
#
# Usage: deploy/build-release.sh [--no-build] [--target-dir DIR] [BIN...]
#   BIN          relay-server and/or relay-client (default: both)
#   --no-build   only strip what target/release already holds
#   --target-dir cargo's target directory (default: $CARGO_TARGET_DIR or
#                <repo>/target)
#   deploy/build-release.sh --strip-only SRC OUTDIR   strip one file
#
# The symbol table stays (panics and backtraces keep function names);
# DWARF debug info, the bulk of a release build with debug = 1, goes.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
build=1
bins=()

# split SRC OUTDIR: OUTDIR/NAME (stripped) and OUTDIR/NAME.debug.
split() {
    local src=$1 out=$2 name
    name=$(basename "$src")
    mkdir -p "$out"
    objcopy --only-keep-debug "$src" "$out/$name.debug"
    chmod 0644 "$out/$name.debug"
    # --add-gnu-debuglink wants the debug file by its final name; run in
    # OUTDIR so that the link holds the bare file name.
    (cd "$out" && objcopy --strip-debug --add-gnu-debuglink="$name.debug" "$src" "$name.tmp")
    mv -f "$out/$name.tmp" "$out/$name"
    echo "$out/$name: $(stat -c %s "$src") -> $(stat -c %s "$out/$name") bytes (debug info: $name.debug)"
}

while [ $# -gt 0 ]; do
    case "$1" in
    --strip-only)
        [ $# -eq 3 ] || { echo "usage: $0 --strip-only SRC OUTDIR" >&2; exit 2; }
        split "$(realpath "$2")" "$3"
        exit 0
        ;;
    --no-build) build=0; shift ;;
    --target-dir) target=$2; shift 2 ;;
    relay-server | relay-client) bins+=("$1"); shift ;;
    *) echo "build-release.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ ${#bins[@]} -gt 0 ] || bins=(relay-server relay-client)

if [ "$build" = 1 ]; then
    args=()
    for b in "${bins[@]}"; do args+=(-p "$b"); done
    (cd "$repo" && cargo build --release --target-dir "$target" "${args[@]}")
fi
for b in "${bins[@]}"; do
    split "$target/release/$b" "$target/dist"
done
