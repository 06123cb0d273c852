//! One upload into one blob, the same steps for the relay and for direct mode:
//!
//! 1. `prepare`: refuse early when the commit is bound to fail (`preflight`), then
//!    find the resume point among the blob's uncommitted blocks; a small file
//!    published by one Put Blob skips both (`Probe::UnlessSmall`): its
//!    conditional Put Blob is the check, one storage request per new file;
//! 2. on a refusal, `ours_in_the_way` tells a re-run whose bytes are already the
//!    blob (sealed by our key) from a real refusal (`in_the_way`);
//! 3. `stager` cuts, hashes and stages the bytes from the resume point (the caller
//!    feeds it: a QUIC stream on the relay, the file in direct mode);
//! 4. `commit` publishes only if the SHA-256 of every byte equals each expected
//!    one; the commit's answer confirms it (block IDs bind their bytes).
//!
//! Between the steps the relay talks to its client (Plan, Start, Trailer) and
//! direct mode checks its source; neither repeats the steps themselves.

use std::sync::Arc;

use relay_proto::block_id::{IdSigner, TransferTag};
use relay_proto::md5_state::Md5State;
use relay_proto::plan::BlockPlan;
use relay_proto::resume::{Md5Markers, ResumePoint, find_resume_point};
use relay_storage::blob::BlobProperties;
use relay_storage::publish::{self, Destination, PublishError, Published};
use relay_storage::staging::{Budget, StageError, Staged, Stager};
use relay_storage::store::BlobStore;

use crate::in_the_way;

/// Files up to this size that fit in one block are not probed before their
/// bytes move (`Probe::UnlessSmall`). Sending them costs less than the
/// existence check: on a long path a client has sent this much before any
/// refusal could reach it, and on a re-run the check would find nothing to
/// save. Larger files are probed, so a refused one is
/// refused before it crosses the link.
pub const UNPROBED_MAX: u64 = 4 << 20;

/// Whether `Upload::prepare` asks storage before any byte moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// Always: the caller wants the answer itself (an Offer with the whole
    /// file's SHA-256 looks for a commit of exactly that file).
    Always,
    /// Unless the file is one block of at most `UNPROBED_MAX` bytes: its one
    /// conditional Put Blob refuses exactly what the probe would have, and a
    /// refusal is explained after (`publish::commit_verified`).
    UnlessSmall,
}

/// One file on its way into one blob.
pub struct Upload<'a> {
    store: Arc<dyn BlobStore>,
    dest: Destination<'a>,
    plan: BlockPlan,
    signer: IdSigner,
    /// Keep the whole file's MD5 for the blob's Content-MD5 (`--put-md5`).
    whole_md5: bool,
}

impl<'a> Upload<'a> {
    /// Block IDs are signed with `dest.key` under a tag private to the writer's
    /// owner (the token's holder, or the direct-mode user) and bound to name,
    /// size and block size, so only that owner's own blocks are ever resumed.
    pub fn new(store: Arc<dyn BlobStore>, dest: Destination<'a>, plan: BlockPlan) -> Self {
        let tag = TransferTag::derive(
            dest.key,
            dest.writer.owner,
            dest.container,
            dest.blob,
            dest.size,
            plan.block_size,
        );
        let signer = IdSigner::new(dest.key.clone(), tag);
        Self {
            store,
            dest,
            plan,
            signer,
            whole_md5: false,
        }
    }

    /// Gives the committed blob a Content-MD5 of every byte (`--put-md5`), as
    /// AzCopy and rclone check it. The MD5 is computed from the same bytes as
    /// the SHA-256, across resumes (`BlockState::Md5` markers), never taken
    /// from the client.
    pub fn with_whole_md5(mut self, on: bool) -> Self {
        self.whole_md5 = on;
        self
    }

    pub fn tag(&self) -> TransferTag {
        self.signer.tag()
    }

    pub fn plan(&self) -> BlockPlan {
        self.plan
    }

    pub fn store(&self) -> &Arc<dyn BlobStore> {
        &self.store
    }

    /// Whether `prepare(probe)` asks storage anything.
    fn probes(&self, probe: Probe) -> bool {
        probe == Probe::Always || self.plan.block_count() > 1 || self.dest.size > UNPROBED_MAX
    }

    /// Before any byte moves: the destination must be free (or at the expected
    /// etag), and the longest run of our own staged blocks. A file of one block
    /// has nothing to resume (its only block is its last): no block list to read.
    ///
    /// The two questions go out together, one round trip and not two. Neither
    /// answer depends on the other, and asking in either order is safe: the
    /// commit is conditional and names only IDs bound to their bytes, so a
    /// blob or block list that changes between or after the two reads makes
    /// the commit fail, never publish something else (the race tests run both
    /// orders).
    pub async fn prepare(&self, probe: Probe) -> Result<ResumePoint, PublishError> {
        if !self.probes(probe) {
            return Ok(ResumePoint::fresh());
        }
        let preflight = publish::preflight(&*self.store, &self.dest);
        let uncommitted = if self.plan.block_count() > 1 {
            let (free, blocks) =
                futures::future::join(preflight, self.store.uncommitted_blocks()).await;
            free?;
            blocks?
        } else {
            preflight.await?;
            Vec::new()
        };
        let markers = if self.whole_md5 {
            Md5Markers::Needed
        } else {
            Md5Markers::Ignored
        };
        Ok(find_resume_point(
            &self.plan,
            &self.signer,
            uncommitted.iter().map(|(id, s)| (id.as_slice(), *s)),
            markers,
        ))
    }

    /// After `prepare` refused: the blob's properties when it already holds
    /// exactly the file hashing to `sha256_hex` under our seal (one look, and
    /// only for a refusal that may be ours: `in_the_way`), else the refusal.
    pub async fn ours_in_the_way(
        &self,
        refusal: PublishError,
        sha256_hex: &str,
    ) -> Result<BlobProperties, PublishError> {
        if !in_the_way::may_be_ours(&refusal) {
            return Err(refusal);
        }
        let found = self.store.properties().await?;
        in_the_way::settle(refusal, found, &self.dest, sha256_hex)
    }

    /// A stager that continues at `start` (the resume point, or a fresh start when
    /// the source's prefix did not match its checkpoint).
    pub fn stager(
        &self,
        start: ResumePoint,
        budget: Budget,
        max_inflight: usize,
    ) -> Result<Stager, StageError> {
        let md5 = self
            .whole_md5
            .then(|| start.md5.unwrap_or_else(Md5State::start));
        let stager = Stager::new(
            self.store.clone(),
            self.plan,
            self.signer.clone(),
            start,
            budget,
            max_inflight,
        )?;
        match md5 {
            Some(state) => stager.with_whole_md5(state),
            None => Ok(stager),
        }
    }

    /// Publishes `staged` only if its SHA-256 equals every `expected` one (who has
    /// it, hex digest); the commit's answer is the confirmation.
    pub async fn commit(
        &self,
        staged: &Staged,
        expected: &[(&str, &str)],
    ) -> Result<Published, PublishError> {
        publish::commit_verified(&*self.store, staged, expected, &self.dest).await
    }
}
