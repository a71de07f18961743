//! The kernel's congestion control sysctls, and keeping network namespace
//! defaults safe when a bloatd algorithm comes and goes.
//!
//! What the kernel does (6.18, net/ipv4/tcp_cong.c; tests/registry.rs checks
//! it): a namespace's default congestion control holds a reference on the
//! algorithm, for a BPF one on its struct_ops map. Unregistering a BPF
//! algorithm that is some namespace's default removes the name from
//! tcp_available_congestion_control but not from that namespace's
//! net.ipv4.tcp_congestion_control: new sockets there keep getting the retired
//! programs (a "ghost": registered nowhere, invisible to bloatd's state map,
//! freed only when someone sets another default). So:
//! - before bloatd unregisters an algorithm, every namespace whose default it
//!   is moves to the algorithm's fallback ([`retire_netns_defaults`]);
//! - when bloatd registers an algorithm, namespaces still defaulting to a
//!   ghost of the same name (a bloatd that was killed) are pointed at the new
//!   registration, or at the fallback where that is not allowed.
//!
//! A second kernel behaviour shapes [`set_kernel_default`]: in a namespace
//! other than the initial one, setting a default that is not in
//! tcp_allowed_congestion_control fails with EPERM *after* taking a reference
//! on the algorithm, and never drops it. For a BPF algorithm that pins its
//! programs and maps until reboot, so bloatd checks first and never makes
//! that write.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use crate::{Algo, Error};

const AVAILABLE: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";
const ALLOWED: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";
const DEFAULT: &str = "/proc/sys/net/ipv4/tcp_congestion_control";

/// Congestion controls the kernel offers now (built in, modules loaded, BPF
/// registered), as in /proc/sys/net/ipv4/tcp_available_congestion_control.
pub fn kernel_available() -> io::Result<Vec<String>> {
    read_list(AVAILABLE)
}

/// This network namespace's default (net.ipv4.tcp_congestion_control).
pub fn kernel_default() -> io::Result<String> {
    Ok(fs::read_to_string(DEFAULT)?.trim().to_string())
}

/// Set this network namespace's default (net.ipv4.tcp_congestion_control).
/// "This" is the calling thread's namespace.
pub fn set_kernel_default(name: &str) -> Result<(), Error> {
    write_default(name)
}

fn read_list(path: &str) -> io::Result<Vec<String>> {
    Ok(fs::read_to_string(path)?
        .split_whitespace()
        .map(String::from)
        .collect())
}

/// nsfs inode of the initial network namespace on kernels that give it a
/// fixed one (PROC_NET_INIT_INO; 6.18 does, measured).
const INIT_NET_INO: u64 = 0xEFFF_FFF9;

/// Is the calling thread in the initial network namespace? Where the kernel
/// does not fix that namespace's inode, compare with pid 1's (inside a
/// container: the container's); if pid 1 is not readable either, answer no,
/// which only makes [`set_kernel_default`] insist on the allowed list.
fn in_initial_netns() -> io::Result<bool> {
    let own = fs::metadata("/proc/thread-self/ns/net")?.ino();
    if own == INIT_NET_INO {
        return Ok(true);
    }
    Ok(fs::metadata("/proc/1/ns/net")
        .map(|m| m.ino() == own)
        .unwrap_or(false))
}

fn write_default(name: &str) -> Result<(), Error> {
    let sysctl_err = |e| {
        Error::io(
            format!("setting net.ipv4.tcp_congestion_control to {name}"),
            e,
        )
    };
    let available = kernel_available().map_err(sysctl_err)?;
    if !available.iter().any(|a| a == name) {
        return Err(Error::UnknownCc {
            name: name.to_string(),
            available: available.join(" "),
        });
    }
    // The kernel would leak a reference on `name` when refusing it (see the
    // module comment): refuse here instead.
    if !in_initial_netns().map_err(sysctl_err)?
        && !read_list(ALLOWED)
            .map_err(sysctl_err)?
            .iter()
            .any(|a| a == name)
    {
        return Err(Error::Restricted {
            name: name.to_string(),
        });
    }
    // one write(2): the kernel parses the whole buffer as the name
    let r = fs::OpenOptions::new()
        .write(true)
        .open(DEFAULT)
        .and_then(|mut f| f.write_all(name.as_bytes()));
    r.map_err(|e| match e.raw_os_error() {
        Some(libc::EACCES) => Error::NotRoot {
            what: format!("set net.ipv4.tcp_congestion_control to {name}"),
        },
        Some(libc::ENOENT) => Error::UnknownCc {
            name: name.to_string(),
            available: available.join(" "),
        },
        Some(libc::EPERM) => Error::Restricted {
            name: name.to_string(),
        },
        Some(libc::EROFS) => Error::ReadOnlySysctl,
        _ => sysctl_err(e),
    })
}

