//! Each owner's share of the memory budget (`--token-share`): a token or an
//! Entra ID principal may hold at most this much of the block buffers at once,
//! so one caller cannot take all of them.
//!
//! A share exists while its owner has a transfer that holds or may take
//! memory: Entra ID principals are as many as the tenant has, so an entry
//! whose last transfer ended (nobody holds the share, no memory is taken from
//! it) is dropped the next time a share is handed out. The map is then bounded
//! by the owners with transfers running, not by every owner ever seen.

use std::collections::HashMap;
use std::sync::Mutex;

use relay_proto::id_key::Owner;
use relay_storage::staging::Budget;
use tokio::sync::OwnedSemaphorePermit;

/// Budget memory held for one caller until its bytes are gone: from its
/// share, then from the relay's budget (`Shared::hold`).
pub type Held = (OwnedSemaphorePermit, OwnedSemaphorePermit);

pub struct Shares {
    bytes: u64,
    map: Mutex<HashMap<Owner, Budget>>,
}

impl Shares {
    /// Shares of `bytes` each.
    pub fn new(bytes: u64) -> Self {
        Self {
            bytes,
            map: Mutex::new(HashMap::new()),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Owner, Budget>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The share of `owner` (the one its running transfers use, or a new one),
    /// after dropping the shares no transfer uses any more.
    pub fn of(&self, owner: &Owner) -> Budget {
        let mut map = self.map();
        // Under the lock no one can take a handle to an unused share, so one
        // found unused stays unused until it is gone.
        map.retain(|o, share| o == owner || !share.is_unused());
        map.entry(*owner)
            .or_insert_with(|| Budget::new(self.bytes))
            .clone()
    }

    /// Blocks waiting for memory on any share right now.
    pub fn waiting(&self) -> u64 {
        self.map().values().map(Budget::waiting).sum()
    }

    /// Owners with a share now.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_share_is_dropped_once_its_last_transfer_let_it_go() {
        let shares = Shares::new(1 << 20);
        let (a, b) = (Owner::of_token("a"), Owner::of_token("b"));
        let share_a = shares.of(&a);
        let held = share_a
            .take(64 << 10)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        drop(share_a);
        // a's transfer ended but its memory is still out (a block in flight):
        // a's share stays, so a new transfer of a's cannot take it twice.
        let _ = shares.of(&b);
        assert_eq!(shares.len(), 2);
        assert_eq!(shares.of(&a).in_use_bytes(), 64 << 10);
        drop(held);
        // Nothing of a's or b's in use: each goes when another share is asked for.
        let _ = shares.of(&b);
        assert_eq!(shares.len(), 1);
        // A thousand principals one after another: never more than one share.
        for i in 0..1000 {
            let _ = shares.of(&Owner::of_token(&format!("principal-{i}")));
            assert_eq!(shares.len(), 1);
        }
    }
}
