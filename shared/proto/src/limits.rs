//! Numbers the protocol and Azure impose, in one place.

pub const KIB: u64 = 1024;
pub const MIB: u64 = 1024 * KIB;
pub const GIB: u64 = 1024 * MIB;
pub const TIB: u64 = 1024 * GIB;

/// ALPN of the relay protocol; the version is part of it, so an incompatible
/// client fails the handshake with a clear "no application protocol" error.
pub const ALPN: &[u8] = b"blob-relay/1";
/// The same protocol, announcing compressed chunks (`chunk`). A client lists it
/// before `ALPN` and a relay that knows it prefers it; either end that does not
/// know it settles on `ALPN`, and then every byte goes plain: capability
/// negotiation in the handshake, before any stream (eager ones too) opens.
pub const ALPN_ZSTD: &[u8] = b"blob-relay/1+zstd";
/// Version carried in every Offer, checked by the relay.
pub const PROTOCOL_VERSION: u32 = 1;

/// Azure's limit on blocks per blob.
pub const MAX_BLOCKS: u64 = 50_000;
/// Azure's limit on one staged block (service version 2019-12-12 and later).
pub const MAX_BLOCK_SIZE: u64 = 4000 * MIB;
/// Blocks at or below 4 MiB miss Azure's high-throughput path; ours are larger.
pub const HIGH_THROUGHPUT_THRESHOLD: u64 = 4 * MIB;
/// Smallest block size we plan (a 1 MiB multiple above the threshold).
pub const MIN_BLOCK_SIZE: u64 = 5 * MIB;
pub const DEFAULT_BLOCK_SIZE: u64 = 16 * MIB;
/// Largest blob we accept: 50,000 blocks of 4000 MiB (about 190.7 TiB).
pub const MAX_BLOB_SIZE: u64 = MAX_BLOCKS * MAX_BLOCK_SIZE;

/// Largest control frame (Offer, Plan, Receipt, ...). Metadata is limited by Azure
/// to 8 KiB in total, so 64 KiB leaves room without letting a peer make us buffer much.
pub const MAX_FRAME_LEN: usize = 64 * 1024;

/// Azure's blob name limit, in characters.
pub const MAX_BLOB_NAME_CHARS: usize = 1024;
/// Azure's limit on all metadata names and values together.
pub const MAX_METADATA_BYTES: usize = 8 * 1024;
