#!/bin/bash
# blob-relay-fetch: copies a VM's boot artifacts from its private container in
# the artifacts storage account, authenticating with the VM's system-assigned
# managed identity (no key, no SAS), and installs the role's Debian package
# (scripts/package) with dpkg: its binary, systemd units, sysctl file and
# system user come from the package. Installed by cloud-init as
# /usr/local/sbin/blob-relay-fetch and run as root by
# blob-relay-fetch@ROLE.service on every boot where the role is not yet
# installed.
#
#   blob-relay-fetch relay    certificate, key, tokens, block-ID key and the
#                             relay-server package; installs the package,
#                             then the files (owned by its blob-relay group)
#   blob-relay-fetch client   client token, relay certificate (and its pin
#                             /etc/blob-relay/relay-cert-sha256) and the
#                             relay-client package
#   blob-relay-fetch tokens   the tokens file only, replaced (atomically)
#                             only when its content changed; run every
#                             minute by blob-relay-tokens.timer, so token
#                             changes reach running relays (which re-read
#                             the file) without a reimage. Gives up after
#                             BLOB_RELAY_FETCH_TIMEOUT_S (default 50 here)
#                             and keeps the tokens it has.
#   blob-relay-fetch needed ROLE
#                             exit 0 if ROLE's package is not installed or
#                             one of its files is missing (the unit's
#                             ExecCondition), 1 if all are there
#
# The package is the blob ROLE-PACKAGE.deb (relay-server.deb,
# relay-client.deb); the container's SHA256SUMS blob (written by Terraform
# from the file it uploaded, `sha256sum` format) gives its SHA-256. A package
# whose SHA-256 differs, or that SHA256SUMS does not list, is never
# installed: it is downloaded again after the retry interval (Terraform may
# be between the two uploads), until BLOB_RELAY_FETCH_TIMEOUT_S.
#
# Configuration: /etc/blob-relay/fetch.env
#   BLOB_RELAY_ARTIFACTS_URL=https://ACCOUNT.blob.core.windows.net/CONTAINER
#   BLOB_RELAY_STORAGE_API_VERSION=2023-11-03   (x-ms-version)
#   BLOB_RELAY_FETCH_TIMEOUT_S=0                (optional; 0: retry forever)
#   BLOB_RELAY_FETCH_RETRY_S=15                 (optional)
#
# A missing blob (404: apply still uploading), a role assignment still
# propagating (403), no outbound path yet or IMDS not ready are all retried
# until they succeed: the VM may boot before Terraform has written the
# artifacts, and Azure documents up to 10 minutes for a role assignment.
#
# BLOB_RELAY_ROOT (environment, default empty) prefixes every path and is
# dpkg's --root: for tests only.
set -euo pipefail

root=${BLOB_RELAY_ROOT:-}
declare -A package=([relay]=relay-server [client]=relay-client)
# The files each role places after its package: all there (and the package
# installed) means done.
declare -A files=(
    [relay]="relay-cert.pem relay-key.pem tokens relay-id-key"
    [client]="client-token relay-cert.pem relay-cert-sha256"
)
dpkg_root=()
[ -z "$root" ] || dpkg_root=(--root="$root")

usage() {
    echo "usage: blob-relay-fetch relay|client|tokens | blob-relay-fetch needed relay|client" >&2
    exit 2
}

