//! Which containers an Entra ID principal may write: each `--entra-grant
//! CLAIM=CONTAINER[,CONTAINER...]` names an app role (the token's `roles`) or a
//! group object ID (its `groups`) and the containers it grants. A principal may
//! write the union of what its roles and groups grant; no grant, no upload. The
//! container names follow the same rules as the tokens file's, and reserved
//! containers stay refused whatever a grant says (checked in `transfer`).

use relay_proto::blob_name::validate_container;

use super::Principal;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    #[error("--entra-grant {0:?}: expected ROLE_OR_GROUP=CONTAINER[,CONTAINER...]")]
    Shape(String),
    #[error("--entra-grant {grant:?}: container {container:?}: {reason}")]
    Container {
        grant: String,
        container: String,
        reason: String,
    },
}

#[derive(Debug, Clone, Default)]
pub struct Grants {
    /// (role name or group ID, containers), in flag order.
    rules: Vec<(String, Vec<String>)>,
}

impl Grants {
    pub fn parse(flags: &[String]) -> Result<Self, GrantError> {
        let mut rules = Vec::new();
        for flag in flags {
            let (claim, containers) = flag
                .split_once('=')
                .filter(|(c, list)| !c.trim().is_empty() && !list.trim().is_empty())
                .ok_or_else(|| GrantError::Shape(flag.clone()))?;
            let mut cs = Vec::new();
            for c in containers.split(',').map(str::trim) {
                validate_container(c).map_err(|e| GrantError::Container {
                    grant: flag.clone(),
                    container: c.to_string(),
                    reason: e.to_string(),
                })?;
                cs.push(c.to_string());
            }
            rules.push((claim.trim().to_string(), cs));
        }
        Ok(Self { rules })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether one of the principal's roles or groups grants `container`.
    pub fn allows(&self, p: &Principal, container: &str) -> bool {
        self.rules.iter().any(|(claim, cs)| {
            (p.roles.contains(claim) || p.groups.contains(claim))
                && cs.iter().any(|c| c == container)
        })
    }

    /// Every container some grant names, each once (for the storage check).
    pub fn containers(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for c in self.rules.iter().flat_map(|(_, cs)| cs) {
            if !out.contains(c) {
                out.push(c.clone());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            "0a1b2c3d-group=lab-b,shared".into(),
        ])
        .expect("parse");
        assert!(g.allows(&who(&["Uploader.lab-a"], &[]), "lab-a"));
        assert!(!g.allows(&who(&["Uploader.lab-a"], &[]), "lab-b"));
        assert!(g.allows(&who(&[], &["0a1b2c3d-group"]), "shared"));
        assert!(!g.allows(&who(&["0a1b2c3d-group"], &[]), "lab-a"));
        assert!(!g.allows(&who(&[], &[]), "lab-a"));
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
}
