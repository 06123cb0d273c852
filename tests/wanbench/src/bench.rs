//! Runs the plan: per profile one lab, then every (repeat, workload, method)
//! in alternating order, each run as its own process in `site` against a
//! fresh Azurite and relay in `cloud`, accounted and verified.

use relay_tests::datasets::DataSet;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use linklab::{Lab, LabStats, LinkProfile, Side};

use crate::child;
use crate::client::{self, ClientReport, RunSpec, SiteBins};
use crate::cloud::{self, Cloud, CloudBins};
use crate::plan::{Method, Plan, Profile, Workload};
use crate::row::{LinkDelta, Row};
use crate::workload::Files;

/// The one container every row writes (and the download rows read).
const CONTAINER: &str = cloud::READABLE_CONTAINER;
/// relay-client's path cache (warm start), one per profile's log dir.
const PATH_CACHE: &str = "paths.json";
/// The `relay-dl` row's own path cache (its estimate is of the other direction).
const PATH_CACHE_DL: &str = "paths-dl.json";

/// Where a run's client finds storage.
struct Urls<'a> {
    storage: &'a str,
    sas: &'a str,
    rclone_config: &'a Path,
    /// AzCopy's container SAS: write (uploads), read and list (downloads).
    azcopy_up: &'a str,
    azcopy_down: &'a str,
}

pub struct Bench<'a> {
    pub plan: &'a Plan,
    pub cloud_bins: CloudBins,
    pub site_bins: SiteBins,
    pub files: &'a Files,
    pub work: PathBuf,
    /// Called after every row (the caller saves partial results).
    pub on_row: &'a mut dyn FnMut(&Row),
}

