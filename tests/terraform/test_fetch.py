"""deploy/blob-relay-fetch.sh run for real against a fake IMDS + blob store
(curl, install, dpkg and dpkg-query shimmed on PATH, every path under
BLOB_RELAY_ROOT): it retries until the artifacts are readable, installs the
package only when its SHA-256 is the one SHA256SUMS lists, places the files
after it, checks the block-ID key, and tells its systemd unit whether a fetch
is needed. The real dpkg installing the real package is the rehearsal's."""

import hashlib
import os
import secrets
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tfmodel import DEPLOY

FAKE_CURL = r"""#!/bin/bash
# Fake curl: IMDS answers a token; blob URLs are served from $FAKE_STORE,
# failing (exit 22, like curl -f on 403/404) while $FAKE_STORE/.fail-NAME
# counts down or the blob is missing.
out= url= auth= version=
while [ $# -gt 0 ]; do
    case "$1" in
    -o) out=$2; shift 2 ;;
    -H) case "$2" in @*) auth=$(cat "${2#@}") ;; x-ms-version:*) version=$2 ;; esac; shift 2 ;;
    --max-time | --retry) shift 2 ;;
    http*) url=$1; shift ;;
    *) shift ;;
    esac
done
case "$url" in
*metadata/identity/oauth2/token*) printf '{"access_token":"tok-%s"}' "$RANDOM"; exit 0 ;;
esac
name=${url##*/}
[ "${auth#Authorization: Bearer tok-}" != "$auth" ] || { echo "no bearer token" >&2; exit 22; }
[ -n "$version" ] || { echo "no x-ms-version" >&2; exit 22; }
echo "$name" >>"$FAKE_STORE/.requests"
if [ -f "$FAKE_STORE/.fail-$name" ]; then
    n=$(cat "$FAKE_STORE/.fail-$name")
    if [ "$n" -gt 0 ]; then echo $((n - 1)) >"$FAKE_STORE/.fail-$name"; exit 22; fi
fi
[ -f "$FAKE_STORE/$name" ] || exit 22
cp "$FAKE_STORE/$name" "$out"
"""

FAKE_INSTALL = r"""#!/bin/bash
# install without -o/-g (no root, no blob-relay group needed); the modes stay.
args=()
while [ $# -gt 0 ]; do
    case "$1" in -o | -g) shift 2 ;; *) args+=("$1"); shift ;; esac
done
exec /usr/bin/install "${args[@]}"
"""


FAKE_DPKG = r"""#!/bin/bash
# Fake dpkg: records `--root=R ... -i FILE` in $FAKE_STORE/.dpkg and marks the
# package (the FILE's first line) installed where the fake dpkg-query looks.
root= deb=
for a in "$@"; do
    case "$a" in --root=*) root=${a#--root=} ;; *.deb) deb=$a ;; esac
done
[ -n "$root" ] && [ -f "$deb" ] || { echo "fake dpkg: want --root=R -i FILE.deb: $*" >&2; exit 2; }
pkg=$(head -n1 "$deb")
echo "$pkg" >>"$FAKE_STORE/.dpkg"
mkdir -p "$root/var/lib/dpkg"
echo "$pkg" >>"$root/var/lib/dpkg/fake-installed"
"""

FAKE_DPKG_QUERY = r"""#!/bin/bash
# Fake dpkg-query -W -f='${db:Status-Status}' PKG: "installed" if the fake
# dpkg installed PKG under --root.
root= pkg=
for a in "$@"; do
    case "$a" in --root=*) root=${a#--root=} ;; -*) ;; *) pkg=$a ;; esac
done
grep -qx "$pkg" "$root/var/lib/dpkg/fake-installed" 2>/dev/null || exit 1
printf installed
"""


def publish(store: Path, pkg: str, content: str) -> None:
    """PKG.deb in the store with its line in SHA256SUMS, as artifacts.tf
    uploads them (the fake package's first line is its name)."""
    (store / f"{pkg}.deb").write_text(content)
    sums = store / "SHA256SUMS"
    lines = [line for line in (sums.read_text().splitlines() if sums.exists() else [])
             if not line.endswith(f"  {pkg}.deb")]
    lines.append(f"{hashlib.sha256(content.encode()).hexdigest()}  {pkg}.deb")
    sums.write_text("\n".join(lines) + "\n")


