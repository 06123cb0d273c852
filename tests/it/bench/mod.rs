//! Benches at a size CI can afford, and the ones run by hand (`--ignored`).

mod azcopy;
mod client_bench;
mod load;
mod watch_memory;
