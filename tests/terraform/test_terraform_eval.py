"""Pieces of terraform/ evaluated by the real Terraform binary, offline: a
provider-less scratch module holding variables.tf plus the locals under test.
Skipped where terraform is not installed."""

import hashlib
import json
import re
import shutil
import subprocess

import pytest

from tfmodel import TERRAFORM, Expr

pytestmark = pytest.mark.skipif(not shutil.which("terraform"), reason="terraform not installed")

REQUIRED = {
    "allowed_client_cidrs": ["203.0.113.0/24"],
    "admin_cidrs": ["198.51.100.7/32", "10.1.0.0/16", "2001:db8::/48"],
    "admin_ssh_public_key": "ssh-ed25519 AAAA test",
    "deployer_principal_ids": ["00000000-0000-0000-0000-000000000001"],
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
        ("admin_cidrs", ["::/0"]),
        ("admin_cidrs", ["*"]),
        ("storage_ip_rules", ["10.0.0.0/8"]),
        ("storage_ip_rules", ["192.168.1.10"]),
        ("storage_ip_rules", ["172.20.0.0/16"]),
        ("storage_ip_rules", ["100.64.1.1"]),
        ("storage_ip_rules", ["2001:db8::/48"]),
        ("storage_ip_rules", ["0.0.0.0/0"]),
        ("storage_ip_rules", ["198.51.100.0/7"]),
        ("storage_ip_rules", ["198.51.100.300"]),
        ("storage_subnet_ids", ["snet-relay"]),
        ("deployer_principal_ids", []),
        ("deployer_principal_ids", ["alice@example.com"]),
        ("rbac_propagation_wait", "90"),
        ("storage_account_kind", "BlobStorage"),
        ("relay_count", 0),
        ("name", "Blob-Relay"),
        ("tokens", {"Lab A": ["data"]}),
        ("tokens", {"lab-a": ["Data"]}),
        ("tokens", {"lab-a": ["ab"]}),
        ("tokens", {"lab-a": ["a--b"]}),
        ("tokens", {"lab-a": ["data:x"]}),
        ("tokens", {"lab-a": ["ab:r"]}),
        ("tokens", {"lab-a": ["data:"]}),
        ("tokens", {"lab-a": ["data:dd"]}),
        ("tokens", {"lab-a": ["data:rwdd"]}),
        ("tokens", {"lab-a": ["data:rwx"]}),
        ("tokens", {"lab-a": ["data:delete"]}),
        ("entra_read_containers", ["Lab-A"]),
        ("entra_read_containers", ["ab"]),
        ("entra_delete_containers", ["a--b"]),
        ("entra_delete_containers", ["data:d"]),
        ("entra_readers", {"alice@example.com": []}),
        ("entra_deleters", {"Lab A deleters": []}),
    ],
)
def test_validation_rejects(tmp_path, var, value):
    outputs, err = run_tf(tmp_path, {var: value})
    assert outputs is None and "Invalid value for variable" in err, err


@pytest.mark.parametrize("right,principals", [("read", "entra_readers"), ("delete", "entra_deleters")])
def test_entra_principals_are_assigned_only_roles_that_exist(tmp_path, right, principals):
    """A reader or deleter is assigned Reader./Deleter.CONTAINER only for a
    container in its entra_*_containers list (the role must exist); being
    an uploader of it is not enough."""
    group = "00000000-0000-4000-8000-00000000000a"
    ok, err = run_tf(tmp_path / "ok", {f"entra_{right}_containers": ["lab-a"], principals: {group: ["lab-a"]}},
                     extra_tf='output "ok" { value = true }\n')
    assert ok == {"ok": True}, err
    bad, err = run_tf(tmp_path / "bad", {"entra_upload_containers": ["lab-b"], f"entra_{right}_containers": ["lab-a"],
                                         principals: {group: ["lab-b"]}})
    assert bad is None and f"entra_{right}_containers" in " ".join(err.split()), err