@pytest.fixture
def sandbox(tmp_path):
    root, store, bin_ = tmp_path / "root", tmp_path / "store", tmp_path / "bin"
    for d in (root / "etc/blob-relay", store, bin_):
        d.mkdir(parents=True)
    (root / "etc/blob-relay/fetch.env").write_text(
        "BLOB_RELAY_ARTIFACTS_URL=https://acct.blob.core.windows.net/relay-boot\n"
        "BLOB_RELAY_STORAGE_API_VERSION=2023-11-03\n")
    for name, text in (("curl", FAKE_CURL), ("install", FAKE_INSTALL), ("dpkg", FAKE_DPKG),
                       ("dpkg-query", FAKE_DPKG_QUERY)):
        (bin_ / name).write_text(text)
        (bin_ / name).chmod(0o755)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(store / "relay-key.pem"), "-out", str(store / "relay-cert.pem"),
                    "-days", "1", "-subj", "/CN=blob-relay"], check=True, capture_output=True)
    (store / "tokens").write_text("a" * 48 + " uploads\n")
    (store / "client-token").write_text("a" * 48 + "\n")
    (store / "relay-id-key").write_text(secrets.token_hex(32) + "\n")
    publish(store, "relay-server", "relay-server\n")
    publish(store, "relay-client", "relay-client\n")
    env = {"PATH": f"{bin_}:/usr/bin:/bin", "FAKE_STORE": str(store), "BLOB_RELAY_ROOT": str(root),
           "BLOB_RELAY_FETCH_RETRY_S": "0"}
    return root, store, env


