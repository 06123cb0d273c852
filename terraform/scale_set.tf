# Scale-out (relay_count > 1): a uniform VM scale set behind a Standard Load
# Balancer. A UDP rule spreads QUIC connections by 5-tuple, so a connection
# stays on one relay while the client's address and port do not change; the
# probe takes a relay out of rotation when GET /healthz fails.
#
# custom_data changes update the scale set in place and reach an instance
# when it is reimaged or created (upgrade_mode Manual), never by replacing it.
#
# Any relay can continue any transfer: the resume state (block IDs with the
# transfer tag, index and hash checkpoint) lives in the blob's uncommitted
# block list in Azure, not on the relay. A client that reconnects after a
# relay dies lands on another one, which reads Get Block List and resumes.

resource "azurerm_public_ip" "lb" {
  count = local.scale_set ? 1 : 0

  name                = "pip-lb-${local.prefix}"
  resource_group_name = azurerm_resource_group.this.name
  location            = azurerm_resource_group.this.location
  allocation_method   = "Static"
  sku                 = "Standard"
  tags                = var.tags
}

resource "azurerm_lb" "relay" {
  count = local.scale_set ? 1 : 0

  name                = "lb-${local.prefix}"
  resource_group_name = azurerm_resource_group.this.name
  location            = azurerm_resource_group.this.location
  sku                 = "Standard"
  tags                = var.tags

  frontend_ip_configuration {
    name                 = "relay"
    public_ip_address_id = azurerm_public_ip.lb[0].id
  }
}

resource "azurerm_lb_backend_address_pool" "relay" {
  count = local.scale_set ? 1 : 0

  name            = "relays"
  loadbalancer_id = azurerm_lb.relay[0].id
}

resource "azurerm_lb_probe" "relay_health" {
  count = local.scale_set ? 1 : 0

  name                = "relay-healthz"
  loadbalancer_id     = azurerm_lb.relay[0].id
  protocol            = "Http"
  port                = var.health_port
  request_path        = "/healthz"
  interval_in_seconds = 5
  number_of_probes    = 2
}

resource "azurerm_lb_rule" "relay_udp" {
  count = local.scale_set ? 1 : 0

  name                           = "relay-quic"
  loadbalancer_id                = azurerm_lb.relay[0].id
  frontend_ip_configuration_name = "relay"
  protocol                       = "Udp"
  frontend_port                  = var.relay_port
  backend_port                   = var.relay_port
  backend_address_pool_ids       = [azurerm_lb_backend_address_pool.relay[0].id]
  probe_id                       = azurerm_lb_probe.relay_health[0].id
  load_distribution              = "Default"
  idle_timeout_in_minutes        = 30
  disable_outbound_snat          = true
}

# Outbound for the instances (apt, Entra ID, and storage outside the service
# endpoint path), explicit rather than Azure's retiring default access.
resource "azurerm_lb_outbound_rule" "relay" {
  count = local.scale_set ? 1 : 0

  name                    = "relay-outbound"
  loadbalancer_id         = azurerm_lb.relay[0].id
  protocol                = "All"
  backend_address_pool_id = azurerm_lb_backend_address_pool.relay[0].id

  frontend_ip_configuration {
    name = "relay"
  }
}

resource "azurerm_linux_virtual_machine_scale_set" "relay" {
  #checkov:skip=CKV_AZURE_97:Encryption at host needs a subscription feature registration; enable it with var.encryption_at_host_enabled. The relay keeps no data on disk (blocks are buffered in memory).
  count = local.scale_set ? 1 : 0

  name                            = "vmss-${local.prefix}"
  resource_group_name             = azurerm_resource_group.this.name
  location                        = azurerm_resource_group.this.location
  sku                             = var.vm_size
  instances                       = var.relay_count
  admin_username                  = var.admin_username
  disable_password_authentication = true
  custom_data                     = local.relay_custom_data
  encryption_at_host_enabled      = var.encryption_at_host_enabled
  extension_operations_enabled    = false
  upgrade_mode                    = "Manual"
  overprovision                   = false
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

  network_interface {
    name                          = "relay"
    primary                       = true
    enable_accelerated_networking = true # still enable_* in scale sets (all 4.x)

    ip_configuration {
      name                                   = "primary"
      primary                                = true
      subnet_id                              = azurerm_subnet.relay.id
      load_balancer_backend_address_pool_ids = [azurerm_lb_backend_address_pool.relay[0].id]
    }
  }

  boot_diagnostics {}

  # The instances' first apt update and artifact fetch go out through the
  # outbound rule: create it first. (The boot artifacts need no ordering:
  # blob-relay-fetch retries until they are there and readable.)
  depends_on = [
    azurerm_lb_rule.relay_udp,
    azurerm_lb_outbound_rule.relay,
  ]
}
