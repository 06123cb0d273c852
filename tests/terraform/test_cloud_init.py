"""The cloud-init templates render (as templatefile() would) into valid
cloud-config that configures and starts the relay without any account key."""

import base64
import functools
import json
import os
import re
import secrets
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tfmodel import (
    DEPLOY,
    REPO,
    TERRAFORM,
    TemplateError,
    render_template,
    template_placeholders,
    templatefile_calls,
)

ACCOUNT = "blobrelayab12cd"
ARTIFACTS_ACCOUNT = "blobrelaybootab12cd"
RELAY_FLAGS = {  # relay-server's flags as RELAY_<FLAG> variables
    "RELAY_LISTEN", "RELAY_STORAGE_URL", "RELAY_ACCOUNT_KEY", "RELAY_TLS_CERT", "RELAY_TLS_KEY",
    "RELAY_CERT_FINGERPRINT_FILE", "RELAY_TOKENS", "RELAY_MEMORY_BUDGET", "RELAY_HEALTH_LISTEN",
    "RELAY_ID_KEY_FILE", "RELAY_BLOCK_CHECKSUM",
    "RELAY_ENTRA_AUDIENCE", "RELAY_ENTRA_TENANT", "RELAY_ENTRA_GRANT",
    "RELAY_ENTRA_READER_ROLES", "RELAY_ENTRA_DELETER_ROLES",
}
ENTRA_TENANT = "72f988bf-0000-4000-8000-00000000cafe"
ENTRA_AUDIENCE = "api://blob-relay-test,0b5e7c1e-1111-4222-8333-444455556666"


def entra_vars(entra) -> dict[str, list[str]]:
    """The entra_*_containers variables: a list is entra_upload_containers
    alone; a dict names them by right ("upload", "read", "delete")."""
    given = {"upload": list(entra)} if not isinstance(entra, dict) else entra
    return {f"entra_{k}_containers": list(given.get(k, [])) for k in ("upload", "read", "delete")}


def entra_env(module, entra) -> str:
    """local.relay_entra_env as Terraform computes it for these
    entra_*_containers (`entra_vars`): the expression's shape is checked
    here, then its parts filled in (audience and tenant with samples: they
    come from Entra ID)."""
    variables = entra_vars(entra)
    loc = module.locals()
    m = re.fullmatch(r'local\.entra_enabled \? join\("(.*?)", compact\(\[(.*)\]\)\) : "(.*)"',
                     loc["relay_entra_env"].text, re.S)
    assert m, loc["relay_entra_env"]
    if not any(variables.values()):
        return m.group(3)
    sep = m.group(1).encode().decode("unicode_escape")
    g = re.fullmatch(r'join\(";", \[for c in var\.entra_upload_containers : "(.*)"\]\)', loc["entra_grant"].text)
    assert g, loc["entra_grant"]
    values = {
        "local.entra_audience": ENTRA_AUDIENCE,
        "local.entra_tenant": ENTRA_TENANT,
        "local.entra_grant": ";".join(g.group(1).replace("${c}", c) for c in variables["entra_upload_containers"]),
    }
    # Each element: a string, or `length(var.X) > 0 ? "..." : ""`.
    items = re.findall(r'(?:length\(var\.(\w+)\) > 0 \? )?"([^"]*)"(?: : "")?', m.group(2))
    lines = [line for var, line in items if not var or variables[var]]
    return sep.join(re.sub(r"\$\{([^}]+)\}", lambda x: values[x.group(1)], line) for line in lines)


