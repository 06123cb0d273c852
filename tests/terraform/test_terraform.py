"""Invariants of terraform/, checked on the parsed source (no providers)."""

import re

import pytest

from tfmodel import TERRAFORM, Expr, resolve_var

FORBIDDEN_SOURCES = {"*", "0.0.0.0/0", "internet", "any", "::/0"}


def test_every_tf_file_parses(module):
    names = {f.name for f in module.files}
    assert {"versions.tf", "variables.tf", "storage.tf", "network.tf", "compute.tf",
            "scale_set.tf", "bench.tf", "outputs.tf", "tls.tf", "main.tf"} <= names
    assert all(module.parsed[n] is not None for n in names)


# --- providers ---------------------------------------------------------------

def _lower_bound_major(constraint: str) -> int:
    m = re.search(r"(?:>=|~>|=)\s*(\d+)\.", constraint)
    assert m, f"no lower bound in {constraint!r}"
    return int(m.group(1))


def test_providers_are_pinned(module):
    rp = module.required_providers()
    assert set(rp) >= {"azurerm", "tls", "random"}
    for name, spec in rp.items():
        assert spec["source"] == f"hashicorp/{name}"
        version = spec.get("version", "")
        assert re.search(r">=|~>", version), f"{name}: no lower bound ({version!r})"
        # An upper bound (or ~>) keeps a new major version out.
        assert "<" in version or "~>" in version, f"{name}: no upper bound ({version!r})"


def test_azurerm_is_4x(module):
    version = module.required_providers()["azurerm"]["version"]
    assert _lower_bound_major(version) >= 4
    assert re.search(r"<\s*5\.", version) or version.strip().startswith("~> 4.")


def test_required_terraform_version(module):
    (_, tf), = list(module.blocks("terraform"))
    assert tf.get("required_version")


def test_provider_uses_entra_id_for_storage(module):
    (_, provider), = list(module.blocks("provider"))
    assert provider["azurerm"]["storage_use_azuread"] is True


# --- identity and RBAC -------------------------------------------------------

# Who holds what. Keys: (role, scope expression); values: the principals.
# Any other assignment, or another principal for one of these, fails: a new
# grant has to be added here on purpose.
RELAY = "local.relay_principal_id"
BENCH = "azurerm_linux_virtual_machine.bench[0].identity[0].principal_id"
DEPLOYERS = "each.value"
CONTRIBUTOR, READER = "Storage Blob Data Contributor", "Storage Blob Data Reader"
# A download container by its ID: Terraform neither creates nor deletes it.
DOWNLOAD_SCOPE = "${azurerm_storage_account.this.id}/blobServices/default/containers/${each.key}"
EXPECTED_GRANTS = {
    (CONTRIBUTOR, "azurerm_storage_container.uploads.id"): {RELAY, BENCH},
    (READER, "azurerm_storage_container.uploads.id"): {DEPLOYERS},
    (READER, DOWNLOAD_SCOPE): {RELAY},
    (READER, "azurerm_storage_container.relay_boot.id"): {RELAY},
    (READER, "azurerm_storage_container.bench_boot.id"): {BENCH},
    (CONTRIBUTOR, "azurerm_storage_account.artifacts.id"): {DEPLOYERS},
}


def _grants(module):
    out = {}
    for ra in module.resources("azurerm_role_assignment"):
        assert "role_definition_id" not in ra.body, ra.address
        scope = ra.body["scope"]
        key = (ra.body["role_definition_name"], getattr(scope, "text", scope))
        out.setdefault(key, set()).add(ra.body["principal_id"].text)
    return out


def test_role_assignments_are_exactly_the_least_privilege_set(module):
    assert _grants(module) == EXPECTED_GRANTS


def test_no_vm_can_write_what_vms_boot_from(module):
    """Issue 18 #2: the fleet's code must not be writable by the fleet. The
    VMs' identities hold no role on the artifacts account, only Reader on
    their own boot container; the relays' write role is the upload
    container, in another account."""
    for (role, scope), principals in _grants(module).items():
        vm_principals = principals & {RELAY, BENCH}
        if not vm_principals:
            continue
        if scope == DOWNLOAD_SCOPE:
            # Read-only, on a container of the upload account (by its ID).
            assert role == READER and scope.startswith("${azurerm_storage_account.this.id}/"), (role, scope)
            continue
        assert scope.startswith("azurerm_storage_container."), (role, scope)
        assert "storage_account" not in scope
        container = module.resource("azurerm_storage_container", scope.split(".")[1].split("[")[0])
        account = container.body["storage_account_id"].text
        if role != READER:
            assert account == "azurerm_storage_account.this.id", (role, scope)
        if account == "azurerm_storage_account.artifacts.id":
            assert role == READER, (role, scope)
    # The relays' storage URL is the upload account; the boot artifacts are
    # fetched from the other one.
    assert module.locals()["storage_url"].startswith("https://${local.storage_account_name}.")
    assert module.locals()["artifacts_url"].startswith("https://${local.artifacts_account_name}.")


