//! A refusal every other file of the run would get too (a wrong token, a
//! grant missing, no such container): the run stops and says it once, as a
//! setup error, instead of one failed line per file.

use crate::transfer::send::Options;
use crate::ui::error_code::ErrorCode;
use crate::ui::report::FileError;

/// Why the whole run stops (exit status 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Signing in for the relay's token failed.
    #[error("{0}")]
    SignIn(String),
    /// The relay refused the token; `hint` says what to check.
    #[error("the relay refused the token ({message}); {hint}")]
    Token { message: String, hint: &'static str },
    /// The relay refused the container for a static token.
    #[error("the relay refused container {container:?} for this token ({message})")]
    Container { container: String, message: String },
    /// An Entra ID principal without the grant: who was refused and what
    /// would let them in, since the fix is the operator's.
    #[error(
        "the relay refused container {container:?} to {who} ({message}); an app role \
         or group the relay maps to {container:?} (--entra-grant) must be \
         assigned to this identity (docs/DEPLOY.md)"
    )]
    Grant {
        container: String,
        who: String,
        message: String,
    },
    #[error(
        "container {container:?} does not exist; create it first \
         (with --direct, --create-container does)"
    )]
    NoContainer { container: String },
}

/// The refusal of `e` if every other file would get it too.
pub fn fatal(e: &FileError, opts: &Options) -> Option<Refusal> {
    let container = opts.container.clone();
    let message = e.message.clone();
    match (e.code, opts.token.who()) {
        (ErrorCode::SignIn, _) => Some(Refusal::SignIn(message)),
        (ErrorCode::Unauthorized, _) => Some(Refusal::Token {
            hint: opts.token.hint(&message),
            message,
        }),
        (ErrorCode::Forbidden, None) => Some(Refusal::Container { container, message }),
        (ErrorCode::Forbidden, Some(who)) => Some(Refusal::Grant {
            container,
            who,
            message,
        }),
        (ErrorCode::StorageRefused, _) if message.contains("ContainerNotFound") => {
            Some(Refusal::NoContainer { container })
        }
        _ => None,
    }
}

/// The refusal of a listing that failed before its first answer: `fatal`'s,
/// or, for `NotFound` (the relay's word for storage's ContainerNotFound: a
/// listing names no blob), no such container.
pub fn listing_refused(e: &FileError, opts: &Options) -> Option<Refusal> {
    fatal(e, opts).or_else(|| {
        (e.code == ErrorCode::NotFound).then(|| Refusal::NoContainer {
            container: opts.container.clone(),
        })
    })
}
