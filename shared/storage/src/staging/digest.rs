//! The hashes every byte goes through as it is read: the SHA-256 (whose state
//! before and after a block its ID carries) and, when kept, the whole file's MD5.

use sha2::{Digest, Sha256};

use relay_proto::checkpoint::Checkpoint;
use relay_proto::md5_state::Md5State;

use super::StageError;

pub(super) struct Digests {
    sha256: Sha256,
    /// The hash state before the block being filled: its ID continues it.
    follows: Checkpoint,
    /// The whole file's MD5 so far (`--put-md5`).
    md5: Option<md5::Md5>,
}

impl Digests {
    /// Continues the SHA-256 from `start` (a resume point's checkpoint).
    pub(super) fn from(start: Checkpoint) -> Result<Self, StageError> {
        let sha256 = start.restore().ok_or(StageError::UnusableCheckpoint)?;
        Ok(Self {
            sha256,
            follows: start,
            md5: None,
        })
    }

    /// Keeps the whole file's MD5 too, continuing `state`.
    pub(super) fn keep_md5(&mut self, state: Md5State) -> Result<(), StageError> {
        self.md5 = Some(state.restore().ok_or(StageError::UnusableMd5State)?);
        Ok(())
    }

    pub(super) fn update(&mut self, bytes: &[u8]) {
        self.sha256.update(bytes);
        if let Some(md5) = &mut self.md5 {
            md5::Digest::update(md5, bytes);
        }
    }

    /// The SHA-256 state after every byte so far, if it can be a checkpoint.
    pub(super) fn after(&self) -> Option<Checkpoint> {
        Checkpoint::of(&self.sha256)
    }

    pub(super) fn follows(&self) -> Checkpoint {
        self.follows
    }

    /// The SHA-256 of every byte so far.
    pub(super) fn sha256_so_far(&self) -> [u8; 32] {
        self.sha256.clone().finalize().into()
    }

    /// The MD5 state after every byte so far, when kept.
    pub(super) fn md5_state(&self) -> Option<Md5State> {
        self.md5.as_ref().and_then(Md5State::of)
    }

    /// A block's bytes are all hashed: the next block's ID continues from here.
    pub(super) fn end_block(&mut self) {
        if let Some(after) = self.after() {
            self.follows = after;
        }
    }

    /// The SHA-256 and, when kept, the MD5 of every byte.
    pub(super) fn finish(self) -> ([u8; 32], Option<[u8; 16]>) {
        let md5 = self.md5.map(|md5| md5::Digest::finalize(md5).into());
        (self.sha256.finalize().into(), md5)
    }
}
