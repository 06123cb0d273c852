//! `relay-client sync` run again and again into one folder of a
//! case-insensitive file system (exFAT through FUSE on a loop device, in a
//! mount namespace of the client's own; see `download_local::exfat_missing`
//! for what it needs), the folder kept between runs so re-runs can be seen.

use std::path::Path;

use crate::download_local::{FoldedRun, client_env, folded_rounds, set_env};

/// Runs the client `rounds` times with `args(mount)` (the arguments after
/// the binary; DEST is `mount/dest`), the file system mounted once for all
/// rounds; after each round every file below `mount/dest` is hashed
/// (relative to it, as the file system names it). Every `every` rounds
/// `mount/dest` is emptied and `index` (an SQLite file outside the mount)
/// removed, so each group of `every` starts afresh.
pub async fn sync_in_exfat(
    args: impl Fn(&Path) -> Vec<String>,
    rounds: usize,
    every: usize,
    index: &Path,
) -> Result<Vec<FoldedRun>, String> {
    let work = crate::files::Scratch::new("exfat-sync");
    let (img, mnt, out) = (work.path("fs.img"), work.path("mnt"), work.path("out"));
    for d in [&mnt, &out] {
        std::fs::create_dir_all(d).map_err(|e| e.to_string())?;
    }
    let f = std::fs::File::create(&img).map_err(|e| e.to_string())?;
    f.set_len(64 << 20).map_err(|e| e.to_string())?;
    let mkfs = std::process::Command::new("mkfs.exfat")
        .arg(&img)
        .output()
        .map_err(|e| format!("mkfs.exfat: {e}"))?;
    if !mkfs.status.success() {
        let why = String::from_utf8_lossy(&mkfs.stderr);
        return Err(format!("mkfs.exfat: {why}"));
    }
    let script = r#"
img=$1; mnt=$2; out=$3; rounds=$4; every=$5; index=$6; shift 6
dev=$(losetup -f --show "$img") || exit 97
trap 'cd /; fusermount -u "$mnt" 2>/dev/null || umount "$mnt"; losetup -d "$dev"' EXIT
mount.exfat-fuse "$dev" "$mnt" >"$out/mount.log" 2>&1 || exit 97
mkdir -p "$mnt/dest"
i=0
while [ "$i" -lt "$rounds" ]; do
    i=$((i + 1))
    "$@" >"$out/r$i.out" 2>"$out/r$i.err"
    echo $? >"$out/r$i.rc"
    (cd "$mnt/dest" && find . -type f -exec sha256sum {} +) >"$out/r$i.sums"
    if [ $((i % every)) -eq 0 ]; then
        rm -rf "$mnt/dest" "$index" "$index-wal" "$index-shm"
        mkdir -p "$mnt/dest"
    fi
done
"#;
    let mut sh = tokio::process::Command::new("unshare");
    sh.arg("-m")
        .args(["sh", "-c", script, "sh"])
        .arg(&img)
        .arg(&mnt)
        .arg(&out)
        .arg(rounds.to_string())
        .arg(every.max(1).to_string())
        .arg(index)
        .arg(crate::binary("relay-client"))
        .args(args(&mnt))
        .kill_on_drop(true);
    set_env(&mut sh, client_env());
    folded_rounds(sh, &out, rounds).await
}
