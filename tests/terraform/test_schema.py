"""Every azurerm argument and block in terraform/*.tf exists, as an argument
(or block) that configuration may set, in the provider's schema at both ends
of the pinned version range; no required argument is missing.

The schema comes from azurerm_schema.json, read from the provider's Go
source by azurerm_schema.py (refresh: see docs/REHEARSAL.md, "Checks without
Azure"). This is what `terraform validate` would catch if the providers
could be downloaded here."""

import json
import re

import hcl2
import pytest

from azurerm_schema import (
    Evaluator,
    Source,
    SchemaError,
    active_in_4x,
    newest_tag,  # noqa: F401  (used by the refresh command)
)
from tfmodel import TERRAFORM

SNAPSHOT = json.loads((TERRAFORM.parent / "tests/terraform/azurerm_schema.json").read_text())
TAGS = sorted(SNAPSHOT["tags"], key=lambda t: tuple(map(int, t[1:].split("."))))
META = {"count", "for_each", "depends_on", "lifecycle", "provider", "provisioner", "connection"}


def _unq(s: str) -> str:
    return s[1:-1] if len(s) >= 2 and s[0] == s[-1] == '"' else s


def _is_block(value) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) and v.get("__is_block__") for v in value)


def check_body(body: dict, node: dict, where: str) -> list[str]:
    """Problems of one resource/block body against a schema node."""
    problems = []
    seen = set()
    for key, value in body.items():
        if key in ("__is_block__", "__comments__"):
            continue
        if key == "dynamic":
            for dyn in value:
                for name, spec in dyn.items():
                    if name == "__is_block__":
                        continue
                    name = _unq(name)
                    seen.add(name)
                    if name not in node["blocks"]:
                        problems.append(f"{where}: no block {name!r}")
                        continue
                    for content in spec.get("content", []):
                        problems += check_body(content, node["blocks"][name]["node"], f"{where}.{name}")
            continue
        seen.add(key)
        if _is_block(value):
            if key in node["blocks"]:
                for i, sub in enumerate(value):
                    problems += check_body(sub, node["blocks"][key]["node"], f"{where}.{key}")
            elif key == "timeouts":
                pass  # every azurerm resource has timeouts (not in the schema map)
            elif key in node["args"]:
                problems.append(f"{where}: {key!r} is an argument, written as a block")
            else:
                problems.append(f"{where}: no block {key!r}")
        else:
            if key in node["args"]:
                if node["args"][key]["computed_only"]:
                    problems.append(f"{where}: {key!r} is read-only (computed)")
            elif key in node["blocks"]:
                problems.append(f"{where}: {key!r} is a block, written as an argument")
            else:
                problems.append(f"{where}: no argument {key!r}")
    for kind in ("args", "blocks"):
        for name, info in node[kind].items():
            if info["required"] and name not in seen:
                problems.append(f"{where}: required {name!r} missing")
    return problems


def check_module(parsed: dict[str, dict], tag: str) -> list[str]:
    schema = SNAPSHOT["tags"][tag]
    problems = []
    for fname, doc in parsed.items():
        for kind, table in (("resource", "resources"), ("data", "data_sources")):
            for block in doc.get(kind, []):
                for rtype, named in block.items():
                    rtype = _unq(rtype)
                    if not rtype.startswith("azurerm_"):
                        continue
                    for name, body in named.items():
                        where = f"{tag} {fname} {kind}.{rtype}.{_unq(name)}"
                        node = schema[table].get(rtype)
                        if node is None:
                            problems.append(f"{where}: type not in the snapshot (refresh it)")
                            continue
                        body = {k: v for k, v in body.items() if k not in META}
                        problems += check_body(body, node, where)
        for block in doc.get("provider", []):
            for pname, body in block.items():
                if _unq(pname) == "azurerm":
                    problems += check_body({k: v for k, v in body.items() if k not in ("alias", "version")},
                                           schema["provider"], f"{tag} {fname} provider.azurerm")
    return problems


OTHER = SNAPSHOT.get("providers", {})


def check_other(parsed: dict[str, dict], provider: str, tag: str) -> list[str]:
    schema = OTHER[provider]["tags"][tag]["resources"]
    problems = []
    for fname, doc in parsed.items():
        for block in doc.get("resource", []):
            for rtype, named in block.items():
                rtype = _unq(rtype)
                if not rtype.startswith(provider + "_"):
                    continue
                for name, body in named.items():
                    where = f"{provider} {tag} {fname} resource.{rtype}.{_unq(name)}"
                    if rtype not in schema:
                        problems.append(f"{where}: type not in the snapshot (refresh it)")
                        continue
                    problems += check_body({k: v for k, v in body.items() if k not in META}, schema[rtype], where)
    return problems


