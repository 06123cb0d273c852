#!/usr/bin/env bash
# The packages install and work: scripts/package builds both .deb packages
# (from the debug build the test suite already made, to stay fast; a release
# is built the same way with the default --profile release), then, in a
# private mount namespace, they are installed with dpkg on a clean root (an
# overlay over this machine's root whose writes vanish with the namespace, so
# nothing of ours is installed there before, and nothing leaks out after),
# and checked there:
#
#   1. dpkg -i of both packages succeeds; the files land where Debian's policy
#      puts them; the system users exist (sysusers.d or adduser);
#   2. `systemd-analyze verify` of every installed unit is clean;
#   3. the installed binaries report their version; the man page and the
#      completions are in place;
#   4. an upload through the installed binaries: Azurite on loopback, the
#      installed relay-server with the example environment file's layout, the
#      installed relay-client uploading a folder; every blob verified;
#   5. SHA256SUMS matches the files, and each archive holds its binary.
#
# Usage (root): tests/package/check.sh [--bin-dir DIR]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin_dir=${CARGO_TARGET_DIR:-$repo/target}/debug
while [ $# -gt 0 ]; do
    case "$1" in
    --bin-dir) bin_dir=$(realpath "$2"); shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "package check: unknown argument $1" >&2; exit 2 ;;
    esac
done

fail() {
    echo "package check: FAILED: $*" >&2
    exit 1
}

