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
  storage_account_name = "${var.name}${random_string.suffix.result}"

  scale_set = var.relay_count > 1

  relay_binary_path  = coalesce(var.relay_binary_path, "${path.module}/../target/release/relay-server")
  client_binary_path = coalesce(var.client_binary_path, "${path.module}/../target/release/relay-client")

  # With Entra ID (managed identity) the relay needs no key: just the endpoint.
  storage_url = "https://${local.storage_account_name}.blob.core.windows.net"

  # Private container holding what the VMs fetch at boot (binaries, cert, key, tokens).
  artifacts_container = "relay-artifacts"
}

resource "azurerm_resource_group" "this" {
  name     = "rg-${local.prefix}"
  location = var.location
  tags     = var.tags
}

data "azurerm_client_config" "current" {}
