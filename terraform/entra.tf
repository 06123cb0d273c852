# Entra ID sign-in for clients (docs/SECURITY.md, "Entra ID sign-in"): the
# relay's app registration, one app role per container and right
# (Uploader.CONTAINER, Reader.CONTAINER, Deleter.CONTAINER), its service
# principal (only principals assigned a role get a token), and the relay's
# settings in relay.env. Off while entra_upload_containers,
# entra_read_containers and entra_delete_containers are all empty: static
# tokens only, and nothing is created in Entra ID.
#
# Or bring an existing registration (entra_existing_application): nothing is
# created, its roles must include those same roles for each container.

locals {
  entra_enabled = length(concat(var.entra_upload_containers, var.entra_read_containers, var.entra_delete_containers)) > 0
  entra_create  = local.entra_enabled && var.entra_existing_application == null
  entra_tenant  = local.entra_enabled ? coalesce(try(var.entra_existing_application.tenant_id, null), data.azurerm_client_config.current.tenant_id) : ""
  entra_app_uri = coalesce(try(var.entra_existing_application.application_id_uri, null), "api://blob-relay-${local.prefix}")
  entra_client  = local.entra_create ? azuread_application.relay[0].client_id : try(var.entra_existing_application.client_id, "")
  # Stable IDs without state: name-based UUIDs (a role's ID must not change
  # while it is assigned).
  entra_role_ids         = { for c in var.entra_upload_containers : c => uuidv5("url", "urn:blob-relay:${local.prefix}:Uploader.${c}") }
  entra_reader_role_ids  = { for c in var.entra_read_containers : c => uuidv5("url", "urn:blob-relay:${local.prefix}:Reader.${c}") }
  entra_deleter_role_ids = { for c in var.entra_delete_containers : c => uuidv5("url", "urn:blob-relay:${local.prefix}:Deleter.${c}") }
  entra_scope_id         = uuidv5("url", "urn:blob-relay:${local.prefix}:user_impersonation")
  # Every app role, by its value: Uploader. (writing, mapped by
  # RELAY_ENTRA_GRANT), Reader. (downloads and listings, honoured with
  # --entra-reader-roles) and Deleter. (deleting a listed version only, never
  # writing or reading, honoured with --entra-deleter-roles).
  entra_app_roles = merge(
    { for c, id in local.entra_role_ids : "Uploader.${c}" => { id = id, description = "May upload into container ${c} through the relay." } },
    { for c, id in local.entra_reader_role_ids : "Reader.${c}" => { id = id, description = "May download and list container ${c} through the relay." } },
    { for c, id in local.entra_deleter_role_ids : "Deleter.${c}" => { id = id, description = "May delete listed blobs in container ${c} through the relay (sync --delete)." } },
  )

  # What the relay accepts: v2 access tokens name the client ID as audience,
  # v1 tokens the application ID URI; both, so either works.
  entra_audience = join(",", compact([local.entra_app_uri, local.entra_client]))
  entra_grant    = join(";", [for c in var.entra_upload_containers : "Uploader.${c}=${c}"])

  # relay.env's Entra ID lines, joined at the YAML block's indentation: the
  # template holds plain interpolations only (tests/terraform renders it with
  # no directive support). Each right's line only when it has a container:
  # the relay honours Reader./Deleter. roles only when told to, and an empty
  # grant list is no grant.
  relay_entra_env = local.entra_enabled ? join("\n      ", compact([
    "RELAY_ENTRA_AUDIENCE=${local.entra_audience}",
    "RELAY_ENTRA_TENANT=${local.entra_tenant}",
    length(var.entra_upload_containers) > 0 ? "RELAY_ENTRA_GRANT=${local.entra_grant}" : "",
    length(var.entra_read_containers) > 0 ? "RELAY_ENTRA_READER_ROLES=true" : "",
    length(var.entra_delete_containers) > 0 ? "RELAY_ENTRA_DELETER_ROLES=true" : "",
  ])) : "# Entra ID sign-in is off (no entra_*_containers): static tokens only."

  # (principal, container) pairs to assign, keyed for for_each: one map per
  # right.
  entra_assignments = {
    for pair in flatten([
      for principal, containers in var.entra_uploaders : [
        for c in containers : { principal = principal, container = c }
      ]
    ]) : "${pair.principal}/${pair.container}" => pair
  }
  entra_reader_assignments = {
    for pair in flatten([
      for principal, containers in var.entra_readers : [
        for c in containers : { principal = principal, container = c }
      ]
    ]) : "${pair.principal}/${pair.container}" => pair
  }
  entra_deleter_assignments = {
    for pair in flatten([
      for principal, containers in var.entra_deleters : [
        for c in containers : { principal = principal, container = c }
      ]
    ]) : "${pair.principal}/${pair.container}" => pair
  }

  # The Azure CLI's public client: pre-authorised, so `--entra cli` and
  # `--entra device-code` (which asks as this client) need no consent prompt.
  azure_cli_client_id = "04b07795-8ddb-461a-bbee-02f9e1bf7b46"
}

