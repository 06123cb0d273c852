//! An upload sync's local walk on a thread of its own, running up to `lead`
//! entries ahead of the merge, each entry with its index record.
//!
//! The merge pulls the walk only as fast as the listing arrives, and on a
//! long link the listing is the slow side. Walked ahead, each file is seen
//! (and, through `tap`, a file changed here can be sent early:
//! `relay_proto::sync::early`) up to `lead` names before the merge reaches
//! it. Memory is the lead's entries, whatever the number of files.
//!
//! Entries cross in chunks, not one by one: an unchanged re-run of a million
//! files hands a million entries over, and a channel operation each would
//! cost more than the walk saves.

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::Scope;

use relay_proto::sync::entry::{IndexRecord, LocalEntry};
use relay_proto::sync::join::Gap;

use super::lookahead::Records;

/// One walk entry with the index's record of its name (none: no row).
pub type Walked = Result<(LocalEntry, Option<IndexRecord>), Gap>;

/// Entries handed over at once.
const CHUNK: usize = 256;

/// The merge's side: the walk's entries in its order; each one's record is
/// held in `records` as it is handed on.
pub struct Behind {
    rx: Receiver<Vec<Walked>>,
    chunk: VecDeque<Walked>,
    records: Records,
}

/// Starts `build()`'s walk on a thread of `scope`, up to `lead` entries
/// (rounded up to a chunk) ahead of the returned iterator; `tap` sees each
/// entry, on the walk's thread, before the merge can. The thread ends when
/// the walk does or the iterator is dropped.
pub fn walk_ahead<'scope, B, W, T>(
    scope: &'scope Scope<'scope, '_>,
    lead: usize,
    build: B,
    tap: T,
) -> (Behind, Records)
where
    B: FnOnce() -> W + Send + 'scope,
    W: Iterator<Item = Walked>,
    T: FnMut(&LocalEntry, Option<&IndexRecord>) + Send + 'scope,
{
    let (tx, rx) = sync_channel(lead.div_ceil(CHUNK));
    scope.spawn(move || walk(build(), tap, &tx));
    let records = Records::handed();
    let behind = Behind {
        rx,
        chunk: VecDeque::new(),
        records: records.clone(),
    };
    (behind, records)
}

fn walk<W, T>(walk: W, mut tap: T, tx: &SyncSender<Vec<Walked>>)
where
    W: Iterator<Item = Walked>,
    T: FnMut(&LocalEntry, Option<&IndexRecord>),
{
    let mut chunk = Vec::with_capacity(CHUNK);
    for item in walk {
        if let Ok((local, record)) = &item {
            tap(local, record.as_ref());
        }
        chunk.push(item);
        if chunk.len() == CHUNK && tx.send(std::mem::take(&mut chunk)).is_err() {
            return;
        }
    }
    if !chunk.is_empty() {
        let _ = tx.send(chunk);
    }
}

impl Iterator for Behind {
    type Item = Result<LocalEntry, Gap>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.chunk.is_empty() {
            self.chunk.extend(self.rx.recv().ok()?);
        }
        let item = self.chunk.pop_front()?;
        Some(item.map(|(local, record)| {
            // The plan asks about an entry before it pulls the next; a
            // chunk's worth kept is the same margin `read_ahead` keeps.
            self.records.hold(local.name.clone(), record, CHUNK);
            local
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use relay_proto::sync::entry::FileStat;

    use super::*;

    fn entry(n: usize) -> Walked {
        let stat = FileStat {
            size: n as u64,
            mtime_ns: 0,
            identity: None,
        };
        let local = LocalEntry {
            name: format!("f{n:06}"),
            stat,
        };
        let record = n.is_multiple_of(2).then(|| IndexRecord {
            etag: format!("e{n}"),
            sha256: "ab".into(),
            stat,
        });
        Ok((local, record))
    }

    /// Every entry arrives in the walk's order with its own record, the
    /// tap sees each one before the merge pulls it, and gaps pass through.
    #[test]
    fn entries_arrive_in_order_with_their_records_after_the_tap_saw_them() {
        let tapped = Arc::new(Mutex::new(Vec::new()));
        let seen = tapped.clone();
        std::thread::scope(|scope| {
            let build = || {
                (0..1000)
                    .map(entry)
                    .chain(std::iter::once(Err(Gap("d: unreadable".into()))))
            };
            let tap = move |l: &LocalEntry, _: Option<&IndexRecord>| {
                seen.lock().expect("tap").push(l.name.clone());
            };
            let (behind, records) = walk_ahead(scope, 512, build, tap);
            let mut n = 0;
            for item in behind {
                let Ok(local) = item else {
                    assert_eq!(n, 1000, "the gap comes last");
                    continue;
                };
                assert_eq!(local.name, format!("f{n:06}"));
                assert!(tapped.lock().expect("tap").contains(&local.name));
                let record = records.take(&local.name).expect("held");
                assert_eq!(
                    record.map(|r| r.etag),
                    (n % 2 == 0).then(|| format!("e{n}"))
                );
                n += 1;
            }
            assert_eq!(n, 1000);
        });
    }

    /// The walk stays at most its lead (and the chunk being filled) ahead
    /// of a merge that does not pull.
    #[test]
    fn the_walk_waits_once_its_lead_is_taken() {
        let tapped = Arc::new(Mutex::new(0usize));
        let seen = tapped.clone();
        std::thread::scope(|scope| {
            let tap = move |_: &LocalEntry, _: Option<&IndexRecord>| {
                *seen.lock().expect("tap") += 1;
            };
            let (mut behind, _records) =
                walk_ahead(scope, 2 * CHUNK, || (0..100_000).map(entry), tap);
            // Taking one entry lets the walk fill the channel (2 chunks) and
            // one more chunk it holds while it waits: it then stops.
            assert!(behind.next().is_some());
            let bound = 4 * CHUNK;
            // Deterministic: wait for the walk to block, never for a time.
            let mut last = 0;
            loop {
                std::thread::yield_now();
                let now = *tapped.lock().expect("tap");
                assert!(now <= bound, "{now} entries walked ahead");
                if now == last && now >= 3 * CHUNK {
                    break;
                }
                last = now;
            }
            drop(behind);
        });
    }
}
