//! Ctrl-C: the first stops the upload cleanly (no new files, in-flight streams
//! reset, the connection closed, a report of what is committed and the command
//! that resumes); a second exits at once. Exit status 130 either way, as shells
//! expect of SIGINT.

use relay_proto::logsafe::hide_sas_signatures;
use tokio::sync::watch;

pub const EXIT_INTERRUPTED: u8 = 130;

#[derive(Clone)]
pub struct Interrupt {
    rx: watch::Receiver<bool>,
}

impl Interrupt {
    /// Takes over SIGINT for the rest of the process. The handler is
    /// registered here, before the upload starts, so a Ctrl-C that comes
    /// before the watching task first runs is kept, not the default exit.
    pub fn install() -> Self {
        let (tx, rx) = watch::channel(false);
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut sigint) = signal(SignalKind::interrupt()) else {
            return Self { rx }; // no signal handling here: the default (exit) stays
        };
        tokio::spawn(async move {
            if sigint.recv().await.is_none() {
                return;
            }
            let _ = tx.send(true);
            if sigint.recv().await.is_some() {
                eprintln!("\nrelay-client: interrupted again; exiting now");
                std::process::exit(i32::from(EXIT_INTERRUPTED));
            }
        });
        Self { rx }
    }

    /// Never fires (library callers and tests that do not want signals).
    pub fn never() -> Self {
        let (tx, rx) = watch::channel(false);
        std::mem::forget(tx);
        Self { rx }
    }

    pub fn fired(&self) -> bool {
        *self.rx.borrow()
    }

    /// Resolves once Ctrl-C was pressed.
    pub async fn wait(&mut self) {
        while !*self.rx.borrow_and_update() {
            if self.rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// The command that resumes a stopped run: the command line as typed, quoted
/// for a POSIX shell, with no secret in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rerun {
    pub command: String,
    /// A SAS signature was shown as `sig=REDACTED`: the user puts theirs back.
    pub sas_hidden: bool,
}

impl Rerun {
    /// What to tell the user besides the command, if anything.
    pub fn note(&self) -> Option<&'static str> {
        self.sas_hidden.then_some(
            "the SAS signature is shown as sig=REDACTED: put yours back, \
             or give the whole URL in RELAY_STORAGE_URL and leave --storage-url out",
        )
    }
}

/// `args` as a rerun: the token and account key replaced by the environment
/// variables that can carry them, and every SAS signature (in `--storage-url`,
/// or anywhere else it was typed) hidden.
pub fn rerun_command(args: &[String]) -> Rerun {
    let mut out: Vec<String> = Vec::new();
    let mut hide_next: Option<&str> = None;
    let mut sas_hidden = false;
    for a in args {
        if let Some(var) = hide_next.take() {
            out.push(format!("\"${var}\""));
            continue;
        }
        let secret = [
            ("--token", "RELAY_TOKEN"),
            ("--account-key", "RELAY_ACCOUNT_KEY"),
        ]
        .into_iter()
        .find(|(flag, _)| a == flag || a.starts_with(&format!("{flag}=")));
        match secret {
            Some((flag, var)) if a == flag => {
                hide_next = Some(var);
                out.push(a.clone());
            }
            Some((flag, var)) => out.push(format!("{flag}=\"${var}\"")),
            None => {
                let shown = hide_sas_signatures(a);
                sas_hidden |= matches!(shown, std::borrow::Cow::Owned(_));
                out.push(quote(&shown));
            }
        }
    }
    Rerun {
        command: out.join(" "),
        sas_hidden,
    }
}

fn quote(a: &str) -> String {
    let plain = !a.is_empty()
        && a.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_./:=@%+-,".contains(&b));
    if plain {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rerun_is_quoted_and_hides_secrets() {
        let args: Vec<String> = [
            "relay-client",
            "upload",
            "my data/",
            "--token",
            "s3cret",
            "--account-key=k3y",
            "--include",
            "*.txt",
            "--to",
            "c/p",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let rerun = rerun_command(&args);
        assert_eq!(
            rerun.command,
            "relay-client upload 'my data/' --token \"$RELAY_TOKEN\" \
             --account-key=\"$RELAY_ACCOUNT_KEY\" --include '*.txt' --to c/p"
        );
        assert_eq!(rerun.note(), None);
    }

    #[test]
    fn a_sas_signature_is_hidden_wherever_it_was_typed() {
        let args: Vec<String> = [
            "relay-client",
            "upload",
            "d",
            "--direct",
            "--storage-url",
            "https://acct.blob.core.windows.net/?sv=2022-11-02&sp=rw&sig=S3CRET%2B%3D",
            "--storage-url=https://acct.blob.core.windows.net/?sig=S3CRET2&sv=1",
            "--to",
            "c",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let rerun = rerun_command(&args);
        assert!(!rerun.command.contains("S3CRET"), "{}", rerun.command);
        assert_eq!(
            rerun.command,
            "relay-client upload d --direct --storage-url \
             'https://acct.blob.core.windows.net/?sv=2022-11-02&sp=rw&sig=REDACTED' \
             '--storage-url=https://acct.blob.core.windows.net/?sig=REDACTED&sv=1' --to c"
        );
        assert!(
            rerun
                .note()
                .is_some_and(|n| n.contains("RELAY_STORAGE_URL"))
        );
    }
}