def run(env, *args, timeout=60):
    return subprocess.run(["bash", str(DEPLOY / "blob-relay-fetch.sh"), *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_relay_fetch_retries_and_installs_the_package_before_the_files(sandbox):
    root, store, env = sandbox
    (store / ".fail-tokens").write_text("3")  # e.g. the role assignment still propagating
    (store / "relay-server.deb").unlink()  # not uploaded yet ...
    proc = subprocess.Popen(["bash", str(DEPLOY / "blob-relay-fetch.sh"), "relay"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # ... until a while later.
    for _ in range(200):
        if (store / ".requests").exists() and (store / ".requests").read_text().count("relay-server.deb") >= 3:
            break
        subprocess.run(["sleep", "0.05"])
    publish(store, "relay-server", "relay-server\n")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "tokens: not readable yet" in err and "relay-server.deb: not readable yet" in err
    assert (store / ".dpkg").read_text() == "relay-server\n"
    etc = root / "etc/blob-relay"
    assert mode(etc / "relay-key.pem") == 0o640 and mode(etc / "tokens") == 0o640
    assert mode(etc / "relay-id-key") == 0o640
    assert (etc / "relay-id-key").read_text() == (store / "relay-id-key").read_text()
    requests = (store / ".requests").read_text().split()
    assert set(requests) >= {"relay-cert.pem", "relay-key.pem", "tokens", "relay-id-key", "SHA256SUMS",
                             "relay-server.deb"}
    # The package's group owns the files: the package is installed before them.
    assert "installed" in out and out.index("relay-server.deb installed") < out.index("relay-key.pem ->")
    # Package installed and files in place mean done: the unit's ExecCondition skips.
    assert run(env, "needed", "relay").returncode == 1
    # A file lost (or an install interrupted before it) makes the fetch needed again.
    (etc / "relay-id-key").unlink()
    assert run(env, "needed", "relay").returncode == 0


@pytest.mark.parametrize("how", ["tampered", "unlisted", "truncated sums"])
def test_a_package_whose_sha256_is_not_the_published_one_is_never_installed(sandbox, how):
    """Issue 51: the package is installed only with the SHA-256 that
    SHA256SUMS (Terraform's hash of the file it uploaded) gives for it."""
    root, store, env = sandbox
    if how == "tampered":  # the blob changed after the apply hashed it
        (store / "relay-server.deb").write_text("relay-server\nand something else\n")
    elif how == "unlisted":
        (store / "SHA256SUMS").write_text((store / "SHA256SUMS").read_text().replace("relay-server.deb", "other.deb"))
    else:
        (store / "SHA256SUMS").write_text((store / "SHA256SUMS").read_text().replace("  relay-server.deb", "0  relay-server.deb"))
    r = run({**env, "BLOB_RELAY_FETCH_TIMEOUT_S": "1"}, "relay")
    assert r.returncode == 1 and "not installing it" in r.stderr and "giving up" in r.stderr, r.stderr
    assert not (store / ".dpkg").exists(), "dpkg ran on a package that failed its check"
    assert not (root / "etc/blob-relay/relay-key.pem").exists()
    assert run(env, "needed", "relay").returncode == 0
    # The right package (Terraform's next apply, or the end of this one) is
    # taken on the next try.
    publish(store, "relay-server", "relay-server\n")
    r = run(env, "relay")
    assert r.returncode == 0 and (store / ".dpkg").read_text() == "relay-server\n", r.stderr


@pytest.mark.parametrize("key", ["ab" * 31, "zz" * 32, "ab" * 33, ""])
def test_relay_fetch_refuses_a_bad_id_key(sandbox, key):
    root, store, env = sandbox
    (store / "relay-id-key").write_text(key + "\n")
    r = run(env, "relay")
    assert r.returncode != 0
    assert "not 64 hex digits" in r.stderr
    assert not (root / "etc/blob-relay/relay-id-key").exists()
    # No package: the next boot (or the unit's restart) tries again.
    assert not (store / ".dpkg").exists()
    assert run(env, "needed", "relay").returncode == 0


def test_id_key_whitespace_is_ignored(sandbox):
    root, store, env = sandbox
    (store / "relay-id-key").write_text("  " + secrets.token_hex(32).upper() + "\r\n\n")
    assert run(env, "relay").returncode == 0


def test_optional_deadline(sandbox):
    root, store, env = sandbox
    (store / "tokens").unlink()
    r = run({**env, "BLOB_RELAY_FETCH_TIMEOUT_S": "1"}, "relay")
    assert r.returncode == 1 and "giving up" in r.stderr


def test_client_fetch_computes_the_pin(sandbox):
    root, store, env = sandbox
    assert run(env, "needed", "client").returncode == 0
    r = run(env, "client")
    assert r.returncode == 0, r.stderr
    der = subprocess.run(["openssl", "x509", "-in", str(store / "relay-cert.pem"), "-outform", "DER"],
                         check=True, capture_output=True).stdout
    pin = (root / "etc/blob-relay/relay-cert-sha256").read_text().strip()
    assert pin == hashlib.sha256(der).hexdigest()
    assert mode(root / "etc/blob-relay/client-token") == 0o600
    assert (store / ".dpkg").read_text() == "relay-client\n"
    assert run(env, "needed", "client").returncode == 1


def test_tokens_refresh_replaces_only_a_changed_file_and_keeps_it_on_failure(sandbox):
    root, store, env = sandbox
    assert run(env, "relay").returncode == 0
    tokens = root / "etc/blob-relay/tokens"
    before = tokens.stat()
    # Unchanged blob: the file is left alone (the relay sees no change).
    r = run(env, "tokens")
    assert r.returncode == 0, r.stderr
    after = tokens.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    # A token added in Terraform: the file is replaced by rename, mode kept.
    (store / "tokens").write_text("a" * 48 + " uploads\n" + "b" * 48 + "\n")
    r = run(env, "tokens")
    assert r.returncode == 0, r.stderr
    assert tokens.read_text() == (store / "tokens").read_text()
    assert tokens.stat().st_ino != before.st_ino and mode(tokens) == 0o640
    # An empty blob, or one that cannot be read within the deadline, leaves
    # the current tokens in place.
    good = tokens.read_text()
    (store / "tokens").write_text("")
    r = run(env, "tokens")
    assert r.returncode == 1 and "empty" in r.stderr and tokens.read_text() == good
    (store / "tokens").unlink()
    r = run({**env, "BLOB_RELAY_FETCH_TIMEOUT_S": "1"}, "tokens")
    assert r.returncode == 1 and "giving up" in r.stderr and tokens.read_text() == good


def test_unknown_role_is_a_usage_error(sandbox):
    _, _, env = sandbox
    assert run(env, "server").returncode == 2
    assert run(env, "needed", "server").returncode == 2


@pytest.fixture(autouse=True)
def _tools():
    for tool in ("openssl", "python3", "sha256sum"):
        assert shutil.which(tool), f"{tool} is needed"
    assert os.path.exists("/usr/bin/install")
