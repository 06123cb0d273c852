//! Where storage meets the protocol. One upload pipeline for the relay and the
//! client's direct mode (`upload`): preflight, the "already committed" check,
//! resume lookup, staging and verify-then-commit, all through the storage seam
//! (`relay_storage::store::BlobStore`); and the one mapping of storage failures to
//! the wire's codes (`failure`), used by the relay's answers and direct mode's
//! report alike.

pub mod failure;
pub mod in_the_way;
pub mod upload;

#[cfg(test)]
mod race_tests;
#[cfg(test)]
mod read_race_tests;
#[cfg(test)]
mod reading_tests;
#[cfg(test)]
mod upload_tests;
