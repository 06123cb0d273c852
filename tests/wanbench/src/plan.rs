//! What to run: link profiles, methods, workloads, repeats and the time cap.
//! Kept apart from the I/O so `--quick` and the full plan are easy to read.

use std::time::Duration;

use anyhow::{Context, bail};
use relay_tests::datasets::DataSet;
use serde::{Deserialize, Serialize};

/// One emulated path (both directions alike), as written in results.json.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    pub rtt_ms: f64,
    /// Random loss per packet and direction, as a fraction (0.01 = 1 %).
    pub loss: f64,
    pub rate_mbit: f64,
}

impl Profile {
    pub const fn new(rtt_ms: f64, loss: f64, rate_mbit: f64) -> Self {
        Self {
            rtt_ms,
            loss,
            rate_mbit,
        }
    }

    /// TCP goodput ceiling: the rate counts IP bytes and a full MTU-1500
    /// segment with timestamps carries 1448 payload bytes.
    pub fn ceiling_mbit(&self) -> f64 {
        self.rate_mbit * 1448.0 / 1500.0
    }

    /// Short label, e.g. `100ms 1% 200M`.
    pub fn label(&self) -> String {
        format!(
            "{}ms {}% {}M",
            self.rtt_ms,
            round_pct(self.loss * 100.0),
            self.rate_mbit
        )
    }

    /// `RTT_MS/LOSS_FRACTION/RATE_MBIT`, e.g. `100/0.01/200`.
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        let parts: Vec<&str> = s.split('/').collect();
        let [rtt, loss, rate] = parts.as_slice() else {
            bail!("profile {s:?}: expected RTT_MS/LOSS/RATE_MBIT, e.g. 100/0.01/200");
        };
        let num = |v: &str, what: &str| -> anyhow::Result<f64> {
            v.trim()
                .parse::<f64>()
                .with_context(|| format!("profile {s:?}: bad {what} {v:?}"))
        };
        let p = Self::new(
            num(rtt, "rtt_ms")?,
            num(loss, "loss")?,
            num(rate, "rate_mbit")?,
        );
        if !(0.0..=1.0).contains(&p.loss) || p.rate_mbit <= 0.0 || p.rtt_ms < 0.0 {
            bail!("profile {s:?}: loss must be a fraction in 0..=1, rate > 0, rtt >= 0");
        }
        Ok(p)
    }
}

fn round_pct(p: f64) -> f64 {
    (p * 1000.0).round() / 1000.0
}

/// The five profiles of the full run.
pub const FULL_PROFILES: [Profile; 5] = [
    Profile::new(20.0, 0.0, 200.0),
    Profile::new(100.0, 0.001, 200.0),
    Profile::new(100.0, 0.01, 200.0),
    Profile::new(200.0, 0.01, 200.0),
    Profile::new(200.0, 0.05, 100.0),
];

/// `--quick`: a clean and a lossy path on which every method finishes
/// inside the cap, so CI can demand that every row verified its blobs. (At
/// 1 % loss a single cubic flow, which is what the Python SDK's one Put Blob
/// of a file under 64 MiB gets, moves ~1.7 Mbit/s: too slow for a smoke test.)
pub const QUICK_PROFILES: [Profile; 2] = [
    Profile::new(20.0, 0.0, 200.0),
    Profile::new(100.0, 0.001, 200.0),
];

