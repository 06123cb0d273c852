"""The deployment rehearsal (scripts/rehearse; docs/REHEARSAL.md):
stands up what terraform/ describes on this machine, from the rendered
cloud-init on, runs it through its stages and tears it down. One line per
stage with what it checked; the last line `rehearsal: N of M stages passed`.
Exit status 0 only if every stage that exists passed.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import traceback
import hashlib
import uuid
from pathlib import Path

import yaml

import infra
from download_stage import DownloadStage, var_tokens
from errors import StageFailed, check
from render import rendered
from recording import AlertRecording
from sync_stage import SyncStage
from traffic import TrafficStages
from tfmodel import DEPLOY, Module
from vm import Vm, apply_write_files, host_has_no, host_has_no_package, ns_name, runcmd_lines

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RELAYS = ["relay-1", "relay-2"]
VMS = [*RELAYS, "bench"]
# The units whose programs the sandbox stage checks, recorded with strace by
# the unit runner (units.py --trace) from their execve on, for the whole run:
# the relays through every upload of the traffic stages, restarts included.
STRACE_DIR = "/run/rehearsal/strace"
TRACED = {
    "relay": {"relay-server.service": "relay-server.log", "blob-relay-fetch@relay.service": "fetch.log",
              "blob-relay-tokens.service": "tokens.log"},
    "bench": {"blob-relay-fetch@client.service": "fetch.log"},
}
SHIM = """#!/bin/sh
# systemctl in a rehearsal VM: systemd is not PID 1 here, so requests go to the
# rehearsal's unit runner (tests/rehearsal/units.py), which reads the real units.
f=/run/rehearsal/systemctl.d/$(date +%s%N)-$$.req
printf '%s\\n' "$*" >"$f.tmp" && mv "$f.tmp" "$f"
"""


class Rehearsal(TrafficStages, DownloadStage, SyncStage, AlertRecording):
    def __init__(self, args):
        self.args = args
        self.bins = Path(args.bin_dir).resolve()
        self.run = Path(args.run_dir)
        self.logs = self.run / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.procs: list[subprocess.Popen] = []
        self.runners: dict[str, subprocess.Popen] = {}
        self.vms: dict[str, Vm] = {}
        self.results: list[tuple[str, bool, str]] = []
        self.tenant = str(uuid.uuid4())
        self.jwt_key = secrets.token_hex(32)
        self.principals = {vm: str(uuid.uuid4()) for vm in VMS}
        self.module = Module()

    # --- plumbing ---------------------------------------------------------
    def spawn(self, argv: list[str], log: str, **kw) -> subprocess.Popen:
        p = subprocess.Popen(argv, stdout=open(self.logs / log, "a"), stderr=subprocess.STDOUT, **kw)
        self.procs.append(p)
        return p

    def state(self, vm: str) -> dict:
        """The unit runner's state file, read through its mount namespace."""
        if self.runners[vm].poll() is not None:
            raise StageFailed(f"{vm}: the unit runner exited ({self.runners[vm].returncode}; logs/{vm}-runner.log)")
        return infra.read_json(Path(f"/proc/{self.runners[vm].pid}/root/run/rehearsal/state.json"))

    def unit(self, vm: str, name: str) -> dict:
        return self.state(vm).get("units", {}).get(name, {})

    def wait(self, what: str, cond, limit_s: float, step: float = 0.25):
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            v = cond()
            if v:
                return v
            time.sleep(step)
        raise StageFailed(f"{what}: not within {limit_s:.0f} s")

    def journal(self, vm: str, unit: str) -> str:
        try:
            return Path(f"/proc/{self.runners[vm].pid}/root/run/rehearsal/journal/{unit}.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def systemctl(self, vm: str, *words: str) -> None:
        self.vms[vm].run(f"systemctl {' '.join(words)}")

    # --- set-up -----------------------------------------------------------
    def setup(self) -> None:
        texts, used = rendered(infra.LB_IP)
        self.texts, self.used, self.values = texts, used, used["values"]
        (self.run / "values.json").write_text(json.dumps(used, indent=1, default=str))
        for role, text in texts.items():
            (self.run / f"cloud-init-{role}.yaml").write_text(text)
        v = self.values
        self.storage_host = f"{v['storage_account']}.blob.core.windows.net"
        self.artifacts_host = f"{v['artifacts_account']}.blob.core.windows.net"
        self.hosts = {self.artifacts_host: infra.STORAGE_IP, self.storage_host: infra.UPLOADS_IP}
        bench_net = ipaddress.ip_network(self.module.resource("azurerm_subnet", "bench").body["address_prefixes"][0])
        self.net = infra.Network(infra.relay_subnet(v["vnet_address_space"]), bench_net)
        self.net.create()
        ns_dir = self.run / "ns"
        ns_dir.mkdir(exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "rh-ns", str(ns_dir)], check=True)
        subprocess.run(["mount", "--make-private", str(ns_dir)], check=True)
        self.pki = infra.Pki(self.run / "pki", [self.storage_host, self.artifacts_host], infra.LB_IP)
        self.account_keys = {v["storage_account"]: secrets.token_urlsafe(48),
                             v["artifacts_account"]: secrets.token_urlsafe(48)}
        self.account_keys = {a: __import__("base64").b64encode(k.encode()).decode() for a, k in self.account_keys.items()}
        self.procs += infra.start_storage(self.run, REPO / "node_modules/.bin/azurite-blob", self.pki,
                                          self.account_keys, self.bins / "rehearsal-storage", self.storage_host,
                                          corrupt=1, slow_commit_trigger=self.run / "slow-commit",
                                          logs=self.logs)
        self.front = self.procs[-1]
        infra.wait_tcp(ns_name("storage"), infra.STORAGE_IP, 443, 60)
        infra.wait_tcp(ns_name("storage"), infra.UPLOADS_IP, 443, 30)
        self.deployer = infra.Deployer(self.run, self.pki.ca, self.tenant, self.jwt_key,
                                       used["relay"]["storage_api_version"], self.hosts)
        self.upload_artifacts()

    def upload_artifacts(self) -> None:
        """What terraform/artifacts.tf and storage.tf create and upload."""
        v = self.values
        art = f"https://{self.artifacts_host}"
        self.deployer.container(f"https://{self.storage_host}", v["container"])
        for c in (v["relay_boot_container"], v["bench_boot_container"]):
            self.deployer.container(art, c)
        # The packages of scripts/package, from the binaries under test (a
        # release build would take minutes; the packaging is the same).
        self.packages = package(self.bins, self.run / "package", self.logs)
        self.client_token = secrets.token_hex(24)  # random_password: 48, no special
        self.revoked_token = secrets.token_hex(24)
        self.tokens_v1 = (f"# client_token\n{self.client_token} {v['container']}\n"
                          f"# rehearsal-old\n{self.revoked_token} {v['container']}\n")
        var_lines, self.named_tokens = var_tokens(v["tokens"])  # var.tokens, as artifacts.tf writes them
        self.tokens_v1 += var_lines
        relay_boot = f"{art}/{v['relay_boot_container']}"
        bench_boot = f"{art}/{v['bench_boot_container']}"
        # artifacts.tf: the package under a fixed name, and SHA256SUMS with
        # the SHA-256 of the file uploaded.
        self.deployer.put_blob(relay_boot, "relay-server.deb", self.packages["relay-server"])
        self.deployer.put_blob(relay_boot, "SHA256SUMS", sums_line(self.packages["relay-server"], "relay-server.deb"))
        self.deployer.put_blob(relay_boot, "relay-cert.pem", self.pki.relay.read_bytes())
        self.deployer.put_blob(relay_boot, "relay-key.pem", self.pki.relay_key.read_bytes())
        self.deployer.put_blob(relay_boot, "tokens", self.tokens_v1.encode())
        self.deployer.put_blob(relay_boot, "relay-id-key", (secrets.token_hex(32) + "\n").encode())
        self.deployer.put_blob(bench_boot, "relay-client.deb", self.packages["relay-client"])
        self.deployer.put_blob(bench_boot, "SHA256SUMS", sums_line(self.packages["relay-client"], "relay-client.deb"))
        self.deployer.put_blob(bench_boot, "client-token", (self.client_token + "\n").encode())
        self.deployer.put_blob(bench_boot, "relay-cert.pem", self.pki.relay.read_bytes())
        self.relay_boot, self.bench_boot = relay_boot, bench_boot

    def boot_vm(self, name: str) -> None:
        """The VM image (the run's CA in the system trust store, DNS for the
        accounts), PID 1 (the unit runner) and IMDS, then cloud-init."""
        vm = Vm(name, self.run)
        self.vms[name] = vm
        vm.create_mounts()
        vm.write_file("/usr/local/share/ca-certificates/blob-relay-rehearsal-ca.crt", self.pki.ca.read_bytes())
        vm.run("update-ca-certificates >/dev/null 2>&1")
        hosts = "".join(f"{ip} {h}\n" for h, ip in self.hosts.items())
        vm.write_file("/etc/hosts", vm.read_file("/etc/hosts") + b"\n" + hosts.encode())
        vm.write_file("/run/rehearsal/systemctl", SHIM.encode(), 0o755)
        vm.run("mount --bind /run/rehearsal/systemctl /usr/bin/systemctl")
        vm.write_file("/run/rehearsal/units.py", (HERE / "units.py").read_bytes())
        trace = sum((["--trace", f"{unit}={STRACE_DIR}/{log}"]
                     for unit, log in TRACED["bench" if name == "bench" else "relay"].items()), [])
        self.runners[name] = self.spawn([*vm.nsenter(), "/usr/bin/python3", "/run/rehearsal/units.py", *trace],
                                        f"{name}-runner.log")
        self.procs.append(self.spawn(
            ["ip", "netns", "exec", vm.netns, sys.executable, str(HERE / "imds.py"), "--vm", name,
             "--principal", self.principals[name], "--tenant", self.tenant, "--key", self.jwt_key,
             "--resource-id", f"/subscriptions/rehearsal/resourceGroups/rg/providers/Microsoft.Compute/{name}",
             "--log", str(self.logs / "imds.jsonl")], f"{name}-imds.log"))
        infra.wait_tcp(vm.netns, "169.254.169.254", 80, 30)
        self.wait(f"{name}: unit runner up", lambda: self.state(name) != {} or
                  Path(f"/proc/{self.runners[name].pid}/root/run/rehearsal/systemctl.d").is_dir(), 30)
        cfg = yaml.safe_load(self.texts["bench" if name == "bench" else "relay"])
        self.written[name] = apply_write_files(vm, cfg)
        self.runcmd[name] = []
        for line in runcmd_lines(cfg):
            # cloud-init runs runcmd as one script without `set -e`: every line runs.
            r = vm.run(line, check=False, timeout=300)
            self.runcmd[name].append((line, r.returncode, (r.stderr or "").strip().splitlines()[-1:]))

    # --- stages -----------------------------------------------------------
    def stage_rendered(self) -> str:
        self.written, self.runcmd = {}, {}
        check(not Path("/etc/blob-relay").exists(), "the host has /etc/blob-relay before the run")
        check(host_has_no("blob-relay"), "the host has a blob-relay user before the run")
        check(not host_has_no_package(), f"the host has the packages' files before the run: {host_has_no_package()}")
        for name in VMS:
            self.boot_vm(name)
        # The files are the deploy/ files, at their real paths, in each VM only.
        for name in VMS:
            vm = self.vms[name]
            for path, src in (("/usr/local/sbin/blob-relay-fetch", "blob-relay-fetch.sh"),
                              ("/etc/systemd/system/blob-relay-fetch@.service", "blob-relay-fetch@.service")):
                check(vm.read_file(path) == (DEPLOY / src).read_bytes(), f"{name}:{path} is not deploy/{src}")
        # The relay's own units come with its package (the fetch installs it):
        # cloud-init writes none of them.
        for name in RELAYS:
            for unit in ("relay-server.service", "blob-relay-tokens.service", "blob-relay-tokens.timer"):
                check(self.vms[name].run(f"test -e /etc/systemd/system/{unit}", check=False).returncode != 0,
                      f"{name}: cloud-init wrote /etc/systemd/system/{unit}, which the package ships")
        check(not Path("/etc/blob-relay").exists(), "a VM's files reached the host's /etc/blob-relay")
        check(host_has_no("blob-relay"), "a VM's useradd reached the host")
        failed = {n: [(line, rc, err) for line, rc, err in cmds if rc != 0] for n, cmds in self.runcmd.items()}
        allowed = {"sysctl --system"}
        unexpected = {n: [f for f in fs if not any(a in f[0] for a in allowed) and "azcopy" not in f[0]]
                      for n, fs in failed.items()}
        check(not any(unexpected.values()), f"runcmd lines failed: {unexpected}")
        n_files = sum(len(w) for w in self.written.values())
        n_cmds = sum(len(c) for c in self.runcmd.values())
        sysctl = "sysctl --system refused (read-only /proc/sys: the kernel is the host's)" \
            if any("sysctl" in f[0] for fs in failed.values() for f in fs) else "sysctl --system applied"
        azcopy = [f for fs in failed.values() for f in fs if "azcopy" in f[0]]
        return (f"cloud-init of 2 relays + bench rendered from terraform/templates (suffix {self.used['suffix']}, "
                f"relay_count {self.values['relay_count']}); {n_files} write_files at their paths in each VM's own "
                f"mount namespace, {n_cmds} runcmd lines run; host untouched; "
                f"{sysctl}{'; azcopy not installed (no Microsoft repo here)' if azcopy else ''}")

    def stage_booted(self) -> str:
        for name in RELAYS:
            def up(n=name):
                u = self.unit(n, "relay-server.service")
                if "start-limit-hit" in u.get("exits", []):
                    tail = self.journal(n, "relay-server.service").strip().splitlines()[-1:]
                    raise StageFailed(f"{n}: relay-server failed to start 5 times (start-limit-hit): {tail}")
                return u.get("state") == "active" and self.health(n)
            self.wait(f"{name}: relay-server active and /healthz 200", up, 120)
        # dpkg's man-db trigger (the client's man page) rebuilds the man index
        # under the runner's strace: most of this fetch's time.
        self.wait("bench: blob-relay-fetch@client done", lambda: self.unit("bench", "blob-relay-fetch@client.service")
                  .get("state") == "active", 300)
        lines = []
        for name in RELAYS:
            vm, st = self.vms[name], self.unit(name, "relay-server.service")
            fetch = self.unit(name, "blob-relay-fetch@relay.service")
            check(fetch.get("state") == "active" and fetch.get("exits") == ["0"], f"{name}: fetch {fetch}")
            log = self.journal(name, "runner")
            check(log.find("blob-relay-fetch@relay.service: started") < log.find("relay-server.service: started"),
                  f"{name}: relay-server started before the fetch")
            pid = st["pid"]
            status = Path(f"/proc/{pid}/status").read_text()
            uid = int(next(l for l in status.splitlines() if l.startswith("Uid:")).split()[1])
            want_uid = int(vm.run("id -u blob-relay").stdout)
            check(uid == want_uid and uid != 0, f"{name}: relay runs as uid {uid}, not blob-relay ({want_uid})")
            env = dict(e.split("=", 1) for e in Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0") if "=" in e)
            check(env.get("STATE_DIRECTORY") == "/var/lib/blob-relay", f"{name}: STATE_DIRECTORY={env.get('STATE_DIRECTORY')}")
            check(env.get("RELAY_BLOCK_CHECKSUM") == "crc64", f"{name}: EnvironmentFile not applied")
            stat = vm.run("stat -c '%U %a' /var/lib/blob-relay /run/blob-relay").stdout.split("\n")
            check(stat[0] == "blob-relay 700" and stat[1] == "blob-relay 750", f"{name}: directories {stat}")
            fp = vm.read_file("/run/blob-relay/cert-sha256").decode().strip().replace(":", "").lower()
            check(fp == self.pki.relay_sha256(), f"{name}: the relay's fingerprint file {fp!r} is not the fetched cert's")
            self.check_package(name, "relay-server")
            exe = os.readlink(f"/proc/{pid}/exe")
            check(exe == "/usr/bin/relay-server", f"{name}: the relay runs {exe}, not the package's /usr/bin/relay-server")
            enabled = self.state(name).get("enabled", [])
            check({"relay-server.service", "blob-relay-tokens.timer"} <= set(enabled),
                  f"{name}: the fetch did not enable the package's units: {enabled}")
            lines.append(name)
        bench = self.vms["bench"]
        self.check_package("bench", "relay-client")
        pin = bench.read_file("/etc/blob-relay/relay-cert-sha256").decode().strip()
        check(pin == self.pki.relay_sha256(), "bench: relay-cert-sha256 is not the relay certificate's")
        check(bench.run("test -x /usr/bin/relay-client", check=False).returncode == 0, "bench: no relay-client")
        # dpkg wrote only into the VMs' overlays.
        check(host_has_no("blob-relay"), "a VM's package made the blob-relay user on the host")
        check(not host_has_no_package(), f"a VM's dpkg reached the host: {host_has_no_package()}")
        skipped = self.unit("relay-1", "relay-server.service").get("not_applied", [])
        self.start_recording()
        return ("blob-relay-fetch@relay before relay-server on both relays (cert, key, tokens, id key and the "
                "relay-server package from the artifacts account, its SHA-256 checked against SHA256SUMS, installed "
                "with dpkg: /usr/bin/relay-server, its units enabled, the blob-relay user; nothing of it on the host); "
                "relay-server as blob-relay with relay.env, STATE_DIRECTORY=/var/lib/blob-relay "
                "(0700), /run/blob-relay (0750) with the fetched cert's fingerprint; /healthz 200 on both; bench "
                f"installed the relay-client package, fetched its token and the pin; not applied by the unit runner: {len(skipped)} sandbox "
                "directives of relay-server.service (the sandbox stage's)")

    def check_package(self, name: str, pkg: str) -> None:
        """dpkg in the VM has PKG installed, at the version built for the run,
        and the unit files it installed are the deploy/ ones at Debian's
        paths."""
        vm = self.vms[name]
        status = vm.run(f"dpkg-query -W -f='${{db:Status-Status}} ${{Version}}' {pkg}", check=False).stdout
        want = subprocess.run(["dpkg-deb", "-f", str(self.packages[pkg]), "Version"], capture_output=True,
                              text=True, check=True).stdout.strip()
        check(status == f"installed {want}", f"{name}: dpkg-query {pkg}: {status!r}, not installed {want}")
        if pkg == "relay-server":
            unit = vm.read_file("/usr/lib/systemd/system/relay-server.service").decode()
            check(unit == (DEPLOY / "relay-server.service").read_text().replace("/usr/local/bin/", "/usr/bin/")
                  .replace("/usr/local/sbin/", "/usr/sbin/"),
                  f"{name}: the installed relay-server.service is not deploy/'s")
            check(vm.run("test -f /usr/lib/sysctl.d/60-blob-relay.conf", check=False).returncode == 0,
                  f"{name}: no sysctl file from the package")

    def health(self, name: str) -> bool:
        ip = self.net.ip(name)
        r = subprocess.run(["ip", "netns", "exec", ns_name("balancer"), "curl", "-fsS", "--max-time", "2",
                            f"http://{ip}:{self.values['health_port']}/healthz"], capture_output=True)
        return r.returncode == 0

    def stage_identity(self) -> str:
        if os.environ.get("REHEARSAL_PLANT_KEY"):
            # Negative control of this stage (docs/REHEARSAL.md): an account key
            # where an operator might leave one must fail it.
            key = next(iter(self.account_keys.values()))
            self.vms["relay-2"].run(f"echo 'RELAY_ACCOUNT_KEY={key}' >> /etc/blob-relay/relay.env")
        log = [json.loads(l) for l in (self.logs / "imds.jsonl").read_text().splitlines()]
        by_vm = {vm: [e for e in log if e["vm"] == vm and e["status"] == 200] for vm in VMS}
        check(all(by_vm[vm] for vm in VMS), f"IMDS tokens per VM: { {k: len(v) for k, v in by_vm.items()} }")
        check(all(e["resource"].rstrip("/") == "https://storage.azure.com" for es in by_vm.values() for e in es),
              "a token for another resource was asked for")
        # IMDS is each VM's own: not reachable from outside a VM namespace.
        for ns in (ns_name("wan"), ns_name("balancer"), ns_name("storage")):
            r = subprocess.run(["ip", "netns", "exec", ns, "curl", "-sS", "--max-time", "2", "-H", "Metadata: true",
                                "http://169.254.169.254/metadata/identity/oauth2/token?api-version=2018-02-01"
                                "&resource=https://storage.azure.com/"], capture_output=True)
            check(r.returncode != 0, f"IMDS answered in {ns}")
        # Each VM's token names that VM's identity.
        for name in VMS:
            out = self.vms[name].run(
                "curl -fsS -H 'Metadata: true' 'http://169.254.169.254/metadata/identity/oauth2/token?"
                "api-version=2018-02-01&resource=https%3A%2F%2Fstorage.azure.com%2F'").stdout
            claims = json.loads(__import__("base64").urlsafe_b64decode(
                json.loads(out)["access_token"].split(".")[1] + "=="))
            check(claims["oid"] == self.principals[name], f"{name}: token for {claims['oid']}")
        # No account key or SAS anywhere in a VM: files it has, environments and command lines.
        # Connection strings' key and SAS fields, with their "=": the bare words
        # are also names in the client's own code (its bench's `AccountKey`
        # way to sign AzCopy's SAS).
        secrets_ = list(self.account_keys.values()) + ["AccountKey=", "SharedAccessSignature="]
        # A SAS's signature is its sig= parameter with a value (an HMAC-SHA256 in
        # base64, percent-encoded or not); the client's own message about one it
        # hid ("sig=REDACTED") is not one.
        sas_sig = r"sig=[A-Za-z0-9%+/]{20,}"
        scanned = 0
        for name in VMS:
            vm = self.vms[name]
            # Everything the VM has written (its overlays' upper layers) and
            # its tmpfs: the image below is the host's own.
            where = f"{self.run}/vm/{name}/upper /run /tmp /var/tmp /mnt"
            vm.run(f"test -d {self.run}/vm/{name}/upper/etc/blob-relay")  # the scan sees what the VM wrote
            for s in secrets_:
                r = vm.run(f"grep -rlaF -- {json.dumps(s)} {where} 2>/dev/null", check=False)
                check(r.stdout.strip() == "", f"{name}: {s[:8]}... found in {r.stdout.split()[:3]}")
            r = vm.run(f"grep -rlaE -- {json.dumps(sas_sig)} {where} 2>/dev/null", check=False)
            check(r.stdout.strip() == "", f"{name}: a SAS signature (sig=...) found in {r.stdout.split()[:3]}")
        for pid in self.vm_pids():
            for f in ("environ", "cmdline"):
                try:
                    data = Path(f"/proc/{pid}/{f}").read_bytes().decode(errors="replace")
                except OSError:
                    continue
                scanned += 1
                for s in secrets_:
                    check(s not in data, f"pid {pid} {f} holds {s[:8]}...")
                check(re.search(sas_sig, data) is None, f"pid {pid} {f} holds a SAS signature")
        return (f"IMDS at 169.254.169.254 in each VM only (not from wan/balancer/storage), {sum(map(len, by_vm.values()))} "
                f"managed-identity tokens for storage.azure.com, each VM's own oid; no account key or SAS in the VMs' "
                f"files, nor in {scanned // 2} VM processes' environment and command line")

    def vm_pids(self) -> list[int]:
        pids = []
        for name in VMS:
            r = subprocess.run(["ip", "netns", "pids", ns_name(name)], capture_output=True, text=True)
            pids += [int(p) for p in r.stdout.split()]
        return pids

    def stage_https(self) -> str:
        bench = self.vms["bench"]
        url = f"{self.relay_boot}/tokens"
        tok = ("curl -sS -o /dev/null -w '%{http_code}' -H \"Authorization: Bearer $(curl -fsS -H 'Metadata: true' "
               "'http://169.254.169.254/metadata/identity/oauth2/token?api-version=2018-02-01&resource=https%3A%2F%2Fstorage.azure.com%2F'"
               " | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"access_token\"])')\" -H 'x-ms-version: 2023-11-03' ")
        ok = bench.run(tok + url, check=False).stdout
        check(ok == "200", f"bench: GET with its token over the system trust store: {ok}")
        # The trust comes from the VM's store: an empty CA bundle fails the handshake.
        bench.run("printf '' > /tmp/empty.pem")
        r = bench.run(f"curl -sS --cacert /tmp/empty.pem --capath /nonexistent -o /dev/null {url}", check=False)
        check(r.returncode in (35, 60, 77), f"TLS without the CA: curl exit {r.returncode}")
        # Azurite enforces the token: none -> 404 (a private container), expired -> 401, wrong audience -> 401.
        check(self.deployer.request("GET", url, token=None) in (401, 403, 404), "anonymous read of relay-boot")
        now = int(time.time())
        from imds import jwt
        expired = jwt({"aud": "https://storage.azure.com/", "iss": f"https://sts.windows.net/{self.tenant}/",
                       "iat": now - 7200, "nbf": now - 7200, "exp": now - 3600}, bytes.fromhex(self.jwt_key))
        wrong_aud = jwt({"aud": "https://management.azure.com/", "iss": f"https://sts.windows.net/{self.tenant}/",
                         "iat": now, "nbf": now, "exp": now + 600}, bytes.fromhex(self.jwt_key))
        refusals = []
        for tok, why in ((expired, "expired"), (wrong_aud, "audience")):
            body = self.run / "refusal.xml"
            code = self.deployer.request("GET", url, token=tok, out=body)
            text = body.read_text(errors="replace")
            check(code in (401, 403) and "AuthenticationFailed" in text and why in text.lower(),
                  f"{why} token: HTTP {code} {text[:200]}")
            refusals.append(code)
        plain = subprocess.run(["ip", "netns", "exec", ns_name("wan"), "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}",
                                "--max-time", "5", f"http://{infra.STORAGE_IP}:443/"], capture_output=True, text=True)
        check(plain.stdout.strip() in ("000", "400"), f"plain HTTP to storage answered {plain.stdout}")
        return ("storage only over HTTPS with a CA made for this run, trusted through each VM's system store "
                "(update-ca-certificates; the fetch script's curl and the relay's and client's rustls verified "
                f"storage against it); Azurite --oauth basic with two accounts: token 200, no token refused, "
                f"expired and wrong-audience tokens {refusals[0]}/{refusals[1]} AuthenticationFailed; an empty trust "
                f"store fails the handshake")

    def start_balancer(self) -> None:
        v = self.values["probe"]
        self.spawn(["ip", "netns", "exec", ns_name("balancer"), sys.executable, str(HERE / "balancer.py"),
                    "--listen", f"{infra.LB_IP}:{self.values['relay_port']}",
                    *sum((["--backend", self.net.ip(n)] for n in RELAYS), []),
                    "--backend-port", str(self.values["relay_port"]), "--probe-port", str(v["port"]),
                    "--probe-path", v["path"], "--interval-s", str(v["interval_s"]), "--threshold", str(v["threshold"]),
                    "--state", str(self.run / "balancer.json")], "balancer.log")

    # --- driver -----------------------------------------------------------
    def collect_traces(self) -> None:
        """Stops the relays (systemctl stop: SIGTERM, as at a shutdown, so the
        recording ends with the relay's own exit) and keeps each VM's strace
        logs in logs/VM-strace/ for the sandbox stage, with what each traced
        relay did (traced.json)."""
        summary = {}
        for name in RELAYS:
            if name not in self.runners or self.runners[name].poll() is not None:
                continue
            try:
                self.systemctl(name, "stop", "relay-server.service")
                self.wait(f"{name}: relay-server stopped", lambda n=name: self.unit(n, "relay-server.service")
                          .get("state") in ("inactive", "failed"), 40)
            except Exception as e:  # noqa: BLE001 - the sandbox stage then fails on what is missing
                print(f"rehearse: {name}: stopping the relay for its recording: {e}", flush=True)
            journal = self.journal(name, "relay-server.service")
            unit = self.unit(name, "relay-server.service")
            summary[name] = {"commits": len(re.findall(r"relay_server::transfer: committed ", journal)),
                             "starts": unit.get("starts", 0), "exits": unit.get("exits", [])}
        for name, p in self.runners.items():
            src = Path(f"/proc/{p.pid}/root{STRACE_DIR}")
            if p.poll() is None and src.is_dir():
                shutil.copytree(src, self.logs / f"{name}-strace", dirs_exist_ok=True)
        (self.logs / "traced.json").write_text(json.dumps(summary, indent=1))

    def teardown(self) -> None:
        self.collect_traces()
        for name, p in self.runners.items():
            # The VMs' journals, kept with the run's logs.
            src = Path(f"/proc/{p.pid}/root/run/rehearsal/journal")
            if src.is_dir():
                shutil.copytree(src, self.logs / f"{name}-journal", dirs_exist_ok=True)
        for name, p in self.runners.items():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.runners.values():
            try:
                p.wait(timeout=40)
            except subprocess.TimeoutExpired:
                p.kill()
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        # Anything still in a VM namespace was started by this run.
        for pid in self.vm_pids() if hasattr(self, "net") else []:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if hasattr(self, "net"):
            self.net.destroy()
        for mnt in (self.run / "ns").glob("*.mnt"):
            subprocess.run(["umount", str(mnt)], capture_output=True)
        subprocess.run(["umount", str(self.run / "ns")], capture_output=True)


def package(bins: Path, out: Path, logs: Path) -> dict[str, Path]:
    """scripts/package on the binaries in `bins`: {package name: its .deb}."""
    with open(logs / "package.log", "w") as log:
        subprocess.run([str(REPO / "scripts/package"), "--bin-dir", str(bins), "--fast", "--out", str(out)],
                       stdout=log, stderr=subprocess.STDOUT, check=True)
    debs = {p.name.split("_")[0]: p for p in out.glob("*.deb")}
    check(set(debs) == {"relay-server", "relay-client"}, f"scripts/package made {sorted(debs)}")
    return debs


def sums_line(deb: Path, name: str) -> bytes:
    """The SHA256SUMS blob of artifacts.tf: filesha256() of the file uploaded."""
    return f"{hashlib.sha256(deb.read_bytes()).hexdigest()}  {name}\n".encode()


# sync before tokens: the token stage's new tokens blob drops var.tokens' entries.
STAGES = ["rendered", "booted", "identity", "https", "crc64", "balancer", "compare", "failover", "download",
          "sync", "tokens"]
LABELS = {"https": "HTTPS", "crc64": "CRC-64", "tokens": "token refresh"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--bin-dir", required=True)
    p.add_argument("--run-dir", required=True)
    p.add_argument("--summary-file", help="write {passed, stages} here instead of printing the last line "
                   "(scripts/rehearse adds the stages of its other scripts)")
    args = p.parse_args()
    names = [LABELS.get(s, s) for s in STAGES]

    def summary(passed: int) -> None:
        if args.summary_file:
            Path(args.summary_file).write_text(json.dumps({"passed": passed, "stages": names}))
        else:
            print(f"rehearsal: {passed} of {len(STAGES)} stages passed (stages: {', '.join(names)})")
    r = Rehearsal(args)
    passed = 0
    try:
        try:
            r.setup()
            r.start_balancer()
        except Exception as e:  # noqa: BLE001 - reported as the first stage's failure
            traceback.print_exc(file=open(r.logs / "setup-error.log", "w"))
            print(f"set-up: FAILED: {e}")
            summary(0)
            return 1
        broken = False
        for s in STAGES:
            label = LABELS.get(s, s)
            if broken:
                print(f"{label}: not run (an earlier stage failed)", flush=True)
                continue
            t0 = time.monotonic()
            try:
                line = getattr(r, f"stage_{s}")()
                passed += 1
                print(f"{label}: ok ({time.monotonic() - t0:.0f} s): {line}", flush=True)
            except Exception as e:  # noqa: BLE001 - every failure is a stage line
                with open(r.logs / f"{s}-error.log", "w") as f:
                    traceback.print_exc(file=f)
                print(f"{label}: FAILED ({time.monotonic() - t0:.0f} s): {e}", flush=True)
                broken = s in ("rendered", "booted")
        if passed == len(STAGES):
            # The alerts stage's end state, after the last traffic stage.
            try:
                r.record_outage()
            except Exception as e:  # noqa: BLE001 - the alerts stage then fails on the missing recording
                with open(r.logs / "alerts-recording-error.log", "w") as f:
                    traceback.print_exc(file=f)
                print(f"rehearse: the alerts recording failed: {e}", flush=True)
    finally:
        if os.environ.get("REHEARSAL_HOLD"):
            # Debugging: leave the VMs up until this file exists.
            release = r.run / "release"
            print(f"rehearse: holding; touch {release} to tear down", flush=True)
            while not release.exists():
                time.sleep(1)
        r.teardown()
    summary(passed)
    return 0 if passed == len(STAGES) else 1


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())
