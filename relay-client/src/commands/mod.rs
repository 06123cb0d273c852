//! The `upload` command and what every command shares: its flags (`args`,
//! `connection_args`), the setup decided before the first file moves
//! (`setup`), Ctrl-C (`interrupt`). `download`, `watch` and `bench` are
//! commands in folders of their own beside this one.
//!
//! May import `transfer`, `relay`, `ui` and `sign_in`; never `cli`.

pub mod args;
pub mod connection_args;
pub mod in_flight;
pub mod interrupt;
pub mod setup;
pub mod upload;