/// How the files travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// relay-client through relay-server over QUIC (controller: `--relay-congestion`).
    Relay,
    /// Same, with QUIC Cubic on both ends (optional row).
    RelayCubic,
    /// Relay with `--no-warm-start`: the connection starts cold, as the first
    /// upload to a relay does (optional row; it still saves its estimate).
    RelayCold,
    /// Relay with `--compress off` (the `relay` row compresses with the
    /// client's default, `auto`): what compression buys, side by side.
    RelayOff,
    /// Cold and `--no-probe-train`: plain slow start, the cold start before
    /// the packet train (optional row, for comparison).
    RelayColdPlain,
    /// relay-client --direct, sized by itself from the path (8 MiB blocks and
    /// 16-32 requests in flight per file on a far path), TCP cubic.
    DirectCubic,
    /// The same with TCP bbr.
    DirectBbr,
    /// Python azure-storage-blob, max_concurrency=8, TCP cubic.
    PythonSdk,
    /// Same with TCP bbr (optional row).
    PythonSdkBbr,
    /// The Python SDK with 32 files at once (one Put Blob each for files up to
    /// 64 MiB): its best small-file setting on loopback here. TCP bbr.
    PythonSdk32,
    /// The same with 64 files at once.
    PythonSdk64,
    /// relay-client --direct --connections 32 (small files: 32 Put Blobs in
    /// flight instead of 8). TCP bbr.
    DirectBbr32,
    /// rclone (Debian package) `copy` with the azureblob backend over a SAS URL,
    /// `--transfers 32`. TCP bbr.
    Rclone,
    /// relay-client download through the relay (the relay's controller sends):
    /// the run's files, put in storage through the relay first (untimed),
    /// come back to the site.
    RelayDl,
    /// The same with `download --compress off` (the `relay-dl` row compresses
    /// with the client's default, `auto`): what compression buys on the way
    /// back, side by side.
    RelayDlOff,
    /// relay-client download --direct over TCP cubic.
    DirectDlCubic,
    /// relay-client download --direct over TCP bbr.
    DirectDlBbr,
    /// Python azure-storage-blob `download_blob(max_concurrency=8)`, 4 files
    /// at once, TCP cubic (py/download.py).
    PythonSdkDl,
    /// AzCopy (`azcopy copy`, its defaults: connections from the CPU count,
    /// 8 MiB blocks) over a container SAS, TCP cubic.
    AzcopyCubic,
    /// The same over TCP bbr.
    AzcopyBbr,
    /// AzCopy tuned as its documentation suggests for fast links
    /// (AZCOPY_CONCURRENCY_VALUE=AUTO, 16 MiB blocks), TCP cubic.
    AzcopyTunedCubic,
    /// The same over TCP bbr.
    AzcopyTunedBbr,
    /// AzCopy's download of the run's prefix (its defaults), TCP cubic.
    AzcopyDlCubic,
    /// The same over TCP bbr.
    AzcopyDlBbr,
    /// The tuned AzCopy's download, TCP cubic.
    AzcopyTunedDlCubic,
    /// The same over TCP bbr.
    AzcopyTunedDlBbr,
}

impl Method {
    /// Every method, in the order `--help` names them.
    pub const ALL: [Method; 26] = [
        Method::Relay,
        Method::RelayCubic,
        Method::RelayCold,
        Method::RelayColdPlain,
        Method::RelayOff,
        Method::DirectCubic,
        Method::DirectBbr,
        Method::PythonSdk,
        Method::PythonSdkBbr,
        Method::PythonSdk32,
        Method::PythonSdk64,
        Method::DirectBbr32,
        Method::Rclone,
        Method::RelayDl,
        Method::RelayDlOff,
        Method::DirectDlCubic,
        Method::DirectDlBbr,
        Method::PythonSdkDl,
        Method::AzcopyCubic,
        Method::AzcopyBbr,
        Method::AzcopyTunedCubic,
        Method::AzcopyTunedBbr,
        Method::AzcopyDlCubic,
        Method::AzcopyDlBbr,
        Method::AzcopyTunedDlCubic,
        Method::AzcopyTunedDlBbr,
    ];

