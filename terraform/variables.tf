# Inputs. Defaults follow the relay's own defaults (UDP 4433, health 9090) so
# that the NSG, the load balancer and the cloud-init config agree.

variable "subscription_id" {
  description = "Azure subscription ID. null: ARM_SUBSCRIPTION_ID, else the Azure CLI's current account."
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
  description = "Source CIDRs for SSH to the VMs (private ranges allowed, e.g. over a VPN or a peered VNet). Storage access is storage_ip_rules / storage_subnet_ids."
  type        = list(string)

  validation {
    condition = length(var.admin_cidrs) > 0 && alltrue([
      for c in var.admin_cidrs : can(cidrhost(c, 0)) && !contains(["0.0.0.0/0", "::/0", "*", "Internet", "Any"], c)
    ])
    error_message = "admin_cidrs must be a non-empty list of CIDRs and must not open SSH to the whole Internet."
  }
}

# Storage firewall. IP rules take public IPv4 only (no private ranges, no
# IPv6, no /31 or /32 prefixes: single addresses go bare, a /31 becomes its
# two addresses), and they do not apply to clients in the storage account's
# own region, whose traffic reaches storage from private addresses: those
# (Cloud Shell, a CI runner or an operator VM in `location`) come in through
# a subnet with the Microsoft.Storage service endpoint, storage_subnet_ids.
variable "storage_ip_rules" {
  description = "Public IPv4 addresses or CIDRs (prefix /8 to /32) let through both storage firewalls: where terraform plan/apply runs (outside `location`) and where people read uploads from."
  type        = list(string)
  default     = []

  validation {
    condition = alltrue([
      for c in var.storage_ip_rules : can(regex("^(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}(/([0-9]|[12][0-9]|3[0-2]))?$", c))
    ])
    error_message = "storage_ip_rules: each entry must be an IPv4 address or IPv4 CIDR (storage firewall IP rules do not accept IPv6)."
  }

  validation {
    condition = alltrue([
      for c in var.storage_ip_rules : !can(regex("^(0\\.|10\\.|127\\.|169\\.254\\.|172\\.(1[6-9]|2[0-9]|3[01])\\.|192\\.168\\.|100\\.(6[4-9]|[7-9][0-9]|1[01][0-9]|12[0-7])\\.|22[4-9]\\.|2[3-5][0-9]\\.)", c))
    ])
    error_message = "storage_ip_rules: private, loopback, link-local, CGNAT and multicast/reserved ranges are rejected by the storage firewall. A client that reaches storage from a private address (a VNet, a VPN, or anything in the account's own region) needs storage_subnet_ids instead."
  }

  validation {
    condition = alltrue([
      for c in var.storage_ip_rules : !strcontains(c, "/") || try(tonumber(split("/", c)[1]) >= 8, false)
    ])
    error_message = "storage_ip_rules: prefixes shorter than /8 are refused (use the ranges you actually need)."
  }
}

variable "storage_subnet_ids" {
  description = "Extra subnet IDs (each with the Microsoft.Storage service endpoint) let through both storage firewalls: for terraform or operators running inside Azure in the account's region (Cloud Shell VNet, self-hosted runner)."
  type        = list(string)
  default     = []

  validation {
    condition = alltrue([
      for id in var.storage_subnet_ids : can(regex("(?i)^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\\.Network/virtualNetworks/[^/]+/subnets/[^/]+$", id))
    ])
    error_message = "storage_subnet_ids: each entry must be a subnet resource ID (/subscriptions/.../subnets/NAME)."
  }
}

# Who may manage the deployment's data plane. Terraform writes the boot
# artifacts with Entra ID (shared keys are off) and reads them back on every
# plan, so every operator (or a group holding them) is listed here, rather
# than whoever happened to run apply last.
variable "deployer_principal_ids" {
  description = "Entra ID object IDs (users, groups or service principals) that run terraform plan/apply. Each gets Storage Blob Data Contributor on the artifacts account and Storage Blob Data Reader on the upload container."
  type        = list(string)

  validation {
    condition = length(var.deployer_principal_ids) > 0 && alltrue([
      for id in var.deployer_principal_ids : can(regex("^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", id))
    ])
    error_message = "deployer_principal_ids must be a non-empty list of object IDs (GUIDs), e.g. from `az ad signed-in-user show --query id -o tsv` or `az ad group show -g GROUP --query id -o tsv`."
  }
}