if [ -z "${PACKAGE_CHECK_INNER:-}" ]; then
    [ "$(id -u)" = 0 ] || { echo "package check: needs root (mount namespace, chroot)" >&2; exit 2; }
    for tool in dpkg-deb unshare chroot systemd-analyze sha256sum; do
        command -v "$tool" >/dev/null || fail "$tool is missing"
    done
    work=$(mktemp -d "${TMPDIR:-/tmp}/package-check.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    # Packaged from the binaries the tests use; the release profile differs
    # only in optimisation.
    out=$work/out
    mkdir -p "$out"
    "$repo/scripts/package" --bin-dir "$bin_dir" --out "$out"

    # 5. The sums and the archives, outside the namespace (nothing to install).
    (cd "$out" && sha256sum --quiet -c SHA256SUMS) || fail "SHA256SUMS does not match the files"
    for p in relay-server relay-client; do
        listing=$(tar -tzf "$out"/$p-*.tar.gz)
        grep -q "/usr/bin/$p\$" <<<"$listing" || fail "the $p archive has no usr/bin/$p"
    done
    echo "package check: SHA256SUMS matches; each archive holds its binary"

    exec env PACKAGE_CHECK_INNER=1 PACKAGE_CHECK_WORK="$work" PACKAGE_CHECK_OUT="$out" \
        unshare --mount --propagation private "$0" "$@"
fi

# ---- inside the mount namespace ------------------------------------------
work=$PACKAGE_CHECK_WORK
out=$PACKAGE_CHECK_OUT
ovl=$work/ovl
mkdir -p "$ovl"
# The upper layer on a tmpfs of its own: the overlay's layers must not overlap.
mount -t tmpfs tmpfs "$ovl"
mkdir -p "$ovl/upper" "$ovl/work" "$ovl/root"
mount -t overlay overlay -o "lowerdir=/,upperdir=$ovl/upper,workdir=$ovl/work" "$ovl/root"
root=$ovl/root
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount -t tmpfs tmpfs "$root/tmp"
mkdir -p "$root/pkg"
mount --bind "$out" "$root/pkg"
in_root() { chroot "$root" "$@"; }

for p in relay-server relay-client; do
    # A clean root for our files: nothing of ours there before the install.
    [ ! -e "$root/usr/bin/$p" ] || fail "/usr/bin/$p exists before the install (not a clean root)"
done

# 1. Install.
in_root sh -c "dpkg -i /pkg/relay-server_*.deb /pkg/relay-client_*.deb" >"$work/dpkg.log" 2>&1 ||
    { cat "$work/dpkg.log"; fail "dpkg -i"; }
for f in /usr/bin/relay-server /usr/bin/relay-client /usr/sbin/blob-relay-fetch \
    /usr/lib/systemd/system/relay-server.service /usr/lib/systemd/system/blob-relay-fetch@.service \
    /usr/lib/systemd/system/blob-relay-tokens.service /usr/lib/systemd/system/blob-relay-tokens.timer \
    /usr/lib/systemd/system/relay-client-watch@.service /usr/lib/sysctl.d/60-blob-relay.conf \
    /usr/share/man/man1/relay-client.1.gz /usr/share/bash-completion/completions/relay-client \
    /usr/share/doc/relay-server/examples/relay.env; do
    [ -e "$root$f" ] || fail "$f is not installed"
done
for u in blob-relay blob-relay-watch; do
    in_root getent passwd "$u" >/dev/null || fail "system user $u was not created"
done
echo "package check: dpkg -i installed both packages on a clean root; users blob-relay, blob-relay-watch exist"

# 2. The units, as installed (a template as an instance).
units=(relay-server.service blob-relay-fetch@relay.service blob-relay-tokens.service
    blob-relay-tokens.timer relay-client-watch@example.service)
verify_out=$(in_root sh -c "cd /usr/lib/systemd/system && systemd-analyze verify ${units[*]}" 2>&1) ||
    { echo "$verify_out" >&2; fail "systemd-analyze verify ${units[*]}"; }
if [ -n "$verify_out" ]; then
    echo "$verify_out" >&2
    fail "systemd-analyze verify reported the above"
fi
echo "package check: systemd-analyze verify ${units[*]}: clean"

# 3. Versions, man page, completions.
for p in relay-server relay-client; do
    v=$(in_root "/usr/bin/$p" --version) || fail "$p --version"
    echo "package check: $v"
done
in_root sh -c 'zcat /usr/share/man/man1/relay-client.1.gz | grep -q "relay-client"' || fail "the man page"

# 4. An upload through the installed binaries.
azurite=$repo/node_modules/.bin/azurite-blob
[ -x "$azurite" ] || fail "Azurite is not installed (npm ci)"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
blob_port=$(port)
relay_port=$(port)
health_port=$(port)
key='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='
pids=()
cleanup_inner() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup_inner EXIT
"$azurite" --blobHost 127.0.0.1 --blobPort "$blob_port" --inMemoryPersistence --disableTelemetry \
    --skipApiVersionCheck --silent >"$work/azurite.log" 2>&1 &
pids+=($!)
storage=http://127.0.0.1:$blob_port/devstoreaccount1
up=0
for _ in $(seq 1200); do
    curl -s -o /dev/null "http://127.0.0.1:$blob_port/" && { up=1; break; }
    kill -0 "${pids[0]}" 2>/dev/null || break
    sleep 0.1
done
[ "$up" = 1 ] || { cat "$work/azurite.log"; fail "Azurite did not start"; }

# The layout relay.env.example describes, under the installed files.
token=package-check-token-0123456789
mkdir -p "$root/etc/blob-relay" "$root/tmp/state" "$root/tmp/files/data/sub"
echo "$token data" >"$root/etc/blob-relay/tokens"
# chroot itself, not the in_root function: a function in the background is a
# subshell, whose PID ($!) is not the relay's, and killing it left the relay
# running after the check; chroot execs the relay, so $! is the relay.
chroot "$root" /usr/bin/relay-server --listen "127.0.0.1:$relay_port" --storage-url "$storage" \
    --account-key "$key" --tokens /etc/blob-relay/tokens --state-dir /tmp/state \
    --id-key-ephemeral --health-listen "127.0.0.1:$health_port" \
    --cert-fingerprint-file /tmp/fingerprint >"$work/relay.log" 2>&1 &
pids+=($!)
for _ in $(seq 1200); do
    [ -s "$root/tmp/fingerprint" ] && curl -fs -o /dev/null "http://127.0.0.1:$health_port/healthz" && break
    sleep 0.1
done
[ -s "$root/tmp/fingerprint" ] || { cat "$work/relay.log"; fail "the installed relay did not start"; }

head -c 20000000 /dev/urandom >"$root/tmp/files/data/big.bin"
for i in 1 2 3; do head -c 70000 /dev/urandom >"$root/tmp/files/data/sub/small-$i.bin"; done
# The container, made by the installed client's direct mode (the relay never
# creates containers).
echo seed >"$root/tmp/seed.txt"
in_root /usr/bin/relay-client upload /tmp/seed.txt --direct --storage-url "$storage" \
    --account-key "$key" --to data/seed --create-container >"$work/seed.log" 2>&1 ||
    { cat "$work/seed.log"; fail "creating the container with the installed client"; }
in_root env RELAY_TOKEN="$token" /usr/bin/relay-client upload /tmp/files/data --to data \
    --relay "127.0.0.1:$relay_port" --relay-cert-sha256 "$(cat "$root/tmp/fingerprint")" \
    --json >"$work/upload.json" 2>"$work/upload.err" ||
    { cat "$work/upload.err" "$work/relay.log"; fail "upload through the installed binaries"; }
python3 - "$work/upload.json" "$root/tmp/files" <<'EOF' || fail "the upload's report"
import hashlib, json, os, sys
report = json.load(open(sys.argv[1]))
files = report["files"]
assert len(files) == 4, files
for f in files:
    assert f["status"] == "committed", f
    path = os.path.join(sys.argv[2], f["path"].lstrip("/").removeprefix("tmp/files/"))
    local = hashlib.sha256(open(path, "rb").read()).hexdigest()
    assert f["sha256"] == local, (f, local)
print(f"package check: upload through the installed binaries: {len(files)} files committed, each blob's SHA-256 the file's")
EOF
