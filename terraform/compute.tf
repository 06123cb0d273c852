# The relay: one VM with its own public IP (relay_count = 1), or a scale set
# behind a Standard Load Balancer (relay_count > 1, see scale_set.tf). Either
# way the instances share one system-assigned identity's roles: Storage Blob
# Data Contributor on the upload container (storage.tf) and Storage Blob
# Data Reader on the relay-boot container of the artifacts account
# (artifacts.tf). Nothing else.
#
# custom_data is ForceNew on a single VM: editing anything rendered into it
# (the fetch script and unit, the relay's drop-in, ports,
# relay_memory_budget, the storage account names) replaces the VM. The
# relay-server package (its binary and units) is not in it: the VM fetches
# it from relay-boot. docs/DEPLOY.md lists what replaces what.

locals {
  storage_api_version = "2023-11-03"

  relay_custom_data = base64encode(templatefile("${path.module}/templates/cloud-init-relay.yaml.tftpl", {
    relay_port          = var.relay_port
    health_port         = var.health_port
    storage_url         = local.storage_url
    memory_budget       = var.relay_memory_budget
    entra_env           = local.relay_entra_env
    artifacts_url       = "${local.artifacts_url}/${local.relay_boot_container}"
    storage_api_version = local.storage_api_version
    fetch_script_b64    = filebase64("${path.module}/../deploy/blob-relay-fetch.sh")
    fetch_unit_b64      = filebase64("${path.module}/../deploy/blob-relay-fetch@.service")
    systemd_dropin_b64  = filebase64("${path.module}/../deploy/relay-server.service.d/10-fetch.conf")
  }))

  relay_principal_id = (local.scale_set
    ? azurerm_linux_virtual_machine_scale_set.relay[0].identity[0].principal_id
    : azurerm_linux_virtual_machine.relay[0].identity[0].principal_id
  )
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
}
