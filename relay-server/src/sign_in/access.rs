//! What a stream asks to do with a container, below both the tokens file's
//! grants (`tokens_file`) and the checks that read them (`auth`).

/// What a stream asks to do with a container: an Offer writes, a Fetch or a
/// List reads. Each is granted apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}
