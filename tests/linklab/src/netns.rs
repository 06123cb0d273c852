//! Network namespaces: create, enter (per thread or per child process),
//! tune, and delete — plus cleanup of namespaces left by crashed runs.
//!
//! Why `ip netns`: it owns the /run/netns bind-mount convention, so
//! namespaces made here show up in `ip netns list` and can be inspected or
//! removed by hand. Entering is done with setns(2) on a single thread, which
//! changes only that thread's namespace; sockets and TUNs it creates stay in
//! the namespace after the thread ends.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::process::Command;
use std::thread::JoinHandle;

use anyhow::{Context, bail};

/// Prefix of every namespace the lab creates; `cleanup` only touches these.
pub const PREFIX: &str = "brl-";

/// Run `ip ARGS`, turning a failure into an error with its stderr.
pub fn ip(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("ip: cannot run (is iproute2 installed?)")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A named network namespace that is deleted (with any process still in it)
/// when dropped.
#[derive(Debug)]
pub struct Netns {
    name: String,
    fd: OwnedFd,
}

impl Netns {
    pub fn create(name: &str) -> anyhow::Result<Self> {
        ip(&["netns", "add", name])?;
        match File::open(Path::new("/run/netns").join(name)) {
            Ok(file) => Ok(Self {
                name: name.to_owned(),
                fd: file.into(),
            }),
            Err(e) => {
                let _ = delete(name);
                Err(e).context(format!("netns: {name}: open"))
            }
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// A handle to the namespace, e.g. for `setns` in a child process.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// Run `f` on a fresh thread that has entered this namespace.
    pub fn spawn_thread<F, T>(&self, f: F) -> anyhow::Result<JoinHandle<anyhow::Result<T>>>
    where
        F: FnOnce() -> anyhow::Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let fd = self.fd.try_clone().context("netns: dup")?;
        let name = self.name.clone();
        std::thread::Builder::new()
            .name(format!("in-{name}"))
            .spawn(move || {
                enter(&fd).with_context(|| format!("netns: {name}: setns"))?;
                drop(fd);
                f()
            })
            .context("netns: spawn thread")
    }

    /// Run `f` inside this namespace and wait for its result.
    pub fn run<F, T>(&self, f: F) -> anyhow::Result<T>
    where
        F: FnOnce() -> anyhow::Result<T> + Send + 'static,
        T: Send + 'static,
    {
        match self.spawn_thread(f)?.join() {
            Ok(result) => result,
            Err(_) => bail!("netns: {}: thread panicked", self.name),
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = delete(&self.name) {
            eprintln!("linklab: teardown: {e:#}");
        }
    }
}

/// Move the calling thread into the namespace behind `fd`.
pub fn enter(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: setns on a valid namespace fd; affects only this thread.
    if unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Kill what still runs in namespace `name`, then delete it.
pub fn delete(name: &str) -> anyhow::Result<()> {
    kill_members(name);
    ip(&["netns", "delete", name]).map(|_| ())
}

/// SIGKILL every process in namespace `name` except ourselves: a leftover
/// server would otherwise keep the namespace (and its sockets) alive.
fn kill_members(name: &str) {
    let Ok(out) = ip(&["netns", "pids", name]) else {
        return;
    };
    let me = std::process::id();
    for pid in out.split_whitespace().filter_map(|p| p.parse::<u32>().ok()) {
        if pid != me && pid > 1 {
            // SAFETY: kill(2) with a pid read from the namespace's member list.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
    }
}

/// Write one sysctl under /proc/sys (dots become slashes). Network sysctls
/// apply to the calling thread's namespace.
pub fn write_sysctl(key: &str, value: &str) -> anyhow::Result<()> {
    let path = Path::new("/proc/sys").join(key.replace('.', "/"));
    std::fs::write(&path, value).with_context(|| format!("sysctl: {key}={value}"))
}

/// Raise a host-wide integer sysctl to `min` if it is lower (never lower it).
pub fn raise_sysctl(key: &str, min: u64) -> anyhow::Result<()> {
    let path = Path::new("/proc/sys").join(key.replace('.', "/"));
    let current: u64 = std::fs::read_to_string(&path)
        .with_context(|| format!("sysctl: read {key}"))?
        .trim()
        .parse()
        .with_context(|| format!("sysctl: parse {key}"))?;
    if current < min {
        write_sysctl(key, &min.to_string())?;
    }
    Ok(())
}

/// Lab namespaces in /run/netns: (name, owning pid if the name carries one).
pub fn list_lab_namespaces() -> Vec<(String, Option<u32>)> {
    let Ok(entries) = std::fs::read_dir("/run/netns") else {
        return Vec::new();
    };
    let mut names: Vec<(String, Option<u32>)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(PREFIX))
        .map(|n| {
            // Names look like brl-<side>-<pid>-<counter>.
            let pid = n.split('-').nth(2).and_then(|p| p.parse().ok());
            (n, pid)
        })
        .collect();
    names.sort();
    names
}

/// Delete lab namespaces whose owning process is gone (all of them with
/// `all`). Returns the names deleted.
pub fn cleanup(all: bool) -> anyhow::Result<Vec<String>> {
    let mut deleted = Vec::new();
    let mut errors = Vec::new();
    for (name, pid) in list_lab_namespaces() {
        let owner_alive = pid.is_some_and(|p| Path::new(&format!("/proc/{p}")).exists());
        if owner_alive && !all {
            continue;
        }
        match delete(&name) {
            Ok(()) => deleted.push(name),
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    if !errors.is_empty() {
        bail!("{}", errors.join("\n"));
    }
    Ok(deleted)
}
