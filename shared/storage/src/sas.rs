//! Account SAS signed from a shared key (HMAC-SHA256), for users who have only
//! the account key: the relay signs its own short-lived SAS instead of sending the
//! key anywhere. Pure: time is an argument.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Service version we sign for (the 2020-12-06+ string-to-sign with encryption scope).
pub const SAS_VERSION: &str = "2021-08-06";

/// Why no SAS could be signed.
#[derive(Debug, thiserror::Error)]
pub enum SasError {
    #[error("account key is not valid base64")]
    KeyNotBase64,
    #[error("account key is empty")]
    EmptyKey,
    /// A start or expiry time that cannot be represented.
    #[error(transparent)]
    Time(#[from] time::error::ComponentRange),
    /// A start or expiry time that cannot be written as RFC 3339.
    #[error(transparent)]
    Format(#[from] time::error::Format),
}

/// Query string (without `?`) of an account SAS for the blob service that allows
/// read, write, delete, list, add and create on containers and objects, from
/// `now - 5 min` (clock skew) to `now + lifetime`.
pub fn account_sas(
    account: &str,
    key_base64: &str,
    now: OffsetDateTime,
    lifetime: time::Duration,
) -> Result<String, SasError> {
    let key = STANDARD
        .decode(key_base64.trim())
        .map_err(|_| SasError::KeyNotBase64)?;
    let fmt = |t: OffsetDateTime| -> Result<String, SasError> {
        Ok(t.replace_nanosecond(0)?.format(&Rfc3339)?)
    };
    let start = fmt(now - time::Duration::minutes(5))?;
    let expiry = fmt(now + lifetime)?;
    let (sp, ss, srt) = ("rwdlac", "b", "co");
    let string_to_sign =
        format!("{account}\n{sp}\n{ss}\n{srt}\n{start}\n{expiry}\n\n\n{SAS_VERSION}\n\n");
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).map_err(|_| SasError::EmptyKey)?;
    mac.update(string_to_sign.as_bytes());
    let sig = STANDARD.encode(mac.finalize().into_bytes());
    let q = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("sv", SAS_VERSION)
        .append_pair("ss", ss)
        .append_pair("srt", srt)
        .append_pair("sp", sp)
        .append_pair("st", &start)
        .append_pair("se", &expiry)
        .append_pair("sig", &sig)
        .finish();
    Ok(q)
}

/// Query string (without `?`) of a service SAS for one container of the blob
/// service, granting only `permissions` (e.g. `w` to upload, `rl` to read and
/// list), from `now - 5 min` to `now + lifetime`: what a foreign tool gets
/// (AzCopy takes its SAS on the command line, where other local users can
/// read it while it runs), so it is no wider and lives no longer than the job.
pub fn container_sas(
    account: &str,
    key_base64: &str,
    container: &str,
    permissions: &str,
    now: OffsetDateTime,
    lifetime: time::Duration,
) -> Result<String, SasError> {
    let key = STANDARD
        .decode(key_base64.trim())
        .map_err(|_| SasError::KeyNotBase64)?;
    let fmt = |t: OffsetDateTime| -> Result<String, SasError> {
        Ok(t.replace_nanosecond(0)?.format(&Rfc3339)?)
    };
    let start = fmt(now - time::Duration::minutes(5))?;
    let expiry = fmt(now + lifetime)?;
    // Permissions, start, expiry, resource, identifier, IP, protocol,
    // version, resource kind, snapshot time, encryption scope, then the five
    // response headers (none overridden).
    let string_to_sign = format!(
        "{permissions}\n{start}\n{expiry}\n/blob/{account}/{container}\n\n\n\n{SAS_VERSION}\nc\n\n\n\n\n\n\n"
    );
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).map_err(|_| SasError::EmptyKey)?;
    mac.update(string_to_sign.as_bytes());
    let sig = STANDARD.encode(mac.finalize().into_bytes());
    Ok(url::form_urlencoded::Serializer::new(String::new())
        .append_pair("sv", SAS_VERSION)
        .append_pair("sr", "c")
        .append_pair("sp", permissions)
        .append_pair("st", &start)
        .append_pair("se", &expiry)
        .append_pair("sig", &sig)
        .finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_known_vector() {
        // Key and inputs fixed; the expected signature was computed independently with
        // `printf 'acct\nrwdlac\nb\nco\n2024-01-01T00:00:00Z\n2024-01-01T01:05:00Z\n\n\n2021-08-06\n\n' |
        //  openssl dgst -sha256 -mac HMAC -macopt hexkey:00010203 -binary | base64`.
        let now = OffsetDateTime::from_unix_timestamp(1_704_067_500).expect("time");
        let q = account_sas("acct", "AAECAw==", now, time::Duration::hours(1)).expect("sas");
        assert!(q.contains("st=2024-01-01T00%3A00%3A00Z"), "{q}");
        assert!(q.contains("se=2024-01-01T01%3A05%3A00Z"), "{q}");
        assert!(
            q.contains("sig=mHV6sH87qjI9xiuzQZxWXgu7kKqCeIiHLsj17%2FeDX%2Fg%3D"),
            "{q}"
        );
    }

    #[test]
    fn signs_a_container_sas_for_only_what_was_asked() {
        // The expected signature was computed independently with
        // `printf 'w\n2024-01-01T00:00:00Z\n2024-01-01T01:05:00Z\n/blob/acct/cont\n\n\n\n2021-08-06\nc\n\n\n\n\n\n\n' |
        //  openssl dgst -sha256 -mac HMAC -macopt hexkey:00010203 -binary | base64`.
        let now = OffsetDateTime::from_unix_timestamp(1_704_067_500).expect("time");
        let q = container_sas(
            "acct",
            "AAECAw==",
            "cont",
            "w",
            now,
            time::Duration::hours(1),
        )
        .expect("sas");
        assert!(q.contains("sr=c&sp=w&"), "{q}");
        assert!(q.contains("se=2024-01-01T01%3A05%3A00Z"), "{q}");
        assert!(
            q.contains("sig=cce7w9ZNKsMGLqLh4EUYudvDRUQ7%2FKJ8c%2B8V7iAVVgo%3D"),
            "{q}"
        );
        // Another container or permission signs differently.
        let other = container_sas(
            "acct",
            "AAECAw==",
            "cont2",
            "w",
            now,
            time::Duration::hours(1),
        )
        .expect("sas");
        assert!(!other.contains("sig=cce7w9"), "{other}");
        assert!(
            container_sas("a", "not base64!", "c", "r", now, time::Duration::hours(1)).is_err()
        );
    }

    #[test]
    fn bad_key() {
        let now = OffsetDateTime::UNIX_EPOCH;
        assert!(account_sas("a", "not base64!", now, time::Duration::hours(1)).is_err());
    }
}