variable "rbac_propagation_wait" {
  description = "How long to wait after granting the deployers their blob role before Terraform writes blobs (Azure documents up to 10 minutes for role assignments to take effect). Waited again only when those assignments change."
  type        = string
  default     = "10m"

  validation {
    condition     = can(regex("^[0-9]+(s|m)$", var.rbac_propagation_wait))
    error_message = "rbac_propagation_wait must be a duration such as 600s or 10m."
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

variable "download_containers" {
  description = "Containers of the upload account that relay-client download may read through the relays: the relays' identity gets Storage Blob Data Reader on each, nothing more. Each must exist: Terraform neither creates nor deletes them (they hold what other jobs wrote). The upload container (container_name) is readable without being listed (the relays' Contributor role there includes reading). Who may read is still each token's or principal's read grant (`:r`); this only lets the relays read at all."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.download_containers : length(c) >= 3 && length(c) <= 63 && can(regex("^[a-z0-9](-?[a-z0-9])*$", c))])
    error_message = "Containers must be valid container names (3-63 lowercase letters, digits and single hyphens)."
  }
}

variable "tokens" {
  description = "More client tokens, beside client_token: name => containers the token may use, each `data` or `data:w` (write), `data:r` (read: relay-client download; the relays read only container_name and download_containers), `data:d` (delete: relay-client sync --delete; never implied by write; the relays may delete only in container_name) or a combination of the letters r, w and d, each at most once, in any order as the relays' tokens file takes them (`data:rw`, `data:wd`, `data:rwd`) ([] = write any container that is not reserved, read and delete none). Apply after adding, changing or removing an entry: the tokens blob is rewritten and every relay picks it up within about a minute (blob-relay-tokens.timer), no reimage. Values: the sensitive output `tokens`."
  type        = map(list(string))
  default     = {}

  validation {
    condition     = alltrue([for name in keys(var.tokens) : can(regex("^[a-z0-9][a-z0-9-]{0,39}$", name))])
    error_message = "Token names are 1-40 lowercase letters, digits and hyphens (they label lines in the tokens file)."
  }

  validation {
    condition = alltrue(flatten([for cs in values(var.tokens) : [
      for c in cs : length(split(":", c)[0]) >= 3 && length(split(":", c)[0]) <= 63 && can(regex("^[a-z0-9](-?[a-z0-9])*(:(r|w|d|rw|wr|rd|dr|wd|dw|rwd|rdw|wrd|wdr|drw|dwr))?$", c))
    ]]))
    error_message = "Containers must be valid container names (3-63 lowercase letters, digits and single hyphens), each with no suffix or access letters r, w and d, each at most once (:r, :w, :d, :rw, :wd, :rwd, ...)."
  }
}

variable "blob_soft_delete_days" {
  description = "Days a deleted blob stays recoverable."
  type        = number
  default     = 7
}

# --- relay -------------------------------------------------------------------

variable "relay_id_key_generation" {
  description = "Generation of the key the relays MAC block IDs with (RELAY_ID_KEY_FILE). Change it to rotate the key: uploads in progress then restart from zero."
  type        = number
  default     = 1
}

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

variable "relay_package_path" {
  description = "Local path of the relay-server .deb package (scripts/package) the relays install at boot. null: the one <repo>/target/package/relay-server_*_amd64.deb."
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
  description = "If set, a source VM in this (far) region, with relay-client installed, for deploy/compare.sh. Must differ from location (storage IP rules do not apply within a region). null: none."
  type        = string
  default     = null
}

variable "bench_vm_size" {
  description = "Size of the benchmark source VM (accelerated networking is enabled on it too)."
  type        = string
  default     = "Standard_D8ds_v5"
}

variable "client_package_path" {
  description = "Local path of the relay-client .deb package (scripts/package) the benchmark VM installs at boot. null: the one <repo>/target/package/relay-client_*_amd64.deb."
  type        = string
  default     = null
}

variable "entra_upload_containers" {
  description = "Containers clients may write when signed in with Entra ID (relay-client --entra): one app role Uploader.CONTAINER each on the relay's app registration, mapped by the relay to that container. Empty (and entra_read_containers and entra_delete_containers empty too): Entra ID sign-in is off and nothing is created in Entra ID (needs the azuread provider's rights: Application Administrator or Application.ReadWrite.OwnedBy)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.entra_upload_containers : length(c) >= 3 && length(c) <= 63 && can(regex("^[a-z0-9](-?[a-z0-9])*$", c))])
    error_message = "Containers must be valid container names (3-63 lowercase letters, digits and single hyphens)."
  }
}