def evaluate(module, text: str, entra=()):
    """Value of a templatefile argument, for the few expression shapes the
    module uses (with `entra` as the entra_*_containers, `entra_vars`).
    Unknown shapes fail: extend this when adding arguments."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        # A string template: "${local.a}/${local.b}".
        return re.sub(r"\$\{([^}]+)\}", lambda m: str(evaluate(module, m.group(1))), text[1:-1])
    if text == "local.relay_entra_env":
        return entra_env(module, entra)
    if m := re.fullmatch(r"local\.(\w+_container)", text):
        value = module.locals()[m.group(1)]
        assert isinstance(value, str), value
        return value
    if m := re.fullmatch(r"var\.(\w+)", text):
        value = module.default(m.group(1))
        if value is None and m.group(1) == "bench_source_region":
            value = "australiaeast"
        return value
    if m := re.fullmatch(r'filebase64\("\$\{path\.module\}/(.+)"\)', text):
        return base64.b64encode((TERRAFORM / m.group(1)).read_bytes()).decode()
    samples = {
        "local.storage_url": f"https://{ACCOUNT}.blob.core.windows.net",
        "local.artifacts_url": f"https://{ARTIFACTS_ACCOUNT}.blob.core.windows.net",
        "local.storage_api_version": module.locals()["storage_api_version"],
        "local.relay_address": "20.0.0.10:4433",
    }
    if text in samples:
        return samples[text]
    raise AssertionError(f"test does not know how to evaluate templatefile argument {text!r}")


def rendered(module, name, entra=()):
    call = templatefile_calls(module)[name]
    variables = {k: evaluate(module, v, entra) for k, v in call.items()}
    text = (TERRAFORM / "templates" / name).read_text()
    return render_template(text, variables), variables


def env_file(content: str) -> dict:
    out = {}
    for line in content.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        assert key not in out, f"duplicate {key}"
        out[key] = value
    return out


def write_file(cfg, path):
    (entry,) = [w for w in cfg["write_files"] if w["path"] == path]
    if entry.get("encoding") == "b64":
        return base64.b64decode(entry["content"]).decode()
    return entry["content"]


TEMPLATES = ["cloud-init-relay.yaml.tftpl", "cloud-init-bench.yaml.tftpl"]


@pytest.mark.parametrize("name", TEMPLATES)
def test_template_variables_match_the_call(module, name):
    call = templatefile_calls(module)[name]
    text = (TERRAFORM / "templates" / name).read_text()
    assert template_placeholders(text) == set(call), "templatefile() arguments and ${...} in the template differ"


@pytest.mark.parametrize("name", TEMPLATES)
def test_template_renders_to_cloud_config(module, name):
    text, _ = rendered(module, name)
    assert text.startswith("#cloud-config\n")
    cfg = yaml.safe_load(text)
    assert isinstance(cfg, dict) and cfg["write_files"] and cfg["runcmd"]
    # Azure's custom_data limit is 64 KiB after base64.
    assert len(base64.b64encode(text.encode())) < 64 * 1024


def test_relay_env_file(module):
    text, _ = rendered(module, "cloud-init-relay.yaml.tftpl")
    cfg = yaml.safe_load(text)
    env = env_file(write_file(cfg, "/etc/blob-relay/relay.env"))
    assert set(env) <= RELAY_FLAGS
    assert env["RELAY_LISTEN"] == "0.0.0.0:4433"
    assert re.fullmatch(r"https://[a-z0-9]{3,24}\.blob\.core\.windows\.net", env["RELAY_STORAGE_URL"])
    assert env["RELAY_TOKENS"] == "/etc/blob-relay/tokens"
    assert env["RELAY_HEALTH_LISTEN"].endswith(":9090")
    assert env["RELAY_TLS_CERT"] and env["RELAY_TLS_KEY"]
    assert env["RELAY_MEMORY_BUDGET"] == module.default("relay_memory_budget")
    assert env["RELAY_ID_KEY_FILE"] == "/etc/blob-relay/relay-id-key"
    # Azure checks x-ms-content-crc64 as it checks Content-MD5, for a tenth of the CPU.
    assert env["RELAY_BLOCK_CHECKSUM"] == "crc64"
    assert "RELAY_ACCOUNT_KEY" not in env
    # Entra ID sign-in is off by default: static tokens only.
    assert not any(k.startswith("RELAY_ENTRA") for k in env), env
    # No key, SAS or secret material inline: key and tokens are fetched at boot.
    lowered = text.lower().replace("# no account key:", "")
    assert not re.search(r"account[-_ ]?key|accountkey|[?&]sig=|-----begin", lowered)


def test_relay_env_with_entra_sign_in(module):
    """entra_upload_containers set: relay.env gains the relay's Entra ID
    settings, one grant per container's app role, and nothing else changes."""
    off = env_file(write_file(yaml.safe_load(rendered(module, "cloud-init-relay.yaml.tftpl")[0]),
                              "/etc/blob-relay/relay.env"))
    text, _ = rendered(module, "cloud-init-relay.yaml.tftpl", entra=["lab-a", "lab-b"])
    env = env_file(write_file(yaml.safe_load(text), "/etc/blob-relay/relay.env"))
    assert set(env) <= RELAY_FLAGS
    assert env.pop("RELAY_ENTRA_AUDIENCE") == ENTRA_AUDIENCE
    assert env.pop("RELAY_ENTRA_TENANT") == ENTRA_TENANT
    assert env.pop("RELAY_ENTRA_GRANT") == "Uploader.lab-a=lab-a;Uploader.lab-b=lab-b"
    assert env == off


