//! What carrying out a batch of deletes tells the person: one event per
//! candidate, and the counts at the end.

/// What became of one candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `--dry-run`: it would be deleted; nothing was.
    WouldDelete,
    Deleted,
    /// Nothing was there to delete any more (someone else removed it).
    AlreadyGone,
    /// Kept: it is no longer what the merge saw (a local file changed since
    /// this machine placed it, or a blob written after the listing).
    KeptChanged(String),
    /// Not deleted, and it should have been: the reason.
    Failed(String),
}

/// One candidate's outcome, by its name below DEST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteEvent {
    pub name: String,
    pub outcome: Outcome,
}

/// Where events go as they happen (the report, `--json`'s lines).
pub trait DeleteSink {
    fn event(&mut self, event: DeleteEvent);
}

impl DeleteSink for Vec<DeleteEvent> {
    fn event(&mut self, event: DeleteEvent) {
        self.push(event);
    }
}

/// The counts of one run's deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeleteSummary {
    /// `--dry-run`: the deletes that would have been made.
    pub would_delete: u64,
    pub deleted: u64,
    pub already_gone: u64,
    /// Kept because they changed after the merge saw them.
    pub kept_changed: u64,
    /// Local files kept because this machine did not place them, or they
    /// changed since (without `--delete-unknown`).
    pub kept_unknown: u64,
    pub failed: u64,
}

impl DeleteSummary {
    /// Counts `outcome` and hands it to `sink`.
    pub(super) fn record(&mut self, sink: &mut dyn DeleteSink, name: String, outcome: Outcome) {
        let count = match outcome {
            Outcome::WouldDelete => &mut self.would_delete,
            Outcome::Deleted => &mut self.deleted,
            Outcome::AlreadyGone => &mut self.already_gone,
            Outcome::KeptChanged(_) => &mut self.kept_changed,
            Outcome::Failed(_) => &mut self.failed,
        };
        *count += 1;
        sink.event(DeleteEvent { name, outcome });
    }
}

/// Why a batch stopped part way (what had been done is in the summary).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// The destination refused to delete at all (the grant): one refusal
    /// ends every delete.
    Refused(String),
    /// The spooled candidates could not be read back.
    Spill(String),
}
