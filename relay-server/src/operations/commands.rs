//! Operator commands beside serving: `cert show|rotate` for the self-signed
//! identity in the state directory, and `token new` to make a tokens-file line
//! together with the client command that uses it.

use std::path::PathBuf;

use relay_proto::blob_name::{ContainerNameError, validate_container};

use crate::connection::tls::{Identity, TlsError};
use crate::operations::command_args::{CertCommand, Command, TokenCommand, TokenNewArgs};
use crate::operations::config::Args;
use crate::operations::state_dir::{CERT_FILE, FINGERPRINT_FILE, KEY_FILE, StateDir, StateError};

/// Why an operator command failed.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error(transparent)]
    State(#[from] StateError),
    /// `--tls-cert`/`--tls-key` cannot be used.
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(
        "no certificate yet in {} (the relay makes one at its first start)",
        dir.display()
    )]
    NoCertificate { dir: PathBuf },
    /// `cert rotate` with an operator's certificate: it is not ours to replace.
    #[error("the relay is configured with --tls-cert (RELAY_TLS_CERT): replace that file instead")]
    OperatorCertificate,
    #[error("--containers {name:?}: {source}")]
    Container {
        name: String,
        source: ContainerNameError,
    },
    #[error("--containers {name:?}: reserved (--reserved-containers); no upload may write it")]
    Reserved { name: String },
}

/// Runs `command`; what it prints is its result, errors are returned.
pub fn run(command: &Command, args: &Args) -> Result<(), CommandError> {
    let state = StateDir::resolve(args.state_dir.as_deref())?;
    match command {
        Command::Cert(CertCommand::Show) => cert_show(&state, args),
        Command::Cert(CertCommand::Rotate) => cert_rotate(&state, args),
        Command::Token(TokenCommand::New(new)) => token_new(&state, args, new),
    }
}

fn cert_show(state: &StateDir, args: &Args) -> Result<(), CommandError> {
    let (id, from) = current_identity(state, args)?;
    let id = id.ok_or_else(|| CommandError::NoCertificate {
        dir: state.path.clone(),
    })?;
    println!("{}", id.fingerprint);
    eprintln!("relay-server: certificate {}", from.display());
    Ok(())
}

fn cert_rotate(state: &StateDir, args: &Args) -> Result<(), CommandError> {
    if args.listen.tls_cert.is_some() {
        return Err(CommandError::OperatorCertificate);
    }
    let old = state.load_identity()?;
    let new = state.create_identity(&args.listen.tls_names)?;
    if let Some(old) = old {
        eprintln!("relay-server: old fingerprint {}", old.fingerprint);
    }
    println!("{}", new.fingerprint);
    eprintln!(
        "relay-server: new certificate in {} ({}, {}, {}); restart the relay to use it, then give clients the new --relay-cert-sha256",
        state.path.display(),
        CERT_FILE,
        KEY_FILE,
        FINGERPRINT_FILE
    );
    Ok(())
}

/// The identity the relay would present: `--tls-cert`'s, else the state
/// directory's (if made yet); with the file it came from.
fn current_identity(
    state: &StateDir,
    args: &Args,
) -> Result<(Option<Identity>, PathBuf), CommandError> {
    match (&args.listen.tls_cert, &args.listen.tls_key) {
        (Some(c), Some(k)) => Ok((Some(Identity::from_pem_files(c, k)?), c.clone())),
        _ => Ok((state.load_identity()?, state.file(CERT_FILE))),
    }
}

/// Random bytes in a token: 192 bits, far beyond guessing.
const TOKEN_BYTES: usize = 24;

fn token_new(state: &StateDir, args: &Args, new: &TokenNewArgs) -> Result<(), CommandError> {
    for c in &new.containers {
        validate_container(c).map_err(|source| CommandError::Container {
            name: c.clone(),
            source,
        })?;
        if args.sign_in.reserved_containers.contains(c) {
            return Err(CommandError::Reserved { name: c.clone() });
        }
    }
    let token = hex::encode(rand::random::<[u8; TOKEN_BYTES]>());
    println!("{}", token_line(&token, &new.containers));
    let (id, _) = current_identity(state, args)?;
    let pin = match id {
        Some(id) => id.fingerprint,
        None => format!(
            "\"$(cat {})\"",
            state.file(FINGERPRINT_FILE).display() // made at the relay's first start
        ),
    };
    let address = new
        .address
        .clone()
        .unwrap_or_else(|| format!("{}:{}", host_name(), args.listen.listen.port()));
    let to = new.containers.first().map_or("CONTAINER", String::as_str);
    eprintln!(
        "relay-server: add the line above to {} (the relay re-reads it within seconds); the client uploads with:\n  RELAY_TOKEN={token} relay-client upload FILES... \\\n    --relay {address} --relay-cert-sha256 {pin} --to {to}",
        args.sign_in
            .tokens
            .as_deref()
            .map_or_else(|| "the tokens file".into(), |p| p.display().to_string())
    );
    Ok(())
}

/// `TOKEN` or `TOKEN a,b`: the tokens file's format.
pub fn token_line(token: &str, containers: &[String]) -> String {
    if containers.is_empty() {
        token.to_string()
    } else {
        format!("{token} {}", containers.join(","))
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "RELAY-HOST".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sign_in::tokens_file::{ContainerGrant, Grant, parse_tokens};

    #[test]
    fn a_new_token_line_is_accepted_by_the_tokens_file_parser() {
        let token = hex::encode(rand::random::<[u8; TOKEN_BYTES]>());
        let line = token_line(&token, &["data".into(), "logs".into()]);
        let p = parse_tokens(&format!("{line}\n{}\n", token_line(&token, &[])));
        assert!(p.skipped.is_empty(), "{:?}", p.skipped);
        assert_eq!(
            p.tokens[0],
            (
                token.clone(),
                Grant::Containers(vec![
                    ContainerGrant::write("data"),
                    ContainerGrant::write("logs")
                ])
            )
        );
        assert_eq!(p.tokens[1], (token, Grant::AnyContainer));
    }
}
