"""The deployment rehearsal's pure parts (tests/rehearsal; scripts/rehearse
runs the whole thing as root): its renderer agrees with the offline tests',
its unit parser reads the deploy/ units as systemd would, its balancer's
hash spreads flows, and its IMDS stand-in's tokens pass the checks Azurite's
`--oauth basic` makes."""

import base64
import json
import re
import sys
from pathlib import Path

import yaml

from test_cloud_init import env_file, rendered as offline_rendered, write_file
from tfmodel import DEPLOY

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rehearsal"))

import balancer  # noqa: E402
import imds  # noqa: E402
import render  # noqa: E402
import units  # noqa: E402


def test_rehearsal_renders_what_the_offline_tests_render_but_with_its_values(module):
    texts, used = render.rendered("198.51.100.10", suffix="ab12cd")
    relay = yaml.safe_load(texts["relay"])
    env = env_file(write_file(relay, "/etc/blob-relay/relay.env"))
    assert env["RELAY_STORAGE_URL"] == "https://blobrelayab12cd.blob.core.windows.net"
    assert env["RELAY_BLOCK_CHECKSUM"] == "crc64"
    # rehearsal.tfvars: the variables an operator of a small relay sets.
    assert env["RELAY_MEMORY_BUDGET"] == used["tfvars"]["relay_memory_budget"] == "2GiB"
    assert used["values"]["relay_count"] == 2
    bench = yaml.safe_load(texts["bench"])
    assert env_file(write_file(bench, "/etc/blob-relay/bench.env"))["BENCH_RELAY"] == "198.51.100.10:4433"
    # Same template, same renderer: everything but the evaluated values is identical.
    offline, _ = offline_rendered(module, "cloud-init-relay.yaml.tftpl")
    offline_cfg = yaml.safe_load(offline)
    for entry in relay["write_files"]:
        if entry.get("encoding") == "b64":
            assert write_file(offline_cfg, entry["path"]) == write_file(relay, entry["path"]), entry["path"]
    assert [c for c in relay["runcmd"]] == offline_cfg["runcmd"]


def test_probe_is_read_from_the_terraform():
    _, used = render.rendered("198.51.100.10", suffix="ab12cd")
    assert used["values"]["probe"] == {"protocol": "Http", "port": 9090, "path": "/healthz",
                                       "interval_s": 5, "threshold": 2}


def test_unit_files_parse_as_systemd_reads_them():
    conf = units.parse_unit((DEPLOY / "relay-server.service").read_text(), {})
    units.parse_unit((DEPLOY / "relay-server.service.d/10-fetch.conf").read_text(), conf)
    u = units.Unit("relay-server.service", conf)
    assert u.all("Unit", "Requires") == ["blob-relay-fetch@relay.service"]
    assert u.get("Service", "User") == "blob-relay"
    assert u.get("Service", "Restart") == "on-failure"
    # Repeated keys accumulate; the runner reports what it does not apply.
    assert conf["Service"]["SystemCallFilter"] == ["@system-service", "~@privileged"]
    not_applied = {k for k in conf["Service"] if k not in units.IMPLEMENTED["Service"]}
    assert {"ProtectSystem", "SystemCallFilter", "PrivateUsers", "MemoryDenyWriteExecute"} <= not_applied
    fetch = units.Unit("blob-relay-fetch@relay.service",
                       units.parse_unit((DEPLOY / "blob-relay-fetch@.service").read_text(), {}))
    assert fetch.spec(fetch.get("Service", "ExecStart")) == "/usr/local/sbin/blob-relay-fetch relay"
    assert units.seconds("1min") == 60 and units.seconds("2s") == 2 and units.seconds("infinity") == float("inf")
    assert units.seconds(fetch.get("Unit", "StartLimitIntervalSec")) == 0


def test_balancer_hash_is_stable_and_uses_every_backend():
    backends = [balancer.Backend("10.60.1.4"), balancer.Backend("10.60.1.5")]
    picks = [balancer.pick(("10.61.1.4", port, "198.18.2.2", 4433, "udp"), backends) for port in range(40000, 40064)]
    assert {b.ip for b in picks} == {"10.60.1.4", "10.60.1.5"}
    again = [balancer.pick(("10.61.1.4", port, "198.18.2.2", 4433, "udp"), backends) for port in range(40000, 40064)]
    assert picks == again
    assert balancer.pick(("10.61.1.4", 1, "198.18.2.2", 4433, "udp"), []) is None


def test_imds_tokens_pass_azurites_basic_checks():
    class Args:
        tenant, principal, resource_id, key, lifetime_s = "t-1", "p-1", "/sub/x", "00" * 32, 600

    body = imds.token_for(Args, "https://storage.azure.com/", 1_700_000_000)
    claims = json.loads(base64.urlsafe_b64decode(body["access_token"].split(".")[1] + "=="))
    # node_modules/azurite BlobTokenAuthenticator: issuer prefix, audience pattern, nbf/exp/iat.
    assert claims["iss"].startswith("https://sts.windows.net/")
    assert re.fullmatch(r"https://storage\.azure\.com/?", claims["aud"])
    assert claims["nbf"] <= claims["iat"] < claims["exp"] == 1_700_000_600
    assert claims["oid"] == "p-1"
    # azure_identity reads expires_on as a string of epoch seconds.
    assert body["expires_on"] == "1700000600" and body["token_type"] == "Bearer"


