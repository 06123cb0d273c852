# Shared names and the resource group. One relay deployment per root module.

resource "random_string" "suffix" {
  length  = 6
  lower   = true
  upper   = false
  numeric = true
  special = false
}

locals {
  prefix = "${var.name}-${random_string.suffix.result}"

  # Storage account names: 3-24 lowercase letters and digits, globally unique.
  # Uploads go to one account; what the VMs boot from lives in another, which
  # no VM and no upload can write.
  storage_account_name   = "${var.name}${random_string.suffix.result}"
  artifacts_account_name = "${var.name}boot${random_string.suffix.result}"

  scale_set = var.relay_count > 1

  # scripts/package writes the .deb packages here, one version at a time (it
  # empties the directory first). The VM sizes are x86-64: amd64 packages.
  package_dir         = "${path.module}/../target/package"
  relay_package_name  = coalesce(one(fileset(local.package_dir, "relay-server_*_amd64.deb")), "relay-server_VERSION_amd64.deb")
  client_package_name = coalesce(one(fileset(local.package_dir, "relay-client_*_amd64.deb")), "relay-client_VERSION_amd64.deb")
  relay_package_path  = coalesce(var.relay_package_path, "${local.package_dir}/${local.relay_package_name}")
  client_package_path = coalesce(var.client_package_path, "${local.package_dir}/${local.client_package_name}")

  # With Entra ID (managed identity) the relay needs no key: just the endpoint.
  storage_url   = "https://${local.storage_account_name}.blob.core.windows.net"
  artifacts_url = "https://${local.artifacts_account_name}.blob.core.windows.net"

  # Containers of the artifacts account: the relays read relay-boot (the
  # relay-server package and its SHA256SUMS, TLS certificate and key, tokens,
  # block-ID key), the benchmark VM reads bench-boot (the relay-client
  # package and its SHA256SUMS, its token, the certificate). Read-only roles.
  relay_boot_container = "relay-boot"
  bench_boot_container = "bench-boot"

  # Storage firewall IP rules: bare addresses for single hosts (no /32), and
  # a /31 as its two addresses (the firewall refuses /31 and /32 prefixes).
  storage_ip_rules = distinct(flatten([
    for c in var.storage_ip_rules :
    endswith(c, "/32") ? [trimsuffix(c, "/32")] :
    endswith(c, "/31") ? [cidrhost(c, 0), cidrhost(c, 1)] : [c]
  ]))

  # Region names as Azure compares them ("West Europe" == "westeurope").
  location_key       = lower(replace(var.location, " ", ""))
  bench_location_key = var.bench_source_region == null ? null : lower(replace(var.bench_source_region, " ", ""))
}

resource "azurerm_resource_group" "this" {
  name     = "rg-${local.prefix}"
  location = var.location
  tags     = var.tags
}

data "azurerm_client_config" "current" {}

# A warning, not an error: the identity running plan may hold the role
# through a group listed in deployer_principal_ids.
check "deployer_is_listed" {
  assert {
    condition     = contains(var.deployer_principal_ids, data.azurerm_client_config.current.object_id)
    error_message = "The identity running Terraform (object ID ${data.azurerm_client_config.current.object_id}) is not in deployer_principal_ids. Unless it is a member of a group listed there, blob reads and writes of the boot artifacts will fail with 403."
  }
}
