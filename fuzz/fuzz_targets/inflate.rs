//! `relay_proto::inflate::Inflater` (the relay's decoder of compressed chunks)
//! on arbitrary bytes; see `blob_relay_fuzz::inflate::check_inflate_bytes`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    blob_relay_fuzz::inflate::check_inflate_bytes(data);
});
