//! Which build a binary is: its package version and the commit its build
//! script found (`shared/build/commit.rs`), in the one form both binaries print
//! after their name (`--version`) and the relay puts in its Plans.
//!
//! A macro, not constants of this crate: `env!` must read the calling
//! binary's package and build script, and a crate every other crate builds on
//! must not rebuild on each commit.

/// Declares `VERSION`, `COMMIT` and `LONG` (`0.1.0 (abc1234)`) in the calling
/// module, from the calling crate's package version and `BLOB_RELAY_COMMIT`.
#[macro_export]
macro_rules! build_version {
    () => {
        /// The package version, e.g. `0.1.0`.
        pub const VERSION: &str = env!("CARGO_PKG_VERSION");
        /// Short hash, `-dirty` when built with uncommitted changes, or `unknown`.
        pub const COMMIT: &str = env!("BLOB_RELAY_COMMIT");
        /// `0.1.0 (abc1234)`: what `--version` prints after the name.
        pub const LONG: &str = concat!(
            env!("CARGO_PKG_VERSION"),
            " (",
            env!("BLOB_RELAY_COMMIT"),
            ")"
        );
    };
}
