# Provider pins. azurerm 4.x is required: the resources below use 4.x argument
# names (accelerated_networking_enabled, storage_account_id on containers,
# https_traffic_only_enabled) and 4.x's mandatory subscription_id handling.
terraform {
  required_version = ">= 1.6.0"

  required_providers {
    azurerm = {
      source  = "hashicorp/azurerm"
      version = ">= 4.14.0, < 5.0.0"
    }
    tls = {
      source  = "hashicorp/tls"
      version = ">= 4.0.5, < 5.0.0"
    }
    random = {
      source  = "hashicorp/random"
      version = ">= 3.6.0, < 4.0.0"
    }
    # local: writes the relay certificate as DER so that Terraform can output
    # its SHA-256 fingerprint (local_file.content_sha256 hashes the decoded
    # bytes); no Terraform function hashes binary data.
    local = {
      source  = "hashicorp/local"
      version = ">= 2.5.1, < 3.0.0"
    }
    # time: waits for Azure RBAC to propagate before Terraform writes blobs
    # with Entra ID (shared keys are disabled).
    time = {
      source  = "hashicorp/time"
      version = ">= 0.12.0, < 1.0.0"
    }
  }
}

provider "azurerm" {
  features {}

  # null: taken from ARM_SUBSCRIPTION_ID or the Azure CLI's current account.
  subscription_id = var.subscription_id

  # Shared-key access is disabled on the account, so blob and container data
  # operations must use Entra ID.
  storage_use_azuread = true
}