OTHER_CASES = [(p, t) for p in sorted(OTHER) for t in OTHER[p]["tags"]]


@pytest.mark.parametrize("provider,tag", OTHER_CASES)
def test_every_argument_exists_in_the_other_providers(parsed_raw, provider, tag):
    problems = check_other(parsed_raw, provider, tag)
    assert not problems, "\n".join(problems)


def _arg(required=False):
    return {"computed_only": False, "force_new": False, "required": required}


def _node(required=(), optional=(), blocks=None):
    args = {a: _arg(True) for a in required} | {a: _arg() for a in optional}
    return {"args": args, "blocks": {k: {"required": False, "node": v} for k, v in (blocks or {}).items()}}


# azuread (the relay's app registration, terraform/entra.tf) is written with
# the plugin SDK, which azurerm_schema.py's --other reader (plugin-framework
# providers) does not read. Until it does, the arguments of the resources
# entra.tf uses are listed here by hand from the provider's documentation at
# the floor of its pin (registry.terraform.io/providers/hashicorp/azuread/
# 3.0.0/docs: application, application_pre_authorized, service_principal,
# app_role_assignment) and checked the same way: a misspelt argument or a
# missing required one fails. Partial lists: only what such a resource may
# reasonably be given here; refresh them with the reader when it learns the
# SDK.
AZUREAD_V3 = {
    "azuread_application": _node(
        required=["display_name"],
        optional=["identifier_uris", "sign_in_audience", "owners", "notes", "tags",
                  "group_membership_claims", "prevent_duplicate_names", "fallback_public_client_enabled"],
        blocks={
            "api": _node(
                optional=["requested_access_token_version", "known_client_applications",
                          "mapped_claims_enabled"],
                blocks={"oauth2_permission_scope": _node(
                    required=["id"],
                    optional=["value", "type", "enabled", "admin_consent_display_name",
                              "admin_consent_description", "user_consent_display_name",
                              "user_consent_description"])},
            ),
            "app_role": _node(
                required=["id", "allowed_member_types", "description", "display_name"],
                optional=["value", "enabled"]),
        },
    ),
    "azuread_application_pre_authorized": _node(
        required=["permission_ids"], optional=["application_id", "authorized_client_id"]),
    "azuread_service_principal": _node(
        optional=["client_id", "app_role_assignment_required", "owners", "tags", "notes",
                  "use_existing", "account_enabled"]),
    "azuread_app_role_assignment": _node(
        required=["app_role_id", "principal_object_id", "resource_object_id"]),
}
HAND_LISTED = {"azuread": AZUREAD_V3}


def test_azuread_arguments_are_the_documented_ones(parsed_raw):
    problems = []
    for fname, doc in parsed_raw.items():
        for block in doc.get("resource", []):
            for rtype, named in block.items():
                rtype = _unq(rtype)
                if not rtype.startswith("azuread_"):
                    continue
                for name, body in named.items():
                    where = f"azuread {fname} resource.{rtype}.{_unq(name)}"
                    if rtype not in AZUREAD_V3:
                        problems.append(f"{where}: not in the hand-listed resources (add it from the docs)")
                        continue
                    problems += check_body({k: v for k, v in body.items() if k not in META}, AZUREAD_V3[rtype], where)
    assert not problems, "\n".join(problems)
    # The check can fail: a misspelt argument is caught.
    bad = hcl2.loads('resource "azuread_service_principal" "x" {\n  client_idd = "a"\n}\n')
    ((_, named),) = bad["resource"][0].items()
    ((_, body),) = named.items()
    assert check_body(body, AZUREAD_V3["azuread_service_principal"], "x") == ["x: no argument 'client_idd'"]


def test_other_providers_are_covered_at_their_floor(parsed_raw):
    text = (TERRAFORM / "versions.tf").read_text()
    used = {_unq(t).split("_")[0] for doc in parsed_raw.values() for b in doc.get("resource", []) for t in b}
    for provider in sorted(used - {"azurerm", "terraform"} - set(HAND_LISTED)):
        m = re.search(rf'\b{provider}\s*=\s*\{{[^}}]*version\s*=\s*"\s*>=\s*(\d+\.\d+\.\d+)', text, re.S)
        assert m, provider
        assert provider in OTHER, f"{provider} not in the snapshot: refresh with --other {provider}=DIR"
        assert f"v{m.group(1)}" in OTHER[provider]["tags"], f"{provider}: floor v{m.group(1)} not in the snapshot"
        assert len(OTHER[provider]["tags"]) >= 2


