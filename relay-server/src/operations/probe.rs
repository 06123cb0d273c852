//! Whether the relay can reach its storage with its credentials: one Get Blob
//! Properties on a probe name in a container a token grants. A missing blob (404)
//! is success: the request crossed the network, the credential was obtained and
//! Azure accepted it. A wrong port, a wrong key, or a managed identity off Azure
//! fails with its cause. `--check-config` runs it once; while serving it runs in
//! the background and `/healthz` reports the last result.

use std::sync::Mutex;
use std::time::Duration;

use relay_storage::account::{ClientBuildError, Storage};
use relay_storage::blob::{BlobError, WriterOptions};
use relay_storage::credentials::{StorageAccess, StorageAuth};
use relay_storage::retry::Backoff;
use tokio::sync::watch;

/// The blob the probe asks about; never written.
pub const PROBE_BLOB: &str = "blob-relay-probe";
/// Where to ask when no token names a container.
pub const FALLBACK_CONTAINER: &str = "blob-relay-probe";
/// The scope of Entra ID tokens for Blob Storage.
const STORAGE_SCOPE: &str = "https://storage.azure.com/.default";

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().to_string()
}

/// The longest one check may take, credential included.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(20);

/// Why storage could not be used with the relay's credentials.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("no answer within {} s (credential or network)", CHECK_TIMEOUT.as_secs())]
    Timeout,
    /// Shown by the first line of the credential's error.
    #[error("cannot get an Entra ID token: {}", first_line(&.0.to_string()))]
    EntraToken(azure_core::Error),
    #[error(transparent)]
    Storage(#[from] BlobError),
}

/// Asks storage one question, without retries: its answer is the point.
#[derive(Clone)]
pub struct StorageProbe {
    storage: Storage,
    container: String,
}

impl StorageProbe {
    /// Probes in the first of `containers`, else in `FALLBACK_CONTAINER`.
    pub fn new(access: StorageAccess, containers: &[String]) -> Result<Self, ClientBuildError> {
        let opts = WriterOptions {
            backoff: Backoff {
                max_attempts: 1,
                ..Backoff::default()
            },
            connect_timeout: Duration::from_secs(5),
            patience: relay_storage::watch::Patience::both(Duration::from_secs(10)),
            ..WriterOptions::default()
        };
        Ok(Self {
            storage: Storage::new(access, &opts)?,
            container: containers
                .first()
                .cloned()
                .unwrap_or_else(|| FALLBACK_CONTAINER.to_string()),
        })
    }

    pub fn container(&self) -> &str {
        &self.container
    }

    /// `Ok` when storage answered and accepted the credential.
    pub async fn check(&self) -> Result<(), ProbeError> {
        match tokio::time::timeout(CHECK_TIMEOUT, self.check_inner()).await {
            Ok(r) => r,
            Err(_) => Err(ProbeError::Timeout),
        }
    }

    async fn check_inner(&self) -> Result<(), ProbeError> {
        // An Entra ID token first, on its own: its failure (no managed identity
        // here, CLI not signed in) then reads as such, not as a storage error.
        if let StorageAuth::Entra(credential) = &self.storage.access().auth {
            credential
                .get_token(&[STORAGE_SCOPE], None)
                .await
                .map_err(ProbeError::EntraToken)?;
        }
        let writer = self.storage.writer(&self.container, PROBE_BLOB)?;
        writer.properties().await?;
        Ok(())
    }
}

/// The last probe's result, as `/healthz` and `/metrics` show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reachability {
    /// No check finished yet.
    Unknown,
    Reachable,
    Unreachable(String),
}

/// Shared between the background checker and the health endpoint.
#[derive(Debug)]
pub struct StorageHealth {
    last: Mutex<Reachability>,
}

impl Default for StorageHealth {
    fn default() -> Self {
        Self {
            last: Mutex::new(Reachability::Unknown),
        }
    }
}

impl StorageHealth {
    pub fn get(&self) -> Reachability {
        self.last.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records a result; logs only changes, so a long outage is one line.
    pub fn set(&self, now: Reachability) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if *last != now {
            match &now {
                Reachability::Reachable => tracing::info!("storage reachable"),
                Reachability::Unreachable(cause) => {
                    tracing::warn!(%cause, "storage unreachable: /healthz answers 503");
                }
                Reachability::Unknown => {}
            }
        }
        *last = now;
    }
}

/// Checks every `interval` until shutdown; the first check at once.
pub async fn run(
    probe: StorageProbe,
    health: std::sync::Arc<StorageHealth>,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let result = match probe.check().await {
            Ok(()) => Reachability::Reachable,
            Err(cause) => Reachability::Unreachable(cause.to_string()),
        };
        health.set(result);
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}