def test_storage_ip_rules_are_normalised(module, tmp_path):
    """/32 -> bare address, /31 -> its two addresses (the firewall takes
    neither prefix), wider public ranges unchanged."""
    extra = (
        f"locals {{\n  storage_ip_rules = {local_expr(module, 'storage_ip_rules')}\n}}\n"
        'output "rules" { value = local.storage_ip_rules }\n'
    )
    given = ["198.51.100.7/32", "192.0.2.0/28", "203.0.113.6/31", "203.0.113.9"]
    outputs, err = run_tf(tmp_path, {"storage_ip_rules": given}, extra_tf=extra)
    assert outputs == {"rules": ["198.51.100.7", "192.0.2.0/28", "203.0.113.6", "203.0.113.7", "203.0.113.9"]}, err


def test_storage_ip_rules_error_names_the_fix(tmp_path):
    outputs, err = run_tf(tmp_path, {"storage_ip_rules": ["10.1.2.3"]})
    assert outputs is None and "storage_subnet_ids" in " ".join(err.split()), err


def test_same_region_bench_is_refused(module, tmp_path):
    """The bench VM's precondition, evaluated on the real expressions."""
    extra = (
        "locals {\n"
        f"  location_key = {local_expr(module, 'location_key')}\n"
        f"  bench_location_key = {local_expr(module, 'bench_location_key')}\n"
        "}\n"
        'output "same" { value = local.bench_location_key == local.location_key }\n'
    )
    same, err = run_tf(tmp_path / "same", {"location": "West Europe", "bench_source_region": "westeurope"},
                       extra_tf=extra)
    far, err2 = run_tf(tmp_path / "far", {"bench_source_region": "australiaeast"}, extra_tf=extra)
    assert same == {"same": True}, err
    assert far == {"same": False}, err2
    bench = module.resource("azurerm_linux_virtual_machine", "bench").body
    (pre,) = bench["lifecycle"][0]["precondition"]
    assert pre["condition"] == Expr("local.bench_location_key != local.location_key")


def test_scale_set_switch(module, tmp_path):
    extra = (
        f"locals {{\n  scale_set = {local_expr(module, 'scale_set')}\n}}\n"
        'output "scale_set" { value = local.scale_set }\n'
    )
    one, err = run_tf(tmp_path / "one", extra_tf=extra)
    three, err3 = run_tf(tmp_path / "three", {"relay_count": 3}, extra_tf=extra)
    assert one == {"scale_set": False}, err
    assert three == {"scale_set": True}, err3


def test_tfvars_example_passes_validation(tmp_path):
    """The documented starting point is accepted as it stands."""
    import hcl2

    with (TERRAFORM / "terraform.tfvars.example").open() as fh:
        raw = hcl2.load(fh)
    values = {k: (v[1:-1] if isinstance(v, str) and v[:1] == v[-1:] == '"' else
                  [x[1:-1] if isinstance(x, str) and x[:1] == '"' else x for x in v] if isinstance(v, list) else v)
              for k, v in raw.items() if not k.startswith("__")}
    assert {"deployer_principal_ids", "storage_ip_rules", "admin_cidrs"} <= set(values)
    outputs, err = run_tf(tmp_path, values, extra_tf='output "n" { value = length(var.deployer_principal_ids) }\n')
    assert outputs == {"n": 1}, err