    pub const DEFAULT: [Method; 4] = [
        Method::Relay,
        Method::DirectCubic,
        Method::DirectBbr,
        Method::PythonSdk,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Method::Relay => "relay",
            Method::RelayCubic => "relay-cubic",
            Method::RelayCold => "relay-cold",
            Method::RelayColdPlain => "relay-cold-plain",
            Method::RelayOff => "relay-off",
            Method::DirectCubic => "direct-cubic",
            Method::DirectBbr => "direct-bbr",
            Method::PythonSdk => "python-sdk",
            Method::PythonSdkBbr => "python-sdk-bbr",
            Method::PythonSdk32 => "python-sdk-32",
            Method::PythonSdk64 => "python-sdk-64",
            Method::DirectBbr32 => "direct-bbr-32",
            Method::Rclone => "rclone",
            Method::RelayDl => "relay-dl",
            Method::RelayDlOff => "relay-dl-off",
            Method::DirectDlCubic => "direct-dl-cubic",
            Method::DirectDlBbr => "direct-dl-bbr",
            Method::PythonSdkDl => "python-sdk-dl",
            Method::AzcopyCubic => "azcopy-cubic",
            Method::AzcopyBbr => "azcopy-bbr",
            Method::AzcopyTunedCubic => "azcopy-tuned-cubic",
            Method::AzcopyTunedBbr => "azcopy-tuned-bbr",
            Method::AzcopyDlCubic => "azcopy-dl-cubic",
            Method::AzcopyDlBbr => "azcopy-dl-bbr",
            Method::AzcopyTunedDlCubic => "azcopy-tuned-dl-cubic",
            Method::AzcopyTunedDlBbr => "azcopy-tuned-dl-bbr",
        }
    }

    pub fn parse(s: &str) -> anyhow::Result<Self> {
        let all = Self::ALL;
        all.into_iter()
            .find(|m| m.name() == s.trim())
            .with_context(|| {
                let names: Vec<_> = all.iter().map(|m| m.name()).collect();
                format!("unknown method {s:?} (one of {})", names.join(", "))
            })
    }

    /// TCP congestion control the site namespace is pinned to (TCP methods only).
    pub fn tcp_cc(self) -> Option<&'static str> {
        match self {
            Method::DirectCubic
            | Method::PythonSdk
            | Method::DirectDlCubic
            | Method::PythonSdkDl
            | Method::AzcopyCubic
            | Method::AzcopyTunedCubic
            | Method::AzcopyDlCubic
            | Method::AzcopyTunedDlCubic => Some("cubic"),
            Method::DirectBbr
            | Method::DirectDlBbr
            | Method::PythonSdkBbr
            | Method::PythonSdk32
            | Method::PythonSdk64
            | Method::DirectBbr32
            | Method::Rclone
            | Method::AzcopyBbr
            | Method::AzcopyTunedBbr
            | Method::AzcopyDlBbr
            | Method::AzcopyTunedDlBbr => Some("bbr"),
            Method::Relay
            | Method::RelayCubic
            | Method::RelayCold
            | Method::RelayColdPlain
            | Method::RelayOff
            | Method::RelayDl
            | Method::RelayDlOff => None,
        }
    }

    /// The blobs travel from storage to the site (`relay-client download`).
    pub fn is_download(self) -> bool {
        matches!(
            self,
            Method::RelayDl
                | Method::RelayDlOff
                | Method::DirectDlCubic
                | Method::DirectDlBbr
                | Method::PythonSdkDl
                | Method::AzcopyDlCubic
                | Method::AzcopyDlBbr
                | Method::AzcopyTunedDlCubic
                | Method::AzcopyTunedDlBbr
        )
    }

    /// AzCopy's tuning for an AzCopy row, None for every other row.
    pub fn azcopy(self) -> Option<relay_client::bench::azcopy::Tuning> {
        use relay_client::bench::azcopy::Tuning;
        match self {
            Method::AzcopyCubic
            | Method::AzcopyBbr
            | Method::AzcopyDlCubic
            | Method::AzcopyDlBbr => Some(Tuning::Defaults),
            Method::AzcopyTunedCubic
            | Method::AzcopyTunedBbr
            | Method::AzcopyTunedDlCubic
            | Method::AzcopyTunedDlBbr => Some(Tuning::Tuned),
            _ => None,
        }
    }

    pub fn is_python(self) -> bool {
        matches!(
            self,
            Method::PythonSdk
                | Method::PythonSdkBbr
                | Method::PythonSdk32
                | Method::PythonSdk64
                | Method::PythonSdkDl
        )
    }

    /// Files the Python SDK uploads at once.
    pub fn python_parallel(self) -> usize {
        match self {
            Method::PythonSdk32 => 32,
            Method::PythonSdk64 => 64,
            _ => 4,
        }
    }
}

/// What is uploaded in one run: `count` files of `file_bytes` each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Workload {
    pub count: usize,
    pub file_bytes: u64,
}

impl Workload {
    pub const fn new(count: usize, file_bytes: u64) -> Self {
        Self { count, file_bytes }
    }

    /// `COUNTxSIZE`, e.g. `10000x64KiB`, `1x625MiB` (also the results' label).
    pub fn name(self) -> String {
        format!("{}x{}", self.count, size_label(self.file_bytes))
    }

    pub fn total_bytes(self) -> u64 {
        self.file_bytes * self.count as u64
    }

