//! The relay as operators run it: a separate process, its configuration, identity, health and signals.

mod identity;
mod relay_process;
