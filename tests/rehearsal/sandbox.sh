#!/usr/bin/env bash
# Rehearsal stage "sandbox": the units the deployment installs hold the
# programs they run (docs/REHEARSAL.md, "Sandbox check").
#
#   1. `systemd-analyze verify` on every unit the deployment installs (the
#      fetch unit and the relay's drop-in from cloud-init, the relay's and
#      the token refresh's units from the relay-server package), in a mount
#      namespace where the rendered cloud-init's files sit at their real
#      paths (/etc/systemd/system, /usr/local/sbin, /etc/blob-relay) and the
#      package is installed with dpkg; any message about them fails (verify
#      exits 0 on unknown keys).
#   2. Every system call the relay and blob-relay-fetch make is allowed by
#      their unit's SystemCallFilter= as `systemd-analyze syscall-filter`
#      expands it; no socket family outside RestrictAddressFamilies=, no
#      writable+executable mapping (MemoryDenyWriteExecute=), no new
#      namespace (RestrictNamespaces=); and every path the relay writes is
#      inside what ProtectSystem=strict leaves writable
#      (tests/rehearsal/sandbox_check.py).
#
# Usage (root):
#   sandbox.sh [--strace-log FILE]... [--fetch-strace-log FILE] [--tokens-strace-log FILE]
#              [--recorded TEXT] [--bin-dir DIR] [--package-dir DIR] [--keep DIR]
#
# With --strace-log (the rehearsal's recordings of its relays, one per
# relay, `strace -f -qq -y -o FILE` started at the relay's execve, i.e.
# after the switch to its user, through all the rehearsal's uploads; a file
# under a directory VM-strace/ is labelled with VM), those logs are checked,
# and --recorded says in the last line where they come from; without it this
# script records its own, on the deployed path: in a private network and
# mount namespace it writes the rendered cloud-init's files, puts a
# stand-in IMDS at 169.254.169.254 (tests/rehearsal/sandbox_imds.py: tokens
# Azurite's --oauth basic accepts) and an HTTPS artifacts container, runs
# blob-relay-fetch (relay role: it installs the relay-server package; and the bench
# VM's client role) under strace, starts Azurite on loopback (HTTPS with a
# CA made for the run and put in the system trust store, bearer tokens,
# --loose so it takes crc64), runs the relay as the unit does (user
# blob-relay, the rendered relay.env: managed identity, crc64; its state and
# runtime directories, umask 0027, cwd /) under strace, uploads a
# multi-block file and small files with relay-client, refreshes the tokens
# with `blob-relay-fetch tokens` (also under strace) and uploads with the
# new token, scrapes /healthz and /metrics, and stops the relay with
# SIGTERM. One addition to the rendered relay.env: RELAY_MEMORY_LIMIT=57GiB,
# what the relay's default (90 % of the machine's memory) is on the deployed
# VM's 64 GiB (its start-up check would refuse the rendered 16 GiB budget
# on a smaller machine).
#
# --fetch-strace-log / --tokens-strace-log: the rehearsal's recordings of
# blob-relay-fetch@relay.service and blob-relay-tokens.service (recorded
# here when absent). --bin-dir: relay-server and relay-client (default
# $CARGO_TARGET_DIR/debug or target/debug). --package-dir: the .deb packages
# of those binaries (scripts/package; made here with --fast when absent).
# --keep DIR: copy the logs there.
#
# Prints one line per check and last:
#   sandbox: 4 units verified; N distinct syscalls recorded, all allowed by SystemCallFilter; writes only under ...
# Exits non-zero naming every system call outside a filter and every path
# written outside the writable set (each on stderr, and the system calls
# again in the FAILED line).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

