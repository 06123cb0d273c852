//! The local side of downloads, for the tests of what a download leaves on
//! disk: blobs nothing checks whole (`ranges`), the partial files a run left,
//! a client stopped mid-file, and a case-insensitive file system (exFAT,
//! through FUSE, on a loop device) in a mount namespace of the client's own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rand::{RngCore, SeedableRng};
use relay_storage::store::{Commit, Condition};
use sha2::{Digest, Sha256};

use crate::blobs::writer;
use crate::download_client::T;

/// `size` pseudo-random bytes from `seed`.
pub fn pattern(size: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; size];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

pub fn sha_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// Commits `data` as blocks of 1 MiB with neither a Content-MD5 nor a valid
/// seal: a blob nothing checks whole, read with storage's MD5 of each range
/// (`check: ranges`). Returns its SHA-256.
pub async fn put_ranges(container: &str, name: &str, data: &[u8]) -> String {
    let w = writer(container, name);
    let mut ids = Vec::new();
    for (i, chunk) in data.chunks(1 << 20).enumerate() {
        let id = format!("block-{i:06}").into_bytes();
        w.stage_block(&id, bytes::Bytes::copy_from_slice(chunk))
            .await
            .unwrap_or_else(|e| panic!("stage {name}: {e}"));
        ids.push(id);
    }
    let sha = sha_hex(data);
    let meta = BTreeMap::new();
    w.commit(
        ids,
        &Commit {
            sha256_hex: &sha,
            seal: "not-a-seal",
            content_type: None,
            content_md5: None,
            metadata: &meta,
            condition: &Condition::Always,
        },
    )
    .await
    .unwrap_or_else(|e| panic!("commit {name}: {e}"));
    sha
}

/// The partial files (not their sidecars) under `dir`, at any depth: names
/// ending in `.relay-partial` that are no sidecar (`.meta.relay-partial`, or
/// an older client's `.relay-partial.json`).
pub fn partial_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().to_string();
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(partial_files(&p));
        } else if name.ends_with(".relay-partial") && !name.ends_with(".meta.relay-partial") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// Waits until a partial file under `dir` holds more than `min` bytes while
