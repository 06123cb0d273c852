//! Storage's own request error: what the service (or the transport) said, with
//! the HTTP status and Azure's error code when there was a response. Wire codes
//! are chosen by the caller (`relay-pipeline`).

use azure_storage_blob::StorageError;

use crate::retry::is_retryable_status;

/// `BlobError::code` of a request that missed its deadline (no status).
pub const TIMEOUT_CODE: &str = "Timeout";

/// Azure's codes for a body whose transactional checksum (Content-MD5,
/// x-ms-content-crc64) does not match what the service received.
pub const TRANSIT_CORRUPTION_CODES: [&str; 2] = ["Md5Mismatch", "Crc64Mismatch"];

/// An Azure failure, with the HTTP status and Azure's error code when there was a response.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct BlobError {
    pub status: Option<u16>,
    pub code: Option<String>,
    pub message: String,
}

impl BlobError {
    pub(crate) fn from_azure(op: &str, err: azure_core::Error) -> Self {
        let status = err.http_status().map(u16::from);
        if status.is_none() {
            // No response: the cause is in the error's source chain (connection
            // reset, closed, timed out), which the conversion below would drop.
            return Self {
                status,
                code: None,
                message: format!(
                    "Azure {op} failed: {}",
                    relay_proto::logsafe::hide_sas_signatures(&with_sources(&err))
                ),
            };
        }
        match StorageError::try_from(err) {
            Ok(se) => {
                let code = se.error_code.as_ref().map(|c| c.to_string());
                let what = se
                    .message
                    .as_deref()
                    .map(|m| m.lines().next().unwrap_or(m).to_string())
                    .unwrap_or_default();
                Self {
                    status,
                    message: format!(
                        "Azure {op} failed: {} {}{}",
                        u16::from(se.status_code),
                        code.as_deref().unwrap_or(""),
                        if what.is_empty() {
                            String::new()
                        } else {
                            format!(" ({what})")
                        }
                    ),
                    code,
                }
            }
            Err(e) => Self {
                status,
                code: None,
                message: format!(
                    "Azure {op} failed: {}",
                    relay_proto::logsafe::hide_sas_signatures(&e.to_string())
                ),
            },
        }
    }

    /// Transport failures (no status), throttling/server errors and bodies the
    /// service got corrupted (its checksum of what arrived differs from the one
    /// sent: the bytes are still here, sending them again is right) are retried.
    pub fn is_retryable(&self) -> bool {
        self.status.is_none_or(is_retryable_status) || self.is_corrupted_in_transit()
    }

    /// 400 Md5Mismatch / Crc64Mismatch: what arrived is not what was sent.
    pub fn is_corrupted_in_transit(&self) -> bool {
        self.status == Some(400)
            && self
                .code
                .as_deref()
                .is_some_and(|c| TRANSIT_CORRUPTION_CODES.contains(&c))
    }

    pub fn is_conflict(&self) -> bool {
        matches!(self.status, Some(409 | 412))
    }
}

/// An error and its causes, outermost first: "a: b: c".
fn with_sources(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let part = cause.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::BlobError;
    use relay_proto::logsafe::hide_sas_signatures;

    fn refused(status: u16, code: &str) -> BlobError {
        BlobError {
            status: Some(status),
            code: Some(code.into()),
            message: String::new(),
        }
    }

    #[test]
    fn corrupted_bodies_are_retried_other_refusals_are_not() {
        assert!(refused(400, "Crc64Mismatch").is_retryable());
        assert!(refused(400, "Md5Mismatch").is_retryable());
        assert!(!refused(400, "InvalidBlockId").is_retryable());
        assert!(!refused(403, "AuthorizationPermissionMismatch").is_retryable());
        assert!(!refused(412, "Crc64Mismatch").is_retryable());
        assert!(refused(503, "ServerBusy").is_retryable());
    }

    #[test]
    fn sas_signatures_are_hidden_in_error_text() {
        // Transport errors quote the request's URL, SAS and all.
        let text = "error sending request for url (http://127.0.0.1:1/acct/c/b?comp=block&sig=SECRET%3D): operation timed out";
        let cut = hide_sas_signatures(text);
        assert!(!cut.contains("SECRET"), "{cut}");
        assert_eq!(
            cut,
            "error sending request for url (http://127.0.0.1:1/acct/c/b?comp=block&sig=REDACTED): operation timed out"
        );
    }
}
