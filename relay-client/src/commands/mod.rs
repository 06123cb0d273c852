//! The commands that move files: `upload`, `download`, `sync` (and their
//! flags, `args`, `download_args`, `sync_args`, `connection_args`), `ls` (a
//! container's blobs, `ls_args`), and the setup every command
//! decides before the first file moves (`setup`). Each hands its items to
//! the runner (`run`) and a driver (`transfer`, `download`, `watch`).
//!
//! May import the drivers and the libraries; never `cli`.

pub mod args;
pub mod connection_args;
pub mod download;
pub mod download_args;
pub mod ls;
pub mod ls_args;
pub mod output_args;
pub mod setup;
pub mod sync;
pub mod sync_args;
pub mod upload;
pub mod watch;
pub mod watch_args;
