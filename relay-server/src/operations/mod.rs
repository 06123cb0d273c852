//! What operators touch: the flags and config file (`config`,
//! `command_args`, `entra_config`), the subcommands (`commands`), the state
//! directory (`state_dir`), and the health listener (`http`, `health`,
//! `probe`). Beside `transfer`: it may import `state`, `sign_in`,
//! `connection` and `telemetry`; `configuration` turns its flags into the
//! relay's `Config`, and `main.rs` runs its subcommands and listener.

pub mod command_args;
pub mod commands;
pub mod config;
pub mod entra_config;
pub mod health;
pub mod http;
pub mod probe;
pub mod state_dir;
