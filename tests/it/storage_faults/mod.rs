//! Storage that misbehaves (through the fault proxy) or lies, under uploads and downloads.

mod download;
mod first_range;
mod lies;
mod upload;
