//! A stand-in for Azure Blob Storage that is not the bottleneck, for one
//! measurement Azurite cannot make here: the relay's and the client's CPU per
//! small file when storage answers as fast as a storage account's front ends
//! (thousands of requests a second) instead of at Azurite's 200–400 files a
//! second on one Node.js core. `wanbench --storage standin` and
//! `syncbench --storage standin` (a sync of a million files: Azurite slows to
//! some 18 files a second past 35,000 blobs) run it in Azurite's place; every
//! other test still runs against Azurite.
//!
//! It speaks the subset of the Blob REST API the relay and the bench use
//! (Create Container, Put Blob, Put Block, Put Block List, Get Block List, Get
//! Blob with ranges, Get Blob Properties, Delete Blob, List Blobs flat with
//! `prefix`, `marker`, `maxresults` and `include=metadata`) over HTTP/1.1 with
//! keep-alive, keeps every blob in memory, checks Content-MD5 as the service
//! does, and answers anything else with 501. It does not check the request's
//! signature: it measures the clients' cost, and signing is on their side.
//!
//! `store` holds the rules (no I/O); `http` maps requests onto them;
//! `list_xml` writes a List Blobs page as the service does (pure).

mod http;
mod list_xml;
pub mod store;

pub use http::serve;
