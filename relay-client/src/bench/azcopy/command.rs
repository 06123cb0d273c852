//! How AzCopy is run, as pure data: its command line and environment for one
//! copy, and whether (and with which SAS) the bench runs it at all.
//!
//! AzCopy runs as a user runs it: `azcopy copy SOURCE DEST`, its own defaults
//! (connections from the CPU count, 8 MiB blocks, INFO log), plus only what
//! this use needs: `--from-to` (AzCopy cannot tell a storage endpoint from
//! its address unless it ends in `.blob.core.windows.net`, e.g. Azurite's),
//! `--recursive` for a folder, `--output-type json` (the summary read back;
//! the same progress lines as text) and a log and plan folder of the run's own.

use std::ffi::OsString;
use std::path::Path;

/// Which way a copy goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    Upload,
    Download,
}

impl Way {
    /// `--from-to`.
    fn locations(self) -> &'static str {
        match self {
            Way::Upload => "LocalBlob",
            Way::Download => "BlobLocal",
        }
    }

    /// The SAS permissions a copy this way needs: write to upload (AzCopy
    /// creates blobs with Put Block / Put Block List or Put Blob), read and
    /// list to download a prefix.
    pub fn permissions(self) -> &'static str {
        match self {
            Way::Upload => "w",
            Way::Download => "rl",
        }
    }
}

/// AzCopy's defaults, or the tuning its documentation suggests for fast
/// links: `AZCOPY_CONCURRENCY_VALUE=AUTO` (it tunes its connection count from
/// 4 up while throughput grows) and larger blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tuning {
    Defaults,
    /// AUTO concurrency and `--block-size-mb TUNED_BLOCK_MIB`.
    Tuned,
}

/// The tuned rows' block size: the relay's own (16 MiB), twice AzCopy's 8.
pub const TUNED_BLOCK_MIB: u32 = 16;

/// `copy SOURCE DEST ...` for one job (SOURCE or DEST carries the SAS).
pub fn copy_argv(
    source: &str,
    dest: &str,
    way: Way,
    recursive: bool,
    tuning: Tuning,
) -> Vec<String> {
    let mut v: Vec<String> = ["copy", source, dest, "--from-to", way.locations()]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if recursive {
        v.push("--recursive".into());
    }
    v.extend(["--output-type".into(), "json".into()]);
    if tuning == Tuning::Tuned {
        v.extend(["--block-size-mb".into(), TUNED_BLOCK_MIB.to_string()]);
    }
    v
}

/// The environment of one job: its log and plan files in `scratch` (so the
/// bench can watch the log and delete both; AzCopy would keep them in
/// ~/.azcopy), and AUTO concurrency when tuned.
pub fn env(scratch: &Path, tuning: Tuning) -> Vec<(&'static str, OsString)> {
    let mut v = vec![
        ("AZCOPY_LOG_LOCATION", scratch.join("logs").into_os_string()),
        (
            "AZCOPY_JOB_PLAN_LOCATION",
            scratch.join("plans").into_os_string(),
        ),
    ];
    if tuning == Tuning::Tuned {
        v.push(("AZCOPY_CONCURRENCY_VALUE", "AUTO".into()));
    }
    v
}

/// How long a SAS signed for one job lives: an hour, plus the job's bytes at
/// 1 Mbit/s (a slow link's job must not outlive its SAS).
pub fn sas_lifetime(bytes: u64) -> std::time::Duration {
    std::time::Duration::from_secs(3600 + bytes.saturating_mul(8) / 1_000_000)
}

/// Where the SAS for AzCopy comes from: the credential the direct runs use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SasFrom {
    /// `--azcopy-sas`.
    Given,
    /// Signed per job from the account key: one container, only the
    /// permissions of the job's way, `sas_lifetime`.
    AccountKey,
    /// The SAS in `--storage-url`.
    StorageUrl,
}

/// Whether the bench runs AzCopy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision<P> {
    Run {
        azcopy: P,
        sas: SasFrom,
    },
    /// No AzCopy (none on PATH, or `--no-azcopy`): the bench is as without it.
    Absent,
    /// Found on PATH but cannot run, and why (said in the report).
    Skip(String),
    /// `--azcopy` was asked for and cannot be honoured.
    Refuse(String),
}

/// What the bench was given that decides about AzCopy.
#[derive(Debug, Clone)]
pub struct Given<P> {
    /// `--azcopy PATH`.
    pub explicit: Option<P>,
    /// `azcopy` found on PATH.
    pub on_path: Option<P>,
    pub disabled: bool,
    pub storage_url: bool,
    pub sas_flag: bool,
    pub account_key: bool,
    pub sas_in_url: bool,
}

