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

  # deploy/build-release.sh writes stripped binaries here (debug info in
  # target/dist/*.debug, linked by .gnu_debuglink).
  relay_binary_path  = coalesce(var.relay_binary_path, "${path.module}/../target/dist/relay-server")
  client_binary_path = coalesce(var.client_binary_path, "${path.module}/../target/dist/relay-client")

  # With Entra ID (managed identity) the relay needs no key: just the endpoint.
  storage_url   = "https://${local.storage_account_name}.blob.core.windows.net"
  artifacts_url = "https://${local.artifacts_account_name}.blob.core.windows.net"

  # Containers of the artifacts account: the relays read relay-boot (binary,
  # TLS certificate and key, tokens, block-ID key), the benchmark VM reads
  # bench-boot (relay-client, its token, the certificate). Read-only roles.
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
