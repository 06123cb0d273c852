//! The operator commands' flags (`relay-server cert show|rotate`, `token new`),
//! apart from `commands`, which runs them: `config::Args` holds the parsed
//! command and `commands` reads both, so neither imports the other's module back.

use clap::{Args as ClapArgs, Subcommand};

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The relay's self-signed certificate in --state-dir.
    #[command(subcommand)]
    Cert(CertCommand),
    /// Tokens for the tokens file.
    #[command(subcommand)]
    Token(TokenCommand),
}

#[derive(Debug, Subcommand)]
pub enum CertCommand {
    /// Print the fingerprint clients pin (--relay-cert-sha256) and the files.
    Show,
    /// Replace the certificate and key with new ones (names from --tls-name).
    /// The running relay keeps the old one until it restarts; then every client
    /// needs the new fingerprint.
    #[command(after_long_help = ROTATE_HELP)]
    Rotate,
}

const ROTATE_HELP: &str = "Run it as the user the relay runs as, so the relay can read the new key:
  sudo -u blob-relay relay-server cert rotate --state-dir /var/lib/blob-relay
  sudo systemctl restart relay-server     # drains in-flight transfers first
  cat /var/lib/blob-relay/tls-cert.sha256 # give clients the new --relay-cert-sha256";

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a random token. Prints its tokens-file line on stdout (so
    /// `>> /etc/blob-relay/tokens` adds it) and the client command on stderr.
    New(TokenNewArgs),
}

#[derive(Debug, ClapArgs)]
pub struct TokenNewArgs {
    /// Containers the token may write (comma-separated); without it, any
    /// container that is not reserved.
    #[arg(long, value_delimiter = ',')]
    pub containers: Vec<String>,

    /// Address clients use to reach this relay, for the printed client command.
    /// Default: this machine's host name and the port of --listen.
    #[arg(long, value_name = "HOST:PORT")]
    pub address: Option<String>,
}
