//! Where a run's files go: through the relay's connections, or straight to
//! storage (`--direct`, or `--fallback direct` after a failed handshake).
//! `commands::setup::mode` chooses; each file's driver follows.

use crate::relay::links::RelayLinks;
use crate::transfer::direct::Direct;

pub enum Mode {
    Relay(Box<RelayLinks>),
    Direct(Box<Direct>),
}

impl Mode {
    pub fn name(&self) -> &'static str {
        match self {
            Mode::Relay(_) => "relay",
            Mode::Direct(_) => "direct",
        }
    }
}