def test_a_traced_unit_runs_under_strace_from_its_execve_and_signals_reach_the_program(tmp_path, monkeypatch):
    """units.py --trace: the sandbox stage's recordings. The main PID is the
    traced program (a kill or KillMode=mixed's SIGTERM must reach it, not
    strace), the log starts at its execve and a restart appends."""
    import shutil
    import signal
    import time

    import pytest

    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    unit_dir, journal = tmp_path / "units", tmp_path / "journal"
    unit_dir.mkdir()
    journal.mkdir()
    monkeypatch.setattr(units, "UNIT_DIRS", [unit_dir])
    monkeypatch.setattr(units, "JOURNAL", journal)
    monkeypatch.setattr(units, "CTL", tmp_path)
    (unit_dir / "t.service").write_text("[Service]\nType=simple\nExecStart=/bin/sleep 60\nKillMode=mixed\n"
                                        "Restart=on-failure\nRestartSec=0\n")
    log = tmp_path / "strace" / "t.log"
    r = units.Runner({"t.service": str(log)})
    try:
        assert r.start("t.service")
        u = r.unit("t.service")
        main = u.main()
        assert main != u.proc.pid
        deadline = time.monotonic() + 10
        while Path(f"/proc/{main}/comm").read_text().strip() != "sleep" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert Path(f"/proc/{main}/comm").read_text().strip() == "sleep"
        # Killed: strace ends with the program's signal, Restart=on-failure starts it again.
        import os
        os.kill(main, signal.SIGKILL)
        u.proc.wait(timeout=10)
        r.reap()
        assert u.exits == [str(-signal.SIGKILL)] or u.exits == [-signal.SIGKILL]
        r.tick()
        assert u.restarts == 1 and u.main() not in (None, main)
        second = u.main()
        t0 = time.monotonic()
        r.stop("t.service", limit_s=10)
        assert u.state == "inactive"
        assert time.monotonic() - t0 < 5, "SIGTERM did not end the traced program"
        assert not Path(f"/proc/{second}").exists()
    finally:
        r.stop("t.service", limit_s=5)
    text = log.read_text()
    assert text.count('execve("/bin/sleep"') == 2, text[:500]
    # -qq leaves out strace's own exit lines: the signals show as delivered to the program.
    assert "--- SIGKILL" in text or text.count("execve") == 2
    assert "--- SIGTERM {si_signo=SIGTERM" in text, text[-500:]


def test_unit_runner_reads_the_packages_units_under_etcs(tmp_path, monkeypatch):
    """Issue 51: the relay's units come from its package (/usr/lib/systemd/
    system), the deployment's drop-in and fetch unit from cloud-init (/etc):
    the runner finds both, /etc first, and merges drop-ins of both
    directories (a same-named drop-in in /etc replaces the package's)."""
    etc, lib = tmp_path / "etc", tmp_path / "lib"
    (etc / "r.service.d").mkdir(parents=True)
    (lib / "r.service.d").mkdir(parents=True)
    monkeypatch.setattr(units, "UNIT_DIRS", [etc, lib])
    (lib / "r.service").write_text("[Unit]\nDescription=from the package\n[Service]\nExecStart=/usr/bin/r\n")
    (lib / "r.service.d" / "10-a.conf").write_text("[Unit]\nWants=lib-a.service\n")
    (lib / "r.service.d" / "20-b.conf").write_text("[Unit]\nWants=lib-b.service\n")
    (etc / "r.service.d" / "20-b.conf").write_text("[Unit]\nRequires=etc-b.service\n")
    (lib / "f@.service").write_text("[Service]\nExecStart=/usr/sbin/f %i\n")
    (etc / "f@.service").write_text("[Service]\nExecStart=/usr/local/sbin/f %i\n")
    r = units.load("r.service")
    assert r.get("Unit", "Description") == "from the package"
    assert r.all("Unit", "Wants") == ["lib-a.service"] and r.all("Unit", "Requires") == ["etc-b.service"]
    assert units.load("f@relay.service").get("Service", "ExecStart") == "/usr/local/sbin/f %i"
    import pytest
    with pytest.raises(FileNotFoundError):
        units.load("missing.service")


def test_rehearsal_tokens_file_lines_are_terraforms():
    """The rehearsal writes var.tokens into the tokens blob as
    terraform/artifacts.tf's local.tokens_file does (test_terraform_eval runs
    that expression): a comment naming each token, the token, its containers
    comma-separated, no list for "any container"."""
    import download_stage

    text, made = download_stage.var_tokens({"reader": ["uploads:rw", "results:r"], "ops": []})
    assert text == f"# reader\n{made['reader']} uploads:rw,results:r\n# ops\n{made['ops']}\n"
    assert all(len(t) == 48 for t in made.values())
    assert download_stage.reader_of({"w": ["results"], "r": ["results:r"]}, "results") == "r"
    assert render.tfvars()["tokens"] and render.tfvars()["download_containers"]


def test_sync_stage_picks_its_grants_by_their_letters():
    """The sync stage's tokens come from rehearsal.tfvars by what they grant
    on the upload container, in any letter order: one that may read, write
    and delete, and one that may write (and read) but not delete."""
    import pytest

    import sync_stage
    from errors import StageFailed

    tokens = {"w": ["uploads"], "rw": ["uploads:wr", "results:r"], "d": ["results:rwd", "uploads:dwr"]}
    assert sync_stage.entry_with(tokens, "uploads", "rwd") == "d"
    assert sync_stage.entry_with(tokens, "uploads", "rw", without="d") == "rw"
    assert sync_stage.letters("uploads") == "w"
    with pytest.raises(StageFailed):
        sync_stage.entry_with({"w": ["uploads"]}, "uploads", "rwd")
    v = render.tfvars()["tokens"]
    assert sync_stage.entry_with(v, "uploads", "rwd") and sync_stage.entry_with(v, "uploads", "rw", without="d")
