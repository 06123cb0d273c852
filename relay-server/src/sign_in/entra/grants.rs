//! What an Entra ID principal may do with which containers. Each
//! `--entra-grant WHO=CONTAINER[:MODE][,...]` names who:
//! - `role:NAME`: an app role in the token's `roles`;
//! - `group:OBJECT_ID`: a group in the token's `groups`;
//! - a bare `NAME`: an app role, as before roles and groups were named apart;
//!
//! and what each container allows, in the tokens file's access letters: a
//! bare name or `:w` writes (uploads), `:r` reads (downloads, listings), `:d`
//! deletes (one listed version of a blob), combined as `:rw`, `:wd`, `:rwd`.
//! Deleting is implied by neither writing nor reading. Roles and
//! groups are matched apart, so a group whose object ID equals a role's name
//! cannot take that role's grant (nor a role a group's). A principal may do the
//! union of what its roles and groups grant; no grant, nothing.
//!
//! With `--entra-reader-roles`, an app role `Reader.<container>` in the token
//! also grants reading that container, so a tenant admin grants reads by
//! assigning roles alone; with `--entra-deleter-roles`, an app role
//! `Deleter.<container>` grants deleting there the same way (and nothing
//! else). Reserved containers stay refused whatever a grant says (checked in
//! `transfer`).

use relay_proto::blob_name::validate_container;

use super::Principal;
use crate::sign_in::access::{Access, Rights};

/// The app role prefix `--entra-reader-roles` honours.
pub const READER_ROLE_PREFIX: &str = "Reader.";

/// The app role prefix `--entra-deleter-roles` honours.
pub const DELETER_ROLE_PREFIX: &str = "Deleter.";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    #[error(
        "--entra-grant {0:?}: expected [role:|group:]NAME=CONTAINER[:r|:w|:d|:rw|:wd|:rwd][,CONTAINER...]"
    )]
    Shape(String),
    #[error("--entra-grant {grant:?}: container {container:?}: {reason}")]
    Container {
        grant: String,
        container: String,
        reason: String,
    },
    #[error(
        "--entra-grant {grant:?}: mode {mode:?} of {container:?} is not access letters r, w and d (r, w, d, rw, wd, rwd)"
    )]
    Mode {
        grant: String,
        container: String,
        mode: String,
    },
}

/// Who a grant names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Who {
    Role(String),
    Group(String),
}

impl Who {
    fn matches(&self, p: &Principal) -> bool {
        match self {
            Who::Role(r) => p.roles.contains(r),
            Who::Group(g) => p.groups.contains(g),
        }
    }
}

/// What a grant allows on one container.
pub type Mode = Rights;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub who: Who,
    pub containers: Vec<(String, Mode)>,
}

#[derive(Debug, Clone, Default)]
pub struct Grants {
    /// In flag order.
    rules: Vec<Rule>,
    /// `--entra-reader-roles`: `Reader.<container>` roles grant reading.
    reader_roles: bool,
    /// `--entra-deleter-roles`: `Deleter.<container>` roles grant deleting.
    deleter_roles: bool,
}

impl Grants {
    pub fn parse(flags: &[String]) -> Result<Self, GrantError> {
        let rules = flags
            .iter()
            .map(|f| parse_rule(f))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            rules,
            reader_roles: false,
            deleter_roles: false,
        })
    }

    /// Honours `Reader.<container>` app roles as read grants.
    pub fn with_reader_roles(mut self, on: bool) -> Self {
        self.reader_roles = on;
        self
    }

    /// Honours `Deleter.<container>` app roles as delete grants.
    pub fn with_deleter_roles(mut self, on: bool) -> Self {
        self.deleter_roles = on;
        self
    }

    /// Nothing could be granted: no rule and no reader or deleter roles.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty() && !self.reader_roles && !self.deleter_roles
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Whether one of the principal's roles or groups grants `access` to
    /// `container`.
    pub fn allows(&self, p: &Principal, container: &str, access: Access) -> bool {
        let by_rule = self.rules.iter().any(|r| {
            r.who.matches(p)
                && r.containers
                    .iter()
                    .any(|(c, m)| c == container && m.allows(access))
        });
        let prefix = match access {
            Access::Read if self.reader_roles => Some(READER_ROLE_PREFIX),
            Access::Delete if self.deleter_roles => Some(DELETER_ROLE_PREFIX),
            _ => None,
        };
        by_rule
            || prefix.is_some_and(|prefix| {
                validate_container(container).is_ok()
                    && p.roles
                        .iter()
                        .any(|r| r.strip_prefix(prefix) == Some(container))
            })
    }

    /// Every container some grant names, each once (for the storage check).
    pub fn containers(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (c, _) in self.rules.iter().flat_map(|r| &r.containers) {
            if !out.contains(c) {
                out.push(c.clone());
            }
        }
        out
    }
}

