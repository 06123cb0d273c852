# The storage account the relay writes to, the upload container, and a private
# container of boot artifacts that the VMs fetch with their managed identity.

locals {
  # Storage firewall IP rules take bare addresses for single hosts (no /32)
  # and do not accept /31.
  admin_storage_ip_rules = [for c in var.admin_cidrs : endswith(c, "/32") ? trimsuffix(c, "/32") : c]

  bench_storage_ip_rules = local.bench_enabled ? [azurerm_public_ip.bench[0].ip_address] : []
}

resource "azurerm_storage_account" "this" {
  #checkov:skip=CKV_AZURE_59:Public endpoint stays on but default_action is Deny: only the relay subnet (service endpoint), admin_cidrs and the benchmark VM get through; a private endpoint would also need private DNS for no gain here.
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
    virtual_network_subnet_ids = [azurerm_subnet.relay.id]
    ip_rules                   = concat(local.admin_storage_ip_rules, local.bench_storage_ip_rules)
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

resource "azurerm_storage_container" "uploads" {
  #checkov:skip=CKV2_AZURE_21:Blob read logging needs a Log Analytics workspace or a second account; add a diagnostic setting where audit logs are required.
  name                  = var.container_name
  storage_account_id    = azurerm_storage_account.this.id
  container_access_type = "private"
}

resource "azurerm_storage_container" "artifacts" {
  #checkov:skip=CKV2_AZURE_21:See the uploads container.
  name                  = local.artifacts_container
  storage_account_id    = azurerm_storage_account.this.id
  container_access_type = "private"
}

# Whoever runs terraform apply writes the artifacts with Entra ID, so they
# need the data-plane role too (owning the subscription is not enough).
resource "azurerm_role_assignment" "deployer_blob" {
  scope                = azurerm_storage_account.this.id
  role_definition_name = "Storage Blob Data Contributor"
  principal_id         = data.azurerm_client_config.current.object_id
}

# Role assignments take a minute or two to reach the storage front ends.
resource "time_sleep" "deployer_rbac" {
  depends_on      = [azurerm_role_assignment.deployer_blob]
  create_duration = "90s"
}

resource "azurerm_storage_blob" "relay_server" {
  name                   = "relay-server"
  storage_account_name   = azurerm_storage_account.this.name
  storage_container_name = azurerm_storage_container.artifacts.name
  type                   = "Block"
  source                 = local.relay_binary_path
  content_md5            = try(filemd5(local.relay_binary_path), null)

  lifecycle {
    precondition {
      condition     = fileexists(local.relay_binary_path)
      error_message = "relay-server binary not found: run `cargo build --release -p relay-server` first, or set relay_binary_path."
    }
  }

  depends_on = [time_sleep.deployer_rbac]
}

resource "azurerm_storage_blob" "relay_cert" {
  name                   = "relay-cert.pem"
  storage_account_name   = azurerm_storage_account.this.name
  storage_container_name = azurerm_storage_container.artifacts.name
  type                   = "Block"
  source_content         = tls_self_signed_cert.relay.cert_pem
  content_type           = "application/x-pem-file"

  depends_on = [time_sleep.deployer_rbac]
}

resource "azurerm_storage_blob" "relay_key" {
  name                   = "relay-key.pem"
  storage_account_name   = azurerm_storage_account.this.name
  storage_container_name = azurerm_storage_container.artifacts.name
  type                   = "Block"
  source_content         = tls_private_key.relay.private_key_pem
  content_type           = "application/x-pem-file"

  depends_on = [time_sleep.deployer_rbac]
}

resource "azurerm_storage_blob" "relay_tokens" {
  name                   = "tokens"
  storage_account_name   = azurerm_storage_account.this.name
  storage_container_name = azurerm_storage_container.artifacts.name
  type                   = "Block"
  source_content         = "${random_password.client_token.result} ${var.container_name}\n"
  content_type           = "text/plain"

  depends_on = [time_sleep.deployer_rbac]
}

resource "azurerm_storage_blob" "relay_client" {
  count = local.bench_enabled ? 1 : 0

  name                   = "relay-client"
  storage_account_name   = azurerm_storage_account.this.name
  storage_container_name = azurerm_storage_container.artifacts.name
  type                   = "Block"
  source                 = local.client_binary_path
  content_md5            = try(filemd5(local.client_binary_path), null)

  lifecycle {
    precondition {
      condition     = fileexists(local.client_binary_path)
      error_message = "relay-client binary not found: run `cargo build --release -p relay-client` first, or set client_binary_path."
    }
  }

  depends_on = [time_sleep.deployer_rbac]
}
