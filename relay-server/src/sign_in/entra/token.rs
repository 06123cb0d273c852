//! A compact JWS read by the relay itself, before any key is looked up: its
//! shape, its header (each parameter once, `alg` a string, no `crit`, a `kid`),
//! its signature's encoding and its claims (a JSON object, each claim once).
//! Pure: every way a token can be malformed is refused here by its own name,
//! so garbage never costs a key fetch and the log says what was wrong.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::{Map, Value};

use super::claims::Claims;

/// How a token is malformed. Each is a label of
/// `blob_relay_entra_refusals_total` (`malformed_<label>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("longer than 16 KiB")]
    TooLong,
    #[error("not three dot-separated parts")]
    Shape,
    #[error("header is not base64url")]
    HeaderEncoding,
    #[error("header is not a JSON object")]
    HeaderJson,
    #[error("a header parameter given twice")]
    DuplicateHeader,
    #[error("header has no alg")]
    NoAlg,
    #[error("alg is not a string")]
    AlgType,
    #[error("crit header (no extension is understood)")]
    Crit,
    #[error("header has no kid")]
    NoKid,
    #[error("kid is not a string")]
    KidType,
    #[error("signature is not base64url")]
    SignatureEncoding,
    #[error("claims are not base64url")]
    ClaimsEncoding,
    #[error("claims are not a JSON object")]
    ClaimsJson,
    #[error("a claim given twice")]
    DuplicateClaim,
    #[error("a claim of the wrong type")]
    ClaimType,
    #[error("no exp claim")]
    NoExp,
    #[error("no oid claim")]
    NoOid,
}

impl Malformed {
    pub const ALL: [Malformed; 17] = [
        Malformed::TooLong,
        Malformed::Shape,
        Malformed::HeaderEncoding,
        Malformed::HeaderJson,
        Malformed::DuplicateHeader,
        Malformed::NoAlg,
        Malformed::AlgType,
        Malformed::Crit,
        Malformed::NoKid,
        Malformed::KidType,
        Malformed::SignatureEncoding,
        Malformed::ClaimsEncoding,
        Malformed::ClaimsJson,
        Malformed::DuplicateClaim,
        Malformed::ClaimType,
        Malformed::NoExp,
        Malformed::NoOid,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Malformed::TooLong => "malformed_too_long",
            Malformed::Shape => "malformed_shape",
            Malformed::HeaderEncoding => "malformed_header_encoding",
            Malformed::HeaderJson => "malformed_header_json",
            Malformed::DuplicateHeader => "malformed_header_duplicate",
            Malformed::NoAlg => "malformed_no_alg",
            Malformed::AlgType => "malformed_alg_type",
            Malformed::Crit => "malformed_crit",
            Malformed::NoKid => "malformed_no_kid",
            Malformed::KidType => "malformed_kid_type",
            Malformed::SignatureEncoding => "malformed_signature_encoding",
            Malformed::ClaimsEncoding => "malformed_claims_encoding",
            Malformed::ClaimsJson => "malformed_claims_json",
            Malformed::DuplicateClaim => "malformed_claim_duplicate",
            Malformed::ClaimType => "malformed_claim_type",
            Malformed::NoExp => "malformed_no_exp",
            Malformed::NoOid => "malformed_no_oid",
        }
    }
}

/// Why `parse` refused a token: malformed, or a well-formed header naming an
/// algorithm other than RS256.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    Malformed(Malformed),
    Algorithm,
}

impl From<Malformed> for ParseError {
    fn from(m: Malformed) -> Self {
        ParseError::Malformed(m)
    }
}

/// A token whose form is right; its signature is not verified yet.
#[derive(Debug)]
pub struct Jws<'a> {
    pub kid: String,
    /// `header.claims`, what the signature covers.
    signed: &'a str,
    signature: &'a str,
    pub claims: Claims,
}

impl Jws<'_> {
    /// The RS256 signature over the token's first two parts, under `key`.
    pub fn verifies(&self, key: &DecodingKey) -> bool {
        jsonwebtoken::crypto::verify(
            self.signature,
            self.signed.as_bytes(),
            key,
            Algorithm::RS256,
        )
        .unwrap_or(false)
    }
}

