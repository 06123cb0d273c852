//! Deleting a listed blob's version (the relay's `Delete`, storage's delete
//! with `If-Match`), the grant it needs, the seal a listing vouches with,
//! the client's delete primitive (`delete_listed`, both ways), and
//! `relay-client ls`: through a real relay and Azurite.

mod client;
mod frames;
mod ls;
mod storage;
