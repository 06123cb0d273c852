# What the VMs boot from: a separate storage account that only the deployers
# can write. The relays read relay-boot, the benchmark VM reads bench-boot,
# both with Storage Blob Data Reader on that one container. A relay (or
# whoever takes one over) therefore cannot change the package that every new
# or reimaged relay installs, and no upload can land here: the relays' storage
# URL is the other account, where they may write only the upload container.

resource "azurerm_storage_account" "artifacts" {
  #checkov:skip=CKV_AZURE_59:Public endpoint stays on but default_action is Deny: only the relay subnet (service endpoint), storage_ip_rules, storage_subnet_ids and the benchmark VM get through.
  #checkov:skip=CKV2_AZURE_33:Service endpoint instead of a private endpoint, as for the upload account.
  #checkov:skip=CKV2_AZURE_1:Microsoft-managed keys; customer-managed keys need a Key Vault this deployment does not otherwise have.
  #checkov:skip=CKV_AZURE_206:A few small blobs that terraform apply rewrites from the local build and state; ZRS survives a zone loss.
  #checkov:skip=CKV_AZURE_33:No queues: blobs only.
  name                     = local.artifacts_account_name
  resource_group_name      = azurerm_resource_group.this.name
  location                 = azurerm_resource_group.this.location
  account_kind             = "StorageV2"
  account_tier             = "Standard"
  account_replication_type = "ZRS"

  shared_access_key_enabled       = false
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
    versioning_enabled = true
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
    # Terraform itself writes and reads the artifacts through this firewall.
    precondition {
      condition     = length(var.storage_ip_rules) + length(var.storage_subnet_ids) > 0
      error_message = "Set storage_ip_rules (the public IPv4 address Terraform runs from, outside the deployment's region) or storage_subnet_ids (its subnet, inside the region): otherwise the storage firewall blocks Terraform's own uploads of the boot artifacts."
    }
  }
}

resource "azurerm_storage_container" "relay_boot" {
  #checkov:skip=CKV2_AZURE_21:See the uploads container.
  name                  = local.relay_boot_container
  storage_account_id    = azurerm_storage_account.artifacts.id
  container_access_type = "private"
}

resource "azurerm_storage_container" "bench_boot" {
  #checkov:skip=CKV2_AZURE_21:See the uploads container.
  name                  = local.bench_boot_container
  storage_account_id    = azurerm_storage_account.artifacts.id
  container_access_type = "private"
}

# --- who may read and write --------------------------------------------------

resource "azurerm_role_assignment" "deployer_artifacts" {
  for_each = toset(var.deployer_principal_ids)

  scope                = azurerm_storage_account.artifacts.id
  role_definition_name = "Storage Blob Data Contributor"
  principal_id         = each.value
}

resource "azurerm_role_assignment" "relay_boot_read" {
  scope                = azurerm_storage_container.relay_boot.id
  role_definition_name = "Storage Blob Data Reader"
  principal_id         = local.relay_principal_id
  principal_type       = "ServicePrincipal"
}

# Role assignments can take up to 10 minutes to reach the storage front ends.
# The wait restarts whenever the set of assignments it waits for changes.
resource "time_sleep" "deployer_rbac" {
  create_duration = var.rbac_propagation_wait
  triggers = {
    assignments = join(",", sort([for ra in azurerm_role_assignment.deployer_artifacts : ra.id]))
  }
}

# --- relay-boot --------------------------------------------------------------

# The relay-server package (scripts/package) and its SHA-256, which the boot
# fetch checks before dpkg installs it: a package changed after this apply
# hashed it is refused. Both blob names are fixed, so cloud-init (and with it
# the VMs) need not change with the package's version.
resource "azurerm_storage_blob" "relay_package" {
  name                 = "relay-server.deb"
  storage_container_id = azurerm_storage_container.relay_boot.id
  type                 = "Block"
  source               = local.relay_package_path
  content_type         = "application/vnd.debian.binary-package"
  content_md5          = try(filemd5(local.relay_package_path), null)

  lifecycle {
    precondition {
      condition     = fileexists(local.relay_package_path)
      error_message = "relay-server package not found at ${local.relay_package_path}: run scripts/package first (it builds the release binaries and the .deb packages into target/package), or set relay_package_path."
    }
  }

  depends_on = [time_sleep.deployer_rbac]
}

resource "azurerm_storage_blob" "relay_package_sums" {
  name                 = "SHA256SUMS"
  storage_container_id = azurerm_storage_container.relay_boot.id
  type                 = "Block"
  source_content       = "${try(filesha256(local.relay_package_path), "")}  relay-server.deb\n"
  content_type         = "text/plain"

  depends_on = [time_sleep.deployer_rbac]
}