/// Every rule of form, in order; nothing here needs a key.
pub fn parse(token: &str) -> Result<Jws<'_>, ParseError> {
    let mut parts = token.split('.');
    let (Some(header), Some(claims), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Malformed::Shape.into());
    };
    let header = object(
        header,
        Malformed::HeaderEncoding,
        Malformed::HeaderJson,
        Malformed::DuplicateHeader,
    )?;
    // The algorithm is refused by name before anything else is looked at:
    // `none`, HS256 (which would take the public key as an HMAC secret) and
    // all but RS256.
    match header.get("alg") {
        None => return Err(Malformed::NoAlg.into()),
        Some(Value::String(alg)) if alg == "RS256" => {}
        Some(Value::String(_)) => return Err(ParseError::Algorithm),
        Some(_) => return Err(Malformed::AlgType.into()),
    }
    // RFC 7515 4.1.11: extensions listed in `crit` must be understood; the
    // relay understands none (`b64: false` would change what is signed).
    if header.contains_key("crit") {
        return Err(Malformed::Crit.into());
    }
    let kid = match header.get("kid") {
        None => return Err(Malformed::NoKid.into()),
        Some(Value::String(kid)) => kid.clone(),
        Some(_) => return Err(Malformed::KidType.into()),
    };
    if URL_SAFE_NO_PAD.decode(signature).is_err() {
        return Err(Malformed::SignatureEncoding.into());
    }
    let claims = object(
        claims,
        Malformed::ClaimsEncoding,
        Malformed::ClaimsJson,
        Malformed::DuplicateClaim,
    )?;
    let claims: Claims =
        serde_json::from_value(Value::Object(claims)).map_err(|_| Malformed::ClaimType)?;
    let signed_len = token.len() - signature.len() - 1;
    Ok(Jws {
        kid,
        signed: &token[..signed_len],
        signature,
        claims,
    })
}

/// A base64url JSON object whose members are each named once: a duplicate
/// would be read one way here and maybe another way by another parser.
fn object(
    part: &str,
    encoding: Malformed,
    json: Malformed,
    duplicate: Malformed,
) -> Result<Map<String, Value>, Malformed> {
    let bytes = URL_SAFE_NO_PAD.decode(part).map_err(|_| encoding)?;
    let Members(members) = serde_json::from_slice(&bytes).map_err(|_| json)?;
    let mut out = Map::new();
    for (k, v) in members {
        if out.insert(k, v).is_some() {
            return Err(duplicate);
        }
    }
    Ok(out)
}

/// A JSON object's members in order, duplicates kept (serde_json's `Map`
/// keeps the last silently).
struct Members(Vec<(String, Value)>);

impl<'de> serde::Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut out = Vec::new();
                while let Some(kv) = map.next_entry::<String, Value>()? {
                    out.push(kv);
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        URL_SAFE_NO_PAD.encode(s)
    }

    fn token(header: &str, claims: &str, sig: &str) -> String {
        format!("{}.{}.{sig}", b64(header), b64(claims))
    }

    const H: &str = r#"{"alg":"RS256","kid":"k1","typ":"JWT"}"#;
    const C: &str = r#"{"exp":5,"oid":"o"}"#;

    #[test]
    fn each_malformed_part_is_named() {
        let ok = token(H, C, "c2ln");
        let jws = parse(&ok).expect("well formed");
        assert_eq!(jws.kid, "k1");
        assert_eq!(jws.signature, "c2ln");
        assert_eq!(jws.signed, ok.rsplit_once('.').expect("dot").0);
        let m = |t: &str| parse(t).err();
        let mal = |x| Some(ParseError::Malformed(x));
        let two = format!("{}.{}", b64(H), b64(C));
        assert_eq!(m(&two), mal(Malformed::Shape));
        assert_eq!(m(&format!("{ok}.x")), mal(Malformed::Shape));
        assert_eq!(m("e!!.e30.c2ln"), mal(Malformed::HeaderEncoding));
        assert_eq!(m(&token("[1]", C, "")), mal(Malformed::HeaderJson));
        assert_eq!(
            m(&token(r#"{"alg":"RS256","alg":"none","kid":"k"}"#, C, "")),
            mal(Malformed::DuplicateHeader)
        );
        assert_eq!(m(&token(r#"{"kid":"k"}"#, C, "")), mal(Malformed::NoAlg));
        assert_eq!(
            m(&token(r#"{"alg":["RS256"],"kid":"k"}"#, C, "")),
            mal(Malformed::AlgType)
        );
        assert_eq!(
            m(&token(r#"{"alg":"HS256","kid":"k"}"#, C, "")),
            Some(ParseError::Algorithm)
        );
        assert_eq!(
            m(&token(
                r#"{"alg":"RS256","kid":"k","crit":["b64"],"b64":false}"#,
                C,
                ""
            )),
            mal(Malformed::Crit)
        );
        assert_eq!(
            m(&token(r#"{"alg":"RS256"}"#, C, "")),
            mal(Malformed::NoKid)
        );
        assert_eq!(
            m(&token(r#"{"alg":"RS256","kid":7}"#, C, "")),
            mal(Malformed::KidType)
        );
        assert_eq!(m(&token(H, C, "c2ln!")), mal(Malformed::SignatureEncoding));
        assert_eq!(
            m(&format!("{}.e30!.c2ln", b64(H))),
            mal(Malformed::ClaimsEncoding)
        );
        assert_eq!(m(&token(H, "\"x\"", "c2ln")), mal(Malformed::ClaimsJson));
        assert_eq!(
            m(&token(H, r#"{"oid":"a","oid":"b"}"#, "c2ln")),
            mal(Malformed::DuplicateClaim)
        );
        assert_eq!(
            m(&token(H, r#"{"exp":"soon"}"#, "c2ln")),
            mal(Malformed::ClaimType)
        );
    }
}
