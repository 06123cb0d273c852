// Sets BLOB_RELAY_COMMIT (the commit this binary is built from); the logic is
// shared with the other binary's build script.
include!("../shared/build/commit.rs");
