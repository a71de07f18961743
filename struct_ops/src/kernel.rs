//! The kernel's congestion control sysctls, and keeping network namespace
//! defaults safe when a bloatd algorithm goes away.
//!
//! What the kernel does (measured on 6.18, see tests/registry.rs): a
//! namespace's default congestion control holds a reference on the
//! struct_ops map. Unregistering a BPF algorithm that is some namespace's
//! default removes its name from tcp_available_congestion_control but not
//! from that namespace's net.ipv4.tcp_congestion_control: new sockets there
//! keep getting the retired programs, under a name nobody can select or
//! re-register cleanly, until someone sets another default. So before
//! bloatd unregisters an algorithm it moves every namespace whose default it
//! is to [`Algo::fallbacks`] ([`retire_netns_defaults`]).

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;

use crate::{Algo, CcError};

const AVAILABLE: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";
const DEFAULT: &str = "/proc/sys/net/ipv4/tcp_congestion_control";

/// Congestion controls the kernel offers now (built in, modules loaded, BPF
/// registered), as in /proc/sys/net/ipv4/tcp_available_congestion_control.
pub fn kernel_available() -> io::Result<Vec<String>> {
    Ok(fs::read_to_string(AVAILABLE)?.split_whitespace().map(String::from).collect())
}

/// This network namespace's default (net.ipv4.tcp_congestion_control).
pub fn kernel_default() -> io::Result<String> {
    Ok(fs::read_to_string(DEFAULT)?.trim().to_string())
}

/// Set this network namespace's default (net.ipv4.tcp_congestion_control).
pub fn set_kernel_default(name: &str) -> Result<(), CcError> {
    write_default(name).map_err(|e| default_error(name, e))
}

fn write_default(name: &str) -> io::Result<()> {
    // one write(2): the kernel parses the whole buffer as the name
    fs::OpenOptions::new().write(true).open(DEFAULT)?.write_all(name.as_bytes())
}

fn default_error(name: &str, e: io::Error) -> CcError {
    match e.raw_os_error() {
        Some(libc::ENOENT) => CcError::UnknownCc {
            name: name.to_string(),
            available: kernel_available().map(|v| v.join(" ")).unwrap_or_else(|e| format!("? ({e})")),
        },
        Some(libc::EACCES) => CcError::NotRoot { what: format!("set net.ipv4.tcp_congestion_control to {name}") },
        // tcp_set_default_congestion_control: only the initial netns may
        // default to a restricted (not in tcp_allowed_congestion_control) one
        Some(libc::EPERM) => CcError::Restricted { name: name.to_string() },
        _ => CcError::io(format!("setting net.ipv4.tcp_congestion_control to {name}"), e),
    }
}

/// A network namespace whose default congestion control bloatd changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetiredDefault {
    /// How the namespace was found: "/run/netns/NAME" or "pid N".
    pub netns: String,
    /// net:[inode] of the namespace.
    pub netns_inode: u64,
    pub from: String,
    pub to: String,
}

/// Every network namespace reachable through /run/netns (ip netns) or a
/// process, once each (by inode), with how it was found.
fn network_namespaces() -> Vec<(String, u64, File)> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let named = fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| (e.path().display().to_string(), e.path()));
    let procs = fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
        .map(|e| (format!("pid {}", e.file_name().to_string_lossy()), e.path().join("ns/net")));
    for (label, path) in named.chain(procs) {
        // processes come and go while we look: skip what vanished
        let Ok(f) = File::open(&path) else { continue };
        let Ok(m) = f.metadata() else { continue };
        if seen.insert((m.dev(), m.ino())) {
            out.push((label, m.ino(), f));
        }
    }
    out
}

/// Move every network namespace whose default is `algo` to the first of
/// [`Algo::fallbacks`] the namespace accepts. Returns what was changed.
///
/// Namespaces are entered from a short-lived thread (setns affects only the
/// calling thread, and /proc/sys/net follows the thread's namespace).
/// Namespaces held only by an open file descriptor or a bind mount outside
/// /run/netns are not found.
pub fn retire_netns_defaults(algo: Algo) -> Result<Vec<RetiredDefault>, CcError> {
    let name = algo.name();
    let namespaces = network_namespaces();
    let worker = std::thread::spawn(move || -> Result<Vec<RetiredDefault>, CcError> {
        let mut changed = Vec::new();
        for (label, inode, f) in namespaces {
            // SAFETY: f is an open nsfs file; setns only changes this thread.
            if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EPERM) {
                    return Err(CcError::NotRoot { what: format!("enter network namespace {label}") });
                }
                continue;
            }
            if kernel_default().ok().as_deref() != Some(name) {
                continue;
            }
            let mut last_err = None;
            for to in algo.fallbacks() {
                match write_default(to) {
                    Ok(()) => {
                        changed.push(RetiredDefault {
                            netns: label.clone(),
                            netns_inode: inode,
                            from: name.to_string(),
                            to: to.to_string(),
                        });
                        last_err = None;
                        break;
                    }
                    Err(e) => last_err = Some(default_error(to, e)),
                }
            }
            if let Some(e) = last_err {
                return Err(e);
            }
        }
        Ok(changed)
    });
    worker.join().unwrap_or_else(|_| Err(CcError::io("netns worker", io::Error::other("panicked"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sysctls() {
        let avail = kernel_available().unwrap();
        assert!(avail.iter().any(|a| a == "reno"), "reno is always built in: {avail:?}");
        let def = kernel_default().unwrap();
        assert!(avail.contains(&def), "default {def} not in {avail:?}");
    }

    #[test]
    fn unknown_default_is_named() {
        let e = default_error("nosuchcc", io::Error::from_raw_os_error(libc::ENOENT));
        let msg = e.to_string();
        assert!(msg.contains("nosuchcc") && msg.contains("reno"), "{msg}");
    }

    #[test]
    fn finds_own_namespace() {
        let own = fs::metadata("/proc/self/ns/net").unwrap().ino();
        assert!(network_namespaces().iter().any(|(_, ino, _)| *ino == own));
    }
}