impl Bench<'_> {
    pub fn run_profile(&mut self, profile: Profile) -> anyhow::Result<Vec<Row>> {
        let lab = Lab::start(LinkProfile {
            offload: self.plan.nic_offload,
            ..LinkProfile::new(profile.rtt_ms, profile.loss, profile.rate_mbit)
        })
        .context("start the lab")?;
        let dir = self.work.join(format!("logs-{}", slug(&profile.label())));
        std::fs::create_dir_all(&dir).context("create log dir")?;
        // Every profile's first relay run starts cold, also in a reused --work-dir.
        let _ = std::fs::remove_file(dir.join(PATH_CACHE));
        let _ = std::fs::remove_file(dir.join(PATH_CACHE_DL));
        let storage_url = Cloud::storage_url_from_site(&lab);
        let sas_url = Cloud::container_sas_url(&lab, CONTAINER)?;
        let rclone_config = dir.join("rclone.conf");
        std::fs::write(&rclone_config, "").context("write rclone.conf")?;
        let (azcopy_up, azcopy_down) = (
            Cloud::container_sas(CONTAINER, "w")?,
            Cloud::container_sas(CONTAINER, "rl")?,
        );
        let urls = Urls {
            storage: &storage_url,
            sas: &sas_url,
            rclone_config: &rclone_config,
            azcopy_up: &azcopy_up,
            azcopy_down: &azcopy_down,
        };
        // Storage sends a download: direct download rows pin the cloud
        // namespace's controller, and every other row gets the lab's own back.
        let cloud_cc = crate::tcp_cc::current(&lab, Side::Cloud)?;
        let mut rows = Vec::new();
        for repeat in 1..=self.plan.repeats {
            for &workload in &self.plan.workloads {
                // A B C D, A B C D, ...: slow drifts hit every method alike.
                for &method in &self.plan.methods {
                    crate::interrupt::check()?;
                    // Every run starts from an empty account, as on Azure,
                    // where a request's cost does not grow with the blobs
                    // stored. In-memory Azurite's does (1.7 ms of CPU per
                    // Put Blob with none stored, 3.7 ms past 8,000): sharing
                    // one would charge each run for the runs before it.
                    let sender_cc = match method.tcp_cc() {
                        Some(cc) if method.is_download() => cc.to_string(),
                        _ => cloud_cc.clone(),
                    };
                    if crate::tcp_cc::current(&lab, Side::Cloud)? != sender_cc {
                        crate::tcp_cc::pin(&lab, Side::Cloud, sender_cc)?;
                    }
                    let mut cloud = Cloud::start(
                        &lab,
                        &self.cloud_bins,
                        &self.plan.relay_congestion,
                        self.plan.storage_delay,
                        &dir,
                    )?;
                    cloud::ensure_container(&lab, CONTAINER)?;
                    cloud.check_alive()?;
                    let mut row =
                        self.run_one(&lab, &cloud, &urls, &dir, profile, method, workload, repeat)?;
                    drop(cloud);
                    if self.plan.tcp_reference {
                        self.tcp_reference(&lab, method, workload, &mut row)?;
                    }
                    eprintln!("{}", progress_line(&row));
                    (self.on_row)(&row);
                    rows.push(row);
                }
            }
        }
        Ok(rows)
    }

    #[allow(clippy::too_many_arguments)]
    fn run_one(
        &self,
        lab: &Lab,
        cloud: &Cloud,
        urls: &Urls,
        dir: &Path,
        profile: Profile,
        method: Method,
        workload: Workload,
        repeat: u32,
    ) -> anyhow::Result<Row> {
        let prefix = format!("{}-{}-r{repeat}", method.name(), workload.name());
        let congestion = match method.tcp_cc() {
            Some(cc) => {
                crate::tcp_cc::pin_site(lab, cc)?;
                format!("tcp:{cc}")
            }
            None if method == Method::RelayCubic => "quic:cubic".into(),
            None if method == Method::RelayCold => {
                format!("quic:{} (cold)", self.plan.relay_congestion)
            }
            None if method == Method::RelayColdPlain => {
                format!("quic:{} (cold, no train)", self.plan.relay_congestion)
            }
            None => format!("quic:{}", self.plan.relay_congestion),
        };
        let files = self.files.of(workload);
        let stdout = dir.join(format!("{prefix}.json"));
        let stderr = dir.join(format!("{prefix}.err"));
        let paths: Vec<PathBuf> = files.iter().map(|(p, _)| p.clone()).collect();
        let files_dir = self.files.dir_of(workload).unwrap_or_default();
        // Download rows: the files come back to DL_DIR/PREFIX/.
        let dl_dir = self.work.join("downloads");
        let got = dl_dir.join(&prefix);
        if method.is_download() {
            crate::download::clear(&got)?;
            crate::download::seed(lab, cloud, &self.site_bins, &paths, CONTAINER, &prefix, dir)?;
        }
        // AzCopy's log (watched for the job's end), plan and HOME.
        let scratch = dir.join(format!("{prefix}.azcopy"));
        let _ = std::fs::remove_dir_all(&scratch);
        let mut azcopy_log = method.azcopy().map(|_| crate::azcopy::watch(&scratch));
        let spec = RunSpec {
            method,
            files: &paths,
            container: CONTAINER,
            prefix: &prefix,
            storage_url: urls.storage,
            sas_url: urls.sas,
            dir: &files_dir,
            rclone_config: urls.rclone_config,
            azcopy_sas_up: urls.azcopy_up,
            azcopy_sas_down: urls.azcopy_down,
            scratch: &scratch,
            relay_congestion: &self.plan.relay_congestion,
            client_args: &self.plan.client_args,
            path_cache: &dir.join(if method.is_download() {
                PATH_CACHE_DL
            } else {
                PATH_CACHE
            }),
            to_dir: &dl_dir,
            stdout: &stdout,
            stderr: &stderr,
        };
        let mut cmd = client::command(&self.site_bins, cloud, &spec)?;
        // Loopback: the client runs next to storage and the relay (the cloud's
        // own address is local there), and the link stays idle.
        let side = if self.plan.loopback {
            Side::Cloud
        } else {
            Side::Site
        };
        lab.enter_on_spawn(side, &mut cmd)?;

        let relay_pid = cloud.relay_pid();
        let azurite_pid = cloud.azurite_pid();
        child::reset_peak_rss(relay_pid)?;
        let relay_cpu0 = child::cpu_seconds(relay_pid)?;
        let azurite_cpu0 = child::cpu_seconds(azurite_pid)?;
        let loadavg_1m = loadavg_1m();
        let stats0 = lab.stats();
        let done = child::run_capped_probing(cmd, self.plan.cap, &mut || {
            azcopy_log.as_mut().is_some_and(|l| l.poll())
        })?;
        let stats1 = lab.stats();
        let link = delta(&stats0, &stats1);
        // A capped download's goodput, as a capped upload's: what the link
        // delivered (here to the site), its payload share.
        let down_payload = (stats1.cloud_to_site.forwarded_bytes
            - stats0.cloud_to_site.forwarded_bytes) as f64
            * 1448.0
            / 1500.0;
        let relay_cpu_s = child::cpu_seconds(relay_pid)? - relay_cpu0;
        let azurite_cpu_s = child::cpu_seconds(azurite_pid)? - azurite_cpu0;
        let relay_peak = child::peak_rss_kib(relay_pid)?;

        let out = std::fs::read_to_string(&stdout).unwrap_or_default();
        let bytes = self.plan.workload_bytes(workload);
        let report = if method == Method::Rclone {
            Ok(client::rclone_report(
                done.exit_code,
                done.wall.as_secs_f64(),
                &paths,
                &prefix,
                bytes,
            ))
        } else if method.azcopy().is_some() {
            let seconds = done.done_at.unwrap_or(done.wall).as_secs_f64();
            crate::azcopy::report(&out, done.exit_code, seconds, &paths, &prefix, bytes)
        } else {
            client::parse(method, &out)
        };
        let expected_blobs: Vec<String> = files
            .iter()
            .map(|(p, _)| format!("{prefix}/{}", file_name(p)))
            .collect();
        let mut error = None;
        let mut reattempts = 0;
        let mut warm_start = None;
        let mut storage_requests = None;
        let mut abandoned = None;
        let mut direct_sizing = None;
        let (verified, seconds, bytes_done, retries) = if done.capped && method.is_download() {
            error = Some(format!("capped at {} s", self.plan.cap.as_secs()));
            let on_disk = crate::download::bytes_on_disk(&got);
            (false, done.wall.as_secs_f64(), on_disk, 0)
        } else if done.capped {
            // What reached storage by the cap; in-flight data is not counted.
            let stored = cloud::stored_bytes(lab, CONTAINER, expected_blobs)?;
            error = Some(format!("capped at {} s", self.plan.cap.as_secs()));
            (false, done.wall.as_secs_f64(), stored, 0)
        } else {
            match report {
                Ok(r) => {
                    reattempts = r.reattempts;
                    warm_start = r.warm_start;
                    storage_requests = r.storage_requests;
                    abandoned = r.abandoned;
                    direct_sizing = r.direct_sizing;
                    let (ok, why) = if method.is_download() {
                        crate::download::verify(files, &got, &r)?
                    } else {
                        verify(lab, files, &r)?
                    };
                    if !ok {
                        error = Some(why.unwrap_or_else(|| tail(&stderr)));
                    }
                    let done_bytes = if ok { bytes } else { r.bytes };
                    (ok, r.seconds, done_bytes, r.retries)
                }
                Err(e) => {
                    error = Some(format!("{e:#}: {}", tail(&stderr)));
                    (false, done.wall.as_secs_f64(), 0, 0)
                }
            }
        };
        if method.is_download() {
            // Checked: a 1 GiB row's copy need not outlive it.
            crate::download::clear(&got)?;
        }
        let azcopy = method
            .azcopy()
            .zip(azcopy_log.as_ref())
            .map(|(tuning, log)| {
                crate::azcopy::run_info(tuning, log.facts(), done.wall.as_secs_f64())
            });
        // AzCopy's log of a verified run is not kept (at INFO it logs every
        // request, so a matrix would fill the disk); a failed run's is.
        if verified || method.azcopy().is_none() {
            let _ = std::fs::remove_dir_all(&scratch);
        }
        if done.capped {
            // Let the relay / Azurite finish with the abandoned transfer.
            std::thread::sleep(Duration::from_secs(3));
        }
        let ceiling = profile.ceiling_mbit();
        Ok(Row {
            profile,
            method: method.name().into(),
            workload: workload.name(),
            repeat,
            files: files.len(),
            bytes,
            verified,
            capped: done.capped,
            exit_code: done.exit_code,
            seconds,
            wall_seconds: done.wall.as_secs_f64(),
            bytes_done,
            goodput_mbit: if method.is_download() && done.capped {
                down_payload * 8.0 / seconds.max(f64::MIN_POSITIVE) / 1e6
            } else if method.is_download() {
                goodput_mbit(false, bytes_done, &link, seconds)
            } else {
                goodput_mbit(done.capped, bytes_done, &link, seconds)
            },
            link_ceiling_mbit: ceiling,
            // The data direction's drops: cloud -> site for a download.
            queue_loss_pct: if method.is_download() {
                link.down_queue_loss_pct()
            } else {
                link.queue_loss_pct()
            },
            random_loss_pct: if method.is_download() {
                link.down_random_loss_pct()
            } else {
                link.random_loss_pct()
            },
            link,
            client_cpu_s: done.cpu_s,
            relay_cpu_s,
            azurite_cpu_s,
            peak_rss_mib: done.max_rss_kib as f64 / 1024.0,
            relay_peak_rss_mib: relay_peak as f64 / 1024.0,
            retries,
            reattempts,
            warm_start,
            congestion,
            loadavg_1m,
            commit: source_commit(),
            data: (self.plan.data != DataSet::Random).then(|| self.plan.data.name().to_string()),
            storage_requests,
            abandoned: abandoned.map(|a| a.0),
            abandoned_while_moving: abandoned.map(|a| a.1),
            direct_block_size: direct_sizing.map(|d| d.0),
            direct_connections: direct_sizing.map(|d| d.1),
            tcp_reference: None,
            tcp_same_bytes: None,
            loopback: self.plan.loopback,
            storage_delay: self.plan.storage_delay,
            storage_cpu: self.plan.storage_cpu,
            standin: self.plan.standin,
            nic_offload: self.plan.nic_offload,
            azcopy,
            error,
        })
    }
}