@pytest.mark.parametrize("entra,want", [
    ({"upload": ["lab-a"], "read": ["lab-a", "lab-b"], "delete": ["lab-a"]},
     {"RELAY_ENTRA_GRANT": "Uploader.lab-a=lab-a", "RELAY_ENTRA_READER_ROLES": "true",
      "RELAY_ENTRA_DELETER_ROLES": "true"}),
    ({"read": ["lab-b"]}, {"RELAY_ENTRA_READER_ROLES": "true"}),
    ({"delete": ["lab-b"]}, {"RELAY_ENTRA_DELETER_ROLES": "true"}),
])
def test_relay_env_with_entra_reader_and_deleter_roles(module, entra, want):
    """entra_read_containers / entra_delete_containers set: the relay is
    started with --entra-reader-roles / --entra-deleter-roles (as
    RELAY_ENTRA_*_ROLES=true, which its flags read), each only when its
    roles exist; no empty grant list when nothing is uploaded."""
    off = env_file(write_file(yaml.safe_load(rendered(module, "cloud-init-relay.yaml.tftpl")[0]),
                              "/etc/blob-relay/relay.env"))
    text, _ = rendered(module, "cloud-init-relay.yaml.tftpl", entra=entra)
    env = env_file(write_file(yaml.safe_load(text), "/etc/blob-relay/relay.env"))
    assert set(env) <= RELAY_FLAGS
    assert env.pop("RELAY_ENTRA_AUDIENCE") == ENTRA_AUDIENCE
    assert env.pop("RELAY_ENTRA_TENANT") == ENTRA_TENANT
    assert {k: env.pop(k) for k in list(env) if k.startswith("RELAY_ENTRA")} == want
    assert env == off


def test_relay_reads_the_entra_role_switches_terraform_writes():
    """The variables relay.env sets are the relay's own: relay-server's
    --entra-reader-roles and --entra-deleter-roles read exactly these."""
    src = (REPO / "relay-server" / "src" / "operations" / "config.rs").read_text()
    for flag, var in (("entra_reader_roles", "RELAY_ENTRA_READER_ROLES"),
                      ("entra_deleter_roles", "RELAY_ENTRA_DELETER_ROLES")):
        assert re.search(rf'env = "{var}"\)\]\s*pub {flag}: bool', src), flag


@pytest.mark.parametrize("right,role", [("upload", "Uploader"), ("read", "Reader"), ("delete", "Deleter")])
def test_each_right_has_its_app_roles_and_assignments(module, right, role):
    """Uploader, Reader and Deleter roles alike: a stable name-based ID per
    container, an app role on the registration (local.entra_app_roles, one
    dynamic block), and assignments from
    their own principals variable, made only on a registration Terraform
    creates."""
    loc = module.locals()
    ids = {"upload": "entra_role_ids", "read": "entra_reader_role_ids", "delete": "entra_deleter_role_ids"}[right]
    assert loc[ids].text == (f'{{for c in var.entra_{right}_containers : c => '
                             f'uuidv5("url", "urn:blob-relay:${{local.prefix}}:{role}.${{c}}")}}'), loc[ids]
    assert re.search(rf'for c, id in local\.{ids} : "{role}\.\$\{{c\}}" => \{{', loc["entra_app_roles"].text), role
    name = {"upload": "uploader", "read": "reader", "delete": "deleter"}[right]
    principals = {"upload": "entra_uploaders", "read": "entra_readers", "delete": "entra_deleters"}[right]
    assignments = {"upload": "entra_assignments", "read": "entra_reader_assignments",
                   "delete": "entra_deleter_assignments"}[right]
    (res,) = [r for r in module.resources("azuread_app_role_assignment") if r.name == name]
    assert res.body["for_each"].text == f"local.entra_create ? local.{assignments} : {{}}", res.body
    assert res.body["app_role_id"].text == f"local.{ids}[each.value.container]", res.body
    assert f"var.{principals}" in loc[assignments].text
    assert module.default(f"entra_{right}_containers") == [] and module.default(principals) == {}


