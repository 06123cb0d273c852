# The relay: one VM with its own public IP (relay_count = 1), or a scale set
# behind a Standard Load Balancer (relay_count > 1, see scale_set.tf). Either
# way each instance has a system-assigned managed identity holding
# Storage Blob Data Contributor on the storage account and nothing else.

locals {
  storage_api_version = "2023-11-03"
  artifacts_url       = "${local.storage_url}/${local.artifacts_container}"

  relay_custom_data = base64encode(templatefile("${path.module}/templates/cloud-init-relay.yaml.tftpl", {
    relay_port          = var.relay_port
    health_port         = var.health_port
    storage_url         = local.storage_url
    memory_budget       = var.relay_memory_budget
    artifacts_url       = local.artifacts_url
    storage_api_version = local.storage_api_version
    fetch_script_b64    = filebase64("${path.module}/../deploy/blob-relay-fetch.sh")
    systemd_unit_b64    = filebase64("${path.module}/../deploy/relay-server.service")
    sysctl_conf_b64     = filebase64("${path.module}/../deploy/sysctl.d/60-blob-relay.conf")
  }))
}

resource "azurerm_network_interface" "relay" {
  #checkov:skip=CKV_AZURE_119:The relay is an Internet-facing UDP endpoint; the NSG admits only allowed_client_cidrs (UDP) and admin_cidrs (SSH).
  count = local.scale_set ? 0 : 1

  name                           = "nic-${local.prefix}"
  resource_group_name            = azurerm_resource_group.this.name
  location                       = azurerm_resource_group.this.location
  accelerated_networking_enabled = true
  tags                           = var.tags

  ip_configuration {
    name                          = "primary"
    subnet_id                     = azurerm_subnet.relay.id
    private_ip_address_allocation = "Dynamic"
    public_ip_address_id          = azurerm_public_ip.relay[0].id
  }
}

resource "azurerm_linux_virtual_machine" "relay" {
  count = local.scale_set ? 0 : 1

  name                            = "vm-${local.prefix}"
  resource_group_name             = azurerm_resource_group.this.name
  location                        = azurerm_resource_group.this.location
  size                            = var.vm_size
  admin_username                  = var.admin_username
  disable_password_authentication = true
  network_interface_ids           = [azurerm_network_interface.relay[0].id]
  custom_data                     = local.relay_custom_data
  encryption_at_host_enabled      = var.encryption_at_host_enabled
  allow_extension_operations      = false
  tags                            = var.tags

  admin_ssh_key {
    username   = var.admin_username
    public_key = var.admin_ssh_public_key
  }

  identity {
    type = "SystemAssigned"
  }

  os_disk {
    caching              = "ReadWrite"
    storage_account_type = "Premium_LRS"
  }

  source_image_reference {
    publisher = var.vm_image.publisher
    offer     = var.vm_image.offer
    sku       = var.vm_image.sku
    version   = var.vm_image.version
  }

  boot_diagnostics {}

  # The VM fetches these at first boot; upload them before it starts.
  depends_on = [
    azurerm_storage_blob.relay_server,
    azurerm_storage_blob.relay_cert,
    azurerm_storage_blob.relay_key,
    azurerm_storage_blob.relay_tokens,
  ]
}

# Data-plane access to the one storage account: no Contributor, no
# subscription or resource-group scope.
resource "azurerm_role_assignment" "relay_vm_blob" {
  count = local.scale_set ? 0 : 1

  scope                = azurerm_storage_account.this.id
  role_definition_name = "Storage Blob Data Contributor"
  principal_id         = azurerm_linux_virtual_machine.relay[0].identity[0].principal_id
  principal_type       = "ServicePrincipal"
}