impl Bench<'_> {
    /// `--tcp-reference`: after a direct row of one file, as many plain TCP
    /// flows of its controller as it had requests in flight (its connections,
    /// at most the file's blocks), for as long as it took (at most 120 s);
    /// then, if the upload finished within the cap, the file's bytes over as
    /// many fresh flows (a capped upload's path would hold the same-bytes
    /// flows past the cap too: its time-based ceiling says why it was capped).
    fn tcp_reference(
        &self,
        lab: &Lab,
        method: Method,
        workload: Workload,
        row: &mut Row,
    ) -> anyhow::Result<()> {
        // The reference measures the upload direction only.
        let Some(cc) = method.tcp_cc().filter(|_| !method.is_download()) else {
            return Ok(());
        };
        let (block, connections) = match (row.direct_block_size, row.direct_connections) {
            (Some(block), Some(connections)) => (block, connections),
            // A capped client is stopped before it reports the sizing it
            // chose; the reference takes what the client's own sizing rule
            // chooses on this path (the flow count goes into the reference).
            _ if row.capped && matches!(method, Method::DirectCubic | Method::DirectBbr) => {
                expected_direct_sizing(row.profile.rtt_ms, cc)
            }
            _ => return Ok(()),
        };
        if workload.count != 1 || block == 0 {
            return Ok(());
        }
        let blocks = workload.file_bytes.div_ceil(block);
        let flows = usize::try_from(blocks.min(connections)).unwrap_or(1);
        let seconds = row.seconds.clamp(1.0, 120.0);
        crate::interrupt::check()?;
        let r = crate::tcp_reference::measure(lab, cc, flows, seconds)?;
        eprintln!(
            "wanbench: {:<16} tcp reference: {} x {} for {:.0} s: {:.1} Mbit/s",
            row.place(),
            r.flows,
            r.cc,
            r.seconds,
            r.goodput_mbit
        );
        row.tcp_reference = Some(r);
        if row.capped {
            return Ok(());
        }
        crate::interrupt::check()?;
        let same = crate::tcp_reference::measure_same_bytes(lab, cc, flows, workload.file_bytes)?;
        eprintln!(
            "wanbench: {:<16} tcp reference, same bytes: {} x {}: {:.2} s, {:.1} Mbit/s",
            row.place(),
            same.flows,
            same.cc,
            same.seconds,
            same.goodput_mbit
        );
        row.tcp_same_bytes = Some(same);
        Ok(())
    }
}

