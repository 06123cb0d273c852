# Provider pins. azurerm >= 4.77.0: blobs name their container by
# storage_container_id (4.77; storage_account_name / storage_container_name
# are deprecated there), and the subscription falls back to the Azure CLI's
# current account (4.35). Every azurerm argument below is checked against
# the provider's schema at both ends of this range by
# tests/terraform/test_schema.py (snapshot: tests/terraform/azurerm_schema.json).
terraform {
  required_version = ">= 1.6.0"

  required_providers {
    azurerm = {
      source  = "hashicorp/azurerm"
      version = ">= 4.77.0, < 5.0.0"
    }
    tls = {
      source  = "hashicorp/tls"
      version = ">= 4.0.5, < 5.0.0"
    }
    # random_bytes (the relays' block-ID key) needs 3.6.0.
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
    # azuread: the relay's app registration for Entra ID sign-in (entra.tf;
    # nothing is created while every entra_*_containers is empty). 3.x names
    # applications by client_id.
    azuread = {
      source  = "hashicorp/azuread"
      version = ">= 3.0.0, < 4.0.0"
    }
  }
}

provider "azurerm" {
  features {
    storage {
      # The storage accounts are managed through Azure Resource Manager
      # only: no polling of the queue and static-website data-plane
      # endpoints (unused here) on create, and no data-plane reads of them on
      # every refresh (which needed a blob role and a way through the
      # firewall for anyone running plan).
      data_plane_available = false
    }
  }

  # null: ARM_SUBSCRIPTION_ID, else the Azure CLI's current account.
  subscription_id = var.subscription_id

  # Shared-key access is disabled on the accounts, so the blob data
  # operations (the boot artifacts) use Entra ID.
  storage_use_azuread = true
}
