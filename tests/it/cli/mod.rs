//! What the binaries take on their command lines and say back: input checks, output, flag references in the docs, and no secret in any output.

mod flag_reference;
mod input;
mod output;
mod secrets;
