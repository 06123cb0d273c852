//! One QUIC connection and its streams, before any file: the certificate
//! (`tls`), admission and its slots (`admission`), how many streams a
//! connection may open (`stream_credit`), turns to read control frames
//! (`frame_turns`) and a stream's view of its connection (`link`). May import
//! `telemetry` only; never `sign_in`, `state`, `transfer` or `operations`.

pub mod admission;
pub mod frame_turns;
pub mod link;
pub mod stream_credit;
pub mod tls;