fn parse_rule(flag: &str) -> Result<Rule, GrantError> {
    let shape = || GrantError::Shape(flag.to_string());
    let (who, list) = flag
        .split_once('=')
        .map(|(w, l)| (w.trim(), l.trim()))
        .filter(|(w, l)| !w.is_empty() && !l.is_empty())
        .ok_or_else(shape)?;
    let who = match who.split_once(':') {
        Some(("role", name)) if !name.trim().is_empty() => Who::Role(name.trim().to_string()),
        Some(("group", id)) if !id.trim().is_empty() => Who::Group(id.trim().to_string()),
        // Another prefix is most likely a typo of one of these: refused rather
        // than taken as a role named "grup:...".
        Some(_) => return Err(shape()),
        None => Who::Role(who.to_string()),
    };
    let mut containers = Vec::new();
    for entry in list.split(',').map(str::trim) {
        let (c, mode) = entry.split_once(':').unwrap_or((entry, "w"));
        validate_container(c).map_err(|e| GrantError::Container {
            grant: flag.to_string(),
            container: c.to_string(),
            reason: e.to_string(),
        })?;
        let mode = Rights::parse(mode).ok_or_else(|| GrantError::Mode {
            grant: flag.to_string(),
            container: c.to_string(),
            mode: mode.to_string(),
        })?;
        containers.push((c.to_string(), mode));
    }
    Ok(Rule { who, containers })
}

#[cfg(test)]
mod tests {
    use super::*;
    use Access::{Delete, Read, Write};

