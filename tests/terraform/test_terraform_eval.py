"""Pieces of terraform/ evaluated by the real Terraform binary, offline: a
provider-less scratch module holding variables.tf plus the locals under test.
Skipped where terraform is not installed."""

import json
import shutil
import subprocess

import pytest

from tfmodel import TERRAFORM

pytestmark = pytest.mark.skipif(not shutil.which("terraform"), reason="terraform not installed")

REQUIRED = {
    "allowed_client_cidrs": ["203.0.113.0/24"],
    "admin_cidrs": ["198.51.100.7/32", "192.0.2.0/28"],
    "admin_ssh_public_key": "ssh-ed25519 AAAA test",
}


def run_tf(workdir, overrides=None, extra_tf=""):
    workdir.mkdir(exist_ok=True)
    shutil.copy(TERRAFORM / "variables.tf", workdir / "variables.tf")
    (workdir / "extra.tf").write_text(extra_tf)
    values = {**REQUIRED, **(overrides or {})}
    (workdir / "test.auto.tfvars.json").write_text(json.dumps(values))
    env = {"PATH": shutil.which("terraform").rsplit("/", 1)[0] + ":/usr/bin:/bin", "HOME": str(workdir),
           "TF_CLI_CONFIG_FILE": "/dev/null", "CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1"}
    subprocess.run(["terraform", "init", "-input=false", "-backend=false"], cwd=workdir, env=env,
                   check=True, capture_output=True)
    r = subprocess.run(["terraform", "apply", "-auto-approve", "-input=false", "-no-color"], cwd=workdir,
                       env=env, capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr
    out = subprocess.run(["terraform", "output", "-json"], cwd=workdir, env=env, check=True,
                         capture_output=True, text=True).stdout
    return {k: v["value"] for k, v in json.loads(out).items()}, ""


def local_expr(module, name):
    return module.locals()[name].text


def test_defaults_are_accepted(tmp_path):
    outputs, err = run_tf(tmp_path, extra_tf='output "port" { value = var.relay_port }\n')
    assert outputs == {"port": 4433}, err


@pytest.mark.parametrize(
    "var,value",
    [
        ("allowed_client_cidrs", ["0.0.0.0/0"]),
        ("allowed_client_cidrs", []),
        ("allowed_client_cidrs", ["Internet"]),
        ("admin_cidrs", ["0.0.0.0/0"]),
        ("admin_cidrs", ["*"]),
        ("storage_account_kind", "BlobStorage"),
        ("relay_count", 0),
        ("name", "Blob-Relay"),
    ],
)
def test_validation_rejects(tmp_path, var, value):
    outputs, err = run_tf(tmp_path, {var: value})
    assert outputs is None and "Invalid value for variable" in err, err


def test_storage_ip_rules_drop_slash_32(module, tmp_path):
    extra = (
        "locals {\n  bench_enabled = false\n"
        f"  admin_storage_ip_rules = {local_expr(module, 'admin_storage_ip_rules')}\n}}\n"
        'output "rules" { value = local.admin_storage_ip_rules }\n'
    )
    outputs, err = run_tf(tmp_path, extra_tf=extra)
    assert outputs == {"rules": ["198.51.100.7", "192.0.2.0/28"]}, err


def test_scale_set_switch(module, tmp_path):
    extra = (
        f"locals {{\n  scale_set = {local_expr(module, 'scale_set')}\n}}\n"
        'output "scale_set" { value = local.scale_set }\n'
    )
    one, err = run_tf(tmp_path / "one", extra_tf=extra)
    three, err3 = run_tf(tmp_path / "three", {"relay_count": 3}, extra_tf=extra)
    assert one == {"scale_set": False}, err
    assert three == {"scale_set": True}, err3
