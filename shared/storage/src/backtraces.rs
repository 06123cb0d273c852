//! The Azure SDK builds an error, and with it a `std::backtrace::Backtrace`,
//! each time it looks up an optional header that is absent: every request, in
//! its client-request-id policy. With `RUST_BACKTRACE=1` in the environment
//! (common on developer machines) each of those errors walks the stack
//! (docs/PERFORMANCE.md, "Small files: backtraces nobody reads"), and the
//! errors are dropped unseen, so the walk buys nothing.

/// Turns off backtraces captured by libraries (`RUST_LIB_BACKTRACE=0`) unless
/// the user chose a value. Panics still print theirs under `RUST_BACKTRACE`.
///
/// Call first thing in `main`, before any thread exists: the environment is
/// process-wide and std reads this variable once, at the first capture.
pub fn no_library_backtraces() {
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // SAFETY: called at the top of a single-threaded `main` (see above), so
        // no other thread can read or write the environment concurrently.
        unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "0") };
    }
}
