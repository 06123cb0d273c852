//! Which build this is: the package version and the commit build.rs found, for
//! `--version`, the first log line, `blob_relay_build_info` and the Plans the
//! relay sends (so a client at `-v` says which relay it talks to).

use crate::telemetry::exposition::{Exposition, Kind};

relay_proto::build_version!();

/// `blob_relay_build_info{version="0.1.0",commit="abc1234"} 1`: the usual
/// info-series form, so a query can join it onto any other series.
pub fn render(out: &mut Exposition) {
    out.labelled(
        "blob_relay_build_info",
        Kind::Gauge,
        "The relay's build: version and the commit it was built from (-dirty: with uncommitted changes); always 1.",
        [([("version", VERSION), ("commit", COMMIT)], 1)],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_info_is_one_series_at_one() {
        let mut e = Exposition::default();
        render(&mut e);
        let want =
            format!("blob_relay_build_info{{version=\"{VERSION}\",commit=\"{COMMIT}\"}} 1\n");
        assert!(e.encode().contains(&want));
        assert!(LONG.starts_with(VERSION) && !COMMIT.is_empty());
    }
}