def test_entra_resources_only_when_asked(module):
    """Nothing in Entra ID unless entra_upload_containers is set and no
    existing registration is given; the service principal admits only
    principals assigned a role."""
    assert module.default("entra_upload_containers") == []
    assert module.default("entra_existing_application") is None
    for rtype in ("azuread_application", "azuread_service_principal", "azuread_application_pre_authorized"):
        (r,) = module.resources(rtype)
        assert r.body["count"].text == "local.entra_create ? 1 : 0", r.body
    (sp,) = module.resources("azuread_service_principal")
    assert sp.body["app_role_assignment_required"] is True
    loc = module.locals()
    assert loc["entra_enabled"].text == (
        "length(concat(var.entra_upload_containers, var.entra_read_containers, var.entra_delete_containers)) > 0")
    assert loc["entra_create"].text == "local.entra_enabled && var.entra_existing_application == null"


@pytest.fixture(scope="session")
def relay_server_bin() -> Path:
    """RELAY_SERVER_BIN, else a debug build from this checkout. Never a skip: a
    relay that cannot be built or found fails the test."""
    if given := os.environ.get("RELAY_SERVER_BIN"):
        path = Path(given)
    else:
        cargo = shutil.which("cargo")
        assert cargo, "cargo not on PATH: install Rust or set RELAY_SERVER_BIN"
        subprocess.run([cargo, "build", "-q", "-p", "relay-server", "--bin", "relay-server"], cwd=REPO, check=True)
        path = REPO / os.environ.get("CARGO_TARGET_DIR", "target") / "debug" / "relay-server"
    assert path.is_file() and os.access(path, os.X_OK), f"no relay-server binary at {path}"
    return path


def openssl(*args, cwd):
    assert shutil.which("openssl"), "openssl is needed to make the test certificate"
    return subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def relay_env_on_disk(module, tmp_path):
    """The rendered relay.env with every absolute path moved under tmp_path, and
    the files it names in place as blob-relay-fetch and systemd would leave them:
    tokens (deploy/tokens.example's format), an ECDSA P-256 certificate and key
    (what terraform/tls.tf issues), the fingerprint file's runtime directory."""
    text, _ = rendered(module, "cloud-init-relay.yaml.tftpl")
    env = env_file(write_file(yaml.safe_load(text), "/etc/blob-relay/relay.env"))
    local = {k: str(tmp_path / v.lstrip("/")) if v.startswith("/") else v for k, v in env.items()}
    moved = {k for k in env if env[k] != local[k]}
    assert moved == {"RELAY_TOKENS", "RELAY_TLS_CERT", "RELAY_TLS_KEY", "RELAY_CERT_FINGERPRINT_FILE",
                     "RELAY_ID_KEY_FILE"}, moved
    for k in moved:
        Path(local[k]).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(DEPLOY / "tokens.example", local["RELAY_TOKENS"])
    # What terraform's random_bytes(32).hex becomes in the relay-boot blob.
    key = Path(local["RELAY_ID_KEY_FILE"])
    key.write_text(secrets.token_hex(32) + "\n")
    key.chmod(0o600)
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", local["RELAY_TLS_KEY"], "-out", local["RELAY_TLS_CERT"], "-days", "2",
            "-subj", "/CN=blob-relay", "-addext", "subjectAltName=IP:20.0.0.10", cwd=tmp_path)
    return local


@functools.cache
def supports_id_key(binary: Path) -> bool:
    """Whether this relay-server has --id-key-file (issue 11). Until it does,
    RELAY_ID_KEY_FILE is left out of --check-config (the template and the
    fetch script are checked regardless)."""
    r = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60, env={})
    assert r.returncode == 0, r.stderr
    return "--id-key-file" in r.stdout


def check_config(binary: Path, env: dict) -> subprocess.CompletedProcess:
    # Only the relay's variables: nothing inherited (no PATH, HOME, RELAY_* of the
    # caller), exactly as systemd's EnvironmentFile= gives them. The timeout would
    # catch a check that reached for the network (IMDS) after all.
    if not supports_id_key(binary):
        env = {k: v for k, v in env.items() if k != "RELAY_ID_KEY_FILE"}
    # The relay checks its memory bound against the machine it runs on (90 % of
    # RAM by default); the VM the template is for has more than this test host,
    # so check against the VM's memory instead.
    env = {"RELAY_MEMORY_LIMIT": "64GiB", **env}
    return subprocess.run([str(binary), "--check-config"], env=env, capture_output=True, text=True, timeout=60)


