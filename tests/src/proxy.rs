//! Fault-injecting HTTP proxy between the relay and Azurite (see faults tests).
