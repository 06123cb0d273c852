//! Who the peer is and what it may do: tokens-file tokens (`tokens_file`,
//! reloaded by `auth::watch`) and Entra ID access tokens (`entra`), checked in
//! one place (`auth::authenticate`). May import `telemetry` only; never
//! `connection`, `state`, `transfer` or `operations`.

pub mod access;
pub mod auth;
pub mod entra;
pub mod tokens_file;
