//! One measured run: the record written to results.json.

use serde::{Deserialize, Serialize};

use crate::plan::Profile;
use crate::storage_delay::DelaySpec;

/// Lab counters over one run, per direction (`up` = site → cloud, the data
/// direction; `down` carries ACKs and responses).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct LinkDelta {
    pub up_forwarded_packets: u64,
    pub up_forwarded_bytes: u64,
    pub up_dropped_loss: u64,
    pub up_dropped_queue: u64,
    pub down_forwarded_packets: u64,
    pub down_dropped_loss: u64,
    pub down_dropped_queue: u64,
    /// dropped_no_buffer + write_errors, both directions (should stay 0).
    pub emulator_faults: u64,
}

impl LinkDelta {
    fn up_offered(&self) -> u64 {
        self.up_forwarded_packets + self.up_dropped_loss + self.up_dropped_queue
    }

    /// Share of the packets offered to the link (site → cloud) that the
    /// drop-tail queue dropped: loss the sender caused itself.
    pub fn queue_loss_pct(&self) -> f64 {
        pct(self.up_dropped_queue, self.up_offered())
    }

    /// Share dropped by the emulated random loss.
    pub fn random_loss_pct(&self) -> f64 {
        pct(self.up_dropped_loss, self.up_offered())
    }

    fn down_offered(&self) -> u64 {
        self.down_forwarded_packets + self.down_dropped_loss + self.down_dropped_queue
    }

    /// `queue_loss_pct` of the cloud → site direction (a download's data).
    pub fn down_queue_loss_pct(&self) -> f64 {
        pct(self.down_dropped_queue, self.down_offered())
    }

    /// `random_loss_pct` of the cloud → site direction.
    pub fn down_random_loss_pct(&self) -> f64 {
        pct(self.down_dropped_loss, self.down_offered())
    }
}

fn pct(n: u64, of: u64) -> f64 {
    if of == 0 {
        0.0
    } else {
        n as f64 * 100.0 / of as f64
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    pub profile: Profile,
    pub method: String,
    /// `large` (one file) or `small` (many files).
    pub workload: String,
    pub repeat: u32,
    pub files: usize,
    /// Payload bytes of the workload.
    pub bytes: u64,
    /// Client said ok, every local file was reported committed (with the
    /// local SHA-256 where the client reports one), and the bench downloaded
    /// every blob inside the cloud namespace and its SHA-256 matched.
    pub verified: bool,
    /// Killed at the time cap; `seconds` is then the capped interval and
    /// `bytes_done` what had reached storage by then.
    pub capped: bool,
    /// The client's exit code (None: killed by a signal, e.g. at the cap).
    pub exit_code: Option<i32>,
    /// Completion time by the client's clock (relay-client: start to the
    /// last verified commit; python-sdk: first request to last commit), or
    /// the capped interval.
    pub seconds: f64,
    /// Process spawn to exit (includes process start and connection setup).
    pub wall_seconds: f64,
    /// Bytes in storage at the end: all of them, or for a capped run the
    /// committed blobs plus staged blocks at the cap.
    pub bytes_done: u64,
    /// Completed: bytes × 8 / seconds. Capped: link-delivered IP bytes
    /// (site → cloud) × 1448/1500 × 8 / capped seconds (an estimate).
    pub goodput_mbit: f64,
    /// rate × 1448 / 1500.
    pub link_ceiling_mbit: f64,
    pub queue_loss_pct: f64,
    pub random_loss_pct: f64,
    pub link: LinkDelta,
    pub client_cpu_s: f64,
    /// relay-server CPU over the run (relay rows; ~0 elsewhere).
    pub relay_cpu_s: f64,
    pub azurite_cpu_s: f64,
    /// Client peak RSS: its VmHWM, polled every 20 ms.
    pub peak_rss_mib: f64,
    /// relay-server VmHWM over the run (reset before each run).
    pub relay_peak_rss_mib: f64,
    /// Retries the client counted (relay-client per file; Python SDK retry hook).
    pub retries: u64,
    /// File attempts beyond the first (relay-client; e.g. after a lost connection).
    #[serde(default)]
    pub reattempts: u64,
    /// relay-client: whether its connection started warm from the path cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_start: Option<bool>,
    /// Congestion control: `tcp:cubic`, `tcp:bbr`, `quic:bbr`, ...
    pub congestion: String,
    /// 1-minute load average when the run started (other work on the 2 cores).
    #[serde(default)]
    pub loadavg_1m: f64,
    /// Storage requests the client reported (relay-client: per-file counts,
    /// made by the relay in relay mode; Python SDK: its request hook).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_requests: Option<u64>,
    /// relay-client --direct: storage requests its watch gave up (stalled or
    /// unanswered), summed over files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abandoned: Option<u64>,
    /// relay-client --direct: requests ended while their body still moved
    /// (a path blamed for our own deadlines; must stay 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abandoned_while_moving: Option<u64>,
    /// relay-client --direct: the sizing it chose (block size, requests in
    /// flight per file) and the storage round trip it measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direct_block_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direct_connections: Option<u64>,
    /// `--tcp-reference`: what as many plain TCP flows of the same controller
    /// as the direct run had requests in flight carried on the same link,
    /// measured right after it (linklab's TCP sender).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_reference: Option<TcpReference>,
    /// `--tcp-reference`: the file's bytes split over as many fresh plain TCP
    /// flows, first connect to last answer (what TCP takes for this upload).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_same_bytes: Option<TcpReference>,
    /// The client ran in the cloud namespace (loopback), not across the link.
    #[serde(default)]
    pub loopback: bool,
    /// The storage delay proxy in front of Azurite, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_delay: Option<DelaySpec>,
    /// Azurite ran alone on this CPU, everything else on the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_cpu: Option<usize>,
    /// The stand-in storage ran in Azurite's place (`--storage standin`);
    /// `azurite_cpu_s` is then the stand-in's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub standin: bool,
    /// The lab emulated NIC offloads (`--nic-offload`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nic_offload: bool,
    /// AzCopy rows: how it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub azcopy: Option<AzcopyRun>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The commit the binaries were built from (`git describe --always
    /// --dirty` of the checkout at run time); absent in rows older than the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The files' data set when not random (`--data`: logs, csv, fastq, sparse).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
}

/// How an AzCopy row ran, from its own log: what anyone repeating the run
/// needs, and whether its time is the job's (its log's end line) or its
/// process's.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AzcopyRun {
    pub version: Option<String>,
    /// `defaults`, or `tuned` (AZCOPY_CONCURRENCY_VALUE=AUTO, 16 MiB blocks).
    pub tuning: String,
    /// Its connections ("Max concurrent network operations" in its log).
    pub concurrency: Option<u64>,
    /// Its block size ("Specified chunk size").
    pub block_size_bytes: Option<u64>,
    /// The log said the job ended: `seconds` runs to that line. Otherwise
    /// `seconds` is the process's (it notices the end within 2 s, then exits).
    pub job_end_logged: bool,
    /// Spawn to exit.
    pub process_seconds: f64,
}