/// The client's default `--memory-budget` (relay-client's CLI), which bounds
/// the blocks direct mode puts in flight.
const CLIENT_MEMORY_BUDGET: u64 = 512 << 20;

/// Block size and requests in flight that direct mode chooses on a path of
/// `rtt_ms` with connections of controller `cc`, by the client's own rule
/// (`relay_client::transfer::direct_sizing`) and its default memory budget.
fn expected_direct_sizing(rtt_ms: f64, cc: &str) -> (u64, u64) {
    let sizing = relay_client::transfer::direct_sizing::choose(
        relay_client::transfer::direct_sizing::Path {
            rtt: Some(Duration::from_secs_f64(rtt_ms.max(0.0) / 1000.0)),
            tcp_congestion: Some(cc),
        },
        None,
        None,
        CLIENT_MEMORY_BUDGET,
    );
    let connections = u64::try_from(sizing.connections).unwrap_or(u64::MAX);
    (sizing.block_size, connections)
}

/// Client reported every file committed (matching our hash where it gives
/// one), and each blob downloaded from storage hashes to the local SHA-256.
fn verify(
    lab: &Lab,
    files: &[(PathBuf, String)],
    r: &ClientReport,
) -> anyhow::Result<(bool, Option<String>)> {
    if !r.ok {
        return Ok((false, Some("client reported failure".into())));
    }
    let by_name: HashMap<&str, &client::FileOutcome> = r
        .files
        .iter()
        .map(|f| (file_name(Path::new(&f.path)), f))
        .collect();
    let mut to_check = Vec::new();
    for (path, sha) in files {
        let Some(f) = by_name.get(file_name(path)) else {
            return Ok((
                false,
                Some(format!(
                    "{} missing from the client's report",
                    path.display()
                )),
            ));
        };
        if !f.committed {
            return Ok((false, Some(format!("{} not committed", path.display()))));
        }
        if f.sha256
            .as_deref()
            .is_some_and(|s| !s.eq_ignore_ascii_case(sha))
        {
            return Ok((
                false,
                Some(format!("{}: client SHA-256 differs", path.display())),
            ));
        }
        to_check.push((f.blob.clone(), sha.clone()));
    }
    let verdicts = cloud::check_blobs(lab, CONTAINER, to_check)?;
    let differ = verdicts
        .iter()
        .filter(|v| **v == cloud::Verdict::Differs)
        .count();
    let unread: Vec<&str> = verdicts
        .iter()
        .filter_map(|v| match v {
            cloud::Verdict::Unread(e) => Some(e.as_str()),
            _ => None,
        })
        .collect();
    if differ > 0 {
        return Ok((
            false,
            Some(format!("{differ} blobs failed the download hash check")),
        ));
    }
    if let Some(first) = unread.first() {
        return Ok((
            false,
            Some(format!(
                "{} blobs could not be downloaded to check (three tries each; first error: {first})",
                unread.len()
            )),
        ));
    }
    Ok((true, None))
}

