//! The output flags of every command that moves files (`upload`, `watch`,
//! `download`, `sync`): one struct, flattened into each, so each flag is
//! named, explained and defaulted the same everywhere. (`ls` has its own
//! `--json`: one object per blob, no status or bars to choose.)

use clap::Args;

use crate::ui::progress::Output;

#[derive(Debug, Clone, Args)]
pub struct OutputArgs {
    /// Print one JSON summary on stdout instead of text (setup errors too).
    #[arg(long, conflicts_with = "json_lines")]
    pub json: bool,

    /// Print one JSON event per line on stdout as things happen (file results,
    /// periodic status, the summary last), for tools that follow progress.
    #[arg(long)]
    pub json_lines: bool,

    /// Time between status lines when stderr is not a terminal (0: none).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = relay_proto::duration::parse_duration)]
    pub status_interval: std::time::Duration,

    /// No progress bars.
    #[arg(long, short)]
    pub quiet: bool,
}

impl OutputArgs {
    /// `--json` or `--json-lines` (they conflict), else text.
    pub fn output(&self) -> Output {
        if self.json {
            Output::Json
        } else if self.json_lines {
            Output::JsonLines
        } else {
            Output::Text
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        o: OutputArgs,
    }

    #[test]
    fn defaults_and_the_one_choice_of_output() {
        let t = T::try_parse_from(["t"]).expect("defaults");
        assert_eq!(t.o.output(), Output::Text);
        assert_eq!(t.o.status_interval, std::time::Duration::from_secs(10));
        assert!(!t.o.quiet);
        let t = T::try_parse_from(["t", "--json", "-q", "--status-interval", "0"]).expect("flags");
        assert_eq!(t.o.output(), Output::Json);
        assert!(t.o.quiet && t.o.status_interval.is_zero());
        let t = T::try_parse_from(["t", "--json-lines"]).expect("json lines");
        assert_eq!(t.o.output(), Output::JsonLines);
        assert!(T::try_parse_from(["t", "--json", "--json-lines"]).is_err());
    }
}