variable "entra_uploaders" {
  description = "Object IDs of groups, users or service principals => containers they may upload into (each must be in entra_upload_containers): each gets the app role Uploader.CONTAINER. Assigning a group needs Entra ID P1; its members then carry the role in their tokens. Only with a registration Terraform creates."
  type        = map(list(string))
  default     = {}

  validation {
    condition     = alltrue([for p in keys(var.entra_uploaders) : can(regex("^[0-9a-fA-F-]{36}$", p))])
    error_message = "Keys are object IDs (GUIDs): `az ad group show --group NAME --query id -o tsv`."
  }

  validation {
    condition     = alltrue(flatten([for cs in values(var.entra_uploaders) : [for c in cs : contains(var.entra_upload_containers, c)]]))
    error_message = "Every container in entra_uploaders must be listed in entra_upload_containers (it needs its app role)."
  }
}

variable "entra_read_containers" {
  description = "Containers clients may download and list when signed in with Entra ID: one app role Reader.CONTAINER each on the relay's app registration, honoured by the relay (RELAY_ENTRA_READER_ROLES) for that container only. Empty: no Reader roles, and the relay honours none."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.entra_read_containers : length(c) >= 3 && length(c) <= 63 && can(regex("^[a-z0-9](-?[a-z0-9])*$", c))])
    error_message = "Containers must be valid container names (3-63 lowercase letters, digits and single hyphens)."
  }
}

variable "entra_readers" {
  description = "Object IDs of groups, users or service principals => containers they may download and list (each must be in entra_read_containers): each gets the app role Reader.CONTAINER. Only with a registration Terraform creates."
  type        = map(list(string))
  default     = {}

  validation {
    condition     = alltrue([for p in keys(var.entra_readers) : can(regex("^[0-9a-fA-F-]{36}$", p))])
    error_message = "Keys are object IDs (GUIDs): `az ad group show --group NAME --query id -o tsv`."
  }

  validation {
    condition     = alltrue(flatten([for cs in values(var.entra_readers) : [for c in cs : contains(var.entra_read_containers, c)]]))
    error_message = "Every container in entra_readers must be listed in entra_read_containers (it needs its app role)."
  }
}

variable "entra_delete_containers" {
  description = "Containers in which clients signed in with Entra ID may delete (relay-client sync --delete; a listed version only): one app role Deleter.CONTAINER each, honoured by the relay (RELAY_ENTRA_DELETER_ROLES). Write never implies delete. Empty: no Deleter roles, and the relay honours none."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.entra_delete_containers : length(c) >= 3 && length(c) <= 63 && can(regex("^[a-z0-9](-?[a-z0-9])*$", c))])
    error_message = "Containers must be valid container names (3-63 lowercase letters, digits and single hyphens)."
  }
}

variable "entra_deleters" {
  description = "Object IDs of groups, users or service principals => containers they may delete in (each must be in entra_delete_containers): each gets the app role Deleter.CONTAINER. Only with a registration Terraform creates."
  type        = map(list(string))
  default     = {}

  validation {
    condition     = alltrue([for p in keys(var.entra_deleters) : can(regex("^[0-9a-fA-F-]{36}$", p))])
    error_message = "Keys are object IDs (GUIDs): `az ad group show --group NAME --query id -o tsv`."
  }

  validation {
    condition     = alltrue(flatten([for cs in values(var.entra_deleters) : [for c in cs : contains(var.entra_delete_containers, c)]]))
    error_message = "Every container in entra_deleters must be listed in entra_delete_containers (it needs its app role)."
  }
}

variable "entra_existing_application" {
  description = "Use an existing app registration instead of creating one: its client ID, application ID URI and (default: this subscription's) tenant ID. Its app roles must include Uploader.CONTAINER for each of entra_upload_containers, Reader.CONTAINER for each of entra_read_containers and Deleter.CONTAINER for each of entra_delete_containers; assignments are then made outside Terraform."
  type = object({
    client_id          = string
    application_id_uri = string
    tenant_id          = optional(string)
  })
  default = null
}