/// Completed runs: payload bytes over the client's time. Capped runs: the
/// bytes the link delivered to the cloud (IP bytes x 1448/1500, i.e. the
/// payload share of full TCP segments) over the capped interval, because
/// storage sees data only in whole blocks (16 MiB for relay-client) and
/// would round a slow run down to zero.
fn goodput_mbit(capped: bool, bytes_done: u64, link: &LinkDelta, seconds: f64) -> f64 {
    if seconds <= 0.0 {
        return 0.0;
    }
    let payload = if capped {
        link.up_forwarded_bytes as f64 * 1448.0 / 1500.0
    } else {
        bytes_done as f64
    };
    payload * 8.0 / seconds / 1e6
}

fn delta(a: &LabStats, b: &LabStats) -> LinkDelta {
    let (u0, u1, d0, d1) = (
        &a.site_to_cloud,
        &b.site_to_cloud,
        &a.cloud_to_site,
        &b.cloud_to_site,
    );
    LinkDelta {
        up_forwarded_packets: u1.forwarded_packets - u0.forwarded_packets,
        up_forwarded_bytes: u1.forwarded_bytes - u0.forwarded_bytes,
        up_dropped_loss: u1.dropped_loss - u0.dropped_loss,
        up_dropped_queue: u1.dropped_queue - u0.dropped_queue,
        down_forwarded_packets: d1.forwarded_packets - d0.forwarded_packets,
        down_dropped_loss: d1.dropped_loss - d0.dropped_loss,
        down_dropped_queue: d1.dropped_queue - d0.dropped_queue,
        emulator_faults: emulator_faults(u1) + emulator_faults(d1)
            - emulator_faults(u0)
            - emulator_faults(d0),
    }
}

