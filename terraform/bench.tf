# Optional benchmark source (bench_source_region set): a VM in a far region
# with relay-client, for deploy/compare.sh (relay vs direct vs AzCopy). Its
# identity may write the upload container (direct uploads need that) and
# read the bench-boot container; its public IP is let through the storage
# firewalls and the relay NSG. It must be in another region than the
# storage accounts: IP rules do not apply to traffic from the same region.
#
# custom_data is ForceNew: it holds only values that change when the
# deployment itself changes (relay address, count, sizes, regions, deploy/
# files), nothing derived from files outside the repository or from local
# state, so a fresh checkout plans no replacement. The certificate pin is
# computed on the VM from the certificate it fetches.

locals {
  bench_enabled = var.bench_source_region != null
  relay_address = "${local.relay_public_ip}:${var.relay_port}"
}

resource "azurerm_virtual_network" "bench" {
  count = local.bench_enabled ? 1 : 0

  name                = "vnet-bench-${local.prefix}"
  resource_group_name = azurerm_resource_group.this.name
  location            = var.bench_source_region
  address_space       = ["10.61.0.0/16"]
  tags                = var.tags
}

resource "azurerm_subnet" "bench" {
  count = local.bench_enabled ? 1 : 0

  name                 = "snet-bench"
  resource_group_name  = azurerm_resource_group.this.name
  virtual_network_name = azurerm_virtual_network.bench[0].name
  address_prefixes     = ["10.61.1.0/24"]
}

resource "azurerm_network_security_group" "bench" {
  count = local.bench_enabled ? 1 : 0

  name                = "nsg-bench-${local.prefix}"
  resource_group_name = azurerm_resource_group.this.name
  location            = var.bench_source_region
  tags                = var.tags
}

resource "azurerm_network_security_rule" "bench_ssh" {
  count = local.bench_enabled ? 1 : 0

  name                        = "allow-ssh-admin"
  resource_group_name         = azurerm_resource_group.this.name
  network_security_group_name = azurerm_network_security_group.bench[0].name
  priority                    = 110
  direction                   = "Inbound"
  access                      = "Allow"
  protocol                    = "Tcp"
  source_port_range           = "*"
  source_address_prefixes     = var.admin_cidrs
  destination_port_range      = "22"
  destination_address_prefix  = "VirtualNetwork"
}

resource "azurerm_subnet_network_security_group_association" "bench" {
  count = local.bench_enabled ? 1 : 0

  subnet_id                 = azurerm_subnet.bench[0].id
  network_security_group_id = azurerm_network_security_group.bench[0].id
}

resource "azurerm_public_ip" "bench" {
  count = local.bench_enabled ? 1 : 0

  name                = "pip-bench-${local.prefix}"
  resource_group_name = azurerm_resource_group.this.name
  location            = var.bench_source_region
  allocation_method   = "Static"
  sku                 = "Standard"
  tags                = var.tags
}

resource "azurerm_network_interface" "bench" {
  #checkov:skip=CKV_AZURE_119:The benchmark source must reach the relay and storage over the Internet like a real site; its NSG admits SSH from admin_cidrs only.
  count = local.bench_enabled ? 1 : 0

  name                           = "nic-bench-${local.prefix}"
  resource_group_name            = azurerm_resource_group.this.name
  location                       = var.bench_source_region
  accelerated_networking_enabled = true
  tags                           = var.tags

  ip_configuration {
    name                          = "primary"
    subnet_id                     = azurerm_subnet.bench[0].id
    private_ip_address_allocation = "Dynamic"
    public_ip_address_id          = azurerm_public_ip.bench[0].id
  }
}

resource "azurerm_linux_virtual_machine" "bench" {
  count = local.bench_enabled ? 1 : 0

  name                            = "vm-bench-${local.prefix}"
  resource_group_name             = azurerm_resource_group.this.name
  location                        = var.bench_source_region
  size                            = var.bench_vm_size
  admin_username                  = var.admin_username
  disable_password_authentication = true
  network_interface_ids           = [azurerm_network_interface.bench[0].id]
  encryption_at_host_enabled      = var.encryption_at_host_enabled
  allow_extension_operations      = false
  tags                            = var.tags

  custom_data = base64encode(templatefile("${path.module}/templates/cloud-init-bench.yaml.tftpl", {
    artifacts_url       = "${local.artifacts_url}/${local.bench_boot_container}"
    storage_api_version = local.storage_api_version
    relay_address       = local.relay_address
    storage_url         = local.storage_url
    container           = var.container_name
    source_region       = var.bench_source_region
    source_vm_size      = var.bench_vm_size
    relay_region        = var.location
    relay_vm_size       = var.vm_size
    relay_count         = var.relay_count
    fetch_script_b64    = filebase64("${path.module}/../deploy/blob-relay-fetch.sh")
    fetch_unit_b64      = filebase64("${path.module}/../deploy/blob-relay-fetch@.service")
    compare_script_b64  = filebase64("${path.module}/../deploy/compare.sh")
    sysctl_conf_b64     = filebase64("${path.module}/../deploy/sysctl.d/60-blob-relay.conf")
  }))

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

  lifecycle {
    precondition {
      condition     = local.bench_location_key != local.location_key
      error_message = "bench_source_region must differ from location: storage firewall IP rules do not apply to clients in the account's own region, so the benchmark VM would get 403 from storage (and would not measure a long-distance upload anyway)."
    }
  }
}

# Direct uploads (relay-client --direct, AzCopy) write the upload container.
resource "azurerm_role_assignment" "bench_uploads" {
  count = local.bench_enabled ? 1 : 0

  scope                = azurerm_storage_container.uploads.id
  role_definition_name = "Storage Blob Data Contributor"
  principal_id         = azurerm_linux_virtual_machine.bench[0].identity[0].principal_id
  principal_type       = "ServicePrincipal"
}
