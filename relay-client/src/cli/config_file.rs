//! The client's configuration file: named profiles that remember a relay, how
//! to trust it, how to sign in and where files go, so that
//! `relay-client upload data/ --to lab/2026` needs nothing else.
//!
//! ```toml
//! [profile.default]
//! relay = "relay.example.net:4433"
//! relay_cert_sha256 = "AB:CD:..."
//! token_file = "/home/me/.config/blob-relay/token"   # or entra + entra_scope
//! to = "lab/2026"
//! ```
//!
//! The file is `--config FILE` (or `RELAY_CONFIG`), else
//! `$XDG_CONFIG_HOME/blob-relay/client.toml` (`~/.config/...`) when it exists;
//! the profile is `--profile NAME` (or `RELAY_PROFILE`), else `default`. A
//! profile's settings become flags placed before the user's own, used only where
//! neither a flag nor an environment variable gave one: flags > environment >
//! file. A token is referenced by its file (`token_file`); one written into the
//! file itself (`token`) is refused while others can read the file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use clap::parser::ValueSource;

use serde::Deserialize;

/// The settings a profile may hold, and the flag each becomes.
const KEYS: [&str; 9] = [
    "relay",
    "relay_cert_sha256",
    "relay_ca",
    "token",
    "entra",
    "entra_scope",
    "entra_tenant",
    "entra_client_id",
    "to",
];

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    #[serde(default)]
    pub profile: BTreeMap<String, Profile>,
}

/// One named profile; every field optional.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub relay: Option<String>,
    pub relay_cert_sha256: Option<String>,
    pub relay_ca: Option<PathBuf>,
    /// The token itself: a secret in the file (refused unless only its owner can read it).
    pub token: Option<String>,
    /// A file whose first line is the token (read when used; never copied in).
    pub token_file: Option<PathBuf>,
    pub entra: Option<String>,
    pub entra_scope: Option<String>,
    pub entra_tenant: Option<String>,
    pub entra_client_id: Option<String>,
    pub to: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config {}: {source}", path.display())]
    Parse {
        path: PathBuf,
        source: toml::de::Error,
    },
    #[error("config {}: no profile {name:?} (profiles: {known})", path.display())]
    NoProfile {
        path: PathBuf,
        name: String,
        known: String,
    },
    #[error(
        "config {}: it holds a token and others can read it (mode {mode:o}); \
         run `chmod 600 {}`, or put the token in a file and name it with token_file",
        path.display(), path.display()
    )]
    Readable { path: PathBuf, mode: u32 },
    #[error("token_file {}: {source}", path.display())]
    TokenFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config {}: profile {name:?} exists; edit the file or choose another --profile", path.display())]
    Exists { path: PathBuf, name: String },
    #[error("cannot write config {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no config file: give --config FILE (no home directory for the default)")]
    NoHome,
}

/// `$XDG_CONFIG_HOME/blob-relay/client.toml`, else `~/.config/blob-relay/client.toml`.
pub fn default_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("blob-relay").join("client.toml"))
}

/// Parses the file's text (pure).
pub fn parse(path: &Path, text: &str) -> Result<File, ConfigError> {
    toml::from_str(text).map_err(|source| ConfigError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

/// The profile's settings as `(clap id, --flag=value)`, in KEYS' order
/// (pure apart from reading `token_file`, which becomes the token).
pub fn flags(profile: &Profile) -> Result<Vec<(&'static str, String)>, ConfigError> {
    let token = match (&profile.token, &profile.token_file) {
        (Some(t), _) => Some(t.clone()),
        (None, Some(file)) => Some(read_token(&home_relative(file, home().as_deref()))?),
        (None, None) => None,
    };
    let values: [Option<String>; 9] = [
        profile.relay.clone(),
        profile.relay_cert_sha256.clone(),
        profile
            .relay_ca
            .as_ref()
            .map(|p| home_relative(p, home().as_deref()).display().to_string()),
        token,
        profile.entra.clone(),
        profile.entra_scope.clone(),
        profile.entra_tenant.clone(),
        profile.entra_client_id.clone(),
        profile.to.clone(),
    ];
    Ok(KEYS
        .iter()
        .zip(values)
        .filter_map(|(key, value)| Some((*key, format!("--{}={}", key.replace('_', "-"), value?))))
        .collect())
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

/// A path in the file that starts with `~/` is under the home directory, as in
/// git's configuration, so one file (or `terraform output client_profile`) fits
/// any user; other paths, and `~/` without a home, are left as written (pure).
fn home_relative(path: &Path, home: Option<&Path>) -> PathBuf {
    match (path.strip_prefix("~"), home) {
        (Ok(rest), Some(home)) => home.join(rest),
        _ => path.to_path_buf(),
    }
}

fn read_token(file: &Path) -> Result<String, ConfigError> {
    let text = std::fs::read_to_string(file).map_err(|source| ConfigError::TokenFile {
        path: file.to_path_buf(),
        source,
    })?;
    Ok(text.lines().next().unwrap_or_default().trim().to_string())
}

/// Reads the file and picks the profile; `None` when no file was named and the
/// default one does not exist.
pub fn load(
    explicit: Option<&Path>,
    name: Option<&str>,
) -> Result<Option<(PathBuf, Profile)>, ConfigError> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => match default_path() {
            Some(p) if p.exists() => p,
            _ => return Ok(None),
        },
    };
    let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
        path: path.clone(),
        source,
    })?;
    let file = parse(&path, &text)?;
    if file.profile.values().any(|p| p.token.is_some()) {
        refuse_if_readable(&path)?;
    }
    let wanted = name.unwrap_or("default");
    match file.profile.get(wanted) {
        Some(p) => Ok(Some((path, p.clone()))),
        // Without a profile asked for, a file without `default` is no error.
        None if name.is_none() => Ok(None),
        None => Err(ConfigError::NoProfile {
            known: file.profile.keys().cloned().collect::<Vec<_>>().join(", "),
            path,
            name: wanted.to_string(),
        }),
    }
}

