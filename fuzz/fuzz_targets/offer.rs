//! `relay_proto::offer_rules::check_offer` on arbitrary Offers and relay limits; see
//! `blob_relay_fuzz::check_offer_input` for what is asserted.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: blob_relay_fuzz::OfferInput| {
    blob_relay_fuzz::check_offer_input(&input);
});