/// A network namespace whose default congestion control bloatd changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetnsDefaultChange {
    /// How the namespace was found: "/run/netns/NAME" or "pid N".
    pub netns: String,
    /// Inode of the namespace (as in `net:[inode]`).
    pub netns_inode: u64,
    pub from: String,
    pub to: String,
}

/// A network namespace found through /run/netns (ip netns) or a process.
#[derive(Debug)]
pub struct Netns {
    /// How it was found: "/run/netns/NAME" or "pid N".
    pub label: String,
    /// Where it was found, to open it again (it may be gone by then).
    pub path: PathBuf,
    /// Its inode (as in `net:[inode]`).
    pub inode: u64,
    /// It, open: setns(2) takes this.
    pub file: File,
}

/// Every network namespace reachable through /run/netns (ip netns) or a
/// process, once each (by inode).
pub fn network_namespaces() -> Vec<Netns> {
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
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .map(|e| {
            (
                format!("pid {}", e.file_name().to_string_lossy()),
                e.path().join("ns/net"),
            )
        });
    for (label, path) in named.chain(procs) {
        // processes come and go while we look: skip what vanished
        let Ok(file) = File::open(&path) else {
            continue;
        };
        let Ok(m) = file.metadata() else { continue };
        if seen.insert((m.dev(), m.ino())) {
            out.push(Netns {
                label,
                path,
                inode: m.ino(),
                file,
            });
        }
    }
    out
}

/// In every network namespace whose default is `name`, set the first of
/// `candidates` the namespace accepts. Namespaces are entered from a
/// short-lived thread (setns changes only the calling thread, and
/// /proc/sys/net follows the thread's namespace). Namespaces held only by an
/// open file descriptor or a bind mount outside /run/netns are not found.
fn rewrite_netns_defaults(
    name: &'static str,
    candidates: Vec<&'static str>,
) -> Result<Vec<NetnsDefaultChange>, Error> {
    let namespaces = network_namespaces();
    let worker = std::thread::spawn(move || -> Result<Vec<NetnsDefaultChange>, Error> {
        let mut changed = Vec::new();
        for Netns {
            label, inode, file, ..
        } in namespaces
        {
            // SAFETY: file is an open nsfs file; setns only changes this thread.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                if io::Error::last_os_error().raw_os_error() == Some(libc::EPERM) {
                    return Err(Error::NoSetns { netns: label });
                }
                continue; // the namespace went away meanwhile
            }
            if kernel_default().ok().as_deref() != Some(name) {
                continue;
            }
            let mut last_err = None;
            for to in &candidates {
                match write_default(to) {
                    Ok(()) => {
                        changed.push(NetnsDefaultChange {
                            netns: label.clone(),
                            netns_inode: inode,
                            from: name.to_string(),
                            to: to.to_string(),
                        });
                        last_err = None;
                        break;
                    }
                    Err(e) => last_err = Some(e),
                }
            }
            if let Some(e) = last_err {
                return Err(e);
            }
        }
        Ok(changed)
    });
    worker
        .join()
        .unwrap_or_else(|_| Err(Error::io("netns worker", io::Error::other("panicked"))))
}

/// Move every network namespace whose default is `algo` to the first of
/// [`Algo::fallbacks`] it accepts. Called before `algo` is unregistered.
pub fn retire_netns_defaults(algo: Algo) -> Result<Vec<NetnsDefaultChange>, Error> {
    rewrite_netns_defaults(algo.name(), algo.fallbacks().to_vec())
}

/// Point namespaces still defaulting to a ghost named like `algo` (left by
/// a bloatd that was killed) at the registration that now has the name, or
/// at a fallback where the namespace does not allow it. Called right after
/// `algo` is registered.
pub(crate) fn adopt_netns_defaults(algo: Algo) -> Result<Vec<NetnsDefaultChange>, Error> {
    let mut candidates = vec![algo.name()];
    candidates.extend_from_slice(algo.fallbacks());
    rewrite_netns_defaults(algo.name(), candidates)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sysctls() {
        let avail = kernel_available().unwrap();
        assert!(
            avail.iter().any(|a| a == "reno"),
            "reno is always built in: {avail:?}"
        );
        let def = kernel_default().unwrap();
        assert!(avail.contains(&def), "default {def} not in {avail:?}");
    }

    #[test]
    fn unknown_default_is_refused_with_the_list() {
        let msg = set_kernel_default("nosuchcc").unwrap_err().to_string();
        assert!(msg.contains("nosuchcc") && msg.contains("reno"), "{msg}");
        assert!(kernel_default().unwrap() != "nosuchcc");
    }

    #[test]
    fn finds_own_namespace() {
        let own = fs::metadata("/proc/self/ns/net").unwrap().ino();
        assert!(network_namespaces().iter().any(|n| n.inode == own));
    }
}