def test_every_boot_blob_is_in_a_boot_container(module):
    for blob in module.resources("azurerm_storage_blob"):
        assert blob.body["storage_container_id"].text in (
            "azurerm_storage_container.relay_boot.id", "azurerm_storage_container.bench_boot.id"), blob.address
        assert "storage_account_name" not in blob.body and "storage_container_name" not in blob.body


def test_relays_read_only_the_declared_download_containers(module):
    """Issue 50 item 6: the relays' identity reads (Storage Blob Data Reader,
    never more) exactly the containers declared downloadable, each a container
    of the upload account; nothing is downloadable by default."""
    (ra,) = [r for r in module.resources("azurerm_role_assignment") if r.address.endswith(".relay_downloads")]
    assert ra.body["role_definition_name"] == READER
    assert ra.body["principal_id"] == Expr(RELAY)
    assert ra.body["for_each"] == Expr(
        "toset([for c in var.download_containers : c if c != var.container_name])")
    # Scoped by ID to a container of the upload account, never one Terraform
    # manages: listing or unlisting a name must not create or delete data.
    assert getattr(ra.body["scope"], "text", ra.body["scope"]) == DOWNLOAD_SCOPE
    assert not [c for c in module.resources("azurerm_storage_container") if c.name == "downloads"]
    assert module.default("download_containers") == []
    # Nothing else reads on the relays' behalf: their only other roles are
    # the upload container's and their boot container's.
    relay_scopes = {scope for (_, scope), ps in _grants(module).items() if RELAY in ps}
    assert relay_scopes == {
        "azurerm_storage_container.uploads.id",
        "azurerm_storage_container.relay_boot.id",
        DOWNLOAD_SCOPE,
    }


def test_relay_principal_covers_both_shapes(module):
    expr = module.locals()["relay_principal_id"].text
    assert "azurerm_linux_virtual_machine.relay[0].identity[0].principal_id" in expr
    assert "azurerm_linux_virtual_machine_scale_set.relay[0].identity[0].principal_id" in expr
    assert "local.scale_set" in expr


def test_deployers_are_explicit(module):
    """Issue 18 #3: no grant to whoever ran apply last."""
    assert "data.azurerm_client_config.current.object_id" not in {
        p for ps in _grants(module).values() for p in ps}
    for ra in module.resources("azurerm_role_assignment"):
        if ra.body["principal_id"] == Expr("each.value"):
            assert ra.body["for_each"] == Expr("toset(var.deployer_principal_ids)"), ra.address
    assert "default" not in module.variables()["deployer_principal_ids"]


def test_rbac_wait_is_tied_to_the_assignments(module):
    (sleep,) = module.resources("time_sleep")
    assert "azurerm_role_assignment.deployer_artifacts" in sleep.body["triggers"]["assignments"].text
    assert sleep.body["create_duration"] == Expr("var.rbac_propagation_wait")
    assert module.default("rbac_propagation_wait") in ("10m", "600s")
    # Every blob waits for it.
    for blob in module.resources("azurerm_storage_blob"):
        assert Expr("time_sleep.deployer_rbac") in blob.body["depends_on"], blob.address


@pytest.mark.parametrize("rtype", ["azurerm_linux_virtual_machine", "azurerm_linux_virtual_machine_scale_set"])
def test_system_assigned_identity(module, rtype):
    vms = module.resources(rtype)
    assert vms
    for vm in vms:
        (identity,) = vm.body["identity"]
        assert identity["type"] == "SystemAssigned", vm.address


@pytest.mark.parametrize("rtype", ["azurerm_linux_virtual_machine", "azurerm_linux_virtual_machine_scale_set"])
def test_ssh_keys_only(module, rtype):
    for vm in module.resources(rtype):
        assert vm.body["disable_password_authentication"] is True, vm.address
        assert "admin_password" not in vm.body, vm.address


# --- network -----------------------------------------------------------------

def _nsg_rules(module):
    rules = [(r.address, r.body) for r in module.resources("azurerm_network_security_rule")]
    for nsg in module.resources("azurerm_network_security_group"):
        for i, rule in enumerate(nsg.body.get("security_rule", [])):
            rules.append((f"{nsg.address}.security_rule[{i}]", rule))
    return rules


