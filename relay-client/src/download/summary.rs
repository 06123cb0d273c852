//! A download run's summary: what the reporter counted, with the relay's
//! connections and the path it remembers for the next run.

use crate::transfer::mode::Mode;
use crate::ui::progress::Reporter;
use crate::ui::report::Summary;

/// The summary of a download run over `mode`, whose links it closes.
pub async fn summary(mode: &Mode, reporter: &Reporter) -> Summary {
    let mut summary = reporter.summary(mode.name());
    summary.download = true;
    if let Mode::Relay(links) = mode {
        summary.warm_start = Some(links.remember_path());
        links.close().await;
        summary.connections = Some(links.connections());
    }
    summary
}