# installed PKG: dpkg has PKG installed and configured (not just unpacked:
# an interrupted install is done again).
installed() {
    [ "$(dpkg-query "${dpkg_root[@]}" -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]
}

if [ "${1:-}" = needed ]; then
    [ -n "${2:-}" ] && [ -n "${package[$2]:-}" ] || usage
    installed "${package[$2]}" || exit 0
    for f in ${files[$2]}; do
        [ -e "$root/etc/blob-relay/$f" ] || exit 0
    done
    exit 1
fi

role=${1:-relay}
[ -n "${package[$role]:-}" ] || [ "$role" = tokens ] || usage

# shellcheck disable=SC1091
. "$root/etc/blob-relay/fetch.env"
: "${BLOB_RELAY_ARTIFACTS_URL:?missing in /etc/blob-relay/fetch.env}"
api_version=${BLOB_RELAY_STORAGE_API_VERSION:-2023-11-03}
# A refresh must end before the next one starts; a boot fetch may wait.
default_timeout_s=0
[ "$role" != tokens ] || default_timeout_s=50
timeout_s=${BLOB_RELAY_FETCH_TIMEOUT_S:-$default_timeout_s}
retry_s=${BLOB_RELAY_FETCH_RETRY_S:-15}
deadline=$(($(date +%s) + timeout_s))
imds='http://169.254.169.254/metadata/identity/oauth2/token?api-version=2018-02-01&resource=https%3A%2F%2Fstorage.azure.com%2F'

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 0700 "$work"

# Writes the Authorization header to a private file so that the token never
# appears on a command line.
refresh_token() {
    local json
    json=$(curl -fsS --max-time 10 -H 'Metadata: true' "$imds") || return 1
    printf '%s' "$json" | python3 -c '
import json, sys
print("Authorization: Bearer " + json.load(sys.stdin)["access_token"])
' >"$work/auth" || return 1
}

# give_up_or_wait WHAT: exits once the optional deadline has passed, else
# says why it waits and sleeps the retry interval.
give_up_or_wait() {
    if [ "$timeout_s" -gt 0 ] && [ "$(date +%s)" -ge "$deadline" ]; then
        echo "blob-relay-fetch: $1: giving up after ${timeout_s} s" >&2
        exit 1
    fi
    echo "blob-relay-fetch: $1, retrying in ${retry_s} s" >&2
    sleep "$retry_s"
}

# download BLOB: into $work/BLOB, retried until it succeeds (or the optional
# deadline passes).
download() {
    local blob=$1
    until refresh_token &&
        curl -fsS --max-time 900 --retry 3 \
            -H @"$work/auth" -H "x-ms-version: $api_version" \
            -o "$work/$blob" "$BLOB_RELAY_ARTIFACTS_URL/$blob"; do
        give_up_or_wait "$blob: not readable yet (not uploaded, role assignment propagating, or no network?)"
    done
}

# download_package PKG: $work/PKG.deb, whose SHA-256 is the one the
# container's SHA256SUMS lists for PKG.deb. Anything else is refused and
# fetched again: a package changed after Terraform hashed it, a truncated
# download, or SHA256SUMS and the package from two different applies.
download_package() {
    local deb=$1.deb want got
    while :; do
        download SHA256SUMS
        download "$deb"
        want=$(awk -v f="$deb" '($2 == f || $2 == "*" f) && $1 ~ /^[0-9a-f]+$/ && length($1) == 64 { print $1; exit }' \
            "$work/SHA256SUMS")
        got=$(sha256sum <"$work/$deb" | cut -d' ' -f1)
        if [ -z "$want" ]; then
            give_up_or_wait "$deb: not listed in SHA256SUMS; not installing it"
        elif [ "$want" != "$got" ]; then
            give_up_or_wait "$deb: SHA-256 $got is not the $want of SHA256SUMS; not installing it"
        else
            echo "blob-relay-fetch: $deb: SHA-256 $got as SHA256SUMS lists"
            return
        fi
    done
}

# install_package PKG: dpkg installs it (units, sysctl file, system user);
# its maintainer scripts reload systemd.
install_package() {
    download_package "$1"
    DEBIAN_FRONTEND=noninteractive dpkg "${dpkg_root[@]}" --force-confold -i "$work/$1.deb"
    echo "blob-relay-fetch: $1.deb installed"
}

# place BLOB DEST MODE OWNER: atomic replace of DEST.
place() {
    local blob=$1 dest=$root$2 mode=$3 owner=$4
    install -D -m "$mode" -o "${owner%%:*}" -g "${owner##*:}" "$work/$blob" "$dest.new"
    mv -f "$dest.new" "$dest"
    echo "blob-relay-fetch: $blob -> $dest"
}

case "$role" in
relay)
    download relay-cert.pem
    download relay-key.pem
    download tokens
    # Block-ID MAC key: exactly 64 hex digits (surrounding whitespace is
    # ignored). Readable by the relay, writable by root only.
    download relay-id-key
    if ! tr -d ' \t\r\n' <"$work/relay-id-key" | grep -Eqx '[0-9A-Fa-f]{64}'; then
        echo "blob-relay-fetch: relay-id-key is not 64 hex digits; not installing it" >&2
        exit 1
    fi
    # The package first: it makes the blob-relay group the files belong to.
    install_package relay-server
    place relay-cert.pem /etc/blob-relay/relay-cert.pem 0644 root:root
    place relay-key.pem /etc/blob-relay/relay-key.pem 0640 root:blob-relay
    place tokens /etc/blob-relay/tokens 0640 root:blob-relay
    place relay-id-key /etc/blob-relay/relay-id-key 0640 root:blob-relay
    ;;
tokens)
    # Only into place when it changed: the relay re-reads the file when its
    # inode, size or mtime change, and logs each reload. An empty blob is
    # refused (the relay would refuse every upload).
    download tokens
    if [ ! -s "$work/tokens" ]; then
        echo "blob-relay-fetch: tokens blob is empty; keeping the current tokens file" >&2
        exit 1
    fi
    if cmp -s "$work/tokens" "$root/etc/blob-relay/tokens"; then
        exit 0
    fi
    place tokens /etc/blob-relay/tokens 0640 root:blob-relay
    ;;
client)
    download client-token
    download relay-cert.pem
    install_package relay-client
    place client-token /etc/blob-relay/client-token 0600 root:root
    place relay-cert.pem /etc/blob-relay/relay-cert.pem 0644 root:root
    openssl x509 -in "$root/etc/blob-relay/relay-cert.pem" -outform DER | sha256sum | cut -d' ' -f1 \
        >"$root/etc/blob-relay/relay-cert-sha256.new"
    mv -f "$root/etc/blob-relay/relay-cert-sha256.new" "$root/etc/blob-relay/relay-cert-sha256"
    ;;
esac
