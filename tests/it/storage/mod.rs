//! The storage layer against Azurite and the stand-in storage the benches measure against.

mod put_blob;
mod reads;
mod standin;
mod standin_list;
