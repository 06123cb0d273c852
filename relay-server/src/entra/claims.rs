//! The claims checks of an Entra ID access token, after its signature verified:
//! pure (the time is passed in), one explicit list, each refusal named.

use serde::Deserialize;

use super::{Malformed, Refusal};

/// What a token must say to be accepted (from `--entra-*`).
#[derive(Debug, Clone)]
pub struct Policy {
    /// The directory (tenant) ID the token must come from (`tid`).
    pub tenant: String,
    /// Accepted issuers, exactly (v2 `https://login.microsoftonline.com/{tid}/v2.0`,
    /// v1 `https://sts.windows.net/{tid}/`).
    pub issuers: Vec<String>,
    /// Accepted audiences: the relay app's application ID URI and/or client ID.
    pub audiences: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`, seconds.
    pub skew_secs: i64,
}

impl Policy {
    /// Both issuer forms Entra ID uses for a tenant (v1 and v2 tokens).
    pub fn default_issuers(authority: &str, tenant: &str) -> Vec<String> {
        let authority = authority.trim_end_matches('/');
        let mut out = vec![format!("{authority}/{tenant}/v2.0")];
        if authority == "https://login.microsoftonline.com" {
            out.push(format!("https://sts.windows.net/{tenant}/"));
        }
        out
    }
}

/// The claims the relay reads; anything else in the token is ignored.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Claims {
    pub iss: Option<String>,
    pub aud: Option<Audience>,
    pub exp: Option<i64>,
    pub nbf: Option<i64>,
    pub tid: Option<String>,
    pub oid: Option<String>,
    /// A person's display name; absent for applications.
    pub name: Option<String>,
    pub preferred_username: Option<String>,
    /// The calling application (v2 `azp`, v1 `appid`), named for app-only tokens.
    pub azp: Option<String>,
    pub appid: Option<String>,
    #[serde(default)]
    pub roles: Vec<String>,
    #[serde(default)]
    pub groups: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Audience {
    One(String),
    Many(Vec<String>),
}

impl Audience {
    fn contains_any(&self, accepted: &[String]) -> bool {
        match self {
            Audience::One(a) => accepted.contains(a),
            Audience::Many(list) => list.iter().any(|a| accepted.contains(a)),
        }
    }
}

/// Who a valid token names: what grants and resume ownership are keyed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub tenant: String,
    pub object_id: String,
    /// For logs only (peer-provided: escaped where logged).
    pub name: String,
    pub roles: Vec<String>,
    pub groups: Vec<String>,
}

/// Every claims rule, in order; `now` is Unix seconds.
pub fn check(policy: &Policy, claims: Claims, now: i64) -> Result<Principal, Refusal> {
    let exp = claims.exp.ok_or(Refusal::Malformed(Malformed::NoExp))?;
    if now > exp.saturating_add(policy.skew_secs) {
        return Err(Refusal::Expired);
    }
    if let Some(nbf) = claims.nbf
        && now < nbf.saturating_sub(policy.skew_secs)
    {
        return Err(Refusal::NotYetValid);
    }
    match &claims.iss {
        Some(iss) if policy.issuers.contains(iss) => {}
        _ => return Err(Refusal::Issuer),
    }
    match &claims.aud {
        Some(aud) if aud.contains_any(&policy.audiences) => {}
        _ => return Err(Refusal::Audience),
    }
    match &claims.tid {
        Some(tid) if *tid == policy.tenant => {}
        _ => return Err(Refusal::Tenant),
    }
    let object_id = claims
        .oid
        .filter(|o| !o.is_empty())
        .ok_or(Refusal::Malformed(Malformed::NoOid))?;
    let name = claims
        .preferred_username
        .or(claims.name)
        .or(claims.azp)
        .or(claims.appid)
        .unwrap_or_default();
    Ok(Principal {
        tenant: policy.tenant.clone(),
        object_id,
        name,
        roles: claims.roles,
        groups: claims.groups,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TID: &str = "11111111-2222-3333-4444-555555555555";

    fn policy() -> Policy {
        Policy {
            tenant: TID.into(),
            issuers: Policy::default_issuers("https://login.microsoftonline.com", TID),
            audiences: vec!["api://relay".into()],
            skew_secs: 60,
        }
    }

    fn good() -> Claims {
        Claims {
            iss: Some(format!("https://login.microsoftonline.com/{TID}/v2.0")),
            aud: Some(Audience::One("api://relay".into())),
            exp: Some(2_000),
            nbf: Some(1_000),
            tid: Some(TID.into()),
            oid: Some("oid-1".into()),
            name: Some("Ada".into()),
            roles: vec!["Uploader.lab-a".into()],
            ..Claims::default()
        }
    }

    #[test]
    fn each_rule_refuses_by_name() {
        let p = policy();
        let ok = check(&p, good(), 1_500).expect("valid");
        assert_eq!((ok.object_id.as_str(), ok.name.as_str()), ("oid-1", "Ada"));
        // Skew: a minute either side is accepted, a second more is not.
        assert!(check(&p, good(), 2_060).is_ok());
        assert_eq!(check(&p, good(), 2_061), Err(Refusal::Expired));
        assert!(check(&p, good(), 940).is_ok());
        assert_eq!(check(&p, good(), 939), Err(Refusal::NotYetValid));
        let v1 = Claims {
            iss: Some(format!("https://sts.windows.net/{TID}/")),
            ..good()
        };
        assert!(check(&p, v1, 1_500).is_ok());
        let other_iss = Claims {
            iss: Some("https://login.microsoftonline.com/other/v2.0".into()),
            ..good()
        };
        assert_eq!(check(&p, other_iss, 1_500), Err(Refusal::Issuer));
        let aud = Claims {
            aud: Some(Audience::Many(vec!["api://other".into()])),
            ..good()
        };
        assert_eq!(check(&p, aud, 1_500), Err(Refusal::Audience));
        let tid = Claims {
            tid: Some("another".into()),
            ..good()
        };
        assert_eq!(check(&p, tid, 1_500), Err(Refusal::Tenant));
        let no_exp = Claims {
            exp: None,
            ..good()
        };
        assert_eq!(
            check(&p, no_exp, 1_500),
            Err(Refusal::Malformed(Malformed::NoExp))
        );
        let no_oid = Claims {
            oid: None,
            ..good()
        };
        assert_eq!(
            check(&p, no_oid, 1_500),
            Err(Refusal::Malformed(Malformed::NoOid))
        );
    }
}