/// Runs AzCopy when there is one and a SAS for it; an explicit `--azcopy`
/// that cannot run is an error, one merely found on PATH is skipped with the reason.
pub fn decide<P>(g: Given<P>) -> Decision<P> {
    if g.disabled {
        return Decision::Absent;
    }
    let explicit = g.explicit.is_some();
    let Some(azcopy) = g.explicit.or(g.on_path) else {
        return Decision::Absent;
    };
    let why = if !g.storage_url {
        "AzCopy needs the storage account: give --storage-url"
    } else if g.sas_flag {
        return Decision::Run {
            azcopy,
            sas: SasFrom::Given,
        };
    } else if g.account_key {
        return Decision::Run {
            azcopy,
            sas: SasFrom::AccountKey,
        };
    } else if g.sas_in_url {
        return Decision::Run {
            azcopy,
            sas: SasFrom::StorageUrl,
        };
    } else {
        "AzCopy needs a SAS: give --account-key (one is signed per run) or --azcopy-sas"
    };
    if explicit {
        Decision::Refuse(why.into())
    } else {
        Decision::Skip(why.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_copy_with_only_what_this_use_needs() {
        let v = copy_argv(
            "/d/data",
            "http://h/a/c/p?sig=x",
            Way::Upload,
            true,
            Tuning::Defaults,
        );
        assert_eq!(
            v,
            [
                "copy",
                "/d/data",
                "http://h/a/c/p?sig=x",
                "--from-to",
                "LocalBlob",
                "--recursive",
                "--output-type",
                "json"
            ]
        );
        let v = copy_argv(
            "http://h/a/c/p?sig=x",
            "/d/in",
            Way::Download,
            false,
            Tuning::Tuned,
        );
        assert!(v.contains(&"BlobLocal".to_string()) && !v.contains(&"--recursive".to_string()));
        assert!(v.ends_with(&["--block-size-mb".to_string(), "16".to_string()]));
        let e = env(Path::new("/s"), Tuning::Defaults);
        assert_eq!(e.len(), 2, "defaults set no tuning variable");
        assert!(
            env(Path::new("/s"), Tuning::Tuned)
                .contains(&("AZCOPY_CONCURRENCY_VALUE", "AUTO".into()))
        );
        assert_eq!(Way::Upload.permissions(), "w");
        assert_eq!(Way::Download.permissions(), "rl");
    }

    #[test]
    fn the_sas_outlives_a_slow_job() {
        assert_eq!(sas_lifetime(0).as_secs(), 3600);
        // 256 MiB at 1 Mbit/s: 2147 s more.
        assert_eq!(sas_lifetime(256 << 20).as_secs(), 3600 + 2147);
        assert!(sas_lifetime(u64::MAX).as_secs() > 3600);
    }

    fn given() -> Given<&'static str> {
        Given {
            explicit: None,
            on_path: Some("/usr/bin/azcopy"),
            disabled: false,
            storage_url: true,
            sas_flag: false,
            account_key: true,
            sas_in_url: false,
        }
    }

    #[test]
    fn azcopy_runs_with_a_sas_from_the_direct_credential() {
        let run = |sas| Decision::Run {
            azcopy: "/usr/bin/azcopy",
            sas,
        };
        assert_eq!(decide(given()), run(SasFrom::AccountKey));
        let flag = Given {
            sas_flag: true,
            ..given()
        };
        assert_eq!(decide(flag), run(SasFrom::Given));
        let in_url = Given {
            account_key: false,
            sas_in_url: true,
            ..given()
        };
        assert_eq!(decide(in_url), run(SasFrom::StorageUrl));
        let explicit = Given {
            explicit: Some("/opt/azcopy"),
            ..given()
        };
        assert!(matches!(
            decide(explicit),
            Decision::Run {
                azcopy: "/opt/azcopy",
                ..
            }
        ));
    }

    #[test]
    fn without_azcopy_or_a_sas_the_bench_is_unchanged_or_refuses() {
        let none = Given {
            on_path: None,
            ..given()
        };
        assert_eq!(decide(none), Decision::Absent);
        let off = Given {
            disabled: true,
            explicit: None,
            ..given()
        };
        assert_eq!(decide(off), Decision::Absent);
        // Entra ID only: no SAS. Found on PATH: skipped; asked for: refused.
        let entra = Given {
            account_key: false,
            ..given()
        };
        assert!(matches!(decide(entra.clone()), Decision::Skip(w) if w.contains("--azcopy-sas")));
        let asked = Given {
            explicit: Some("/opt/azcopy"),
            ..entra
        };
        assert!(matches!(decide(asked), Decision::Refuse(w) if w.contains("--azcopy-sas")));
        let no_storage = Given {
            storage_url: false,
            explicit: Some("/opt/azcopy"),
            ..given()
        };
        assert!(matches!(decide(no_storage), Decision::Refuse(w) if w.contains("--storage-url")));
    }
}
