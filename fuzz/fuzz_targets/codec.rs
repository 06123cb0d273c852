//! `relay_proto::codec::decode` (and `read_frame`) on arbitrary bytes; see
//! `blob_relay_fuzz::check_frame_bytes` for what is asserted.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    blob_relay_fuzz::check_frame_bytes(data);
});