@pytest.mark.parametrize("provider,tag", [c for c in OTHER_CASES if c[0] == "time"])
def test_other_providers_catch_a_misspelt_argument(provider, tag):
    doc = hcl2.loads('resource "time_sleep" "x" {\n  create_duration = "1s"\n  trigger = {}\n}\n')
    assert any("no argument 'trigger'" in p for p in check_other({"t.tf": doc}, provider, tag))


@pytest.fixture(scope="module")
def parsed_raw():
    out = {}
    for f in sorted(TERRAFORM.glob("*.tf")):
        with f.open() as fh:
            out[f.name] = hcl2.load(fh)
    return out


def test_snapshot_covers_the_pinned_range():
    """The snapshot's oldest tag is the floor in versions.tf, and its newest
    is a release of the same major version: a changed pin needs a refresh."""
    text = (TERRAFORM / "versions.tf").read_text()
    m = re.search(r'azurerm\s*=\s*\{[^}]*version\s*=\s*"\s*>=\s*(\d+)\.(\d+)\.(\d+)\s*,\s*<\s*(\d+)\.0\.0"', text, re.S)
    assert m, "azurerm must be pinned as \">= X.Y.Z, < N.0.0\""
    floor = "v{}.{}.{}".format(*m.group(1, 2, 3))
    assert TAGS[0] == floor, f"snapshot starts at {TAGS[0]}, versions.tf at {floor}: refresh azurerm_schema.json"
    assert len(TAGS) >= 2 and TAGS[-1] != floor
    assert int(TAGS[-1][1:].split(".")[0]) == int(m.group(4)) - 1


def test_snapshot_covers_every_azurerm_type_used(parsed_raw):
    for tag in TAGS:
        for fname, doc in parsed_raw.items():
            for block in doc.get("resource", []):
                for rtype in map(_unq, block):
                    if rtype.startswith("azurerm_"):
                        assert rtype in SNAPSHOT["tags"][tag]["resources"], (tag, rtype)


@pytest.mark.parametrize("tag", TAGS)
def test_every_argument_exists_in_the_provider(parsed_raw, tag):
    problems = check_module(parsed_raw, tag)
    assert not problems, "\n".join(problems)


# --- negative controls: the check catches the class of mistake ----------------

def _vmss_with(network_interface_body: str) -> dict:
    src = (TERRAFORM / "scale_set.tf").read_text()
    m = re.search(r'resource "azurerm_linux_virtual_machine_scale_set" "relay" \{', src)
    assert m
    return {"scale_set.tf": hcl2.loads(src.replace("  network_interface {\n", "  network_interface {\n" + network_interface_body, 1))}


@pytest.mark.parametrize("tag", TAGS)
def test_catches_the_renamed_scale_set_argument(tag):
    """Issue 18 #1: accelerated_networking_enabled exists on the standalone NIC
    only; inside a scale set's network_interface it is still enable_*."""
    problems = check_module(_vmss_with("    accelerated_networking_enabled = true\n"), tag)
    assert any("network_interface: no argument 'accelerated_networking_enabled'" in p for p in problems), problems


@pytest.mark.parametrize("tag", TAGS)
def test_catches_block_vs_argument_readonly_and_missing_required(tag):
    doc = hcl2.loads(
        'resource "azurerm_storage_container" "x" {\n'
        '  storage_account_id = "id"\n'
        '  url = "u"\n'
        '  metadata {\n    a = "b"\n  }\n'
        "}\n"
        'resource "azurerm_resource_group" "y" {\n  name = "n"\n  lcoation = "l"\n}\n'
    )
    problems = "\n".join(check_module({"t.tf": doc}, tag))
    assert "required 'name' missing" in problems
    assert "'metadata' is an argument, written as a block" in problems
    assert "no argument 'lcoation'" in problems and "required 'location' missing" in problems
    if "url" in SNAPSHOT["tags"][tag]["resources"]["azurerm_storage_container"]["args"]:
        assert "'url' is read-only" in problems


# --- the Go reader ----------------------------------------------------------