relay_logs=() fetch_log='' tokens_log='' keep='' recorded='' package_dir=''
bin_dir=${CARGO_TARGET_DIR:-$repo/target}/debug
while [ $# -gt 0 ]; do
    case "$1" in
    --strace-log) relay_logs+=("$(realpath -m "$2")"); shift 2 ;;
    --recorded) recorded=$2; shift 2 ;;
    --fetch-strace-log) fetch_log=$(realpath -m "$2"); shift 2 ;;
    --tokens-strace-log) tokens_log=$(realpath -m "$2"); shift 2 ;;
    --bin-dir) bin_dir=$(realpath "$2"); shift 2 ;;
    --package-dir) package_dir=$(realpath "$2"); shift 2 ;;
    --keep) keep=$(realpath -m "$2"); shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "sandbox: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

fail() {
    echo "sandbox: FAILED: $*" >&2
    exit 1
}

if [ -z "${SANDBOX_INNER:-}" ]; then
    [ "$(id -u)" = 0 ] || { echo "sandbox: needs root (mount and network namespaces)" >&2; exit 2; }
    for tool in strace systemd-analyze unshare setpriv curl openssl python3; do
        command -v "$tool" >/dev/null || fail "$tool is not installed (Debian: strace, systemd, util-linux, curl, openssl, python3)"
    done
    for b in relay-server relay-client; do
        [ -x "$bin_dir/$b" ] || fail "$bin_dir/$b missing: cargo build -p relay-server -p relay-client"
    done
    [ -x "$repo/node_modules/.bin/azurite-blob" ] || fail "Azurite is not installed: npm ci"
    venv=${TF_VENV:-/tmp/blob-relay-tfvenv}
    if ! "$venv/bin/python" -c 'import hcl2, yaml, pytest' 2>/dev/null; then
        echo "sandbox: making the venv of tests/terraform ($venv)"
        if ! { python3 -m venv "$venv" && "$venv/bin/pip" install -q --disable-pip-version-check \
            -r "$repo/tests/terraform/requirements.txt"; }; then
            fail "cannot make $venv"
        fi
    fi
    work=$(mktemp -d "${TMPDIR:-/tmp}/sandbox.XXXXXX")
    # The relay (user blob-relay) writes its strace log under here.
    chmod 0711 "$work"
    trap 'rm -rf "$work"' EXIT
    # The given recordings, copied where the namespace below still sees them
    # (it mounts a fresh /run, where the rehearsal keeps its logs); each
    # relay's keeps its directory's name (VM-strace), its label.
    for i in "${!relay_logs[@]}"; do
        d=$work/given/$i/$(basename "$(dirname "${relay_logs[$i]}")")
        mkdir -p "$d"
        cp "${relay_logs[$i]}" "$d/relay-server.log" 2>/dev/null || : >"$d/relay-server.log"
        relay_logs[$i]=$d/relay-server.log
    done
    for v in fetch_log tokens_log; do
        [ -n "${!v}" ] || continue
        cp "${!v}" "$work/given-$v.log" 2>/dev/null || : >"$work/given-$v.log"
        printf -v "$v" '%s' "$work/given-$v.log"
    done
    # The packages, where the namespace below still sees them.
    mkdir -p "$work/package"
    if [ -n "$package_dir" ]; then
        cp "$package_dir"/*.deb "$work/package/" || fail "no .deb packages in $package_dir"
    else
        "$repo/scripts/package" --bin-dir "$bin_dir" --fast --out "$work/package" >/dev/null ||
            fail "scripts/package --bin-dir $bin_dir"
    fi
    rc=0
    SANDBOX_INNER=1 SANDBOX_WORK=$work SANDBOX_VENV=$venv SANDBOX_BIN=$bin_dir SANDBOX_PACKAGES=$work/package \
        SANDBOX_RELAY_LOGS=$(printf '%s\n' "${relay_logs[@]}") SANDBOX_FETCH_LOG=$fetch_log \
        SANDBOX_TOKENS_LOG=$tokens_log SANDBOX_RECORDED=$recorded \
        unshare --mount --net --propagation private "$0" || rc=$?
    if [ -n "$keep" ]; then
        mkdir -p "$keep"
        cp "$work"/*.log "$keep"/ 2>/dev/null || true
    fi
    exit "$rc"
fi

# ---- inside: a private mount and network namespace -------------------------
work=$SANDBOX_WORK
cd "$work"
pids=()
cleanup() {
    # Only what this script started, by PID; the namespace dies with us.
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT

ip link set lo up
# The instance metadata service's address, on this namespace's loopback.
ip addr add 169.254.169.254/32 dev lo
# The VM's file system: the host's, with writes to /etc, /usr (dpkg), /usr/local
# and /var kept in $work (discarded with it), and a fresh /run. /usr before
# /usr/local: an overlay hides the mounts below it.
for d in /etc /usr /usr/local /var; do
    n=${d//\//_}
    mkdir -p "$work/fs$n/up" "$work/fs$n/work"
    mount -t overlay overlay -o "lowerdir=$d,upperdir=$work/fs$n/up,workdir=$work/fs$n/work" "$d"
done
mount -t tmpfs -o mode=0755 tmpfs /run

az_port=10000 art_port=8080
storage_url=https://127.0.0.1:$az_port/devstoreaccount1

echo "sandbox: cloud-init write_files (rendered from terraform/templates/cloud-init-relay.yaml.tftpl):"
"$SANDBOX_VENV/bin/python" "$here/sandbox_boot.py" / "$storage_url" "https://127.0.0.1:$art_port/relay-boot" >"$work/boot.out" ||
    { cat "$work/boot.out"; fail "rendering the cloud-init"; }
sed 's/^/ /' "$work/boot.out"

# Artifacts the fetch script downloads: what Terraform uploads to relay-boot.
art=$work/artifacts
mkdir -p "$art"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=blob-relay \
    -addext subjectAltName=DNS:blob-relay -keyout "$art/relay-key.pem" -out "$art/relay-cert.pem" 2>/dev/null
openssl rand -hex 32 >"$art/relay-id-key"
token1=sandbox-token-$(openssl rand -hex 12)
token2=sandbox-token-$(openssl rand -hex 12)
echo "$token1 sandbox" >"$art/tokens"
# The packages under their blob names, with SHA256SUMS as artifacts.tf writes it.
cp "$SANDBOX_PACKAGES"/relay-server_*.deb "$art/relay-server.deb"
# The bench VM's role of the same unit (blob-relay-fetch@client).
echo "$token1" >"$art/client-token"
cp "$SANDBOX_PACKAGES"/relay-client_*.deb "$art/relay-client.deb"
(cd "$art" && sha256sum relay-server.deb relay-client.deb >SHA256SUMS)

# Storage (Azurite, and the artifacts stand-in) speaks HTTPS with a
# certificate from a CA made for this run, which the system trust store
# (here the overlay's) trusts as the VM image trusts Microsoft's: the
# relay's TLS client and curl load it as on Azure.
tls=$work/tls
mkdir -p "$tls"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=sandbox CA" \
    -keyout "$tls/ca-key.pem" -out "$tls/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 \
    -keyout "$tls/key.pem" -out "$tls/req.pem" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$tls/ext"
openssl x509 -req -in "$tls/req.pem" -CA "$tls/ca.pem" -CAkey "$tls/ca-key.pem" -CAcreateserial -days 2 \
    -extfile "$tls/ext" -out "$tls/cert.pem" 2>/dev/null
cat "$tls/ca.pem" >>/etc/ssl/certs/ca-certificates.crt

python3 "$here/sandbox_imds.py" 169.254.169.254:80 "127.0.0.1:$art_port" "$art" "$work/imds.ready" \
    "$tls/cert.pem" "$tls/key.pem" &
pids+=($!)
"$repo/node_modules/.bin/azurite-blob" --blobHost 127.0.0.1 --blobPort "$az_port" --inMemoryPersistence \
    --disableTelemetry --skipApiVersionCheck --silent --loose --cert "$tls/cert.pem" --key "$tls/key.pem" \
    --oauth basic \
    >"$work/azurite.out" 2>&1 &
pids+=($!)
for _ in $(seq 600); do
    [ -e "$work/imds.ready" ] && curl -s -o /dev/null "https://127.0.0.1:$az_port/" && break
    sleep 0.1
done
[ -e "$work/imds.ready" ] || fail "the IMDS stand-in did not start"

# systemd's environment for a system service (PATH, no inherited variables).
unit_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# record LOG USER COMMAND...: COMMAND as USER under strace, as its unit runs it
# (cwd /, nothing inherited but what systemd sets).
record() {
    local log=$1 user=$2
    shift 2
    # strace writes the log as USER.
    install -o "$user" -m 0600 /dev/null "$log"
    (
        cd /
        exec env -i PATH=$unit_path LANG=C.UTF-8 "${unit_env[@]}" \
            setpriv --reuid="$user" --regid="$user" --init-groups --no-new-privs \
            strace -f -qq -y -o "$log" "$@"
    )
}

if [ -z "$SANDBOX_FETCH_LOG" ]; then
    fetch_log=$work/fetch-relay.log
    unit_env=()
    # ExecCondition, then ExecStart of blob-relay-fetch@relay.service.
    record "$work/fetch-needed.log" root /usr/local/sbin/blob-relay-fetch needed relay ||
        fail "blob-relay-fetch needed relay: the package is already there?"
    record "$fetch_log" root /usr/local/sbin/blob-relay-fetch relay >"$work/fetch.out" 2>&1 ||
        { cat "$work/fetch.out"; fail "blob-relay-fetch relay"; }
    record "$work/fetch-client.log" root /usr/local/sbin/blob-relay-fetch client >"$work/fetch.out" 2>&1 ||
        { cat "$work/fetch.out"; fail "blob-relay-fetch client"; }
    # One recording of the unit: its ExecCondition and both roles' ExecStart.
    cat "$work/fetch-needed.log" "$work/fetch-client.log" >>"$fetch_log"
else
    fetch_log=$SANDBOX_FETCH_LOG
    # The rehearsal's fetch installed the package in its VMs: the same here.
    dpkg -i "$SANDBOX_PACKAGES"/relay-server_*.deb >"$work/dpkg.out" 2>&1 || { cat "$work/dpkg.out"; fail "dpkg -i"; }
fi
[ -x /usr/bin/relay-server ] || fail "no /usr/bin/relay-server after the fetch"

# ---- 1. systemd-analyze verify ----------------------------------------------
# The units the cloud-init writes (not the host's, also under /etc/systemd/system)
# and the package's.
units=() dropins=()
while read -r f; do
    case "$f" in
    *.service.d/*.conf) dropins+=("${f#/etc/systemd/system/}"); continue ;;
    esac
    u=$(basename "$f")
    # A template is verified as the instance the deployment enables.
    [ "$u" = blob-relay-fetch@.service ] && u=blob-relay-fetch@relay.service
    units+=("$u")
done < <(sed -n 's|^ *\(/etc/systemd/system/[^ ]*\) .*|\1|p' "$work/boot.out")
[ "${units[*]}" = blob-relay-fetch@relay.service ] ||
    fail "expected only the fetch unit in the rendered cloud-init, found: ${units[*]}"
for u in relay-server.service blob-relay-tokens.service blob-relay-tokens.timer; do
    [ -f "/usr/lib/systemd/system/$u" ] || fail "the relay-server package installed no $u"
    units+=("/usr/lib/systemd/system/$u")
done
verify_out=$(cd /etc/systemd/system && systemd-analyze verify "${units[@]}" 2>&1) ||
    { echo "$verify_out" >&2; fail "systemd-analyze verify ${units[*]}"; }
if [ -n "$verify_out" ]; then
    echo "$verify_out" >&2
    fail "systemd-analyze verify reported the above on ${units[*]}"
fi
echo "sandbox: systemd-analyze verify: ${units[*]} (with ${dropins[*]}): clean"

# ---- 2. the recording --------------------------------------------------------
mapfile -t relay_logs < <(printf '%s' "$SANDBOX_RELAY_LOGS" | sed '/^$/d')
if [ ${#relay_logs[@]} = 0 ]; then
    relay_logs=("$work/relay.log")
    relay_log=$work/relay.log
    # StateDirectory=, RuntimeDirectory= as systemd makes them.
    install -d -o blob-relay -g blob-relay -m 0700 /var/lib/blob-relay
    install -d -o blob-relay -g blob-relay -m 0750 /run/blob-relay
    mapfile -t unit_env < <(grep -E '^[A-Z_][A-Z0-9_]*=' /etc/blob-relay/relay.env)
    # The relay checks its worst-case memory against the machine's at start:
    # the rendered budget is sized for the deployed VM (Standard_D16ds_v5,
    # 64 GiB), not for this machine: it gets the limit it defaults to there (90 %).
    unit_env+=(RELAY_MEMORY_LIMIT=57GiB STATE_DIRECTORY=/var/lib/blob-relay
        RUNTIME_DIRECTORY=/run/blob-relay USER=blob-relay LOGNAME=blob-relay HOME=/
        SHELL=/usr/sbin/nologin)
    listen=$(sed -n 's/^RELAY_LISTEN=//p' /etc/blob-relay/relay.env)
    health=$(sed -n 's/^RELAY_HEALTH_LISTEN=//p' /etc/blob-relay/relay.env)
    relay_addr=127.0.0.1:${listen##*:}
    health_addr=127.0.0.1:${health##*:}

    # The container the relay writes into, made with the managed identity's
    # token (what Terraform's azurerm_storage_container does on Azure).
    data=$work/data
    mkdir -p "$data/small"
    head -c $((24 << 20)) /dev/urandom >"$data/big.bin"
    for i in 1 2 3; do head -c $((i * 1000)) /dev/urandom >"$data/small/s$i.bin"; done
    mi_token=$(curl -fsS -H 'Metadata: true' \
        'http://169.254.169.254/metadata/identity/oauth2/token?api-version=2018-02-01&resource=https://storage.azure.com/' |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["access_token"])')
    curl -fsS -X PUT -H "Authorization: Bearer $mi_token" -H 'x-ms-version: 2023-11-03' -H 'Content-Length: 0' \
        "$storage_url/sandbox?restype=container" || fail "creating the container with the token"

    (umask 0027 && record "$relay_log" blob-relay /usr/bin/relay-server) >"$work/relay.out" 2>&1 &
    relay_pid=$!
    pids+=("$relay_pid")
    for _ in $(seq 600); do
        [ -s /run/blob-relay/cert-sha256 ] && curl -fs -o /dev/null "http://$health_addr/healthz" && break
        kill -0 "$relay_pid" 2>/dev/null || { cat "$work/relay.out"; fail "the relay exited"; }
        sleep 0.1
    done
    fingerprint=$(cat /run/blob-relay/cert-sha256)
    upload() { # TOKEN DEST FILES...
        local token=$1 dest=$2
        shift 2
        RELAY_TOKEN=$token "$SANDBOX_BIN/relay-client" upload "$@" --relay "$relay_addr" \
            --relay-cert-sha256 "$fingerprint" --to "$dest" >>"$work/client.out" 2>&1
    }
    upload "$token1" sandbox/run1 "$data/big.bin" "$data/small" ||
        { cat "$work/client.out" "$work/relay.out"; fail "upload through the relay"; }
    curl -fs "http://$health_addr/metrics" >"$work/metrics.txt" || fail "GET /metrics"

    # A new tokens blob, fetched the way blob-relay-tokens.service fetches it.
    printf '%s sandbox\n%s sandbox\n' "$token1" "$token2" >"$art/tokens"
    if [ -z "$SANDBOX_TOKENS_LOG" ]; then
        tokens_log=$work/fetch-tokens.log
        unit_env_saved=("${unit_env[@]}")
        unit_env=()
        record "$tokens_log" root /usr/sbin/blob-relay-fetch tokens >"$work/fetch.out" 2>&1 ||
            { cat "$work/fetch.out"; fail "blob-relay-fetch tokens"; }
        unit_env=("${unit_env_saved[@]}")
    else
        install -m 0640 -o root -g blob-relay "$art/tokens" /etc/blob-relay/tokens
    fi
    # The relay re-reads the tokens file within 2 s of a change.
    for _ in $(seq 100); do
        upload "$token2" sandbox/run2 "$data/small" && break
        sleep 0.2
    done || { cat "$work/client.out"; fail "the refreshed token never worked"; }
    grep -q '^blob_relay_transfers_committed_total [1-9]' "$work/metrics.txt" ||
        fail "the relay's /metrics shows no committed transfer"

    # systemctl stop: SIGTERM to the main process (strace's child).
    main=$(pgrep -P "$(pgrep -P "$relay_pid" -x strace || echo 0)" -x relay-server || true)
    [ -n "$main" ] || fail "cannot find the relay's PID under strace"
    kill -TERM "$main"
    wait "$relay_pid" || { cat "$work/relay.out"; fail "the relay did not exit cleanly on SIGTERM"; }
    echo "sandbox: recorded the relay (as blob-relay, rendered relay.env, managed identity, HTTPS) through 2 uploads," \
        "a token refresh, /healthz, /metrics and SIGTERM"
    recorded="recorded by this script's own uploads"
else
    tokens_log=$SANDBOX_TOKENS_LOG
    recorded=$SANDBOX_RECORDED
    for l in "${relay_logs[@]}"; do [ -s "$l" ] || fail "$l: no recording of the relay (empty or missing)"; done
fi

# ---- 3. the recordings against the units -------------------------------------
# cloud-init's units (the fetch, the relay's drop-in) and the package's.
sys=/etc/systemd/system pkg=/usr/lib/systemd/system
# First, that the check can fail: a real recording of a chroot (in
# @privileged, which the relay's unit takes away) and of a write to /etc
# must be reported by name.
strace -f -qq -y -o "$work/selfcheck.log" sh -c 'chroot / true; echo x >/etc/sandbox-selfcheck'
if python3 "$here/sandbox_check.py" check --writes "$pkg/relay-server.service" "$work/selfcheck.log" \
    2>"$work/selfcheck.out"; then
    fail "self-check: a recorded chroot and a write to /etc passed the relay's sandbox check"
fi
if ! grep -q 'system call chroot ' "$work/selfcheck.out" ||
    ! grep -q 'writes /etc/sandbox-selfcheck ' "$work/selfcheck.out"; then
    cat "$work/selfcheck.out" >&2
    fail "self-check: the violations were not reported by name"
fi
echo "sandbox: self-check: a recorded chroot and a write to /etc are reported by name"
rc=0
lines=() relay_lines=()
for log in "${relay_logs[@]}"; do
    label=relay-server
    vm=$(basename "$(dirname "$log")")
    [ "${vm%-strace}" = "$vm" ] || label="relay-server on ${vm%-strace}"
    l=$(python3 "$here/sandbox_check.py" check --writes --label "$label" \
        "$pkg/relay-server.service,$sys/relay-server.service.d/10-fetch.conf" "$log" 2>>"$work/violations") || rc=1
    lines+=("$l") relay_lines+=("$l")
done
l=$(python3 "$here/sandbox_check.py" check --label blob-relay-fetch@ \
    "$sys/blob-relay-fetch@.service" "$fetch_log" 2>>"$work/violations") || rc=1
lines+=("$l")
if [ -n "${tokens_log:-}" ]; then
    l=$(python3 "$here/sandbox_check.py" check --label blob-relay-tokens \
        "$pkg/blob-relay-tokens.service" "$tokens_log" 2>>"$work/violations") || rc=1
    lines+=("$l")
fi
for l in "${lines[@]}"; do [ -z "$l" ] || echo "sandbox: $l"; done
if [ "$rc" != 0 ]; then
    cat "$work/violations" >&2
    named=$(grep -o '^[^:]*: system call [a-z0-9_]*' "$work/violations" | sed 's/: system call / /' | sort -u |
        paste -sd, - | sed 's/,/, /g')
    fail "a recorded program steps outside its unit's sandbox${named:+: system calls outside the filter: $named}" \
        "(all violations above)"
fi
summary=$(printf '%s; ' "${relay_lines[@]}" | sed 's/; $//')
echo "sandbox: ${#units[@]} units verified; ${recorded:+$recorded: }$summary"
