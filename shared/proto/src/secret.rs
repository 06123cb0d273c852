//! A secret (a token, an account key) that never appears in Debug output or
//! logs: one type for the wire's tokens and storage's keys alike.

use serde::{Deserialize, Serialize};

/// A secret that never appears in Debug output or logs.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}