GO = '''package compute

import (
	"github.com/hashicorp/terraform-provider-azurerm/internal/features"
	"github.com/hashicorp/terraform-provider-azurerm/internal/tf/pluginsdk"
)

func resourceThing() *pluginsdk.Resource {
	r := &pluginsdk.Resource{
		Schema: map[string]*pluginsdk.Schema{
			"name": {
				Type:     pluginsdk.TypeString,
				Required: true,
				ValidateFunc: func(v interface{}, k string) ([]string, []error) {
					return nil, nil
				},
			},
			"nic": nicSchema(),
			"id_only": {Type: pluginsdk.TypeString, Computed: true},
		},
	}
	if !features.FivePointOh() {
		r.Schema["old_name"] = &pluginsdk.Schema{Type: pluginsdk.TypeString, Optional: true}
		r.Schema["name"].Required = false
	} else {
		r.Schema["only_in_five"] = &pluginsdk.Schema{Type: pluginsdk.TypeString, Optional: true}
	}
	if features.FivePointOh() {
		delete(r.Schema, "nic")
	}
	return r
}

func nicSchema() *pluginsdk.Schema {
	return &pluginsdk.Schema{
		Type:     pluginsdk.TypeList,
		Required: true,
		Elem: &pluginsdk.Resource{
			Schema: map[string]*pluginsdk.Schema{
				// TODO 4.0: change this from enable_* to *_enabled
				"enable_accelerated_networking": {
					Type:     pluginsdk.TypeBool,
					Optional: true,
				},
			},
		},
	}
}
'''


def test_go_reader_follows_helpers_and_feature_branches():
    src = Source({"internal/services/compute/thing.go": GO})
    node = Evaluator(src).resource_func(src.func("internal/services/compute", "resourceThing"))
    assert set(node["args"]) == {"name", "id_only", "old_name"}
    assert node["args"]["name"]["required"] is False
    assert node["args"]["id_only"]["computed_only"] is True
    assert set(node["blocks"]) == {"nic"} and node["blocks"]["nic"]["required"] is True
    assert set(node["blocks"]["nic"]["node"]["args"]) == {"enable_accelerated_networking"}


def test_go_reader_refuses_what_it_cannot_evaluate():
    body = "{\n\tif features.FivePointOh() && x {\n\t\ty = 1\n\t}\n}"
    with pytest.raises(SchemaError):
        active_in_4x(body, body.index("y ="))


# --- what forces replacement ----------------------------------------------------

FILE_FUNCS = ("file(", "filebase64(", "filemd5(", "filesha256(", "templatefile(")
LOCAL_STATE = ("local_file.", "local_sensitive_file.")


def _expand(module, value, depth=0) -> str:
    """Source text of an expression with local.X references inlined."""
    text = value.text if hasattr(value, "text") else str(value)
    if depth > 10:
        return text
    local_values = module.locals()
    for name in set(re.findall(r"\blocal\.(\w+)", text)):
        if name in local_values:
            text += " " + _expand(module, local_values[name], depth + 1)
    return text


def _force_new_args(module):
    """(resource, argument, expanded expression) for every top-level azurerm
    argument that is ForceNew in any snapshot version."""
    for r in module.resources():
        if not r.type.startswith("azurerm_"):
            continue
        for key, value in r.body.items():
            if any(SNAPSHOT["tags"][t]["resources"][r.type]["args"].get(key, {}).get("force_new") for t in TAGS):
                yield r, key, _expand(module, value)


def test_a_fresh_checkout_replaces_nothing(module):
    """Issue 18 #6: nothing ForceNew may depend on a file that only exists
    after an apply on this machine (local_file drops out of state when its
    file is missing, which makes everything derived from it unknown)."""
    for r, key, text in _force_new_args(module):
        assert not any(s in text for s in LOCAL_STATE), f"{r.address}.{key} depends on local state: {text[:200]}"
    from tfmodel import templatefile_calls

    for name, args in templatefile_calls(module).items():
        for key, value in args.items():
            assert not any(s in _expand(module, value) for s in LOCAL_STATE), (name, key)


def test_file_driven_replacements_are_documented(module):
    """Every resource that a ForceNew argument derived from a repository file
    (deploy/*, templates, binaries) can replace is named in docs/DEPLOY.md."""
    doc = (TERRAFORM.parent / "docs/DEPLOY.md").read_text()
    section = doc.split("## What replaces what", 1)
    assert len(section) == 2, "docs/DEPLOY.md has no 'What replaces what' section"
    found = set()
    for r, key, text in _force_new_args(module):
        if any(f in text for f in FILE_FUNCS):
            found.add(r.address)
            assert f"`{r.address}`" in section[1], f"{r.address} ({key}) missing from 'What replaces what'"
    assert "azurerm_linux_virtual_machine.relay" in found  # custom_data is ForceNew on a VM
    assert "azurerm_linux_virtual_machine_scale_set.relay" not in found  # updated in place