resource "azurerm_storage_blob" "relay_cert" {
  name                 = "relay-cert.pem"
  storage_container_id = azurerm_storage_container.relay_boot.id
  type                 = "Block"
  source_content       = tls_self_signed_cert.relay.cert_pem
  content_type         = "application/x-pem-file"

  depends_on = [time_sleep.deployer_rbac]
}

resource "azurerm_storage_blob" "relay_key" {
  name                 = "relay-key.pem"
  storage_container_id = azurerm_storage_container.relay_boot.id
  type                 = "Block"
  source_content       = tls_private_key.relay.private_key_pem
  content_type         = "application/x-pem-file"

  depends_on = [time_sleep.deployer_rbac]
}

# The relays' tokens file: client_token, then var.tokens, each after a comment
# naming it, its containers as given (access letters r, w, d included, e.g.
# `uploads:rwd`: the relays' tokens file takes them as they are). Changing it
# rewrites this blob in place; relays fetch it every minute
# (blob-relay-tokens.timer) and re-read their file when it changes.
locals {
  tokens_file = join("", concat(
    ["# client_token\n", "${random_password.client_token.result} ${var.container_name}\n"],
    flatten([for name, containers in var.tokens : [
      "# ${name}\n",
      length(containers) > 0
      ? "${random_password.token[name].result} ${join(",", containers)}\n"
      : "${random_password.token[name].result}\n",
    ]]),
  ))
}

resource "azurerm_storage_blob" "relay_tokens" {
  name                 = "tokens"
  storage_container_id = azurerm_storage_container.relay_boot.id
  type                 = "Block"
  source_content       = local.tokens_file
  content_type         = "text/plain"

  depends_on = [time_sleep.deployer_rbac]
}

# The key every relay MACs block IDs with (RELAY_ID_KEY_FILE): 64 hex digits.
resource "azurerm_storage_blob" "relay_id_key" {
  name                 = "relay-id-key"
  storage_container_id = azurerm_storage_container.relay_boot.id
  type                 = "Block"
  source_content       = "${random_bytes.relay_id_key.hex}\n"
  content_type         = "text/plain"

  depends_on = [time_sleep.deployer_rbac]
}

# --- bench-boot --------------------------------------------------------------

resource "azurerm_role_assignment" "bench_boot_read" {
  count = local.bench_enabled ? 1 : 0

  scope                = azurerm_storage_container.bench_boot.id
  role_definition_name = "Storage Blob Data Reader"
  principal_id         = azurerm_linux_virtual_machine.bench[0].identity[0].principal_id
  principal_type       = "ServicePrincipal"
}

# The relay-client package and its SHA-256, as for the relay's above.
resource "azurerm_storage_blob" "client_package" {
  count = local.bench_enabled ? 1 : 0

  name                 = "relay-client.deb"
  storage_container_id = azurerm_storage_container.bench_boot.id
  type                 = "Block"
  source               = local.client_package_path
  content_type         = "application/vnd.debian.binary-package"
  content_md5          = try(filemd5(local.client_package_path), null)

  lifecycle {
    precondition {
      condition     = fileexists(local.client_package_path)
      error_message = "relay-client package not found at ${local.client_package_path}: run scripts/package first, or set client_package_path."
    }
  }

  depends_on = [time_sleep.deployer_rbac]
}

resource "azurerm_storage_blob" "client_package_sums" {
  count = local.bench_enabled ? 1 : 0

  name                 = "SHA256SUMS"
  storage_container_id = azurerm_storage_container.bench_boot.id
  type                 = "Block"
  source_content       = "${try(filesha256(local.client_package_path), "")}  relay-client.deb\n"
  content_type         = "text/plain"

  depends_on = [time_sleep.deployer_rbac]
}

# The client token alone (no container list, no other token).
resource "azurerm_storage_blob" "bench_client_token" {
  count = local.bench_enabled ? 1 : 0

  name                 = "client-token"
  storage_container_id = azurerm_storage_container.bench_boot.id
  type                 = "Block"
  source_content       = "${random_password.client_token.result}\n"
  content_type         = "text/plain"

  depends_on = [time_sleep.deployer_rbac]
}

# The public certificate: the benchmark VM computes the pin from it at boot.
resource "azurerm_storage_blob" "bench_relay_cert" {
  count = local.bench_enabled ? 1 : 0

  name                 = "relay-cert.pem"
  storage_container_id = azurerm_storage_container.bench_boot.id
  type                 = "Block"
  source_content       = tls_self_signed_cert.relay.cert_pem
  content_type         = "application/x-pem-file"

  depends_on = [time_sleep.deployer_rbac]
}
