//! What the read-side fault matrix (`tests/it/storage_faults/download.rs`) runs
//! on: storage behind the fault proxy, reached by a real relay or by the
//! client's `--direct`; blobs of each kind a download checks differently
//! (sealed, Content-MD5, neither), put straight into Azurite; and the files a
//! download placed, each hashed.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use md5::{Digest as _, Md5};
use relay_proto::id_key::IdKey;
use relay_storage::blob::WriterOptions;
use relay_storage::retry::Backoff;
use relay_storage::store::{Commit, Condition};
use sha2::Sha256;

use crate::azurite::shared_azurite;
use crate::blobs::writer;
use crate::download_client::s;
use crate::files::Scratch;
use crate::proxy::{FaultProxy, Schedule};
use crate::relay::{RelayHandle, RelayOptions};

/// Both ways give up a storage request that makes no progress for this long.
pub const STALL: Duration = Duration::from_secs(2);

/// The relay's attempts per storage request in these tests (the client's
/// `--direct` keeps its own: `Backoff::default`, 8).
pub const RELAY_ATTEMPTS: u32 = 5;

/// How a download reaches storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    Relay,
    Direct,
}

impl Way {
    /// Attempts one storage request gets before the failure is the caller's.
    pub fn attempts(self) -> u32 {
        match self {
            Way::Relay => RELAY_ATTEMPTS,
            Way::Direct => Backoff::default().max_attempts,
        }
    }
}

/// How a blob's bytes are checked when it is downloaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Sealed by the key of the way that reads it (the relay's, or the
    /// direct client's): the file's SHA-256 is checked.
    Sealed,
    /// No seal that holds, a Content-MD5: the file's MD5 is checked.
    ContentMd5,
    /// Neither: storage's MD5 of each range is checked.
    Ranges,
}

impl Kind {
    /// The report's `check` for a blob of this kind.
    pub fn check(self) -> &'static str {
        match self {
            Kind::Sealed => "sealed",
            Kind::ContentMd5 => "content_md5",
            Kind::Ranges => "ranges",
        }
    }
}

/// Storage behind a fault proxy, a fresh container, and the way to it.
pub struct Setup {
    pub way: Way,
    pub proxy: FaultProxy,
    pub container: String,
    /// The relay, when the way is through one.
    pub relay: Option<RelayHandle>,
    /// The key whose seal the way's reader trusts.
    pub key: IdKey,
    /// The direct client's key file (holds `key`).
    key_dir: Scratch,
}

impl Setup {
    pub async fn new(way: Way, tag: &str) -> Self {
        relay_transport::install_crypto_provider();
        let container = crate::blobs::new_container(tag).await;
        let azurite = SocketAddr::from(([127, 0, 0, 1], shared_azurite().port));
        let proxy = FaultProxy::start(azurite, Schedule::seeded(56)).await;
        let key_dir = Scratch::new("rf-key");
        let (relay, key) = match way {
            Way::Relay => {
                let writer = WriterOptions {
                    backoff: Backoff {
                        initial: Duration::from_millis(20),
                        cap: Duration::from_millis(200),
                        max_attempts: RELAY_ATTEMPTS,
                    },
                    patience: relay_storage::watch::Patience::both(STALL),
                    ..WriterOptions::default()
                };
                let relay = RelayHandle::start(
                    shared_azurite().storage_at(&proxy.url(), writer),
                    RelayOptions {
                        limited_to: format!("{container}:rw"),
                        ..Default::default()
                    },
                );
                let key = relay.id_key();
                (Some(relay), key)
            }
            Way::Direct => {
                let key = IdKey::load_or_create(&key_dir.path("direct.key"))
                    .unwrap_or_else(|e| panic!("{e}"));
                (None, key)
            }
        };
        Self {
            way,
            proxy,
            container,
            relay,
            key,
            key_dir,
        }
    }

    /// `download SOURCE --to DIR --json` this way.
    pub fn download_args(&self, source: &str, to: &Path) -> Vec<String> {
        let mut a = s(&[
            "download",
            source,
            "--to",
            to.to_str().unwrap_or_default(),
            "--json",
        ]);
        match &self.relay {
            Some(relay) => a.extend(crate::download_client::relay_flags(relay)),
            None => a.extend(s(&[
                "--direct",
                "--storage-url",
                &self.proxy.url(),
                "--account-key",
                crate::DEV_KEY,
                "--id-key-file",
                self.key_dir.path("direct.key").to_str().unwrap_or_default(),
                "--storage-stall-timeout",
                &format!("{}s", STALL.as_secs()),
            ])),
        }
        a
    }

    /// Puts `data` as `name`, checked as `kind` says, straight into Azurite
    /// (not through the proxy): two blocks and a Put Block List, so storage
    /// sets no Content-MD5 of its own. Returns the SHA-256 (hex).
    pub async fn put(&self, name: &str, data: &[u8], kind: Kind) -> String {
        let sha = hex::encode(Sha256::digest(data));
        let seal = match kind {
            Kind::Sealed => self
                .key
                .seal(&self.container, name, data.len() as u64, &sha),
            Kind::ContentMd5 | Kind::Ranges => "not-a-seal".into(),
        };
        let md5: [u8; 16] = Md5::digest(data).into();
        let w = writer(&self.container, name);
        let half = data.len() / 2;
        // Two blocks; none empty (a blob of 0 bytes is an empty block list).
        let mut ids = Vec::new();
        for (i, part) in [&data[..half], &data[half..]].into_iter().enumerate() {
            if part.is_empty() {
                continue;
            }
            let id = format!("block-{i:02}").into_bytes();
            w.stage_block(&id, Bytes::copy_from_slice(part))
                .await
                .unwrap_or_else(|e| panic!("stage {name}: {e}"));
            ids.push(id);
        }
        let meta = std::collections::BTreeMap::new();
        w.commit(
            ids,
            &Commit {
                sha256_hex: &sha,
                seal: &seal,
                content_type: None,
                content_md5: (kind == Kind::ContentMd5).then_some(md5),
                metadata: &meta,
                condition: &Condition::Always,
            },
        )
        .await
        .unwrap_or_else(|e| panic!("commit {name}: {e}"));
        sha
    }

    pub async fn stop(self) {
        if let Some(relay) = self.relay {
            relay.stop().await;
        }
    }
}

/// Every file under `dir` but a download's own partial files and sidecars
/// (relative path, SHA-256), sorted.
pub fn placed(dir: &Path) -> Vec<(String, String)> {
    crate::download_client::tree(dir)
        .into_iter()
        .filter(|(path, _)| !path.contains(".relay-partial"))
        .collect()
}
