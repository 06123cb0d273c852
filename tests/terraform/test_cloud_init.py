"""The cloud-init templates render (as templatefile() would) into valid
cloud-config that configures and starts the relay without any account key."""

import base64
import json
import re
import shutil
import subprocess

import pytest
import yaml

from tfmodel import (
    DEPLOY,
    TERRAFORM,
    TemplateError,
    render_template,
    template_placeholders,
    templatefile_calls,
)

ACCOUNT = "blobrelayab12cd"
RELAY_FLAGS = {  # relay-server's flags as RELAY_<FLAG> variables
    "RELAY_LISTEN", "RELAY_STORAGE_URL", "RELAY_ACCOUNT_KEY", "RELAY_TLS_CERT", "RELAY_TLS_KEY",
    "RELAY_CERT_FINGERPRINT_FILE", "RELAY_TOKENS", "RELAY_MEMORY_BUDGET", "RELAY_HEALTH_LISTEN",
}


def evaluate(module, text: str):
    """Value of a templatefile argument, for the few expression shapes the
    module uses. Unknown shapes fail: extend this when adding arguments."""
    text = text.strip()
    if m := re.fullmatch(r"var\.(\w+)", text):
        value = module.default(m.group(1))
        if value is None and m.group(1) == "bench_source_region":
            value = "australiaeast"
        return value
    if m := re.fullmatch(r'filebase64\("\$\{path\.module\}/(.+)"\)', text):
        return base64.b64encode((TERRAFORM / m.group(1)).read_bytes()).decode()
    samples = {
        "local.storage_url": f"https://{ACCOUNT}.blob.core.windows.net",
        "local.artifacts_url": f"https://{ACCOUNT}.blob.core.windows.net/relay-artifacts",
        "local.storage_api_version": module.locals()["storage_api_version"],
        "local.relay_address": "20.0.0.10:4433",
        "local_file.relay_cert_der.content_sha256": "ab" * 32,
    }
    if text in samples:
        return samples[text]
    raise AssertionError(f"test does not know how to evaluate templatefile argument {text!r}")


def rendered(module, name):
    call = templatefile_calls(module)[name]
    variables = {k: evaluate(module, v) for k, v in call.items()}
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
    assert "RELAY_ACCOUNT_KEY" not in env
    # No key, SAS or secret material inline: key and tokens are fetched at boot.
    lowered = text.lower().replace("# no account key:", "")
    assert not re.search(r"account[-_ ]?key|accountkey|[?&]sig=|-----begin", lowered)


def test_relay_files_are_the_deploy_files(module):
    text, _ = rendered(module, "cloud-init-relay.yaml.tftpl")
    cfg = yaml.safe_load(text)
    assert write_file(cfg, "/etc/systemd/system/relay-server.service") == (DEPLOY / "relay-server.service").read_text()
    assert write_file(cfg, "/etc/sysctl.d/60-blob-relay.conf") == (DEPLOY / "sysctl.d/60-blob-relay.conf").read_text()
    assert write_file(cfg, "/usr/local/sbin/blob-relay-fetch") == (DEPLOY / "blob-relay-fetch.sh").read_text()
    fetch = env_file(write_file(cfg, "/etc/blob-relay/fetch.env"))
    assert fetch["BLOB_RELAY_ARTIFACTS_URL"].startswith("https://")
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", fetch["BLOB_RELAY_STORAGE_API_VERSION"])


def test_relay_boot_sequence(module):
    text, _ = rendered(module, "cloud-init-relay.yaml.tftpl")
    cmds = [" ".join(map(str, c)) if isinstance(c, list) else c for c in yaml.safe_load(text)["runcmd"]]
    order = ["sysctl --system", "useradd --system", "blob-relay-fetch relay", "systemctl enable --now relay-server.service"]
    positions = [next(i for i, c in enumerate(cmds) if o in c) for o in order]
    assert positions == sorted(positions), cmds


def test_bench_env_file(module):
    text, _ = rendered(module, "cloud-init-bench.yaml.tftpl")
    cfg = yaml.safe_load(text)
    env = env_file(write_file(cfg, "/etc/blob-relay/bench.env"))
    assert env["BENCH_RELAY"].endswith(":4433")
    assert re.fullmatch(r"[0-9a-f]{64}", env["BENCH_RELAY_CERT_SHA256"])
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
