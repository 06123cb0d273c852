# The storage account the relays write uploads to, and its one container.
# Nothing else lives here: the boot artifacts are in their own account
# (artifacts.tf), so neither a relay nor an upload can reach them.

locals {
  bench_storage_ip_rules = local.bench_enabled ? [azurerm_public_ip.bench[0].ip_address] : []
}

resource "azurerm_storage_account" "this" {
  #checkov:skip=CKV_AZURE_59:Public endpoint stays on but default_action is Deny: only the relay subnet (service endpoint), storage_ip_rules, storage_subnet_ids and the benchmark VM get through; a private endpoint would also need private DNS for no gain here.
  #checkov:skip=CKV2_AZURE_33:Service endpoint instead of a private endpoint (see CKV_AZURE_59); the relay reaches storage over the Azure backbone either way.
  #checkov:skip=CKV2_AZURE_1:Microsoft-managed keys; customer-managed keys need a Key Vault this deployment does not otherwise have.
  #checkov:skip=CKV_AZURE_206:Default ZRS survives a zone loss and is the most a premium BlockBlobStorage account offers; the sources stay at the site until a verified Receipt. Set storage_replication_type = "GZRS" (StorageV2) for geo-redundancy.
  #checkov:skip=CKV_AZURE_33:Queue logging does not apply: the relay uses blobs only, and BlockBlobStorage accounts have no queue service.
  name                     = local.storage_account_name
  resource_group_name      = azurerm_resource_group.this.name
  location                 = azurerm_resource_group.this.location
  account_kind             = var.storage_account_kind
  account_tier             = var.storage_account_kind == "BlockBlobStorage" ? "Premium" : "Standard"
  account_replication_type = var.storage_replication_type

  # The relay authenticates with Entra ID (managed identity): no account key.
  shared_access_key_enabled       = var.shared_access_key_enabled
  default_to_oauth_authentication = true

  https_traffic_only_enabled      = true
  min_tls_version                 = "TLS1_2"
  allow_nested_items_to_be_public = false
  public_network_access_enabled   = true

  network_rules {
    default_action             = "Deny"
    bypass                     = ["AzureServices"]
    virtual_network_subnet_ids = concat([azurerm_subnet.relay.id], var.storage_subnet_ids)
    ip_rules                   = concat(local.storage_ip_rules, local.bench_storage_ip_rules)
  }

  blob_properties {
    delete_retention_policy {
      days = var.blob_soft_delete_days
    }
    container_delete_retention_policy {
      days = var.blob_soft_delete_days
    }
  }

  sas_policy {
    expiration_period = "01.00:00:00"
    expiration_action = "Log"
  }

  tags = var.tags

  lifecycle {
    precondition {
      condition     = var.storage_account_kind != "BlockBlobStorage" || contains(["LRS", "ZRS"], var.storage_replication_type)
      error_message = "Premium BlockBlobStorage accounts support only LRS and ZRS replication."
    }
  }
}

# Created through Azure Resource Manager (storage_account_id): no data-plane
# access needed, and its `id` is the ARM ID that role assignments scope to.
resource "azurerm_storage_container" "uploads" {
  #checkov:skip=CKV2_AZURE_21:Blob read logging needs a Log Analytics workspace or a second account; add a diagnostic setting where audit logs are required.
  name                  = var.container_name
  storage_account_id    = azurerm_storage_account.this.id
  container_access_type = "private"
}

# The relays write uploads, and delete in it for a token granted `:d`
# (relay-client sync --delete; the role includes blobs/delete, and deleted
# blobs are kept blob_soft_delete_days by delete_retention_policy above);
# that is all they can do on this account.
resource "azurerm_role_assignment" "relay_uploads" {
  scope                = azurerm_storage_container.uploads.id
  role_definition_name = "Storage Blob Data Contributor"
  principal_id         = local.relay_principal_id
  principal_type       = "ServicePrincipal"
}

# Containers downloads may read (relay-client download, through the relays):
# the relays read them and nothing else of them (least privilege: reading is
# granted per container, only where a download is meant to happen). The
# containers are not Terraform's: they hold results other jobs wrote, so
# listing or unlisting one never creates or deletes it; each must exist
# before apply (the role assignment's scope is the container's ID).
resource "azurerm_role_assignment" "relay_downloads" {
  for_each             = toset([for c in var.download_containers : c if c != var.container_name])
  scope                = "${azurerm_storage_account.this.id}/blobServices/default/containers/${each.key}"
  role_definition_name = "Storage Blob Data Reader"
  principal_id         = local.relay_principal_id
  principal_type       = "ServicePrincipal"
}

# Operators read what was uploaded (docs/DEPLOY.md, Verify).
resource "azurerm_role_assignment" "deployer_uploads_read" {
  for_each = toset(var.deployer_principal_ids)

  scope                = azurerm_storage_container.uploads.id
  role_definition_name = "Storage Blob Data Reader"
  principal_id         = each.value
}
