# VNet, subnet with a Storage service endpoint (relay -> storage stays on the
# Azure backbone and passes the storage firewall), and the NSG: the relay's
# UDP port from allowed_client_cidrs only, SSH from admin_cidrs only.

resource "azurerm_virtual_network" "this" {
  name                = "vnet-${local.prefix}"
  resource_group_name = azurerm_resource_group.this.name
  location            = azurerm_resource_group.this.location
  address_space       = [var.vnet_address_space]
  tags                = var.tags
}

resource "azurerm_subnet" "relay" {
  name                 = "snet-relay"
  resource_group_name  = azurerm_resource_group.this.name
  virtual_network_name = azurerm_virtual_network.this.name
  address_prefixes     = [cidrsubnet(var.vnet_address_space, 8, 1)]
  service_endpoints    = ["Microsoft.Storage"]
}

resource "azurerm_network_security_group" "relay" {
  name                = "nsg-${local.prefix}"
  resource_group_name = azurerm_resource_group.this.name
  location            = azurerm_resource_group.this.location
  tags                = var.tags
}

# QUIC from the upload sites. With a Standard Load Balancer the client's
# source address is preserved, so the same rule applies behind the LB.
resource "azurerm_network_security_rule" "relay_udp" {
  name                        = "allow-relay-udp"
  resource_group_name         = azurerm_resource_group.this.name
  network_security_group_name = azurerm_network_security_group.relay.name
  priority                    = 100
  direction                   = "Inbound"
  access                      = "Allow"
  protocol                    = "Udp"
  source_port_range           = "*"
  source_address_prefixes     = var.allowed_client_cidrs
  destination_port_range      = tostring(var.relay_port)
  destination_address_prefix  = "VirtualNetwork"
}

resource "azurerm_network_security_rule" "ssh" {
  name                        = "allow-ssh-admin"
  resource_group_name         = azurerm_resource_group.this.name
  network_security_group_name = azurerm_network_security_group.relay.name
  priority                    = 110
  direction                   = "Inbound"
  access                      = "Allow"
  protocol                    = "Tcp"
  source_port_range           = "*"
  source_address_prefixes     = var.admin_cidrs
  destination_port_range      = "22"
  destination_address_prefix  = "VirtualNetwork"
}

# The benchmark source VM is a client too.
resource "azurerm_network_security_rule" "relay_udp_bench" {
  count = local.bench_enabled ? 1 : 0

  name                        = "allow-relay-udp-bench"
  resource_group_name         = azurerm_resource_group.this.name
  network_security_group_name = azurerm_network_security_group.relay.name
  priority                    = 120
  direction                   = "Inbound"
  access                      = "Allow"
  protocol                    = "Udp"
  source_port_range           = "*"
  source_address_prefix       = azurerm_public_ip.bench[0].ip_address
  destination_port_range      = tostring(var.relay_port)
  destination_address_prefix  = "VirtualNetwork"
}

# The load balancer's health probe (source AzureLoadBalancer) is allowed by
# the NSG's built-in AllowAzureLoadBalancerInBound rule; the health port is
# not reachable from the Internet.

resource "azurerm_subnet_network_security_group_association" "relay" {
  subnet_id                 = azurerm_subnet.relay.id
  network_security_group_id = azurerm_network_security_group.relay.id
}

# Single relay: its own static public IP. Scale set: the LB's frontend IP.
resource "azurerm_public_ip" "relay" {
  count = local.scale_set ? 0 : 1

  name                = "pip-${local.prefix}"
  resource_group_name = azurerm_resource_group.this.name
  location            = azurerm_resource_group.this.location
  allocation_method   = "Static"
  sku                 = "Standard"
  tags                = var.tags
}

locals {
  relay_public_ip = local.scale_set ? azurerm_public_ip.lb[0].ip_address : azurerm_public_ip.relay[0].ip_address
}
