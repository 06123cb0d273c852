//! AzCopy for the tests and the WAN lab: the Linux binary of the pinned npm
//! package `@azure-tools/azcopy-linux` (package.json), which `scripts/setup`
//! installs with `npm ci` together with Debian's `libsecret-1-0` it links to.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

/// Where `npm ci` puts the binary, under the repository root.
pub const NPM_PATH: &str = "node_modules/@azure-tools/azcopy-linux/dist/bin/azcopy_linux_amd64";

/// The AzCopy binary, made executable (npm unpacks it without the bit), or
/// what to run to install it.
pub fn find() -> Result<PathBuf, String> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(NPM_PATH);
    let meta = std::fs::metadata(&p).map_err(|e| {
        format!(
            "AzCopy is not installed at {} ({e}): run scripts/setup (npm ci, libsecret-1-0)",
            p.display()
        )
    })?;
    if meta.permissions().mode() & 0o111 != 0o111 {
        let mut perms = meta.permissions();
        perms.set_mode(perms.mode() | 0o755);
        std::fs::set_permissions(&p, perms)
            .map_err(|e| format!("chmod +x {}: {e}", p.display()))?;
    }
    Ok(p)
}

/// `find`, for tests: panics with what to run when AzCopy is missing. A
/// machine set up by `scripts/setup` has it, and a test that skipped would
/// hide one that was not.
pub fn azcopy_bin() -> PathBuf {
    find().unwrap_or_else(|e| panic!("{e}"))
}
