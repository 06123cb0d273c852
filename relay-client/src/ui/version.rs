//! Which build this is (`--version`: the package version and the commit
//! build.rs found), and which build the relay is, as its Plans say.

use std::sync::Mutex;

use relay_proto::logsafe::safe;

relay_proto::build_version!();

/// The relay version last logged: said once, and again only when it changes
/// (another relay behind the balancer), not once per file.
static LAST_RELAY: Mutex<Option<String>> = Mutex::new(None);

/// Logs (at `-v`) the relay's version, from a Plan that carries one.
pub fn note_relay(version: Option<&str>) {
    let Some(version) = version else {
        return;
    };
    let Ok(mut last) = LAST_RELAY.lock() else {
        return;
    };
    // Bounded like the log field: a peer's string is not kept whole.
    let seen: String = version.chars().take(128).collect();
    if last.as_deref() != Some(seen.as_str()) {
        tracing::info!(relay_version = %safe(version), "relay version");
        *last = Some(seen);
    }
}