resource "azuread_application" "relay" {
  count            = local.entra_create ? 1 : 0
  display_name     = "Blob Relay ${local.prefix}"
  identifier_uris  = [local.entra_app_uri]
  sign_in_audience = "AzureADMyOrg"

  api {
    requested_access_token_version = 2

    # A delegated scope to pre-authorise the Azure CLI on; what a user may
    # write, read or delete still comes only from the app roles assigned to
    # them.
    oauth2_permission_scope {
      id                         = local.entra_scope_id
      value                      = "user_impersonation"
      type                       = "User"
      enabled                    = true
      admin_consent_display_name = "Upload through Blob Relay"
      admin_consent_description  = "Upload files through the relay into the containers the user's app roles grant."
      user_consent_display_name  = "Upload through Blob Relay"
      user_consent_description   = "Upload files through the relay into the containers your app roles grant."
    }
  }

  # One per container and right (local.entra_app_roles).
  dynamic "app_role" {
    for_each = local.entra_app_roles
    content {
      id                   = app_role.value.id
      value                = app_role.key
      display_name         = replace(app_role.key, ".", ": ")
      description          = app_role.value.description
      allowed_member_types = ["User", "Application"]
      enabled              = true
    }
  }
}

resource "azuread_application_pre_authorized" "azure_cli" {
  count                = local.entra_create ? 1 : 0
  application_id       = azuread_application.relay[0].id
  authorized_client_id = local.azure_cli_client_id
  permission_ids       = [local.entra_scope_id]
}

resource "azuread_service_principal" "relay" {
  count     = local.entra_create ? 1 : 0
  client_id = azuread_application.relay[0].client_id
  # No token for a principal without a role: Entra ID refuses before the relay.
  app_role_assignment_required = true
}

# Who may upload where: a group, user or workload identity per container.
resource "azuread_app_role_assignment" "uploader" {
  for_each            = local.entra_create ? local.entra_assignments : {}
  app_role_id         = local.entra_role_ids[each.value.container]
  principal_object_id = each.value.principal
  resource_object_id  = azuread_service_principal.relay[0].object_id
}

# Who may download and list where.
resource "azuread_app_role_assignment" "reader" {
  for_each            = local.entra_create ? local.entra_reader_assignments : {}
  app_role_id         = local.entra_reader_role_ids[each.value.container]
  principal_object_id = each.value.principal
  resource_object_id  = azuread_service_principal.relay[0].object_id
}

# Who may delete where (write never implies it).
resource "azuread_app_role_assignment" "deleter" {
  for_each            = local.entra_create ? local.entra_deleter_assignments : {}
  app_role_id         = local.entra_deleter_role_ids[each.value.container]
  principal_object_id = each.value.principal
  resource_object_id  = azuread_service_principal.relay[0].object_id
}