def test_tokens_file_from_the_tokens_variable(module, tmp_path):
    """The relays' tokens file as Terraform writes it from var.tokens (token
    values stand in for random_password's): one line per token, a comment
    naming it, containers comma-separated, no list for "any container"; every
    line follows the relay's rules (16-256 visible ASCII, valid containers)."""
    expr = local_expr(module, "tokens_file")
    expr = expr.replace("random_password.client_token.result", 'substr(sha256("client"), 0, 48)')
    expr = expr.replace("random_password.token[name].result", "substr(sha256(name), 0, 48)")
    extra = f"locals {{\n  tokens_file = {expr}\n}}\noutput \"file\" {{ value = local.tokens_file }}\n"
    tokens = {"lab-a": ["data", "scratch"], "ops": [], "reader": ["uploads:rw", "results:r", "data:w"],
              "syncer": ["uploads:rwd", "data:d", "logs:wd", "old:dwr"]}
    outputs, err = run_tf(tmp_path, {"tokens": tokens, "container_name": "uploads"}, extra_tf=extra)
    assert outputs is not None, err
    import hashlib
    tok = lambda n: hashlib.sha256(n.encode()).hexdigest()[:48]  # noqa: E731
    assert outputs["file"] == (
        f"# client_token\n{tok('client')} uploads\n"
        f"# lab-a\n{tok('lab-a')} data,scratch\n"
        f"# ops\n{tok('ops')}\n"
        f"# reader\n{tok('reader')} uploads:rw,results:r,data:w\n"
        f"# syncer\n{tok('syncer')} uploads:rwd,data:d,logs:wd,old:dwr\n"
    )
    for line in outputs["file"].splitlines():
        if line.startswith("#"):
            continue
        token, *rest = line.split(" ")
        assert 16 <= len(token) <= 256 and token.isascii() and token.isprintable(), line
        assert len(rest) <= 1, line
        for c in rest[0].split(",") if rest else []:
            assert relay_takes_letters(c.partition(":")[2]) if ":" in c else True, line


def relay_takes_letters(letters: str) -> bool:
    """The relay's `Rights::parse` (relay-server/src/sign_in/access.rs): the
    letters r, w and d, each at most once, in any order, at least one."""
    return bool(letters) and set(letters) <= set("rwd") and len(set(letters)) == len(letters)


def test_tokens_validation_takes_the_access_letters_the_relay_takes(module):
    """var.tokens' validation regex accepts exactly the access suffixes the
    relays' tokens file accepts (every string of up to 4 letters of r, w, d
    and x), so a grant Terraform lets through is never a line the relay
    skips, and `d` (delete, relay-client sync --delete) is one of them."""
    import itertools

    cond = module.variables()["tokens"]["validation"][1]["condition"].text
    (pattern,) = re.findall(r'regex\("(\^[^"]*)", c\)', cond)
    src = (TERRAFORM.parent / "relay-server" / "src" / "sign_in" / "access.rs").read_text()
    assert "'d' => &mut r.delete" in src, "the relay's access letters changed: update relay_takes_letters"
    for n in range(0, 5):
        for letters in map("".join, itertools.product("rwdx", repeat=n)):
            value = f"data:{letters}"
            assert bool(re.fullmatch(pattern, value)) == relay_takes_letters(letters), value
    assert re.fullmatch(pattern, "data")


def profile_keys() -> set[str]:
    """The keys relay-client's configuration file accepts: the fields of
    `struct Profile` in config_file.rs (serde refuses any other)."""
    src = (TERRAFORM.parent / "relay-client" / "src" / "cli" / "config_file.rs").read_text()
    body = re.search(r"pub struct Profile \{(.*?)\n\}", src, re.S)
    assert body, "struct Profile not found in config_file.rs"
    keys = set(re.findall(r"^\s*pub (\w+): Option<", body.group(1), re.M))
    assert {"relay", "relay_cert_sha256", "token_file", "entra", "entra_scope", "to"} <= keys, keys
    return keys