def _sources(rule):
    out = []
    if "source_address_prefix" in rule:
        out.append(rule["source_address_prefix"])
    if "source_address_prefixes" in rule:
        v = rule["source_address_prefixes"]
        out.extend(v if isinstance(v, list) else [v])
    return out


def _ports(module, rule):
    ports = []
    if "destination_port_range" in rule:
        ports.append(str(resolve_var(module, rule["destination_port_range"])))
    for p in rule.get("destination_port_ranges", []):
        ports.append(str(resolve_var(module, p)))
    return ports


def test_no_inbound_allow_from_anywhere(module):
    for address, rule in _nsg_rules(module):
        if rule["direction"] == "Inbound" and rule["access"] == "Allow":
            for src in _sources(rule):
                assert not (isinstance(src, str) and src.lower() in FORBIDDEN_SOURCES), address


def test_relay_udp_only_from_allowed_client_cidrs(module):
    relay_port = module.default("relay_port")
    assert relay_port == 4433
    seen = 0
    for address, rule in _nsg_rules(module):
        if rule["direction"] != "Inbound" or rule["access"] != "Allow":
            continue
        if str(relay_port) in _ports(module, rule) or rule["protocol"] in ("Udp", "*"):
            assert rule["protocol"] == "Udp", f"{address}: relay port must be UDP only"
            assert _ports(module, rule) == [str(relay_port)], address
            src = _sources(rule)
            if address.endswith("relay_udp_bench"):
                # The optional benchmark VM: its own public IP, nothing wider.
                assert src == [Expr("azurerm_public_ip.bench[0].ip_address")], address
            else:
                assert src == [Expr("var.allowed_client_cidrs")], address
                seen += 1
    assert seen == 1


def test_ssh_only_from_admin_cidrs(module):
    seen = 0
    for address, rule in _nsg_rules(module):
        if rule["direction"] != "Inbound" or rule["access"] != "Allow":
            continue
        if "22" in _ports(module, rule) or rule["protocol"] in ("Tcp", "*"):
            assert rule["protocol"] == "Tcp", address
            assert _ports(module, rule) == ["22"], address
            assert _sources(rule) == [Expr("var.admin_cidrs")], address
            seen += 1
    assert seen >= 1


def test_every_inbound_allow_is_accounted_for(module):
    names = sorted(a for a, r in _nsg_rules(module) if r["direction"] == "Inbound" and r["access"] == "Allow")
    assert names == sorted([
        "azurerm_network_security_rule.relay_udp",
        "azurerm_network_security_rule.relay_udp_bench",
        "azurerm_network_security_rule.ssh",
        "azurerm_network_security_rule.bench_ssh",
    ])


@pytest.mark.parametrize("var", ["allowed_client_cidrs", "admin_cidrs"])
def test_cidr_variables_have_no_open_default_and_are_validated(module, var):
    spec = module.variables()[var]
    assert "default" not in spec or not (set(map(str.lower, spec["default"])) & FORBIDDEN_SOURCES)
    assert "0.0.0.0/0" in spec["validation"][0]["condition"].text


def test_subnet_has_storage_service_endpoint_and_nsg(module):
    subnet = module.resource("azurerm_subnet", "relay")
    assert "Microsoft.Storage" in subnet.body["service_endpoints"]
    assoc = module.resource("azurerm_subnet_network_security_group_association", "relay")
    assert assoc.body["subnet_id"] == Expr("azurerm_subnet.relay.id")


def test_accelerated_networking_on_nics(module):
    nics = module.resources("azurerm_network_interface")
    assert nics
    for nic in nics:
        assert nic.body.get("accelerated_networking_enabled") is True, nic.address


def test_accelerated_networking_on_scale_set(module):
    (vmss,) = module.resources("azurerm_linux_virtual_machine_scale_set")
    for ni in vmss.body["network_interface"]:
        # The scale set's network_interface kept the 3.x name in every 4.x
        # release (test_schema.py checks every name against the provider).
        assert ni.get("enable_accelerated_networking") is True


def test_default_vm_size_is_a_fast_accelerated_networking_size(module):
    # Dv5/Ddv5/Dsv5/Ddsv5 and Ev5 families all support accelerated networking;
    # 16 vCPUs and up get 12.5 Gbit/s or more.
    size = module.default("vm_size")
    m = re.fullmatch(r"Standard_[DE](\d+)[a-z]*_v[56]", size)
    assert m and int(m.group(1)) >= 16, size


# --- load balancer -----------------------------------------------------------