/// A file that holds a secret must be its owner's alone (as ssh does with keys).
fn refuse_if_readable(path: &Path) -> Result<(), ConfigError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(ConfigError::Readable {
            path: path.to_path_buf(),
            mode: mode & 0o777,
        });
    }
    Ok(())
}

/// `argv` with the profile's settings placed right after the subcommand
/// (`upload`, `watch`, `download` or `ls`; download and ls take all but `to`), each only
/// where neither a flag nor an environment variable gave it. Other commands,
/// and runs without a file, get `argv` back.
pub fn merged_argv(argv: &[String]) -> Result<Vec<String>, ConfigError> {
    // A first, lenient pass only to learn the file, the profile, the
    // subcommand and where each value came from.
    let Ok(lenient) = crate::cli::Cli::command()
        .ignore_errors(true)
        .try_get_matches_from(argv)
    else {
        return Ok(argv.to_vec());
    };
    let Some((sub, sub_matches)) = lenient.subcommand() else {
        return Ok(argv.to_vec());
    };
    if !matches!(sub, "upload" | "watch" | "download" | "ls" | "sync") {
        return Ok(argv.to_vec());
    }
    let config = sub_matches
        .get_one::<PathBuf>("config")
        .or_else(|| lenient.get_one::<PathBuf>("config"));
    let profile = sub_matches
        .get_one::<String>("profile")
        .or_else(|| lenient.get_one::<String>("profile"));
    let Some((_, profile)) = load(config.map(PathBuf::as_path), profile.map(String::as_str))?
    else {
        return Ok(argv.to_vec());
    };
    let given = |id: &str| {
        matches!(
            sub_matches.value_source(id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        )
    };
    // A sign-in given on the command line or in the environment replaces the
    // profile's whole sign-in (a token with --entra would be refused).
    let own_sign_in = given("token") || given("entra");
    let at = argv
        .iter()
        .skip(1)
        .position(|a| a == sub)
        .map_or(argv.len(), |i| i + 2);
    let mut merged = argv[..at].to_vec();
    for (id, flag) in flags(&profile)? {
        let replaced = own_sign_in && matches!(id, "token" | "entra" | "entra_scope");
        // `to` is where uploads go; download's --to is a local folder, and
        // ls and sync have none (sync names both sides as arguments).
        let not_here = matches!(sub, "download" | "ls" | "sync") && id == "to";
        if !given(id) && !replaced && !not_here {
            merged.push(flag);
        }
    }
    merged.extend(argv[at..].iter().cloned());
    Ok(merged)
}

/// A TOML basic string (quotes, backslashes and controls escaped).
fn quoted(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The `[profile.NAME]` section for `settings` (pure).
pub fn section(name: &str, settings: &[(&str, String)]) -> String {
    let mut out = format!("[profile.{}]\n", quoted(name));
    for (key, value) in settings {
        out.push_str(&format!("{key} = {}\n", quoted(value)));
    }
    out
}

/// `config init`: appends the profile to the file (made with mode 0600 in a
/// 0700 directory if missing); refuses to replace a profile.
pub fn init(path: &Path, name: &str, settings: &[(&str, String)]) -> Result<(), ConfigError> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let write_err = |source| ConfigError::Write {
        path: path.to_path_buf(),
        source,
    };
    let existing = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(source) => {
            return Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    if parse(path, &existing)?.profile.contains_key(name) {
        return Err(ConfigError::Exists {
            path: path.to_path_buf(),
            name: name.to_string(),
        });
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(write_err)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(write_err)?;
    let gap = if existing.is_empty() || existing.ends_with("\n\n") {
        ""
    } else if existing.ends_with('\n') {
        "\n"
    } else {
        "\n\n"
    };
    f.write_all(format!("{gap}{}", section(name, settings)).as_bytes())
        .map_err(write_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_section_reads_back_as_flags() {
        let text = section(
            "lab \"a\"",
            &[
                ("relay", "r.example:4433".into()),
                ("to", "lab/2026".into()),
                ("entra_scope", "api://x\\y".into()),
            ],
        );
        let file = parse(Path::new("c.toml"), &text).unwrap_or_else(|e| panic!("{e}"));
        let p = &file.profile["lab \"a\""];
        let f: Vec<(&str, String)> = flags(p)
            .unwrap_or_else(|e| panic!("{e}"))
            .into_iter()
            .collect();
        assert_eq!(
            f,
            [
                ("relay", "--relay=r.example:4433".to_string()),
                ("entra_scope", "--entra-scope=api://x\\y".to_string()),
                ("to", "--to=lab/2026".to_string()),
            ]
        );
    }

    #[test]
    fn a_leading_tilde_is_the_home_directory() {
        let home = Some(Path::new("/home/me"));
        assert_eq!(
            home_relative(Path::new("~/.config/blob-relay/token"), home),
            Path::new("/home/me/.config/blob-relay/token")
        );
        assert_eq!(home_relative(Path::new("~"), home), Path::new("/home/me"));
        for kept in ["~other/token", "/etc/token", "token", "a/~/token"] {
            assert_eq!(home_relative(Path::new(kept), home), Path::new(kept));
        }
        assert_eq!(
            home_relative(Path::new("~/token"), None),
            Path::new("~/token")
        );
    }

    #[test]
    fn unknown_keys_are_refused() {
        assert!(parse(Path::new("c"), "[profile.a]\nrelay_addr = \"x\"\n").is_err());
        assert!(parse(Path::new("c"), "[profiles.a]\n").is_err());
    }
}