    fn who(roles: &[&str], groups: &[&str]) -> Principal {
        Principal {
            tenant: "t".into(),
            object_id: "o".into(),
            name: String::new(),
            roles: roles.iter().map(|s| s.to_string()).collect(),
            groups: groups.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn roles_and_groups_grant_their_containers_only() {
        let g = Grants::parse(&[
            "Uploader.lab-a=lab-a".into(),
            "group:0a1b2c3d-group=lab-b,shared".into(),
        ])
        .expect("parse");
        assert!(g.allows(&who(&["Uploader.lab-a"], &[]), "lab-a", Write));
        assert!(!g.allows(&who(&["Uploader.lab-a"], &[]), "lab-b", Write));
        assert!(g.allows(&who(&[], &["0a1b2c3d-group"]), "shared", Write));
        assert!(!g.allows(&who(&["0a1b2c3d-group"], &[]), "lab-b", Write));
        assert!(!g.allows(&who(&[], &[]), "lab-a", Write));
        assert_eq!(g.containers(), vec!["lab-a", "lab-b", "shared"]);
        assert!(matches!(
            Grants::parse(&["nothing".into()]),
            Err(GrantError::Shape(_))
        ));
        assert!(matches!(
            Grants::parse(&["r=".into()]),
            Err(GrantError::Shape(_))
        ));
        assert!(matches!(
            Grants::parse(&["r=Bad_Name".into()]),
            Err(GrantError::Container { .. })
        ));
    }

    /// A group whose object ID (or name) equals a role's
    /// cannot take the role's grant, and the other way round.
    #[test]
    fn roles_and_groups_are_named_apart() {
        let g = Grants::parse(&[
            "role:Uploader.data=data".into(),
            "Uploader.bare=bare".into(),
            "group:Uploader.shared=shared".into(),
        ])
        .expect("parse");
        assert_eq!(
            g.rules()[1].who,
            Who::Role("Uploader.bare".into()),
            "a bare name is a role"
        );
        assert!(g.allows(&who(&["Uploader.data"], &[]), "data", Write));
        assert!(!g.allows(&who(&[], &["Uploader.data"]), "data", Write));
        assert!(g.allows(&who(&["Uploader.bare"], &[]), "bare", Write));
        assert!(!g.allows(&who(&[], &["Uploader.bare"]), "bare", Write));
        assert!(g.allows(&who(&[], &["Uploader.shared"]), "shared", Write));
        assert!(!g.allows(&who(&["Uploader.shared"], &[]), "shared", Write));
        for bad in ["grup:x=data", "role:=data", "group: =data", ":x=data"] {
            assert!(
                matches!(Grants::parse(&[bad.into()]), Err(GrantError::Shape(_))),
                "{bad}"
            );
        }
    }

    /// Reading is a grant of its own.
    #[test]
    fn reading_is_granted_apart_from_writing() {
        let g = Grants::parse(&[
            "role:Lab=data:rw,results:r,inbox".into(),
            "group:g-1=archive:w".into(),
        ])
        .expect("parse");
        let lab = who(&["Lab"], &[]);
        assert!(g.allows(&lab, "data", Read) && g.allows(&lab, "data", Write));
        assert!(g.allows(&lab, "results", Read) && !g.allows(&lab, "results", Write));
        // A bare container keeps today's meaning: write only.
        assert!(!g.allows(&lab, "inbox", Read) && g.allows(&lab, "inbox", Write));
        let grp = who(&[], &["g-1"]);
        assert!(!g.allows(&grp, "archive", Read) && g.allows(&grp, "archive", Write));
        assert!(matches!(
            Grants::parse(&["Lab=data:x".into()]),
            Err(GrantError::Mode { .. })
        ));
        assert!(matches!(
            Grants::parse(&["Lab=data:".into()]),
            Err(GrantError::Mode { .. })
        ));
        assert_eq!(g.containers(), vec!["data", "results", "inbox", "archive"]);
    }

    #[test]
    fn reader_roles_grant_reading_only_when_honoured() {
        let reader = who(&["Reader.results"], &["Reader.data"]);
        let off = Grants::parse(&["role:Lab=data".into()]).expect("parse");
        assert!(!off.allows(&reader, "results", Read));
        let on = off.clone().with_reader_roles(true);
        assert!(on.allows(&reader, "results", Read));
        // Reading only, that container only, and only from a role (not a group).
        assert!(!on.allows(&reader, "results", Write));
        assert!(!on.allows(&reader, "results-2", Read));
        assert!(!on.allows(&reader, "data", Read));
        assert!(!on.allows(&who(&["Reader."], &[]), "", Read));
        assert!(!on.allows(&who(&["reader.results"], &[]), "results", Read));
        // Reader roles alone are a configuration.
        assert!(!Grants::default().with_reader_roles(true).is_empty());
        assert!(Grants::default().is_empty());
        // Reader roles never grant deleting.
        assert!(!on.allows(&reader, "results", Delete));
    }

    /// Deleting is granted by `:d` in a rule, or by a `Deleter.<container>`
    /// role when honoured; never by writing or reading.
    #[test]
    fn deleting_is_granted_apart() {
        let g =
            Grants::parse(&["role:Lab=data:rwd,logs:wd,inbox:rw,arch:d".into()]).expect("parse");
        let lab = who(&["Lab"], &[]);
        assert!(g.allows(&lab, "data", Delete) && g.allows(&lab, "logs", Delete));
        assert!(g.allows(&lab, "arch", Delete) && !g.allows(&lab, "arch", Write));
        assert!(!g.allows(&lab, "inbox", Delete));
        let deleter = who(&["Deleter.results"], &["Deleter.data"]);
        let off = g.clone();
        assert!(!off.allows(&deleter, "results", Delete));
        let on = g.with_deleter_roles(true);
        assert!(on.allows(&deleter, "results", Delete));
        assert!(!on.allows(&deleter, "results", Read) && !on.allows(&deleter, "results", Write));
        // A group of that name grants nothing; nor does another container's role.
        assert!(!on.allows(&deleter, "data", Delete));
        assert!(!on.allows(&deleter, "results-2", Delete));
        // Reader roles honoured do not make deleters of readers.
        let both = Grants::default().with_reader_roles(true);
        assert!(!both.allows(&who(&["Reader.data"], &[]), "data", Delete));
        assert!(!both.allows(&deleter, "results", Delete));
        assert!(!Grants::default().with_deleter_roles(true).is_empty());
        for bad in ["Lab=data:dd", "Lab=data:x", "Lab=data:rwdx"] {
            assert!(
                matches!(Grants::parse(&[bad.into()]), Err(GrantError::Mode { .. })),
                "{bad}"
            );
        }
    }
}
