//! `relay-client download` end to end, and the relay's side of reads and listings spoken frame by frame.

mod compression;
mod direct;
mod end_to_end;
mod listing;
mod partials;
mod placing;
mod relay_frames;
mod relay_listing;
mod sources;
