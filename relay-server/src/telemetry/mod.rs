//! What the relay counts and says about itself: the Prometheus exposition
//! format, histograms, the metrics every layer records into, refusals and
//! failures by cause, and which build this is. The bottom layer: it imports
//! nothing else from this crate, so every other layer may use it.

pub mod exposition;
pub mod failures;
pub mod histogram;
pub mod metrics;
pub mod rejections;
pub mod version;
