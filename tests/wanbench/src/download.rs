//! Download rows (`relay-dl`, `direct-dl-cubic`, `direct-dl-bbr`): before the
//! timed run, the run's files go into the fresh storage through the relay,
//! as the `relay` upload row puts them (sealed by the relay); the row then
//! times `relay-client download` to the site and checks every file that
//! came back against the SHA-256 of its source.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use linklab::{Lab, Side};

use crate::client::{ClientReport, SiteBins};
use crate::cloud::{Cloud, TOKEN, strip_proxies};

/// Bounds a seeding upload that hangs (it crosses no emulated link).
const SEED_CAP: Duration = Duration::from_secs(600);

/// Upload `files` to `container/prefix` through the relay from the cloud
/// namespace, next to the relay: the link stays idle and the timed download
/// finds the blobs an upload through the relay leaves.
pub fn seed(
    lab: &Lab,
    cloud: &Cloud,
    bins: &SiteBins,
    files: &[PathBuf],
    container: &str,
    prefix: &str,
    dir: &Path,
) -> anyhow::Result<()> {
    let out = dir.join(format!("{prefix}.seed.json"));
    let err = dir.join(format!("{prefix}.seed.err"));
    let mut cmd = Command::new(&bins.relay_client);
    cmd.arg("upload")
        .args(files)
        .arg("--relay")
        .arg(cloud.relay_addr.to_string())
        .args(["--relay-cert-sha256", &cloud.fingerprint])
        .arg("--to")
        .arg(format!("{container}/{prefix}"))
        // Its own path cache: the timed rows' warm starts stay theirs.
        .arg("--path-cache")
        .arg(dir.join("paths-seed.json"))
        .args(["--json", "--quiet"])
        .env("RELAY_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .stdout(create(&out)?)
        .stderr(create(&err)?);
    strip_proxies(&mut cmd);
    lab.enter_on_spawn(Side::Cloud, &mut cmd)?;
    let done = crate::child::run_capped(cmd, SEED_CAP)?;
    if done.capped || done.exit_code != Some(0) {
        bail!(
            "seeding {container}/{prefix} through the relay failed (exit {:?}{}; see {})",
            done.exit_code,
            if done.capped { ", capped" } else { "" },
            err.display()
        );
    }
    Ok(())
}

/// The client reported every file downloaded (with our SHA-256 where it
/// gives one), and each file on disk under `got` hashes to its source's.
pub fn verify(
    files: &[(PathBuf, String)],
    got: &Path,
    r: &ClientReport,
) -> anyhow::Result<(bool, Option<String>)> {
    if !r.ok {
        return Ok((false, Some("client reported failure".into())));
    }
    for (path, sha) in files {
        let name = path.file_name().context("a source file without a name")?;
        let local = got.join(name);
        let reported = r
            .files
            .iter()
            .find(|f| Path::new(&f.path).file_name() == Some(name));
        let Some(f) = reported else {
            return Ok((
                false,
                Some(format!("{} missing from the report", local.display())),
            ));
        };
        if !f.committed {
            return Ok((false, Some(format!("{} not downloaded", local.display()))));
        }
        if f.sha256
            .as_deref()
            .is_some_and(|s| !s.eq_ignore_ascii_case(sha))
        {
            return Ok((
                false,
                Some(format!("{}: client SHA-256 differs", local.display())),
            ));
        }
        if !local.is_file() {
            return Ok((false, Some(format!("{} not on disk", local.display()))));
        }
        if !relay_tests::files::sha256_file(&local).eq_ignore_ascii_case(sha) {
            return Ok((
                false,
                Some(format!(
                    "{}: SHA-256 differs from the source",
                    local.display()
                )),
            ));
        }
    }
    Ok((true, None))
}

/// Bytes written under `dir` so far, partial files included (their sidecars
/// not): what a capped download row has on disk by the cap. Counted by the
/// blocks allocated, as a client writing ranges at their offsets (the SDK)
/// leaves holes that a file's length would count.
pub fn bytes_on_disk(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut total = 0;
    for e in entries.flatten() {
        let Ok(meta) = e.metadata() else { continue };
        if meta.is_dir() {
            total += bytes_on_disk(&e.path());
        } else if !is_sidecar(&e.file_name().to_string_lossy()) {
            total += meta.len().min(meta.blocks().saturating_mul(512));
        }
    }
    total
}

/// A partial file's sidecar (`.relay-HEX.meta.relay-partial`; an earlier
/// client's `.NAME.relay-partial.json`): metadata, not bytes of the blob.
fn is_sidecar(name: &str) -> bool {
    name.ends_with(".meta.relay-partial") || name.ends_with(".relay-partial.json")
}

/// Start a row's destination empty (a reused --work-dir keeps old files,
/// which the client would skip as identical).
pub fn clear(dir: &Path) -> anyhow::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("remove {}", dir.display())),
    }
}

fn create(p: &Path) -> anyhow::Result<std::fs::File> {
    std::fs::File::create(p).with_context(|| format!("create {}", p.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_partial_files_but_not_their_sidecars() {
        let dir = std::env::temp_dir().join(format!("wanbench-dl-{}", std::process::id()));
        let sub = dir.join("p");
        std::fs::create_dir_all(&sub).expect("mkdir");
        std::fs::write(sub.join("a.bin"), [0u8; 10]).expect("write");
        std::fs::write(sub.join(".b.bin.relay-partial"), [0u8; 5]).expect("write");
        std::fs::write(sub.join(".b.bin.relay-partial.json"), [0u8; 99]).expect("write");
        std::fs::write(sub.join(".relay-0a.meta.relay-partial"), [0u8; 77]).expect("write");
        // A hole of 1 MiB before one written block counts as that block.
        let holed = std::fs::File::create(sub.join("c.bin")).expect("create");
        holed.set_len(1 << 20).expect("extend");
        std::os::unix::fs::FileExt::write_all_at(&holed, &[1u8; 4096], (1 << 20) - 4096)
            .expect("write");
        let total = bytes_on_disk(&dir);
        assert!((15 + 4096..15 + (1 << 20)).contains(&total), "{total}");
        clear(&dir).expect("clear");
        assert_eq!(bytes_on_disk(&dir), 0);
        clear(&dir).expect("clearing nothing is fine");
    }
}
