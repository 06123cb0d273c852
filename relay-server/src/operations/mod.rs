//! What operators touch: the flags and config file (`config`,
//! `command_args`, `entra_config`), the subcommands (`commands`), the state
//! directory (`state_dir`), and the health listener (`http`, `health`,
//! `probe`). The top layer: it may import every other one, and none imports
//! it except `lib.rs` and `main.rs`.

pub mod command_args;
pub mod commands;
pub mod config;
pub mod entra_config;
pub mod health;
pub mod http;
pub mod probe;
pub mod state_dir;
