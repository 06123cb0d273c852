//! Signing in with Entra ID: the relay's verifier, its signing keys, and the client's token fetching.

mod client;
mod relay;
mod signing_keys;