/// `child` still runs; its path and length.
pub async fn partial_grown(
    dir: &Path,
    min: u64,
    child: &mut tokio::process::Child,
) -> (PathBuf, u64) {
    let t0 = std::time::Instant::now();
    loop {
        for p in partial_files(dir) {
            let len = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
            if len > min {
                return (p, len);
            }
        }
        assert!(t0.elapsed() < T, "no partial file grew past {min} bytes");
        assert!(
            child.try_wait().ok().flatten().is_none(),
            "the client finished before its partial file grew past {min} bytes"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until the partial file `partial` holds more than `min` bytes while
/// `child` still runs, then kills the child (SIGKILL) and reaps it; the
/// length the file had grown to before the kill.
pub async fn kill_when_grown(partial: &Path, min: u64, child: &mut tokio::process::Child) -> u64 {
    let t0 = std::time::Instant::now();
    let held = loop {
        let len = std::fs::metadata(partial).map(|m| m.len()).unwrap_or(0);
        if len > min {
            break len;
        }
        assert!(t0.elapsed() < T, "the partial file never grew");
        assert!(
            child.try_wait().ok().flatten().is_none(),
            "the client finished too soon"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    kill9(child).await;
    held
}

/// SIGKILL to a child this test started, and its end.
pub async fn kill9(child: &mut tokio::process::Child) {
    let pid = child.id().unwrap_or_else(|| panic!("no pid")) as libc::pid_t;
    // SAFETY: kill on the pid of a child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let _ = child.wait().await;
}

/// Runs the client with `dir` bind-mounted read-only over itself, in a mount
/// namespace of its own; `None` when this test cannot (not root, no unshare).
pub async fn in_read_only(args: &[String], dir: &Path) -> Option<std::process::Output> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let script =
        r#"mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 97; shift; exec "$@""#;
    let envs = client_env();
    let mut cmd = tokio::process::Command::new("unshare");
    cmd.arg("-m")
        .arg("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .arg(dir)
        .arg(crate::binary("relay-client"))
        .args(args)
        .kill_on_drop(true);
    set_env(&mut cmd, envs);
    let out = tokio::time::timeout(T, cmd.output()).await.ok()?.ok()?;
    (out.status.code() != Some(97)).then_some(out)
}

pub(crate) type Envs = Vec<(std::ffi::OsString, Option<std::ffi::OsString>)>;

/// The environment `client_command` gives the client.
pub(crate) fn client_env() -> Envs {
    let cmd = crate::client_command(&[], &[]);
    cmd.as_std()
        .get_envs()
        .map(|(k, v)| (k.to_os_string(), v.map(|v| v.to_os_string())))
        .collect()
}

pub(crate) fn set_env(cmd: &mut tokio::process::Command, envs: Envs) {
    for (k, v) in envs {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
}

/// What one client run in the exFAT file system did: its exit status, its
/// stdout, stderr, and `sha256sum` of every file it left (relative paths).
#[derive(Debug)]
pub struct FoldedRun {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub sums: Vec<(String, String)>,
}

/// Why a case-insensitive file system cannot be had here (`None`: it can).
/// The kernel here may lack vfat, exFAT and Unicode case folding (ext4 and
/// tmpfs `casefold`); exFAT through FUSE needs only /dev/fuse, a loop device
/// and the exfat-fuse and exfatprogs packages (scripts/setup installs them).
pub fn exfat_missing() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (a loop device and a mount namespace)".into());
    }
    for tool in [
        "mkfs.exfat",
        "mount.exfat-fuse",
        "losetup",
        "unshare",
        "fusermount",
    ] {
        let found = std::env::var_os("PATH").is_some_and(|p| {
            std::env::split_paths(&p).any(|d| d.join(tool).is_file())
                || Path::new("/usr/sbin").join(tool).is_file()
                || Path::new("/sbin").join(tool).is_file()
        });
        if !found {
            return Some(format!(
                "{tool} is missing (apt-get install exfat-fuse exfatprogs)"
            ));
        }
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".into());
    }
    None
}

/// Runs the client `rounds` times, each into a fresh folder of one exFAT file
/// system (case-insensitive, as exFAT drives are) mounted through FUSE from
/// an image file on a loop device, in a mount namespace of its own; each
/// round's folder is hashed and removed. `args` lack `--to`; each run gets
/// `--to MOUNT/rN`. `Err`: the file system could not be mounted (and why).
pub async fn in_exfat(args: &[String], rounds: usize) -> Result<Vec<FoldedRun>, String> {
    let work = crate::files::Scratch::new("exfat");
    let img = work.path("fs.img");
    let mnt = work.path("mnt");
    let out = work.path("out");
    for d in [&mnt, &out] {
        std::fs::create_dir_all(d).map_err(|e| e.to_string())?;
    }
    let f = std::fs::File::create(&img).map_err(|e| e.to_string())?;
    f.set_len(256 << 20).map_err(|e| e.to_string())?;
    let mkfs = std::process::Command::new("mkfs.exfat")
        .arg(&img)
        .output()
        .map_err(|e| format!("mkfs.exfat: {e}"))?;
    if !mkfs.status.success() {
        return Err(format!(
            "mkfs.exfat: {}",
            String::from_utf8_lossy(&mkfs.stderr)
        ));
    }
    let script = r#"
img=$1; mnt=$2; out=$3; rounds=$4; shift 4
dev=$(losetup -f --show "$img") || exit 97
trap 'cd /; fusermount -u "$mnt" 2>/dev/null || umount "$mnt"; losetup -d "$dev"' EXIT
mount.exfat-fuse "$dev" "$mnt" >"$out/mount.log" 2>&1 || exit 97
i=0
while [ "$i" -lt "$rounds" ]; do
    i=$((i + 1))
    "$@" --to "$mnt/r$i" >"$out/r$i.out" 2>"$out/r$i.err"
    echo $? >"$out/r$i.rc"
    (cd "$mnt/r$i" 2>/dev/null && find . -type f -exec sha256sum {} +) >"$out/r$i.sums"
    rm -rf "$mnt/r$i"
done
"#;
    let envs = client_env();
    let mut sh = tokio::process::Command::new("unshare");
    sh.arg("-m")
        .arg("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .arg(&img)
        .arg(&mnt)
        .arg(&out)
        .arg(rounds.to_string())
        .arg(crate::binary("relay-client"))
        .args(args)
        .kill_on_drop(true);
    set_env(&mut sh, envs);
    folded_rounds(sh, &out, rounds).await
}

/// Runs a script that mounts exFAT and writes each round's `rI.rc`, `.out`,
/// `.err` and `.sums` (sha256sum lines) into `out`; the rounds as it left
/// them. Exit 97 from the script: the mount itself failed.
pub(crate) async fn folded_rounds(
    mut sh: tokio::process::Command,
    out: &Path,
    rounds: usize,
) -> Result<Vec<FoldedRun>, String> {
    let ran = tokio::time::timeout(T * 4, sh.output())
        .await
        .map_err(|_| "the exFAT rounds did not finish".to_string())?
        .map_err(|e| format!("unshare: {e}"))?;
    if ran.status.code() == Some(97) {
        let log = std::fs::read_to_string(out.join("mount.log")).unwrap_or_default();
        return Err(format!(
            "cannot mount exFAT through FUSE on a loop device: {log}"
        ));
    }
    let read = |name: String| std::fs::read_to_string(out.join(name)).unwrap_or_default();
    Ok((1..=rounds)
        .map(|i| FoldedRun {
            code: read(format!("r{i}.rc")).trim().parse().ok(),
            stdout: read(format!("r{i}.out")),
            stderr: read(format!("r{i}.err")),
            sums: read(format!("r{i}.sums"))
                .lines()
                .filter_map(|l| {
                    let (sha, path) = l.split_once("  ")?;
                    Some((path.trim_start_matches("./").to_string(), sha.to_string()))
                })
                .collect(),
        })
        .collect())
}
