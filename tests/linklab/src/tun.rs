//! A TUN device: raw IP packets in and out of a network namespace.
//!
//! Why raw libc: opening a TUN is three syscalls (open, ioctl TUNSETIFF,
//! fcntl), and the device lives in whichever network namespace the calling
//! thread is in, so the caller decides that (see `netns::in_netns`).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use anyhow::{Context, bail};

/// `struct ifreq` as TUNSETIFF reads it: a name and the flags (40 bytes).
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// An open, non-persistent TUN device: it disappears when dropped.
#[derive(Debug)]
pub struct Tun {
    fd: OwnedFd,
    name: String,
}

impl Tun {
    /// Create TUN `name` (IFF_TUN | IFF_NO_PI, non-blocking) in the calling
    /// thread's network namespace. With `offload`, every packet read or
    /// written starts with a `virtio_net_hdr` and the device announces
    /// checksum and UDP segmentation offload (see `offload`).
    pub fn create(name: &str, offload: bool) -> anyhow::Result<Self> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ {
            bail!(
                "tun: {name:?}: name must be 1..{} bytes",
                libc::IFNAMSIZ - 1
            );
        }
        let path = CString::new("/dev/net/tun").context("tun: path")?;
        // SAFETY: plain syscalls on a NUL-terminated path and an fd we own.
        let raw = unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error()).context("tun: open /dev/net/tun");
        }
        // SAFETY: `raw` is a fresh fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut flags = libc::IFF_TUN | libc::IFF_NO_PI;
        if offload {
            flags |= libc::IFF_VNET_HDR;
        }
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            flags: flags as libc::c_short,
            _pad: [0; 22],
        };
        req.name[..name.len()].copy_from_slice(name.as_bytes());
        // SAFETY: TUNSETIFF reads/writes a struct ifreq, which IfReq matches.
        let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req) };
        if rc < 0 {
            return Err(io::Error::last_os_error()).context(format!("tun: {name}: TUNSETIFF"));
        }
        if offload {
            // UDP segmentation needs checksum offload; the kernel takes USO
            // only for both IP versions at once.
            let features = libc::TUN_F_CSUM | libc::TUN_F_USO4 | libc::TUN_F_USO6;
            // SAFETY: TUNSETOFFLOAD takes the feature bits as an unsigned long value.
            let rc = unsafe {
                libc::ioctl(
                    fd.as_raw_fd(),
                    libc::TUNSETOFFLOAD,
                    features as libc::c_ulong,
                )
            };
            if rc < 0 {
                return Err(io::Error::last_os_error()).context(format!(
                    "tun: {name}: TUNSETOFFLOAD (UDP segmentation needs Linux 6.2)"
                ));
            }
        }
        Ok(Self {
            fd,
            name: name.to_owned(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Read one packet; `WouldBlock` when none is waiting.
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: buf is valid for buf.len() bytes.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    /// Write one packet given in parts (a header, then the rest) in one call.
    pub fn write_parts(&self, parts: &[&[u8]]) -> io::Result<usize> {
        let iov: Vec<libc::iovec> = parts
            .iter()
            .map(|p| libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            })
            .collect();
        // SAFETY: every iovec points into a live slice; writev only reads them.
        let n =
            unsafe { libc::writev(self.fd.as_raw_fd(), iov.as_ptr(), iov.len() as libc::c_int) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    /// Write one packet into the namespace's IP stack.
    pub fn write(&self, packet: &[u8]) -> io::Result<usize> {
        // SAFETY: packet is valid for packet.len() bytes.
        let n = unsafe { libc::write(self.fd.as_raw_fd(), packet.as_ptr().cast(), packet.len()) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
}
