# What a client needs: address, certificate fingerprint, token, and a
# command (or a profile for its configuration file) that puts them together.

locals {
  # `terraform output -raw client_profile`: a [profile.default] for the
  # client's configuration file (docs/CLIENT.md, "Profiles"). It never holds a
  # secret: the token is read from token_file, which the user writes from
  # client_token. TOML literal strings ('...'), as no value here has a quote.
  client_profile = join("\n", concat(
    [
      "[profile.default]",
      "relay = '${local.relay_address}'",
      "relay_cert_sha256 = '${terraform_data.relay_cert_sha256.output}'",
    ],
    local.entra_enabled ? [
      "entra = 'device-code'",
      "entra_scope = '${local.entra_app_uri}'",
      "entra_tenant = '${local.entra_tenant}'",
    ] : ["token_file = '~/.config/blob-relay/token'"],
    # With Entra ID sign-in, the first container it may write.
    ["to = '${concat(var.entra_upload_containers, [var.container_name])[0]}'", ""],
  ))
}

output "relay_address" {
  description = "HOST:PORT of the relay (the load balancer's frontend when relay_count > 1)."
  value       = local.relay_address
}

output "relay_cert_sha256" {
  description = "SHA-256 of the relay certificate's DER encoding, lowercase hex (for --relay-cert-sha256). Equals `terraform output -raw relay_cert_pem | openssl x509 -outform DER | sha256sum`."
  value       = terraform_data.relay_cert_sha256.output
}

output "relay_cert_pem" {
  description = "The relay's self-signed certificate (public)."
  value       = tls_self_signed_cert.relay.cert_pem
}

output "client_token" {
  description = "Client token, limited to the upload container (relay-client --token or RELAY_TOKEN)."
  value       = random_password.client_token.result
  sensitive   = true
}

output "tokens" {
  description = "The tokens of var.tokens: name => token (relay-client --token or RELAY_TOKEN)."
  value       = { for name, t in random_password.token : name => t.result }
  sensitive   = true
}

output "client_command" {
  description = "Ready-to-use upload command; run it where `terraform output` works for this state (the token is read from the sensitive output, never printed here)."
  value       = "RELAY_TOKEN=\"$(terraform -chdir=${abspath(path.module)} output -raw client_token)\" relay-client upload PATH... --relay ${local.relay_address} --to ${var.container_name} --relay-cert-sha256 ${terraform_data.relay_cert_sha256.output}"
}

output "client_profile" {
  description = "A [profile.default] for the client's configuration file: `terraform output -raw client_profile >> ~/.config/blob-relay/client.toml`. Relay address (the balancer's with relay_count > 1), certificate fingerprint, destination and sign-in: Entra ID device code when any entra_*_containers is set, else the token in ~/.config/blob-relay/token (`terraform output -raw client_token > ~/.config/blob-relay/token`, mode 0600). Holds no secret."
  value       = local.client_profile
}

output "storage_url" {
  description = "Blob endpoint of the storage account (for relay-client upload --direct --storage-url)."
  value       = local.storage_url
}

output "storage_account_name" {
  description = "Name of the storage account holding the uploads."
  value       = azurerm_storage_account.this.name
}

output "artifacts_account_name" {
  description = "Name of the storage account the VMs boot from (containers relay-boot and bench-boot; only deployer_principal_ids can write it)."
  value       = azurerm_storage_account.artifacts.name
}

output "container" {
  description = "Container the client token may write."
  value       = var.container_name
}

output "resource_group" {
  description = "Resource group holding everything (delete it to tear down by hand)."
  value       = azurerm_resource_group.this.name
}

output "ssh_relay" {
  description = "SSH to the single relay VM (null with a scale set: its instances have no public IP and extension operations, hence Run Command, are disabled; reimage an instance to repair it, or reach its private IP through a jump host in the VNet)."
  value       = local.scale_set ? null : "ssh ${var.admin_username}@${azurerm_public_ip.relay[0].ip_address}"
}

output "ssh_bench" {
  description = "SSH to the benchmark source VM (null without bench_source_region)."
  value       = local.bench_enabled ? "ssh ${var.admin_username}@${azurerm_public_ip.bench[0].ip_address}" : null
}

output "relay_entra_scope" {
  description = "The relay's application ID URI, for relay-client --entra-scope (or RELAY_ENTRA_SCOPE); null while Entra ID sign-in is off."
  value       = local.entra_enabled ? local.entra_app_uri : null
}

output "entra_client_command" {
  description = "Upload command signed in with Entra ID (the Azure CLI's user; or --entra device-code | managed-identity | workload-identity); null while Entra ID sign-in is off."
  value       = local.entra_enabled ? "relay-client upload PATH... --relay ${local.relay_address} --to CONTAINER --relay-cert-sha256 ${terraform_data.relay_cert_sha256.output} --entra cli --entra-scope ${local.entra_app_uri}" : null
}