/// Packets the emulator itself lost or refused (should stay 0).
fn emulator_faults(s: &linklab::LinkStats) -> u64 {
    s.dropped_no_buffer + s.write_errors + s.malformed
}

/// The checkout's commit (`-dirty` with uncommitted changes), once per run: what
/// each row records so published figures name the code they measured.
pub fn source_commit() -> Option<String> {
    static COMMIT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    COMMIT
        .get_or_init(|| {
            let out = std::process::Command::new("git")
                .args(["describe", "--always", "--dirty", "--abbrev=12"])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .output()
                .ok()?;
            let text = String::from_utf8(out.stdout).ok()?;
            (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
        })
        .clone()
}

fn loadavg_1m() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

fn file_name(p: &Path) -> &str {
    p.file_name().and_then(|n| n.to_str()).unwrap_or_default()
}

/// Last line of a client's stderr, for the row's error.
fn tail(p: &Path) -> String {
    std::fs::read_to_string(p)
        .ok()
        .and_then(|s| {
            s.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(str::to_string)
        })
        .unwrap_or_else(|| "no stderr".into())
}

pub fn slug(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

fn progress_line(r: &Row) -> String {
    format!(
        "wanbench: {:<16} {:<11} {:<14} #{} {:>8.2} s {:>7.1} Mbit/s {}{} q{:.2}% r{:.2}% cpu {:.1}/{:.1} s{}",
        r.place(),
        r.workload,
        r.method,
        r.repeat,
        r.seconds,
        r.goodput_mbit,
        if r.verified {
            "verified"
        } else {
            "NOT-verified"
        },
        if r.capped { " capped" } else { "" },
        r.queue_loss_pct,
        r.random_loss_pct,
        r.client_cpu_s,
        r.relay_cpu_s,
        r.error
            .as_deref()
            .map(|e| format!(" ({e})"))
            .unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capped_direct_run_gets_the_sizing_its_finished_runs_report() {
        // What the matrix's finished direct runs reported (results.json,
        // 2026-12-03): 8 MiB x 32 over CUBIC and 8 MiB x 8 over BBR from
        // 100 ms on.
        assert_eq!(expected_direct_sizing(200.0, "cubic"), (8 << 20, 32));
        assert_eq!(expected_direct_sizing(100.0, "cubic"), (8 << 20, 32));
        assert_eq!(expected_direct_sizing(200.0, "bbr"), (8 << 20, 8));
    }
}