def test_rendered_relay_env_passes_check_config(relay_server_bin, relay_env_on_disk, tmp_path):
    env = relay_env_on_disk
    r = check_config(relay_server_bin, env)
    # Everything local is fine (first line); then the check reaches for storage
    # with the VM's managed identity, which does not exist off Azure: it fails
    # with that cause, never "ok".
    assert "configuration ok" in r.stdout, (r.stdout, r.stderr)
    assert r.returncode == 1, r.stderr
    assert f"storage {env['RELAY_STORAGE_URL']}/ via Entra ID not usable" in r.stderr, r.stderr
    assert "cannot get an Entra ID token" in r.stderr or "no answer within" in r.stderr, r.stderr
    assert "reachable" not in r.stdout, r.stdout
    fp = openssl("x509", "-in", env["RELAY_TLS_CERT"], "-noout", "-fingerprint", "-sha256", cwd=tmp_path)
    assert fp.strip().split("=", 1)[1] in r.stdout, (fp, r.stdout)
    # A check only: nothing written.
    assert not Path(env["RELAY_CERT_FINGERPRINT_FILE"]).exists()


@pytest.mark.parametrize(
    "change,complaint",
    [
        ({"RELAY_MEMORY_BUDGET": "banana"}, "--memory-budget"),
        ({"RELAY_TOKENS": "/nonexistent/blob-relay/tokens"}, "cannot read tokens file"),
        ({"RELAY_LISTEN": "0.0.0.0"}, "--listen"),
        # Without a key or SAS the relay uses Entra ID, which needs https.
        ({"RELAY_STORAGE_URL": f"http://{ACCOUNT}.blob.core.windows.net"}, "Entra ID needs https"),
        ({"RELAY_TLS_KEY": None}, "--tls-key"),
        ("other-key", "TLS certificate/key rejected"),
        ("bad-tokens", "skipped line 1"),
    ],
    ids=["budget", "tokens-missing", "listen", "http-entra", "key-unset", "key-mismatch", "tokens-invalid"],
)
def test_check_config_refuses_a_broken_relay_env(relay_server_bin, relay_env_on_disk, tmp_path, change, complaint):
    """Negative controls: check-config really reads what the template configures."""
    env = dict(relay_env_on_disk)
    if change == "other-key":
        other = tmp_path / "other-key.pem"
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(other), cwd=tmp_path)
        env["RELAY_TLS_KEY"] = str(other)
    elif change == "bad-tokens":
        Path(env["RELAY_TOKENS"]).write_text("short\n")
    else:
        for k, v in change.items():
            if v is None:
                env.pop(k)
            else:
                env[k] = v
    r = check_config(relay_server_bin, env)
    assert r.returncode != 0, r.stdout
    assert complaint in r.stderr, r.stderr


@pytest.mark.parametrize("content", ["ab" * 31 + "\n", "zz" * 32 + "\n", ""], ids=["short", "not-hex", "empty"])
def test_check_config_refuses_a_bad_id_key(relay_server_bin, relay_env_on_disk, content):
    """Runs once relay-server has --id-key-file (issue 11); skipped before."""
    if not supports_id_key(relay_server_bin):
        pytest.skip("relay-server has no --id-key-file yet")
    Path(relay_env_on_disk["RELAY_ID_KEY_FILE"]).write_text(content)
    r = check_config(relay_server_bin, relay_env_on_disk)
    assert r.returncode != 0, r.stdout


def test_relay_files_are_the_deploy_files(module):
    text, _ = rendered(module, "cloud-init-relay.yaml.tftpl")
    cfg = yaml.safe_load(text)
    assert write_file(cfg, "/usr/local/sbin/blob-relay-fetch") == (DEPLOY / "blob-relay-fetch.sh").read_text()
    assert write_file(cfg, "/etc/systemd/system/blob-relay-fetch@.service") == \
        (DEPLOY / "blob-relay-fetch@.service").read_text()
    assert write_file(cfg, "/etc/systemd/system/relay-server.service.d/10-fetch.conf") == \
        (DEPLOY / "relay-server.service.d/10-fetch.conf").read_text()
    fetch = env_file(write_file(cfg, "/etc/blob-relay/fetch.env"))
    # The relays read the relay-boot container of the artifacts account, not
    # the account they upload to.
    assert fetch["BLOB_RELAY_ARTIFACTS_URL"] == f"https://{ARTIFACTS_ACCOUNT}.blob.core.windows.net/relay-boot"
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", fetch["BLOB_RELAY_STORAGE_API_VERSION"])


