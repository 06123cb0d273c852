//! What a command connects with: the relay's token (`bearer`), then the
//! connection (`super::mode`).

use std::sync::Arc;

use relay_proto::protocol::Secret;

use super::{ModeFlags, SetupError, mode};
use crate::commands::connection_args::ConnectionArgs;
use crate::sign_in::{Bearer, EntraToken, SignIn, SignInError};
use crate::transfer::mode::Mode;
use crate::ui::weather::WeatherSink;

/// The token for the relay (`bearer`) and the connection (`mode`), for a
/// command whose first container is `container`.
pub async fn connected(
    args: &ConnectionArgs,
    flags: &ModeFlags,
    container: &str,
    weather: WeatherSink,
) -> Result<(Bearer, Mode), SetupError> {
    let bearer = bearer(args, flags.direct)?;
    let mode = mode(args, flags, &bearer, container, weather).await?;
    Ok((bearer, mode))
}

/// The relay's token: `--token`, or with `--entra` an Entra ID token for
/// `--entra-scope`, fetched when the first Offer needs it (`mode` asks for it
/// before any file, so a sign-in problem is one setup error).
pub fn bearer(args: &ConnectionArgs, direct: bool) -> Result<Bearer, SetupError> {
    let token = args.token.clone().unwrap_or_default();
    let Some(flow) = args.entra.filter(|_| !direct) else {
        return Ok(Bearer::Static(Secret(token)));
    };
    if !token.is_empty() {
        return Err(SetupError::TokenAndEntra);
    }
    let audience = args.entra_scope.as_deref().ok_or(SignInError::NoScope)?;
    let scope = crate::sign_in::scope(audience)?;
    let credential = crate::sign_in::credential(&SignIn {
        flow,
        tenant: args.entra_tenant.clone(),
        client_id: args.entra_client_id.clone(),
    })?;
    Ok(Bearer::Entra(Arc::new(EntraToken::new(
        credential, flow, scope,
    ))))
}