def test_lb_probe_is_http_healthz_on_health_port(module):
    (probe,) = module.resources("azurerm_lb_probe")
    assert probe.body["protocol"] == "Http"
    assert probe.body["request_path"] == "/healthz"
    assert probe.body["port"] == Expr("var.health_port")
    assert module.default("health_port") == 9090


def test_lb_rule_is_udp_on_relay_port(module):
    (rule,) = module.resources("azurerm_lb_rule")
    assert rule.body["protocol"] == "Udp"
    assert resolve_var(module, rule.body["frontend_port"]) == 4433
    assert resolve_var(module, rule.body["backend_port"]) == 4433
    assert rule.body["probe_id"] == Expr("azurerm_lb_probe.relay_health[0].id")


def test_lb_is_standard_and_only_for_scale_out(module):
    (lb,) = module.resources("azurerm_lb")
    assert lb.body["sku"] == "Standard"
    assert lb.body["count"] == Expr("local.scale_set ? 1 : 0")
    assert module.locals()["scale_set"] == Expr("var.relay_count > 1")
    assert module.resource("azurerm_linux_virtual_machine", "relay").body["count"] == Expr("local.scale_set ? 0 : 1")
    vmss = module.resource("azurerm_linux_virtual_machine_scale_set", "relay")
    assert vmss.body["instances"] == Expr("var.relay_count")


# --- storage -----------------------------------------------------------------

def test_storage_account_defaults(module):
    sa = module.resource("azurerm_storage_account", "this").body
    assert resolve_var(module, sa["shared_access_key_enabled"]) is False
    assert module.default("storage_account_kind") == "StorageV2"
    assert sa["https_traffic_only_enabled"] is True
    assert sa["min_tls_version"] == "TLS1_2"
    assert sa["allow_nested_items_to_be_public"] is False
    (rules,) = sa["network_rules"]
    assert rules["default_action"] == "Deny"
    assert "azurerm_subnet.relay.id" in rules["virtual_network_subnet_ids"].text


@pytest.mark.parametrize("name", ["this", "artifacts"])
def test_storage_firewalls_use_the_validated_ip_rules(module, name):
    """Issue 18 #4: not admin_cidrs (SSH, may be private or IPv6)."""
    sa = module.resource("azurerm_storage_account", name).body
    assert resolve_var(module, sa.get("shared_access_key_enabled", False)) is False
    (rules,) = sa["network_rules"]
    assert rules["default_action"] == "Deny"
    assert rules["ip_rules"] == Expr("concat(local.storage_ip_rules, local.bench_storage_ip_rules)")
    assert rules["virtual_network_subnet_ids"] == Expr("concat([azurerm_subnet.relay.id], var.storage_subnet_ids)")
    assert "admin_cidrs" not in str(rules)


def test_artifacts_firewall_needs_a_way_in_for_terraform(module):
    sa = module.resource("azurerm_storage_account", "artifacts").body
    (pre,) = sa["lifecycle"][0]["precondition"]
    assert pre["condition"] == Expr("length(var.storage_ip_rules) + length(var.storage_subnet_ids) > 0")


def test_provider_skips_unused_storage_data_plane(module):
    (_, provider), = list(module.blocks("provider"))
    (features,) = provider["azurerm"]["features"]
    (storage,) = features["storage"]
    assert storage["data_plane_available"] is False
    # ... which is only safe while no account uses queue or static website.
    for sa in module.resources("azurerm_storage_account"):
        assert "queue_properties" not in sa.body and "static_website" not in sa.body


def test_premium_block_blob_option(module):
    sa = module.resource("azurerm_storage_account", "this").body
    assert "BlockBlobStorage" in sa["account_tier"].text and "Premium" in sa["account_tier"].text
    assert "BlockBlobStorage" in module.variables()["storage_account_kind"]["validation"][0]["condition"].text


def test_containers_are_private(module):
    containers = module.resources("azurerm_storage_container")
    assert {c.name for c in containers} == {"uploads", "relay_boot", "bench_boot"}
    for c in containers:
        assert c.body["container_access_type"] == "private", c.address


def test_no_account_key_anywhere(module):
    text = module.source_text() + "".join(p.read_text() for p in (TERRAFORM / "templates").iterdir())
    for needle in ("primary_access_key", "secondary_access_key", "connection_string",
                   "RELAY_ACCOUNT_KEY", "--account-key", "AccountKey="):
        assert needle not in text, needle