def test_relay_cloud_init_writes_nothing_the_package_ships(module):
    """Issue 51: the relay's unit, the token refresh's units, the sysctl file
    and the user come from the relay-server package (scripts/package); a copy
    written by cloud-init would shadow the package's and drift from it. Only
    the deployment's own files are written: its configuration, and the fetch
    (script, unit, the relay's drop-in), which runs before the package is
    there."""
    text, _ = rendered(module, "cloud-init-relay.yaml.tftpl")
    cfg = yaml.safe_load(text)
    paths = {f["path"] for f in cfg["write_files"]}
    assert paths == {"/etc/blob-relay/relay.env", "/etc/blob-relay/fetch.env", "/usr/local/sbin/blob-relay-fetch",
                     "/etc/systemd/system/blob-relay-fetch@.service",
                     "/etc/systemd/system/relay-server.service.d/10-fetch.conf"}, paths
    shipped = re.findall(r'^unit "\$repo/deploy/([^"]+)"', (REPO / "scripts/package").read_text(), re.M)
    assert {"relay-server.service", "blob-relay-tokens.service", "blob-relay-tokens.timer"} <= set(shipped), shipped
    cmds = " ".join(" ".join(map(str, c)) if isinstance(c, list) else c for c in cfg["runcmd"])
    assert "useradd" not in cmds and "sysctl" not in cmds, cmds


def test_relay_boot_sequence(module):
    text, _ = rendered(module, "cloud-init-relay.yaml.tftpl")
    cmds = [" ".join(map(str, c)) if isinstance(c, list) else c for c in yaml.safe_load(text)["runcmd"]]
    # Only the fetch is known before the package: it installs the package and
    # then enables and starts the relay and the token refresh timer.
    assert cmds == ["systemctl daemon-reload", "systemctl enable blob-relay-fetch@relay.service",
                    "systemctl start --no-block blob-relay-fetch@relay.service"], cmds
    post = [line for line in (DEPLOY / "blob-relay-fetch@.service").read_text().splitlines()
            if line.startswith("ExecStartPost=")]
    assert len(post) == 1 and "enable --now relay-server.service blob-relay-tokens.timer" in post[0], post
    # The fetch is not a one-shot runcmd: it is the unit, which retries, and
    # on later boots runs again while the package or a file is missing.
    assert not any(re.search(r"blob-relay-fetch\s+(relay|client)\b", c) for c in cmds), cmds


def test_bench_env_file(module):
    text, _ = rendered(module, "cloud-init-bench.yaml.tftpl")
    cfg = yaml.safe_load(text)
    env = env_file(write_file(cfg, "/etc/blob-relay/bench.env"))
    assert env["BENCH_RELAY"].endswith(":4433")
    # The pin is computed on the VM from the certificate it fetches: nothing
    # in custom_data depends on local files or local state.
    assert "BENCH_RELAY_CERT_SHA256" not in env
    assert env["BENCH_RELAY_CERT_SHA256_FILE"] == "/etc/blob-relay/relay-cert-sha256"
    fetch = env_file(write_file(cfg, "/etc/blob-relay/fetch.env"))
    assert fetch["BLOB_RELAY_ARTIFACTS_URL"] == f"https://{ARTIFACTS_ACCOUNT}.blob.core.windows.net/bench-boot"
    cmds = [" ".join(map(str, c)) if isinstance(c, list) else c for c in cfg["runcmd"]]
    assert "systemctl enable blob-relay-fetch@client.service" in cmds
    assert env["BENCH_STORAGE_URL"].startswith("https://")
    assert write_file(cfg, "/usr/local/bin/blob-relay-compare") == (DEPLOY / "compare.sh").read_text()
    assert "token" not in json.dumps(cfg).lower().replace("bench_token_file", "").replace("client-token", "")


def test_renderer_escapes_and_rejects_what_it_cannot_do():
    assert render_template("a=$${x} b=${ y } c=%%{z}", {"y": 4433}) == "a=${x} b=4433 c=%{z}"
    with pytest.raises(TemplateError):
        render_template("${upper(x)}", {"x": "a"})
    with pytest.raises(TemplateError):
        render_template("%{ if x }y%{ endif }", {"x": True})
    with pytest.raises(TemplateError):
        render_template("${missing}", {})


