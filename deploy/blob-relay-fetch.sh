#!/bin/bash
# blob-relay-fetch: copies a VM's boot artifacts from its private container in
# the artifacts storage account, authenticating with the VM's system-assigned
# managed identity (no key, no SAS). Installed by cloud-init as
# /usr/local/sbin/blob-relay-fetch and run as root by
# blob-relay-fetch@ROLE.service on every boot that lacks the role's binary.
#
#   blob-relay-fetch relay    certificate, key, tokens, block-ID key, then
#                             relay-server (last: its presence means done)
#   blob-relay-fetch client   client token, relay certificate (and its pin
#                             /etc/blob-relay/relay-cert-sha256), then
#                             relay-client
#   blob-relay-fetch tokens   the tokens file only, replaced (atomically)
#                             only when its content changed; run every
#                             minute by blob-relay-tokens.timer, so token
#                             changes reach running relays (which re-read
#                             the file) without a reimage. Gives up after
#                             BLOB_RELAY_FETCH_TIMEOUT_S (default 50 here)
#                             and keeps the tokens it has.
#   blob-relay-fetch needed ROLE
#                             exit 0 if ROLE's binary is missing (the unit's
#                             ExecCondition), 1 if it is there
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
# BLOB_RELAY_ROOT (environment, default empty) prefixes every path: for
# tests only.
set -euo pipefail

root=${BLOB_RELAY_ROOT:-}
declare -A binary=([relay]=$root/usr/local/bin/relay-server [client]=$root/usr/local/bin/relay-client)

usage() {
    echo "usage: blob-relay-fetch relay|client|tokens | blob-relay-fetch needed relay|client" >&2
    exit 2
}

if [ "${1:-}" = needed ]; then
    [ -n "${2:-}" ] && [ -n "${binary[$2]:-}" ] || usage
    [ ! -e "${binary[$2]}" ]
    exit
fi

role=${1:-relay}
[ -n "${binary[$role]:-}" ] || [ "$role" = tokens ] || usage

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

# download BLOB: into $work/BLOB, retried until it succeeds (or the optional
# deadline passes).
download() {
    local blob=$1
    until refresh_token &&
        curl -fsS --max-time 900 --retry 3 \
            -H @"$work/auth" -H "x-ms-version: $api_version" \
            -o "$work/$blob" "$BLOB_RELAY_ARTIFACTS_URL/$blob"; do
        if [ "$timeout_s" -gt 0 ] && [ "$(date +%s)" -ge "$deadline" ]; then
            echo "blob-relay-fetch: $blob: still not readable after ${timeout_s} s, giving up" >&2
            exit 1
        fi
        echo "blob-relay-fetch: $blob: not readable yet (not uploaded, role assignment propagating, or no network?), retrying in ${retry_s} s" >&2
        sleep "$retry_s"
    done
}

# place BLOB DEST MODE OWNER: atomic replace of DEST.
place() {
    local blob=$1 dest=$root$2 mode=$3 owner=$4
    install -D -m "$mode" -o "${owner%%:*}" -g "${owner##*:}" "$work/$blob" "$dest.new"
    mv -f "$dest.new" "$dest"
    echo "blob-relay-fetch: $blob -> $dest"
}

fetch() {
    download "$1"
    place "$@"
}

case "$role" in
relay)
    fetch relay-cert.pem /etc/blob-relay/relay-cert.pem 0644 root:root
    fetch relay-key.pem /etc/blob-relay/relay-key.pem 0640 root:blob-relay
    fetch tokens /etc/blob-relay/tokens 0640 root:blob-relay
    # Block-ID MAC key: exactly 64 hex digits (surrounding whitespace is
    # ignored). Readable by the relay, writable by root only.
    download relay-id-key
    if ! tr -d ' \t\r\n' <"$work/relay-id-key" | grep -Eqx '[0-9A-Fa-f]{64}'; then
        echo "blob-relay-fetch: relay-id-key is not 64 hex digits; not installing it" >&2
        exit 1
    fi
    place relay-id-key /etc/blob-relay/relay-id-key 0640 root:blob-relay
    fetch relay-server /usr/local/bin/relay-server 0755 root:root
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
    fetch client-token /etc/blob-relay/client-token 0600 root:root
    fetch relay-cert.pem /etc/blob-relay/relay-cert.pem 0644 root:root
    openssl x509 -in "$root/etc/blob-relay/relay-cert.pem" -outform DER | sha256sum | cut -d' ' -f1 \
        >"$root/etc/blob-relay/relay-cert-sha256.new"
    mv -f "$root/etc/blob-relay/relay-cert-sha256.new" "$root/etc/blob-relay/relay-cert-sha256"
    fetch relay-client /usr/local/bin/relay-client 0755 root:root
    ;;
esac
