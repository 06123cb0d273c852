# The relay's TLS identity and the client token. Clients pin the certificate by
# the SHA-256 of its DER encoding (--relay-cert-sha256), so a self-signed
# certificate is enough: no CA, no DNS name.

resource "tls_private_key" "relay" {
  algorithm   = "ECDSA"
  ecdsa_curve = "P256"
}

resource "tls_self_signed_cert" "relay" {
  private_key_pem = tls_private_key.relay.private_key_pem

  subject {
    common_name  = "blob-relay"
    organization = "Blob Relay"
  }

  dns_names    = ["blob-relay"]
  ip_addresses = [local.relay_public_ip]

  validity_period_hours = var.tls_cert_validity_hours
  early_renewal_hours   = 720

  allowed_uses = [
    "digital_signature",
    "server_auth",
  ]
}

locals {
  # PEM minus armour and line breaks is the base64 of the DER certificate.
  relay_cert_der_base64 = replace(tls_self_signed_cert.relay.cert_pem, "/-----[A-Z ]+-----|\\s/", "")
}

# Terraform has no function that hashes binary data, but local_file hashes
# the bytes it writes: content_sha256 is the SHA-256 of the DER certificate,
# exactly what `openssl x509 -outform DER | sha256sum` prints. The file holds
# only the public certificate.
resource "local_file" "relay_cert_der" {
  filename        = "${path.module}/.relay-cert.der"
  content_base64  = local.relay_cert_der_base64
  file_permission = "0644"
}

# The file is not in git: in a fresh checkout (or another operator's) the
# local provider drops local_file from state and plans to write it again,
# and its content_sha256 is unknown until apply. The fingerprint is
# therefore kept here, replaced only with the certificate itself, so that a
# fresh checkout changes no output and nothing that uses the pin.
resource "terraform_data" "relay_cert_sha256" {
  triggers_replace = tls_self_signed_cert.relay.cert_pem
  input            = local_file.relay_cert_der.content_sha256

  lifecycle {
    ignore_changes = [input]
  }
}

# One client token. The relay's tokens file line is "TOKEN CONTAINER[,...]":
# this token may write only to var.container_name.
resource "random_password" "client_token" {
  length  = 48
  special = false
}

# The tokens of var.tokens, one per name. Removing a name destroys its token:
# relays refuse it from their next refresh on.
resource "random_password" "token" {
  for_each = var.tokens

  length  = 48
  special = false
}

# The key all relays of this deployment MAC block IDs with, so that resume
# state read back from Azure's uncommitted block list is trusted only if a
# relay wrote it. 32 bytes, handed to the relays as 64 hex digits through the
# relay-boot container (RELAY_ID_KEY_FILE). Changing relay_id_key_generation
# rotates it: transfers in progress then restart from zero.
resource "random_bytes" "relay_id_key" {
  length = 32
  keepers = {
    generation = var.relay_id_key_generation
  }
}
