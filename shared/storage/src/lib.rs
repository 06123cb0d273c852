//! Blob Relay's storage layer, used by the relay and by the client's direct mode:
//! Azure credentials and SAS tokens (`credentials`, `sas`), one account's HTTP
//! client and writers (`account`), what its writers share of the Azure SDK
//! (`sdk`), the blob writer over it (`blob`), staging a file's blocks with bounded memory
//! (`staging`), verify-then-commit publishing (`publish`), the retry schedule
//! (`retry`) and when a request is given up (`watch`, fed by `progress`);
//! downloads read through `read` (a blob's ranges) and `listing` (a
//! container's pages, with the relay's seals when asked); `delete` removes
//! one version of a blob (`If-Match`).
//! Every upload request goes through one seam, `store::BlobStore`,
//! with the Azure implementation (`blob::BlobWriter`) and an in-memory twin that
//! can interleave writers deterministically (`memory`); every download request
//! through another, `source::BlobSource`, with the Azure implementation
//! (`source::ContainerReader`) and an in-memory twin over the same blobs
//! (`memory_source`), where a writer can replace or delete a blob between two
//! of a reader's requests.
//!
//! Pure rules (block IDs, checkpoints, resume points) come from `relay-proto`.

pub mod account;
pub mod backtraces;
pub mod blob;
pub mod checksum;
pub mod credentials;
pub mod delete;
pub mod error;
pub mod first_range;
pub mod listing;
pub mod memory;
pub mod memory_source;
pub mod options;
pub mod progress;
pub mod publish;
mod put_blob;
pub mod read;
pub mod retry;
pub mod sas;
mod sdk;
pub mod source;
pub mod staging;
pub mod store;
pub mod watch;