/// Plain TCP beside a direct run: the path's TCP ceiling for that many flows.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TcpReference {
    pub cc: String,
    pub flows: usize,
    pub seconds: f64,
    /// Sum over flows of the bytes each sink counted over its own time.
    pub goodput_mbit: f64,
}

fn share(goodput_mbit: f64, r: &TcpReference) -> Option<f64> {
    (r.goodput_mbit > 0.0).then(|| goodput_mbit / r.goodput_mbit)
}

impl Row {
    /// The client's CPU seconds per GiB it moved: the files' bytes, or for a
    /// capped run what its goodput estimate says it moved (a user sizing a
    /// machine reads this beside the goodput).
    pub fn client_cpu_s_per_gib(&self) -> Option<f64> {
        let moved = self.goodput_mbit * 1e6 / 8.0 * self.seconds;
        (moved > 0.0).then(|| self.client_cpu_s / (moved / f64::from(1u32 << 30)))
    }

    /// The workload as the tables group it: `1x256MiB`, or with the data set
    /// when not random (`1x256MiB logs`), so a run of text-like files is never
    /// a median with random ones.
    pub fn workload_label(&self) -> String {
        match &self.data {
            Some(d) => format!("{} {d}", self.workload),
            None => self.workload.clone(),
        }
    }

    /// Direct goodput as a share of the TCP reference (1.0 = TCP's limit).
    pub fn share_of_tcp(&self) -> Option<f64> {
        share(self.goodput_mbit, self.tcp_reference.as_ref()?)
    }

    /// Direct goodput as a share of plain TCP moving the same bytes.
    pub fn share_of_tcp_same_bytes(&self) -> Option<f64> {
        share(self.goodput_mbit, self.tcp_same_bytes.as_ref()?)
    }

    /// Where the run happened: the link profile or `loopback`, and the storage
    /// delay if any (the group key of the tables).
    pub fn place(&self) -> String {
        let base = if self.loopback {
            "loopback".to_string()
        } else {
            self.profile.label()
        };
        let base = match self.storage_delay {
            Some(d) => match d.conn_mbit {
                Some(m) => format!("{base}, storage +{}ms {}M/conn", d.request_ms, m),
                None => format!("{base}, storage +{}ms", d.request_ms),
            },
            None => base,
        };
        let base = match self.storage_cpu {
            Some(cpu) => format!("{base}, Azurite on CPU {cpu}"),
            None => base,
        };
        let base = if self.standin {
            format!("{base}, stand-in storage")
        } else {
            base
        };
        if self.nic_offload {
            format!("{base}, NIC offloads")
        } else {
            base
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_shares_count_offered_packets() {
        let d = LinkDelta {
            up_forwarded_packets: 970,
            up_dropped_loss: 10,
            up_dropped_queue: 20,
            ..Default::default()
        };
        assert!((d.random_loss_pct() - 1.0).abs() < 1e-9);
        assert!((d.queue_loss_pct() - 2.0).abs() < 1e-9);
        assert_eq!(LinkDelta::default().queue_loss_pct(), 0.0);
    }
}
