//! The claims checks of an Entra ID access token, after its signature verified:
//! pure (the time is passed in), one explicit list, each refusal named. Only
//! access tokens for the relay's API pass: an ID token (a sign-in's proof of
//! who someone is, issued to the app that signed them in) is refused even when
//! its audience is one the relay accepts.

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
    pub iat: Option<i64>,
    /// The token format: "1.0" or "2.0", matching the issuer's form.
    pub ver: Option<String>,
    /// Present in ID tokens (replay protection of a sign-in), never in an
    /// access token's claims.
    pub nonce: Option<serde_json::Value>,
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
    /// Whether the audience is exactly `who` (one value).
    fn is(&self, who: &str) -> bool {
        match self {
            Audience::One(a) => a == who,
            Audience::Many(list) => list.len() == 1 && list[0] == who,
        }
    }

    fn contains_any(&self, accepted: &[String]) -> bool {
        match self {
            Audience::One(a) => accepted.contains(a),
            Audience::Many(list) => list.iter().any(|a| accepted.contains(a)),
        }
    }
}

/// Longest lifetime accepted (`exp` after `iat`, and after now). Entra ID
/// issues access tokens for 60-90 minutes by default, and a token lifetime
/// policy can set at most one day; a token valid for longer was not issued by
/// Entra ID's rules and would stay a bearer credential far past any revocation
/// (removing a role assignment takes effect when the current token expires).
pub const MAX_LIFETIME_SECS: i64 = 24 * 3600;

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
    let longest = now.saturating_add(MAX_LIFETIME_SECS + policy.skew_secs);
    let issued_for = claims.iat.map(|iat| exp.saturating_sub(iat));
    if exp > longest || issued_for.is_some_and(|d| d > MAX_LIFETIME_SECS) {
        return Err(Refusal::Lifetime);
    }
    let iss = match &claims.iss {
        Some(iss) if policy.issuers.contains(iss) => iss,
        _ => return Err(Refusal::Issuer),
    };
    // v2 issuers end in `/v2.0` and issue `ver` 2.0; v1 (`sts.windows.net`)
    // issue 1.0. A mismatch is not a token Entra ID issues.
    let v2 = iss.trim_end_matches('/').ends_with("/v2.0");
    let ver = if v2 { "2.0" } else { "1.0" };
    if claims.ver.as_deref() != Some(ver) {
        return Err(Refusal::Version);
    }
    let aud = match &claims.aud {
        Some(aud) if aud.contains_any(&policy.audiences) => aud,
        _ => return Err(Refusal::Audience),
    };
    // An access token names the application that asked for it (v2 `azp`, v1
    // `appid`) and carries no `nonce`; an ID token has a `nonce` (when the
    // sign-in sent one), names no such application, and its audience is the
    // client that signed the person in.
    let caller = if v2 { &claims.azp } else { &claims.appid };
    let Some(caller) = caller.as_deref().filter(|c| !c.is_empty()) else {
        return Err(Refusal::NotAccessToken);
    };
    if claims.nonce.is_some() || aud.is(caller) {
        return Err(Refusal::NotAccessToken);
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
            iat: Some(1_000),
            ver: Some("2.0".into()),
            azp: Some("client-app".into()),
            tid: Some(TID.into()),
            oid: Some("oid-1".into()),
            name: Some("Ada".into()),
            roles: vec!["Uploader.lab-a".into()],
            ..Claims::default()
        }
    }

    /// Only access tokens for the relay's API, in the
    /// format their issuer issues, living at most a day.
    #[test]
    fn only_access_tokens_of_their_issuers_form_and_bounded_lifetime() {
        let p = policy();
        let at = |c: Claims| check(&p, c, 1_500);
        let v1 = || Claims {
            iss: Some(format!("https://sts.windows.net/{TID}/")),
            ver: Some("1.0".into()),
            azp: None,
            appid: Some("client-app".into()),
            ..good()
        };
        assert!(at(v1()).is_ok());
        // ID tokens: a nonce, no calling application, or the audience is the
        // application that asked (the client that signed someone in).
        let nonce = Claims {
            nonce: Some("n-0S6_WzA2Mj".into()),
            ..good()
        };
        assert_eq!(at(nonce), Err(Refusal::NotAccessToken));
        let no_azp = Claims {
            azp: None,
            ..good()
        };
        assert_eq!(at(no_azp), Err(Refusal::NotAccessToken));
        let v1_no_appid = Claims {
            appid: None,
            azp: Some("client-app".into()),
            ..v1()
        };
        assert_eq!(at(v1_no_appid), Err(Refusal::NotAccessToken));
        let own = Claims {
            azp: Some("api://relay".into()),
            ..good()
        };
        assert_eq!(at(own), Err(Refusal::NotAccessToken));
        // `ver` matches the issuer's form.
        let v2_says_1 = Claims {
            ver: Some("1.0".into()),
            ..good()
        };
        assert_eq!(at(v2_says_1), Err(Refusal::Version));
        let v1_says_2 = Claims {
            ver: Some("2.0".into()),
            ..v1()
        };
        assert_eq!(at(v1_says_2), Err(Refusal::Version));
        let no_ver = Claims {
            ver: None,
            ..good()
        };
        assert_eq!(at(no_ver), Err(Refusal::Version));
        // Lifetime: a day after iat is accepted, a second more is not; an exp
        // years ahead is refused with or without an iat.
        let day = Claims {
            exp: Some(1_000 + MAX_LIFETIME_SECS),
            ..good()
        };
        assert!(at(day).is_ok());
        let longer = Claims {
            exp: Some(1_001 + MAX_LIFETIME_SECS),
            ..good()
        };
        assert_eq!(at(longer), Err(Refusal::Lifetime));
        let years = Claims {
            exp: Some(1_500 + 5 * 365 * 86_400),
            iat: None,
            ..good()
        };
        assert_eq!(at(years), Err(Refusal::Lifetime));
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
            ver: Some("1.0".into()),
            azp: None,
            appid: Some("client-app".into()),
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
