//! What the state directory keeps across restarts, or the flags name instead:
//! the block-ID key and the TLS identity. A configuration check
//! (`--check-config`) only reads them; the real start makes and keeps them.

use relay_proto::id_key::IdKey;

use super::ResolveError;
use crate::connection::tls::Identity;
use crate::operations::config::Args;
use crate::operations::state_dir::{ID_KEY_FILE, StateDir, StateError};

/// The block-ID key: random with `--id-key-ephemeral`, else `--id-key-file` or
/// the state directory's, created on the first start. A configuration check
/// writes nothing: without a key file yet it uses a random key (the real start
/// creates and keeps one).
pub(super) fn id_key(args: &Args) -> Result<IdKey, ResolveError> {
    if args.storage.id_key_ephemeral {
        return Ok(IdKey::random());
    }
    let path = match &args.storage.id_key_file {
        Some(p) => p.clone(),
        None => resolve_state_dir(args)?.file(ID_KEY_FILE),
    };
    let key = if args.check_config && !path.exists() {
        Ok(IdKey::random())
    } else if args.check_config {
        IdKey::load(&path)
    } else {
        IdKey::load_or_create(&path)
    };
    key.map_err(ResolveError::IdKey)
}

fn resolve_state_dir(args: &Args) -> Result<StateDir, StateError> {
    StateDir::resolve(args.state_dir.as_deref())
}

/// `--tls-cert`/`--tls-key`, else the state directory's self-signed identity:
/// made on the first start and kept, so pinned clients keep working. A
/// configuration check only reads it, and makes a throwaway one if there is none
/// yet (the real start will make and keep one).
pub(super) fn identity(args: &Args) -> Result<Identity, ResolveError> {
    if let (Some(c), Some(k)) = (&args.listen.tls_cert, &args.listen.tls_key) {
        return Ok(Identity::from_pem_files(c, k)?);
    }
    let dir = resolve_state_dir(args)?;
    let kept = if args.check_config {
        dir.load_identity()?
    } else {
        Some(dir.load_or_create_identity(&args.listen.tls_names)?)
    };
    match kept {
        Some(id) => Ok(id),
        None => Ok(Identity::self_signed(args.listen.tls_names.clone())?),
    }
}
