#!/bin/bash
# blob-relay-fetch: copies the relay's boot artifacts from the private
# artifacts container to this VM, authenticating with the VM's system-assigned
# managed identity (no key, no SAS). Installed by cloud-init as
# /usr/local/sbin/blob-relay-fetch; run as root.
#
#   blob-relay-fetch relay    relay-server, certificate, key, tokens
#   blob-relay-fetch client   relay-client and the first client token
#
# Configuration: /etc/blob-relay/fetch.env
#   BLOB_RELAY_ARTIFACTS_URL=https://ACCOUNT.blob.core.windows.net/relay-artifacts
#   BLOB_RELAY_STORAGE_API_VERSION=2023-11-03   (x-ms-version)
#   BLOB_RELAY_FETCH_TIMEOUT_S=1200             (optional)
#
# The role assignment of a new VM can take minutes to reach storage, so
# 401/403 answers are retried until the timeout.
set -euo pipefail

role=${1:-relay}
# shellcheck disable=SC1091
. /etc/blob-relay/fetch.env
: "${BLOB_RELAY_ARTIFACTS_URL:?missing in /etc/blob-relay/fetch.env}"
api_version=${BLOB_RELAY_STORAGE_API_VERSION:-2023-11-03}
deadline=$(($(date +%s) + ${BLOB_RELAY_FETCH_TIMEOUT_S:-1200}))
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

# fetch BLOB DEST MODE OWNER: atomic replace of DEST.
fetch() {
    local blob=$1 dest=$2 mode=$3 owner=$4 tmp
    tmp="$work/$blob"
    until refresh_token &&
        curl -fsS --max-time 900 --retry 3 \
            -H @"$work/auth" -H "x-ms-version: $api_version" \
            -o "$tmp" "$BLOB_RELAY_ARTIFACTS_URL/$blob"; do
        if [ "$(date +%s)" -ge "$deadline" ]; then
            echo "blob-relay-fetch: $blob: still not readable, giving up" >&2
            exit 1
        fi
        echo "blob-relay-fetch: $blob: not readable yet (role assignment propagating?), retrying in 15 s" >&2
        sleep 15
    done
    install -D -m "$mode" -o "${owner%%:*}" -g "${owner##*:}" "$tmp" "$dest"
    echo "blob-relay-fetch: $blob -> $dest"
}

case "$role" in
relay)
    fetch relay-server /usr/local/bin/relay-server 0755 root:root
    fetch relay-cert.pem /etc/blob-relay/relay-cert.pem 0644 root:root
    fetch relay-key.pem /etc/blob-relay/relay-key.pem 0640 root:blob-relay
    fetch tokens /etc/blob-relay/tokens 0640 root:blob-relay
    ;;
client)
    fetch relay-client /usr/local/bin/relay-client 0755 root:root
    fetch tokens "$work/client-tokens" 0600 root:root
    # First field of the first line: the token, without its container list.
    install -D -m 0600 /dev/null /etc/blob-relay/client-token
    head -n1 "$work/client-tokens" | cut -d' ' -f1 >/etc/blob-relay/client-token
    ;;
*)
    echo "usage: blob-relay-fetch relay|client" >&2
    exit 2
    ;;
esac
