//! Storage's own request error: what the service (or the transport) said, with
//! the HTTP status and Azure's error code when there was a response. Wire codes
//! are chosen by the caller (`relay-pipeline`).

use azure_storage_blob::StorageError;

use crate::retry::is_retryable_status;

/// `BlobError::code` of a request that missed its deadline (no status).
pub const TIMEOUT_CODE: &str = "Timeout";

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
                message: format!("Azure {op} failed: {e}"),
            },
        }
    }

    /// Transport failures (no status) and throttling/server errors are retried.
    pub fn is_retryable(&self) -> bool {
        self.status.is_none_or(is_retryable_status)
    }

    pub fn is_conflict(&self) -> bool {
        matches!(self.status, Some(409 | 412))
    }
}