def test_boot_artifacts_are_the_packages_with_their_sha256(module):
    """Issue 51: the VMs install scripts/package's .deb packages, under fixed
    blob names, each with a SHA256SUMS blob that Terraform computes from the
    very file it uploads (the boot fetch refuses a package that differs)."""
    for name, container, pkg, local in (("relay_package", "relay_boot", "relay-server", "relay_package_path"),
                                        ("client_package", "bench_boot", "relay-client", "client_package_path")):
        blob = module.resource("azurerm_storage_blob", name).body
        assert blob["name"] == f"{pkg}.deb"
        assert blob["storage_container_id"] == Expr(f"azurerm_storage_container.{container}.id")
        assert blob["source"] == Expr(f"local.{local}")
        assert "scripts/package" in blob["lifecycle"][0]["precondition"][0]["error_message"]
        sums = module.resource("azurerm_storage_blob", f"{name}_sums").body
        assert sums["name"] == "SHA256SUMS"
        assert sums["storage_container_id"] == blob["storage_container_id"]
        assert sums["source_content"] == f'${{try(filesha256(local.{local}), "")}}  {pkg}.deb\\n'
    loc = {k: str(getattr(v, "text", v)) for k, v in module.locals().items()}
    assert loc["package_dir"].endswith("${path.module}/../target/package")
    assert '"relay-server_*_amd64.deb"' in loc["relay_package_name"]
    assert "var.relay_package_path" in loc["relay_package_path"]
    assert "var.client_package_path" in loc["client_package_path"]


def test_block_id_key_is_generated_once_and_shipped_to_relays_only(module):
    (key,) = module.resources("random_bytes")
    assert key.body["length"] == 32
    assert key.body["keepers"]["generation"] == Expr("var.relay_id_key_generation")
    blob = module.resource("azurerm_storage_blob", "relay_id_key").body
    assert blob["storage_container_id"] == Expr("azurerm_storage_container.relay_boot.id")
    assert blob["source_content"] == r"${random_bytes.relay_id_key.hex}\n"  # HCL escape as written
    # Only the relays (and the deployers, who write it) can read relay-boot.
    readers = _grants(module)[(READER, "azurerm_storage_container.relay_boot.id")]
    assert readers == {RELAY}


def test_secrets_stay_out_of_custom_data(module):
    """Key and token travel as private blobs fetched with the managed identity,
    not in custom_data (which any root process on the VM can read back)."""
    from tfmodel import templatefile_calls

    for name, args in templatefile_calls(module).items():
        for key, value in args.items():
            assert "random_password" not in value and "tls_private_key" not in value, (name, key)


# --- outputs -----------------------------------------------------------------

def test_outputs(module):
    outs = module.outputs()
    assert {"relay_address", "relay_cert_sha256", "client_token", "client_command", "client_profile"} <= set(outs)
    assert not outs["client_profile"].get("sensitive")  # it holds no token (test_terraform_eval.py)
    assert outs["client_token"]["sensitive"] is True
    assert outs["relay_cert_sha256"]["value"] == Expr("terraform_data.relay_cert_sha256.output")
    cmd = outs["client_command"]["value"]
    assert "relay-client upload" in cmd
    for flag in ("--relay ", "--to ", "--relay-cert-sha256 "):
        assert flag in cmd
    # The token is fetched from the sensitive output when the command runs.
    assert "random_password" not in cmd and "output -raw client_token" in cmd


def test_cert_der_is_the_pem_body(module, tmp_path):
    """The DER that local_file hashes is the base64 body of the PEM: the
    regex in tls.tf, applied to a real certificate, gives the same SHA-256
    as `openssl x509 -outform DER | sha256sum`."""
    import base64
    import hashlib
    import shutil
    import subprocess

    if not shutil.which("openssl"):
        pytest.skip("openssl not installed")
    expr = module.locals()["relay_cert_der_base64"].text
    m = re.fullmatch(r'replace\(tls_self_signed_cert\.relay\.cert_pem, "/(.+)/", ""\)', expr)
    assert m, expr
    pattern = m.group(1).replace("\\\\", "\\")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", str(tmp_path / "k.pem"), "-out", str(tmp_path / "c.pem"), "-days", "1", "-subj", "/CN=t"],
        check=True, capture_output=True,
    )
    pem = (tmp_path / "c.pem").read_text()
    der = subprocess.run(["openssl", "x509", "-in", str(tmp_path / "c.pem"), "-outform", "DER"],
                         check=True, capture_output=True).stdout
    body = re.sub(pattern, "", pem)
    assert hashlib.sha256(base64.b64decode(body, validate=True)).hexdigest() == hashlib.sha256(der).hexdigest()


def test_checkov_skips_are_justified():
    for f in TERRAFORM.glob("*.tf"):
        for line in f.read_text().splitlines():
            if "checkov:skip" in line:
                assert re.search(r"#checkov:skip=CKV2?_[A-Z]+_\d+:\S.{20,}", line), f"{f.name}: {line.strip()}"