    /// `large` and `small` are the plan's sizes (`--large-mib`, `--small-count`,
    /// `--small-kib`); anything else is `COUNTxSIZE` with SIZE in B, KiB, MiB or GiB.
    pub fn parse(s: &str, plan: &Plan) -> anyhow::Result<Self> {
        let s = s.trim();
        match s {
            "large" => return Ok(Self::new(1, plan.large_bytes)),
            "small" => return Ok(Self::new(plan.small_count, plan.small_bytes)),
            _ => {}
        }
        let (count, size) = s.split_once('x').with_context(|| {
            format!("workload {s:?}: large, small or COUNTxSIZE (e.g. 10000x64KiB)")
        })?;
        let count: usize = count
            .parse()
            .with_context(|| format!("workload {s:?}: bad count"))?;
        let size = parse_size(size).with_context(|| format!("workload {s:?}: bad size"))?;
        if count == 0 || size == 0 {
            bail!("workload {s:?}: count and size must be > 0");
        }
        Ok(Self::new(count, size))
    }
}

/// `64KiB`, `625MiB`, `1GiB`, `100B`.
pub fn parse_size(s: &str) -> anyhow::Result<u64> {
    let units = [
        ("GiB", 1u64 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
        ("B", 1),
    ];
    for (suffix, mult) in units {
        if let Some(n) = s.strip_suffix(suffix) {
            let n: u64 = n.trim().parse().context("not a whole number")?;
            return n.checked_mul(mult).context("too large");
        }
    }
    bail!("{s:?}: give a unit (B, KiB, MiB, GiB)")
}

fn size_label(bytes: u64) -> String {
    let units = [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (suffix, mult) in units {
        if bytes >= mult && bytes.is_multiple_of(mult) {
            return format!("{}{suffix}", bytes / mult);
        }
    }
    format!("{bytes}B")
}

/// Everything a bench run does, resolved from the flags.
#[derive(Clone, Debug)]
pub struct Plan {
    pub profiles: Vec<Profile>,
    pub methods: Vec<Method>,
    pub workloads: Vec<Workload>,
    pub repeats: u32,
    /// A run still going at the cap is killed and reported over the capped interval.
    pub cap: Duration,
    pub large_bytes: u64,
    pub small_count: usize,
    pub small_bytes: u64,
    /// QUIC controller for the `relay` row (client and relay).
    pub relay_congestion: String,
    /// Clients run in the cloud namespace next to Azurite and the relay
    /// (loopback; the emulated link is idle).
    pub loopback: bool,
    /// A delay proxy in front of Azurite (every method's storage requests go
    /// through it): see `storage_delay`.
    pub storage_delay: Option<crate::storage_delay::DelaySpec>,
    /// Azurite alone on this CPU (`--storage-cpu`).
    pub storage_cpu: Option<usize>,
    /// The stand-in storage in Azurite's place (`--storage standin`).
    pub standin: bool,
    /// NIC offloads in the lab (`--nic-offload`).
    pub nic_offload: bool,
    /// Extra arguments for every relay-client run (`--client-arg`).
    pub client_args: Vec<String>,
    /// Plain TCP flows measured after each one-file direct row (`--tcp-reference`).
    pub tcp_reference: bool,
    /// What the files hold (`--data`): random by default, or one of the
    /// text-like sets the compression rows are measured on.
    pub data: DataSet,
}

impl Plan {
    pub fn full() -> Self {
        Self {
            profiles: FULL_PROFILES.to_vec(),
            methods: Method::DEFAULT.to_vec(),
            workloads: vec![Workload::new(1, 256 << 20), Workload::new(200, 256 << 10)],
            repeats: 3,
            cap: Duration::from_secs(120),
            large_bytes: 256 << 20,
            small_count: 200,
            small_bytes: 256 << 10,
            relay_congestion: "relay".into(),
            loopback: false,
            storage_delay: None,
            storage_cpu: None,
            standin: false,
            nic_offload: false,
            client_args: Vec::new(),
            tcp_reference: false,
            data: DataSet::Random,
        }
    }

    pub fn quick() -> Self {
        Self {
            profiles: QUICK_PROFILES.to_vec(),
            repeats: 1,
            // The Python SDK's one Put Blob of 16 MiB at 100 ms / 0.1 % is a
            // single cubic flow: 5-57 s in four CI runs. A 60 s cap left it no
            // margin; the cap only bounds a hung run, and a slow one must pass.
            cap: Duration::from_secs(180),
            large_bytes: 16 << 20,
            small_count: 20,
            workloads: vec![Workload::new(1, 16 << 20), Workload::new(20, 256 << 10)],
            ..Self::full()
        }
    }

    pub fn workload_bytes(&self, w: Workload) -> u64 {
        w.total_bytes()
    }

    pub fn runs(&self) -> usize {
        self.profiles.len() * self.methods.len() * self.workloads.len() * self.repeats as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_profiles_and_methods() {
        let p = Profile::parse("100/0.01/200").expect("valid");
        assert_eq!(p, Profile::new(100.0, 0.01, 200.0));
        assert!(Profile::parse("100/2/200").is_err());
        assert!(Profile::parse("100/0.01").is_err());
        assert_eq!(
            Method::parse("direct-bbr").expect("valid"),
            Method::DirectBbr
        );
        assert!(Method::parse("azcopy").is_err());
        for (name, cc, down, tuned) in [
            ("azcopy-cubic", "cubic", false, false),
            ("azcopy-bbr", "bbr", false, false),
            ("azcopy-tuned-cubic", "cubic", false, true),
            ("azcopy-tuned-bbr", "bbr", false, true),
            ("azcopy-dl-cubic", "cubic", true, false),
            ("azcopy-dl-bbr", "bbr", true, false),
            ("azcopy-tuned-dl-cubic", "cubic", true, true),
            ("azcopy-tuned-dl-bbr", "bbr", true, true),
        ] {
            let m = Method::parse(name).expect("valid");
            assert_eq!(
                (m.name(), m.tcp_cc(), m.is_download()),
                (name, Some(cc), down)
            );
            let tuning = m.azcopy().expect("an AzCopy row");
            assert_eq!(
                tuning == relay_client::bench::azcopy::Tuning::Tuned,
                tuned,
                "{name}"
            );
            // The summary tells directions apart by name.
            assert_eq!(crate::summary::is_download(name), down, "{name}");
        }
        assert!(
            Method::ALL
                .iter()
                .filter(|m| m.azcopy().is_none())
                .all(|m| !m.name().contains("azcopy"))
        );
        let mut names: Vec<&str> = Method::ALL.iter().map(|m| m.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Method::ALL.len(), "one name per method");
        for (name, cc) in [
            ("relay-dl", None),
            ("relay-dl-off", None),
            ("direct-dl-cubic", Some("cubic")),
            ("direct-dl-bbr", Some("bbr")),
            ("python-sdk-dl", Some("cubic")),
        ] {
            let m = Method::parse(name).expect("valid");
            assert!(m.is_download() && m.name() == name && m.tcp_cc() == cc);
        }
        assert!(Method::DEFAULT.iter().all(|m| !m.is_download()));
        assert_eq!(Method::parse("rclone").expect("valid"), Method::Rclone);
    }

    #[test]
    fn parses_workloads() {
        let plan = Plan::full();
        let w = Workload::parse("10000x64KiB", &plan).expect("valid");
        assert_eq!(w, Workload::new(10_000, 64 << 10));
        assert_eq!(w.total_bytes(), 625 << 20);
        assert_eq!(Workload::new(1, w.total_bytes()).name(), "1x625MiB");
        assert_eq!(
            Workload::parse("large", &plan).expect("valid").name(),
            "1x256MiB"
        );
        assert_eq!(
            Workload::parse("small", &plan).expect("valid").name(),
            "200x256KiB"
        );
        assert_eq!(Workload::new(3, 1000).name(), "3x1000B");
        assert!(Workload::parse("0x1MiB", &plan).is_err());
        assert!(Workload::parse("10x64", &plan).is_err());
        assert!(Workload::parse("many", &plan).is_err());
    }

    #[test]
    fn ceiling_is_payload_share_of_rate() {
        let c = Profile::new(20.0, 0.0, 200.0).ceiling_mbit();
        assert!((c - 193.066).abs() < 0.01, "{c}");
        assert_eq!(Profile::new(100.0, 0.001, 200.0).label(), "100ms 0.1% 200M");
    }
}
