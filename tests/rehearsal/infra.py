"""What Azure provides around the VMs, played on this machine: the network
(namespaces joined through a router namespace, addresses from the .tf),
the run's PKI (a CA the VMs trust as the image trusts Microsoft's, the
storage certificate, the relay's self-signed certificate as terraform/tls.tf
issues it), the two storage accounts (Azurite over HTTPS with bearer-token
auth; the uploads account behind the CRC-64 checking front end) and the
deployer's own requests (what terraform apply does with the deployer's
identity: containers, boot artifacts).
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import time
import uuid
from pathlib import Path

from imds import jwt
from vm import Vm, ns_name, sh

STORAGE_IP = "198.18.1.2"  # Azurite: the artifacts account's front end
UPLOADS_IP = "198.18.1.3"  # the uploads account's front end (CRC-64 proxy)
LB_IP = "198.18.2.2"  # the load balancer's frontend (public) address
API_VERSION_HEADER = "x-ms-version"


def relay_subnet(vnet: str) -> ipaddress.IPv4Network:
    """cidrsubnet(var.vnet_address_space, 8, 1), as network.tf computes it."""
    net = ipaddress.ip_network(vnet)
    return list(net.subnets(new_prefix=net.prefixlen + 8))[1]


class Network:
    """Namespaces rhRUN-<vm> joined by the router namespace rhRUN-wan (RUN: `ns_name`); the relays
    share one subnet (a bridge in the wan namespace), as a scale set's instances do."""

    def __init__(self, relay_net: ipaddress.IPv4Network, bench_net: ipaddress.IPv4Network):
        hosts = list(relay_net.hosts())
        bench_hosts = list(bench_net.hosts())
        # Azure gives the first usable address .4 (.1-.3 are reserved).
        self.plan = {
            "storage": ("198.18.1.1/24", [f"{STORAGE_IP}/24", f"{UPLOADS_IP}/24"], None),
            "balancer": ("198.18.2.1/24", [f"{LB_IP}/24"], None),
            "relay-1": (None, [f"{hosts[3]}/{relay_net.prefixlen}"], f"{hosts[0]}/{relay_net.prefixlen}"),
            "relay-2": (None, [f"{hosts[4]}/{relay_net.prefixlen}"], f"{hosts[0]}/{relay_net.prefixlen}"),
            "bench": (f"{bench_hosts[0]}/{bench_net.prefixlen}", [f"{bench_hosts[3]}/{bench_net.prefixlen}"], None),
        }

    def ip(self, vm: str) -> str:
        return self.plan[vm][1][0].split("/")[0]

    def create(self) -> None:
        sh("ip", "netns", "add", ns_name("wan"))
        wan = ["ip", "-n", ns_name("wan")]
        sh(*wan, "link", "set", "lo", "up")
        sh("ip", "netns", "exec", ns_name("wan"), "sysctl", "-qw", "net.ipv4.ip_forward=1")
        bridge_addr = self.plan["relay-1"][2]
        sh(*wan, "link", "add", "br-relay", "type", "bridge")
        sh(*wan, "addr", "add", bridge_addr, "dev", "br-relay")
        sh(*wan, "link", "set", "br-relay", "up")
        for name, (wan_addr, addrs, bridged) in self.plan.items():
            ns = ns_name(name)
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            peer = f"w-{name}"
            sh("ip", "link", "add", peer, "netns", ns_name("wan"), "type", "veth", "peer", "name", "eth0", "netns", ns)
            if bridged:
                sh(*wan, "link", "set", peer, "master", "br-relay")
                gw = bridged.split("/")[0]
            else:
                sh(*wan, "addr", "add", wan_addr, "dev", peer)
                gw = wan_addr.split("/")[0]
            sh(*wan, "link", "set", peer, "up")
            for a in addrs:
                sh("ip", "-n", ns, "addr", "add", a, "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "route", "add", "default", "via", gw)
            if name.startswith("relay") or name == "bench":
                # The instance metadata address, on this VM's own loopback only.
                sh("ip", "-n", ns, "addr", "add", "169.254.169.254/32", "dev", "lo")

    def destroy(self) -> None:
        for name in [*self.plan, "wan"]:
            sh("ip", "netns", "del", ns_name(name), check=False)


class Pki:
    def __init__(self, d: Path, storage_hosts: list[str], lb_ip: str):
        self.d = d
        d.mkdir(parents=True, exist_ok=True)
        self.ca, self.ca_key = d / "ca.pem", d / "ca.key"
        self.storage, self.storage_key = d / "storage.pem", d / "storage.key"
        self.relay, self.relay_key = d / "relay-cert.pem", d / "relay-key.pem"
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        self.openssl("req", "-x509", *ec, "-keyout", self.ca_key, "-out", self.ca, "-days", "2",
                     "-subj", "/CN=Blob Relay rehearsal CA", "-addext", "basicConstraints=critical,CA:TRUE",
                     "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        san = ",".join(["DNS:*.blob.core.windows.net", *(f"DNS:{h}" for h in storage_hosts)])
        csr = d / "storage.csr"
        self.openssl("req", "-new", *ec, "-keyout", self.storage_key, "-out", csr,
                     "-subj", "/CN=*.blob.core.windows.net", "-addext", f"subjectAltName={san}",
                     "-addext", "extendedKeyUsage=serverAuth")
        self.openssl("x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", self.ca_key, "-CAcreateserial",
                     "-days", "2", "-copy_extensions", "copy", "-out", self.storage)
        # terraform/tls.tf: ECDSA P-256, self-signed, CN blob-relay, O Blob Relay,
        # DNS blob-relay and the relay's public address, digital_signature + server_auth.
        self.openssl("req", "-x509", *ec, "-keyout", self.relay_key, "-out", self.relay, "-days", "2",
                     "-subj", "/CN=blob-relay/O=Blob Relay",
                     "-addext", f"subjectAltName=DNS:blob-relay,IP:{lb_ip}",
                     "-addext", "keyUsage=critical,digitalSignature", "-addext", "extendedKeyUsage=serverAuth",
                     "-addext", "basicConstraints=critical,CA:FALSE")
        # tls_private_key's private_key_pem is PKCS#1/SEC1 ("EC PRIVATE KEY").
        self.openssl("ec", "-in", self.relay_key, "-out", self.relay_key)

    def openssl(self, *args) -> None:
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)

    def relay_sha256(self) -> str:
        der = subprocess.run(["openssl", "x509", "-in", str(self.relay), "-outform", "DER"],
                             check=True, capture_output=True).stdout
        import hashlib
        return hashlib.sha256(der).hexdigest()


class Deployer:
    """terraform apply's requests to storage, with the deployer's own Entra
    token (a principal of deployer_principal_ids), from the wan namespace."""

    def __init__(self, run: Path, ca: Path, tenant: str, key: str, api_version: str, hosts: dict[str, str]):
        self.run, self.ca, self.api_version, self.hosts = run, ca, api_version, hosts
        self.tenant, self.key = tenant, key
        self.auth = run / "deployer.auth"

    def token(self, lifetime_s: int = 3600, resource: str = "https://storage.azure.com/") -> str:
        now = int(time.time())
        return jwt({"aud": resource, "iss": f"https://sts.windows.net/{self.tenant}/", "iat": now, "nbf": now,
                    "exp": now + lifetime_s, "oid": "00000000-0000-0000-0000-000000000000", "idtyp": "user"},
                   bytes.fromhex(self.key))

    def request(self, method: str, url: str, body: Path | None = None, headers: list[str] = (),
                out: Path | None = None, token: str | None = "deployer", cacert: Path | None = None) -> int:
        """HTTP status of one storage request (curl in the wan namespace); the body to `out`."""
        host = url.split("/")[2]
        cmd = ["ip", "netns", "exec", ns_name("wan"), "curl", "-sS", "--max-time", "120",
               "--cacert", str(cacert or self.ca), "--resolve", f"{host}:443:{self.hosts[host]}",
               "-X", method, "-H", f"{API_VERSION_HEADER}: {self.api_version}", "-o", str(out or "/dev/null"),
               "-w", "%{http_code}"]
        if token is not None:
            self.auth.write_text(f"Authorization: Bearer {self.token() if token == 'deployer' else token}\n")
            cmd += ["-H", f"@{self.auth}"]
        for h in headers:
            cmd += ["-H", h]
        if body is not None:
            cmd += ["--data-binary", f"@{body}"]
        elif method == "PUT":
            cmd += ["-H", "Content-Length: 0"]
        cmd.append(url)
        r = subprocess.run(cmd, capture_output=True, text=True)
        code = r.stdout.strip()[-3:]
        return int(code) if code.isdigit() else 0

    def container(self, account_url: str, name: str) -> None:
        code = self.request("PUT", f"{account_url}/{name}?restype=container")
        if code not in (201, 409):
            raise RuntimeError(f"create container {account_url}/{name}: HTTP {code}")

    def put_blob(self, container_url: str, name: str, data: bytes | Path) -> None:
        path = data if isinstance(data, Path) else self.run / f"blob-{uuid.uuid4().hex}"
        if not isinstance(data, Path):
            path.write_bytes(data)
        code = self.request("PUT", f"{container_url}/{name}", body=path, headers=["x-ms-blob-type: BlockBlob"])
        if code != 201:
            raise RuntimeError(f"Put Blob {container_url}/{name}: HTTP {code}")

    def list_blobs(self, container_url: str, prefix: str = "") -> list[str]:
        out = self.run / "list.xml"
        code = self.request("GET", f"{container_url}?restype=container&comp=list&prefix={prefix}", out=out)
        if code != 200:
            raise RuntimeError(f"List Blobs {container_url}: HTTP {code}")
        import re
        return re.findall(r"<Name>([^<]+)</Name>", out.read_text())

    def get_blob(self, url: str, out: Path) -> dict:
        """Downloads a blob; returns its metadata (x-ms-meta-*) as a dict."""
        host = url.split("/")[2]
        self.auth.write_text(f"Authorization: Bearer {self.token()}\n")
        r = subprocess.run(["ip", "netns", "exec", ns_name("wan"), "curl", "-sS", "-f", "--cacert", str(self.ca),
                            "--resolve", f"{host}:443:{self.hosts[host]}", "-H", f"@{self.auth}",
                            "-H", f"{API_VERSION_HEADER}: {self.api_version}", "-D", "-", "-o", str(out), url],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"Get Blob {url}: {r.stderr.strip()}")
        meta = {}
        for line in r.stdout.splitlines():
            k, _, v = line.partition(":")
            if k.lower().startswith("x-ms-meta-"):
                meta[k.lower()[len("x-ms-meta-"):]] = v.strip()
        return meta


def start_storage(run: Path, azurite: Path, pki: Pki, accounts: dict[str, str], storage_bin: Path,
                  uploads_host: str, corrupt: int, slow_commit_trigger: Path, logs: Path) -> list[subprocess.Popen]:
    """Azurite (both accounts, HTTPS, --oauth basic) and the uploads front end
    (last): it corrupts the first `corrupt` Put Block bodies and holds the
    next Put Block List 12 s whenever `slow_commit_trigger` appears."""
    env = dict(os.environ, AZURITE_ACCOUNTS=";".join(f"{a}:{k}" for a, k in accounts.items()))
    az = subprocess.Popen(
        ["ip", "netns", "exec", ns_name("storage"), str(azurite), "--blobHost", STORAGE_IP, "--blobPort", "443",
         "--cert", str(pki.storage), "--key", str(pki.storage_key), "--oauth", "basic",
         "--inMemoryPersistence", "--disableTelemetry", "--skipApiVersionCheck"],
        env=env, stdout=open(logs / "azurite.log", "w"), stderr=subprocess.STDOUT)
    front = subprocess.Popen(
        ["ip", "netns", "exec", ns_name("storage"), str(storage_bin), "--listen", f"{UPLOADS_IP}:443",
         "--cert", str(pki.storage), "--key", str(pki.storage_key), "--upstream", f"{STORAGE_IP}:443",
         "--upstream-name", uploads_host, "--ca", str(pki.ca), "--corrupt-put-blocks", str(corrupt),
         "--slow-commit-trigger", str(slow_commit_trigger), "--slow-put-block-list-s", "12",
         "--stats", str(run / "uploads-front.json")],
        stdout=open(logs / "uploads-front.log", "w"), stderr=subprocess.STDOUT)
    return [az, front]


def wait_tcp(netns: str, host: str, port: int, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        r = subprocess.run(["ip", "netns", "exec", netns, "bash", "-c", f"exec 3<>/dev/tcp/{host}/{port}"],
                           capture_output=True)
        if r.returncode == 0:
            return
        time.sleep(0.2)
    raise RuntimeError(f"{host}:{port} not listening in {netns} after {limit_s:.0f} s")


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


__all__ = ["Network", "Pki", "Deployer", "start_storage", "wait_tcp", "read_json", "relay_subnet", "Vm"]
