//! Whether a caller may do what its stream asks, decided in one place for
//! every kind of stream: the protocol version, the container's name, a token
//! (or Entra ID principal) granted that container for what the stream asks,
//! and a container that is not the deployment's own. Nothing here calls
//! storage or raises stream credit: a refused stream never costs either.

use relay_proto::blob_name::{ContainerNameError, validate_container};
use relay_proto::offer_rules::{UnsupportedVersion, check_version};
use relay_proto::protocol::{Code, Delete, Failure, Fetch, List, Offer};

use crate::connection::link::Link;
use crate::connection::stream_credit::StreamTicket;
use crate::sign_in::auth::{Access, AuthError, Caller};
use crate::state::Shared;

/// What a stream asks to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ask {
    /// An Offer: write a blob.
    Upload,
    /// A Fetch: read a blob.
    Fetch,
    /// A List: read a container's names.
    List,
    /// A Delete: remove one version of a blob.
    Delete,
}

impl Ask {
    /// The grant the ask needs: writing never implies reading, nor the
    /// reverse, and neither implies deleting.
    fn access(self) -> Access {
        match self {
            Ask::Upload => Access::Write,
            Ask::Fetch | Ask::List => Access::Read,
            Ask::Delete => Access::Delete,
        }
    }
}

/// A stream's first frame, as far as admission reads it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request<'a> {
    pub ask: Ask,
    pub version: u32,
    pub token: &'a str,
    pub container: &'a str,
}

impl<'a> Request<'a> {
    pub(crate) fn upload(offer: &'a Offer) -> Self {
        Self {
            ask: Ask::Upload,
            version: offer.version,
            token: &offer.token.0,
            container: &offer.container,
        }
    }

    pub(crate) fn fetch(fetch: &'a Fetch) -> Self {
        Self {
            ask: Ask::Fetch,
            version: fetch.version,
            token: &fetch.token.0,
            container: &fetch.container,
        }
    }

    pub(crate) fn delete(delete: &'a Delete) -> Self {
        Self {
            ask: Ask::Delete,
            version: delete.version,
            token: &delete.token.0,
            container: &delete.container,
        }
    }

    pub(crate) fn list(list: &'a List) -> Self {
        Self {
            ask: Ask::List,
            version: list.version,
            token: &list.token.0,
            container: &list.container,
        }
    }
}

/// Why a caller may not do what it asks; each becomes a Reject's code.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refusal {
    #[error(transparent)]
    Version(#[from] UnsupportedVersion),
    #[error(transparent)]
    Name(#[from] ContainerNameError),
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// The deployment's own files (the relay binary, keys, tokens) live there:
    /// no stream may touch them, whatever a token's grant says.
    #[error("container {0:?} is reserved for the relay's own files")]
    Reserved(String),
}

impl Refusal {
    pub(crate) fn code(&self) -> Code {
        match self {
            Refusal::Version(_) => Code::UnsupportedVersion,
            Refusal::Name(_) => Code::InvalidName,
            Refusal::Auth(AuthError::Unknown | AuthError::Entra(_)) => Code::Unauthorized,
            Refusal::Auth(
                AuthError::Container(_) | AuthError::NoRead(_) | AuthError::NoDelete(_),
            )
            | Refusal::Reserved(_) => Code::Forbidden,
        }
    }
}

impl From<Refusal> for Failure {
    fn from(r: Refusal) -> Self {
        Failure::new(r.code(), r.to_string())
    }
}

/// Who the caller is, if it may do what it asks. The version comes first, so a
/// client too old or too new hears that before anything about its token.
pub(crate) async fn admit(shared: &Shared, request: Request<'_>) -> Result<Caller, Refusal> {
    check_version(request.version)?;
    validate_container(request.container)?;
    let caller = crate::sign_in::auth::authenticate(
        &shared.sign_in.tokens,
        shared.sign_in.entra.as_deref(),
        request.token,
        request.container,
        request.ask.access(),
    )
    .await?;
    let reserved = &shared.sign_in.reserved_containers;
    if reserved.iter().any(|c| c == request.container) {
        return Err(Refusal::Reserved(request.container.to_string()));
    }
    Ok(caller)
}

/// A valid Fetch, List or Delete admits the connection as a valid Offer does; the
/// client sends nothing more on the stream, so it counts as one waiting for
/// storage.
pub(crate) fn admitted(link: &Link, ticket: &mut StreamTicket) {
    link.open_gate();
    ticket.declare(0);
    ticket.received();
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_proto::limits::PROTOCOL_VERSION;

    #[test]
    fn each_refusal_has_the_code_the_protocol_names() {
        let cases = [
            (
                Refusal::Version(UnsupportedVersion(PROTOCOL_VERSION + 1)),
                Code::UnsupportedVersion,
            ),
            (Refusal::Auth(AuthError::Unknown), Code::Unauthorized),
            (
                Refusal::Auth(AuthError::Container("c".into())),
                Code::Forbidden,
            ),
            (
                Refusal::Auth(AuthError::NoRead("c".into())),
                Code::Forbidden,
            ),
            (
                Refusal::Auth(AuthError::NoDelete("c".into())),
                Code::Forbidden,
            ),
            (Refusal::Reserved("relay-boot".into()), Code::Forbidden),
        ];
        for (refusal, code) in cases {
            let text = refusal.to_string();
            let f = Failure::from(refusal);
            assert_eq!((f.code, f.message), (code, text));
        }
        let name = validate_container("A").expect_err("upper case");
        assert_eq!(Failure::from(Refusal::Name(name)).code, Code::InvalidName);
        assert_eq!(
            Refusal::Reserved("relay-boot".into()).to_string(),
            "container \"relay-boot\" is reserved for the relay's own files"
        );
    }

    #[test]
    fn an_upload_needs_a_write_grant_and_a_download_a_read_grant() {
        assert_eq!(Ask::Upload.access(), Access::Write);
        assert_eq!(Ask::Fetch.access(), Access::Read);
        assert_eq!(Ask::List.access(), Access::Read);
        assert_eq!(Ask::Delete.access(), Access::Delete);
    }
}
