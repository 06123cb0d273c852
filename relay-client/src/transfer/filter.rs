//! `--include` / `--exclude`: glob patterns (the `globset` crate, as ripgrep uses)
//! matched against a file's path below the directory given on the command line
//! (`sub/b.txt` for `data/sub/b.txt` when `data/` was given; a file given by name
//! is matched by its name). `*` also matches `/`, so `*.txt` matches at any depth.

use globset::{Glob, GlobSet, GlobSetBuilder};

#[derive(Debug, Clone, Default)]
pub struct Filter {
    include: Option<GlobSet>,
    exclude: Option<GlobSet>,
}

/// A pattern of `flag` (`--include` or `--exclude`) that is not a glob.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FilterError {
    #[error("{flag} {pattern:?}: {source}")]
    Pattern {
        flag: &'static str,
        pattern: String,
        source: globset::Error,
    },
    /// The patterns, each valid, cannot be compiled together.
    #[error("{flag}: {source}")]
    Set {
        flag: &'static str,
        source: globset::Error,
    },
}

fn set(flag: &'static str, patterns: &[String]) -> Result<Option<GlobSet>, FilterError> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        b.add(Glob::new(p).map_err(|source| FilterError::Pattern {
            flag,
            pattern: p.clone(),
            source,
        })?);
    }
    b.build()
        .map(Some)
        .map_err(|source| FilterError::Set { flag, source })
}

impl Filter {
    pub fn new(include: &[String], exclude: &[String]) -> Result<Self, FilterError> {
        Ok(Self {
            include: set("--include", include)?,
            exclude: set("--exclude", exclude)?,
        })
    }

    /// Whether a file with this relative path (`/`-separated) is uploaded.
    pub fn admits(&self, relative: &str) -> bool {
        let included = self.include.as_ref().is_none_or(|s| s.is_match(relative));
        let excluded = self.exclude.as_ref().is_some_and(|s| s.is_match(relative));
        included && !excluded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn include_then_exclude() {
        let f = Filter::new(&v(&["*.txt", "logs/**"]), &v(&["**/secret*"])).expect("globs");
        assert!(f.admits("a.txt"));
        assert!(f.admits("deep/down/a.txt"));
        assert!(f.admits("logs/2026/x.bin"));
        assert!(!f.admits("a.bin"));
        assert!(!f.admits("deep/secret.txt"));
        assert!(Filter::default().admits("anything"));
        assert!(Filter::new(&v(&["a[b"]), &[]).is_err());
    }
}
