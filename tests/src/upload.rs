//! One way to build a `relay-client upload` command line in tests.

use std::path::Path;

use crate::relay::{RelayHandle, TOKEN};

/// Arguments of one `relay-client upload` run, built step by step:
/// `Upload::file(&f).to(&c).via(&relay).json().args()`.
#[derive(Debug, Clone, Default)]
pub struct Upload {
    sources: Vec<String>,
    flags: Vec<String>,
}

impl Upload {
    /// An upload of one file or directory.
    pub fn file(path: &Path) -> Self {
        Self {
            sources: vec![path.display().to_string()],
            flags: Vec::new(),
        }
    }

    /// Another source after the first.
    pub fn and(mut self, path: &Path) -> Self {
        self.sources.push(path.display().to_string());
        self
    }

    /// The destination, `CONTAINER` or `CONTAINER/PREFIX`.
    pub fn to(self, to: &str) -> Self {
        self.flag("--to", to)
    }

    /// Through this in-process relay, with the full token.
    pub fn via(self, relay: &RelayHandle) -> Self {
        self.via_addr(&relay.addr.to_string(), &relay.fingerprint)
            .token(TOKEN)
    }

    /// Through a relay at `addr` pinned by `fingerprint` (no token).
    pub fn via_addr(self, addr: &str, fingerprint: &str) -> Self {
        self.flag("--relay", addr)
            .flag("--relay-cert-sha256", fingerprint)
    }

    pub fn token(self, token: &str) -> Self {
        self.flag("--token", token)
    }

    /// The JSON report on stdout (`relay_tests::summary` reads it).
    pub fn json(self) -> Self {
        self.arg("--json")
    }

    pub fn block_size(self, size: &str) -> Self {
        self.flag("--block-size", size)
    }

    pub fn flag(self, name: &str, value: &str) -> Self {
        self.arg(name).arg(value)
    }

    pub fn arg(mut self, a: &str) -> Self {
        self.flags.push(a.to_string());
        self
    }

    /// Flags built elsewhere (e.g. a relay process's `--relay …`).
    pub fn extend(mut self, flags: &[String]) -> Self {
        self.flags.extend(flags.iter().cloned());
        self
    }

    /// The flags alone (no `upload`, no sources), to add to another command line.
    pub fn flags(self) -> Vec<String> {
        self.flags
    }

    /// The command line after the program name.
    pub fn args(self) -> Vec<String> {
        let mut out = vec!["upload".to_string()];
        out.extend(self.sources);
        out.extend(self.flags);
        out
    }
}
