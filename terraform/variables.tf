# Inputs. Defaults follow the relay's own defaults (UDP 4433, health 9090) so
# that the NSG, the load balancer and the cloud-init config agree.

variable "subscription_id" {
  description = "Azure subscription ID. null: taken from ARM_SUBSCRIPTION_ID."
  type        = string
  default     = null
}

variable "name" {
  description = "Name prefix for every resource (lowercase letters and digits, 3-12 characters)."
  type        = string
  default     = "blobrelay"

  validation {
    condition     = can(regex("^[a-z][a-z0-9]{2,11}$", var.name))
    error_message = "name must be 3-12 lowercase letters or digits, starting with a letter."
  }
}

variable "location" {
  description = "Azure region of the storage account and the relay (keep them together)."
  type        = string
  default     = "westeurope"
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = { app = "blob-relay" }
}

# --- access ------------------------------------------------------------------

variable "allowed_client_cidrs" {
  description = "Source CIDRs that may reach the relay's UDP port (the sites that upload). Never 0.0.0.0/0."
  type        = list(string)

  validation {
    condition = length(var.allowed_client_cidrs) > 0 && alltrue([
      for c in var.allowed_client_cidrs : can(cidrhost(c, 0)) && !contains(["0.0.0.0/0", "*", "Internet", "Any"], c)
    ])
    error_message = "allowed_client_cidrs must be a non-empty list of CIDRs and must not open the relay to the whole Internet."
  }
}

variable "admin_cidrs" {
  description = "Source CIDRs for SSH to the VMs and for Terraform's own blob uploads through the storage firewall (the machine running terraform apply must be inside one)."
  type        = list(string)

  validation {
    condition = length(var.admin_cidrs) > 0 && alltrue([
      for c in var.admin_cidrs : can(cidrhost(c, 0)) && !contains(["0.0.0.0/0", "*", "Internet", "Any"], c)
    ])
    error_message = "admin_cidrs must be a non-empty list of CIDRs and must not open SSH to the whole Internet."
  }
}

variable "admin_username" {
  description = "Login of the administrator account on the VMs."
  type        = string
  default     = "azureuser"
}

variable "admin_ssh_public_key" {
  description = "OpenSSH public key for admin_username (password login is disabled)."
  type        = string
}

# --- storage -----------------------------------------------------------------

variable "storage_account_kind" {
  description = "StorageV2 (standard, default) or BlockBlobStorage (premium block blobs: lower latency, higher price)."
  type        = string
  default     = "StorageV2"

  validation {
    condition     = contains(["StorageV2", "BlockBlobStorage"], var.storage_account_kind)
    error_message = "storage_account_kind must be StorageV2 or BlockBlobStorage."
  }
}

variable "storage_replication_type" {
  description = "Replication of the storage account: LRS, ZRS (both kinds), GRS, RAGRS, GZRS, RAGZRS (StorageV2 only)."
  type        = string
  default     = "ZRS"

  validation {
    condition     = contains(["LRS", "ZRS", "GRS", "RAGRS", "GZRS", "RAGZRS"], var.storage_replication_type)
    error_message = "storage_replication_type must be one of LRS, ZRS, GRS, RAGRS, GZRS, RAGZRS."
  }
}

variable "shared_access_key_enabled" {
  description = "Allow shared-key (account key) access. false: Entra ID only, which is all the relay needs."
  type        = bool
  default     = false
}

variable "container_name" {
  description = "Container the client uploads into (the client token is limited to it)."
  type        = string
  default     = "uploads"
}

variable "blob_soft_delete_days" {
  description = "Days a deleted blob stays recoverable."
  type        = number
  default     = 7
}

# --- relay -------------------------------------------------------------------

variable "relay_port" {
  description = "UDP port of the relay (QUIC)."
  type        = number
  default     = 4433
}

variable "health_port" {
  description = "TCP port of the relay's HTTP health endpoint (GET /healthz)."
  type        = number
  default     = 9090
}

variable "relay_memory_budget" {
  description = "The relay's shared block-buffer budget (--memory-budget), e.g. 8GiB. Leave room for the OS: the default VM has 64 GiB."
  type        = string
  default     = "16GiB"
}

variable "relay_binary_path" {
  description = "Local path of the relay-server binary (cargo build --release). null: <repo>/target/release/relay-server."
  type        = string
  default     = null
}

variable "relay_count" {
  description = "Number of relays. 1: a single VM with its own public IP. More: a VM scale set behind a Standard Load Balancer."
  type        = number
  default     = 1

  validation {
    condition     = var.relay_count >= 1 && floor(var.relay_count) == var.relay_count
    error_message = "relay_count must be a whole number >= 1."
  }
}

variable "vm_size" {
  description = "Relay VM size. Must support accelerated networking; the default has 16 vCPU, 64 GiB and 12.5 Gbit/s."
  type        = string
  default     = "Standard_D16ds_v5"
}

variable "encryption_at_host_enabled" {
  description = "Encrypt the VMs' temp disk and disk caches at the host. Needs `az feature register --namespace Microsoft.Compute --name EncryptionAtHost` once per subscription."
  type        = bool
  default     = false
}

variable "vnet_address_space" {
  description = "Address space of the relay VNet."
  type        = string
  default     = "10.60.0.0/16"
}

variable "tls_cert_validity_hours" {
  description = "Validity of the relay's self-signed certificate."
  type        = number
  default     = 8760
}

variable "vm_image" {
  description = "Marketplace image of the VMs (needs cloud-init and curl)."
  type = object({
    publisher = string
    offer     = string
    sku       = string
    version   = string
  })
  default = {
    publisher = "Canonical"
    offer     = "ubuntu-24_04-lts"
    sku       = "server"
    version   = "latest"
  }
}

# --- comparative benchmark ---------------------------------------------------

variable "bench_source_region" {
  description = "If set, a source VM in this (far) region, with relay-client installed, for deploy/compare.sh. null: none."
  type        = string
  default     = null
}

variable "bench_vm_size" {
  description = "Size of the benchmark source VM (accelerated networking is enabled on it too)."
  type        = string
  default     = "Standard_D8ds_v5"
}

variable "client_binary_path" {
  description = "Local path of the relay-client binary for the benchmark VM. null: <repo>/target/release/relay-client."
  type        = string
  default     = null
}
