//! `relay-client watch` end to end: uploads as files arrive, after-upload actions, relay outages, restarts and many files.

mod after_upload;
mod end_to_end;
mod outage;
mod restart;
mod scale;