@pytest.mark.skipif(not shutil.which("terraform"), reason="terraform not installed")
@pytest.mark.parametrize("name", TEMPLATES)
def test_renderer_agrees_with_terraform(module, name, tmp_path):
    """Cross-check with the real templatefile(): a provider-less config, so it
    runs offline."""
    text, variables = rendered(module, name)
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    (tmp_path / "main.tf").write_text(
        'output "r" {\n'
        f'  value = templatefile("{TERRAFORM / "templates" / name}", jsondecode(file("vars.json")))\n'
        "}\n"
    )
    env = {"PATH": "/usr/bin:/bin:/usr/local/bin", "TF_IN_AUTOMATION": "1", "CHECKPOINT_DISABLE": "1",
           "TF_CLI_CONFIG_FILE": "/dev/null", "HOME": str(tmp_path)}
    env["PATH"] = shutil.which("terraform").rsplit("/", 1)[0] + ":" + env["PATH"]
    for args in (["init", "-input=false", "-backend=false"], ["apply", "-auto-approve", "-input=false"]):
        subprocess.run(["terraform", *args], cwd=tmp_path, env=env, check=True, capture_output=True)
    out = subprocess.run(["terraform", "output", "-raw", "r"], cwd=tmp_path, env=env, check=True,
                         capture_output=True, text=True).stdout
    assert out == text


@pytest.mark.skipif(not shutil.which("terraform"), reason="terraform not installed")
@pytest.mark.parametrize("entra", [
    ["lab-a", "lab-b"],
    {"upload": ["lab-a"], "read": ["lab-a"], "delete": ["lab-b"]},
    {"read": ["lab-a"]},
])
def test_entra_env_agrees_with_terraform(module, tmp_path, entra):
    """relay.env with Entra ID on, as the real terraform evaluates entra.tf's
    own expressions (local.entra_grant, local.relay_entra_env, copied from the
    parsed source; the values Entra ID supplies replaced by samples) and
    renders the template: the same text the offline renderer produces."""
    name = "cloud-init-relay.yaml.tftpl"
    text, variables = rendered(module, name, entra=entra)
    loc = module.locals()
    del variables["entra_env"]
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    declared = "".join(f"variable \"{var}\" {{\n  default = {json.dumps(value)}\n}}\n"
                       for var, value in entra_vars(entra).items())
    (tmp_path / "main.tf").write_text(
        declared +
        "locals {\n"
        "  entra_enabled = true\n"
        f"  entra_audience = {json.dumps(ENTRA_AUDIENCE)}\n"
        f"  entra_tenant = {json.dumps(ENTRA_TENANT)}\n"
        f"  entra_grant = {loc['entra_grant'].text}\n"
        f"  relay_entra_env = {loc['relay_entra_env'].text}\n"
        "}\n"
        'output "r" {\n'
        f'  value = templatefile("{TERRAFORM / "templates" / name}", '
        'merge(jsondecode(file("vars.json")), { entra_env = local.relay_entra_env }))\n'
        "}\n"
    )
    env = {"PATH": "/usr/bin:/bin:/usr/local/bin", "TF_IN_AUTOMATION": "1", "CHECKPOINT_DISABLE": "1",
           "TF_CLI_CONFIG_FILE": "/dev/null", "HOME": str(tmp_path)}
    env["PATH"] = shutil.which("terraform").rsplit("/", 1)[0] + ":" + env["PATH"]
    for args in (["init", "-input=false", "-backend=false"], ["apply", "-auto-approve", "-input=false"]):
        r = subprocess.run(["terraform", *args], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    out = subprocess.run(["terraform", "output", "-raw", "r"], cwd=tmp_path, env=env, check=True,
                         capture_output=True, text=True).stdout
    assert out == text
    if isinstance(entra, list):
        assert "RELAY_ENTRA_GRANT=Uploader.lab-a=lab-a;Uploader.lab-b=lab-b\n" in out
    else:
        assert ("RELAY_ENTRA_GRANT=" in out) == bool(entra.get("upload")), out
        assert ("RELAY_ENTRA_READER_ROLES=true\n" in out) == bool(entra.get("read")), out
        assert ("RELAY_ENTRA_DELETER_ROLES=true\n" in out) == bool(entra.get("delete")), out