@pytest.mark.parametrize("entra", [[], ["lab-entra", "other"]])
def test_client_profile_is_a_profile_the_client_accepts(module, tmp_path, entra):
    """`terraform output -raw client_profile`, evaluated on the real expression
    (resources' values stand in for their attributes), parses as TOML into one
    [profile.default] whose keys relay-client accepts; it names the relay the
    relay_address output names, signs in with a token file or Entra ID, and
    holds no token."""
    import tomllib

    fp = hashlib.sha256(b"cert").hexdigest()
    out = module.outputs()["client_profile"]
    assert out["value"] == Expr("local.client_profile") and not out.get("sensitive")
    assert module.outputs()["relay_address"]["value"] == Expr("local.relay_address")
    expr = local_expr(module, "client_profile")
    assert "random_password" not in expr and "client_token" not in expr, expr
    values = {
        "terraform_data.relay_cert_sha256.output": f'"{fp}"',
        "local.relay_address": '"20.0.0.10:4433"',
        "local.entra_app_uri": '"api://blob-relay-test"',
        "local.entra_tenant": '"72f988bf-0000-4000-8000-00000000cafe"',
    }
    for ref, sample in values.items():
        expr = expr.replace(ref, sample)
    extra = (
        f"locals {{\n  entra_enabled = {local_expr(module, 'entra_enabled')}\n"
        f"  client_profile = {expr}\n}}\n"
        'output "profile" { value = local.client_profile }\n'
    )
    outputs, err = run_tf(tmp_path, {"entra_upload_containers": entra, "container_name": "uploads"}, extra_tf=extra)
    assert outputs is not None, err
    text = outputs["profile"]
    parsed = tomllib.loads(text)
    assert list(parsed) == ["profile"] and list(parsed["profile"]) == ["default"], text
    profile = parsed["profile"]["default"]
    assert set(profile) <= profile_keys() - {"token"}, text
    common = {"relay": "20.0.0.10:4433", "relay_cert_sha256": fp}
    if entra:
        assert profile == {**common, "entra": "device-code", "entra_scope": "api://blob-relay-test",
                           "entra_tenant": "72f988bf-0000-4000-8000-00000000cafe", "to": "lab-entra"}, text
    else:
        assert profile == {**common, "token_file": "~/.config/blob-relay/token", "to": "uploads"}, text


def test_entra_app_roles_are_one_per_container_and_right(module, tmp_path):
    """entra.tf's own role expressions, evaluated: one app role per container
    and right, named as the relay matches them, each with its own stable ID
    (the same for the same name on every apply)."""
    names = ["entra_role_ids", "entra_reader_role_ids", "entra_deleter_role_ids", "entra_app_roles"]
    extra = ('locals {\n  prefix = "test-ab12"\n'
             + "".join(f"  {n} = {local_expr(module, n)}\n" for n in names)
             + "}\n" + 'output "roles" { value = local.entra_app_roles }\n')
    given = {"entra_upload_containers": ["lab-a"], "entra_read_containers": ["lab-a", "lab-b"],
             "entra_delete_containers": ["lab-b"]}
    first, err = run_tf(tmp_path / "a", given, extra_tf=extra)
    assert first is not None, err
    roles = first["roles"]
    assert sorted(roles) == ["Deleter.lab-b", "Reader.lab-a", "Reader.lab-b", "Uploader.lab-a"], roles
    assert len({r["id"] for r in roles.values()}) == 4, roles
    assert "delete" in roles["Deleter.lab-b"]["description"], roles
    again, err = run_tf(tmp_path / "b", {**given, "entra_read_containers": ["lab-a"]}, extra_tf=extra)
    assert again is not None, err
    assert {k: v["id"] for k, v in again["roles"].items()} == {
        k: roles[k]["id"] for k in ["Deleter.lab-b", "Reader.lab-a", "Uploader.lab-a"]}


def test_client_profile_entra_flow_is_one_the_client_knows(module):
    """The profile's `entra` value is one of `--entra`'s names (sign_in/mod.rs)."""
    src = (TERRAFORM.parent / "relay-client" / "src" / "sign_in" / "mod.rs").read_text()
    names = set(re.findall(r'Flow::\w+ => "([a-z-]+)"', src))
    flows = set(re.findall(r"entra = '([^']*)'", local_expr(module, "client_profile")))
    assert flows and flows <= names, (flows, names)


def test_rehearsal_tfvars_passes_validation(tmp_path):
    """tests/rehearsal/rehearsal.tfvars's download container and its read,
    write and delete grants are values Terraform accepts."""
    import hcl2

    from tfmodel import normalize

    with (TERRAFORM.parent / "tests" / "rehearsal" / "rehearsal.tfvars").open() as fh:
        raw = normalize(hcl2.load(fh))
    values = {k: raw[k] for k in ("download_containers", "tokens")}
    outputs, err = run_tf(tmp_path, values, extra_tf='output "n" { value = length(var.tokens) }\n')
    assert outputs == {"n": 2}, err
