//! The network namespaces a read of the sockets walks.
//!
//! The socket iterator (bpf/probes.bpf.c, `dump_socks`) is a TCP iterator:
//! it walks the namespace of the thread that reads it. The probes note each
//! namespace a record was made in (`netns_seen`); a read walks its own
//! namespace on the caller's thread, then enters each other one from a
//! short-lived thread (setns changes only the calling thread). This module
//! finds those namespaces again: where one was found last (checked by its
//! inode, since a pid can be reused), else by a scan of /run/netns and
//! /proc (a scan opens one file per process). A namespace never looked for
//! is scanned for at once: a short connection in a new namespace lasts less
//! than a second. One a scan did not find is looked for again only after
//! MISS_AGE, so a namespace bloatd cannot enter (held only by a socket or a
//! mount outside /run/netns) costs one scan in that long, not one a read;
//! it is reported gone (the probes note it again with its next new socket)
//! only once scans have missed it for FORGET_AFTER. Forgetting it at the
//! first miss lost a living namespace's sockets for good: the probes note a
//! namespace when a record is made, so a long download whose sockets were
//! all made before a miss stayed unlisted (issue 30, item 10).

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

/// A namespace a scan did not find is not looked for again for this long.
const MISS_AGE: Duration = Duration::from_secs(10);
/// ... and is forgotten (reported gone) once scans missed it this long.
const FORGET_AFTER: Duration = Duration::from_secs(300);
/// Misses remembered at most (the oldest forgotten first).
const MISSES: usize = 4096;

#[derive(Clone, Copy)]
struct Miss {
    first: Instant,
    last: Instant,
}

#[derive(Default)]
pub struct Finder {
    /// Where each namespace was found last.
    known: HashMap<u32, PathBuf>,
    /// Namespaces scans did not find: when first, and when last.
    missed: HashMap<u32, Miss>,
    /// Scans made (for tests and the log).
    pub scans: u64,
    /// /run/netns's modification time at the last scan. A name added or
    /// removed there since makes every miss stale: inodes are reused, and
    /// a namespace made after a miss may have the missed one's (the lab
    /// makes and removes its namespaces for every run: a new download's
    /// sockets went unlisted for 2-11 s, until the next scan after
    /// MISS_AGE).
    names_at: Option<SystemTime>,
}

/// Where `ip netns` names namespaces.
const NAMES: &str = "/run/netns";

/// The names /run/netns gave namespaces at the last scan, by inode: what
/// the classifier calls a neighbour (bottleneck.rs; containerd's pods and
/// `ip netns` have names, docker's containers none).
static NAMED: std::sync::Mutex<Vec<(u32, String)>> = std::sync::Mutex::new(Vec::new());

/// The name in a scan's label ("/run/netns/NAME"; "pid N" has none).
fn name_in(label: &str) -> Option<&str> {
    label.strip_prefix(NAMES)?.strip_prefix('/')
}

/// The /run/netns name of namespace `inode`, as of the last scan.
pub fn name_of(inode: u32) -> Option<String> {
    let named = NAMED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    named
        .iter()
        .find(|(i, _)| *i == inode)
        .map(|(_, n)| n.clone())
}

/// What `Finder::open` found: the namespaces opened, those scans have not
/// found for FORGET_AFTER (gone), and those missed but not that long
/// (later).
#[derive(Default)]
pub struct Found {
    pub open: Vec<(u32, File)>,
    pub gone: Vec<u32>,
    pub later: Vec<u32>,
}

/// The inode of the calling thread's network namespace.
pub fn own() -> std::io::Result<u32> {
    Ok(std::fs::metadata("/proc/thread-self/ns/net")?.ino() as u32)
}

/// The nsfs file at `path`, if it is still the namespace `inode`.
fn open_if(path: &PathBuf, inode: u32) -> Option<File> {
    let f = File::open(path).ok()?;
    (f.metadata().ok()?.ino() as u32 == inode).then_some(f)
}

/// Make the calling thread's network namespace the one `f` holds open.
pub fn enter(f: &File) -> std::io::Result<()> {
    // SAFETY: f is an open file; setns checks it is a namespace and changes
    // the calling thread only.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Run `f` on a short-lived thread of its own, with the capabilities the
/// daemon keeps raised there (caps.rs: after start no thread has any
/// effective; entering a namespace takes CAP_SYS_ADMIN, opening another
/// process's CAP_SYS_PTRACE), so `enter` changes that thread alone and
/// nothing it raised outlives it. None if it panicked.
pub fn on_own_thread<T: Send>(f: impl FnOnce() -> T + Send) -> Option<T> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                if let Err(e) = crate::caps::raise_kept() {
                    tracing::debug!("raising the kept capabilities to enter namespaces: {e}");
                }
                f()
            })
            .join()
            .ok()
    })
}

/// Run `f` in every network namespace a scan finds, our own included,
/// each entered in turn on a thread of its own (`on_own_thread`), with its
/// label ("/run/netns/NAME", "pid N"). Namespaces it cannot enter are
/// skipped, each with a line naming it.
pub fn in_every(what: &str, mut f: impl FnMut(&str) + Send) {
    on_own_thread(|| {
        for ns in bloatd_cc::network_namespaces() {
            match enter(&ns.file) {
                Ok(()) => f(&ns.label),
                Err(e) => tracing::warn!("{what}: cannot enter {}: {e}", ns.label),
            }
        }
    });
}

impl Finder {
    /// Open each namespace of `wanted`.
    pub fn open(&mut self, wanted: &[u32]) -> Found {
        let names = std::fs::metadata(NAMES).and_then(|m| m.modified()).ok();
        self.open_at(wanted, names)
    }

    /// `open`, /run/netns having been modified at `names`.
    fn open_at(&mut self, wanted: &[u32], names: Option<SystemTime>) -> Found {
        let mut found = Found::default();
        let mut unknown = Vec::new();
        for &ino in wanted {
            match self.known.get(&ino).and_then(|p| open_if(p, ino)) {
                Some(f) => found.open.push((ino, f)),
                None => unknown.push(ino),
            }
        }
        let now = Instant::now();
        // Misses no read asked about for a while: their namespaces left
        // netns_seen.
        self.missed
            .retain(|_, m| now.duration_since(m.last) < FORGET_AFTER);
        let fresh = names == self.names_at;
        let (later, scan): (Vec<u32>, Vec<u32>) = unknown.into_iter().partition(|i| {
            fresh
                && self
                    .missed
                    .get(i)
                    .is_some_and(|m| now.duration_since(m.last) < MISS_AGE)
        });
        found.later = later;
        if scan.is_empty() {
            return found;
        }
        self.scans += 1;
        self.names_at = names;
        let mut scanned: HashMap<u32, bloatd_cc::Netns> = bloatd_cc::network_namespaces()
            .into_iter()
            .map(|n| (n.inode as u32, n))
            .collect();
        *NAMED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = scanned
            .iter()
            .filter_map(|(&i, n)| Some((i, name_in(&n.label)?.to_string())))
            .collect();
        for ino in scan {
            match scanned.remove(&ino) {
                Some(n) => {
                    self.missed.remove(&ino);
                    self.known.insert(ino, n.path);
                    found.open.push((ino, n.file));
                }
                None => {
                    self.known.remove(&ino);
                    let first = self.missed.get(&ino).map_or(now, |m| m.first);
                    if now.duration_since(first) >= FORGET_AFTER
                        || (first == now && self.missed.len() >= MISSES)
                    {
                        self.missed.remove(&ino);
                        found.gone.push(ino);
                    } else {
                        self.missed.insert(ino, Miss { first, last: now });
                        found.later.push(ino);
                    }
                }
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_what_run_netns_calls_it() {
        assert_eq!(name_in("/run/netns/bltest-nbr"), Some("bltest-nbr"));
        assert_eq!(name_in("pid 4242"), None);
        assert_eq!(name_in("/run/netnsx/a"), None);
    }

    #[test]
    fn finds_own_namespace_and_remembers_where() {
        let own = own().unwrap();
        let mut f = Finder::default();
        let got = f.open(&[own]);
        assert_eq!(got.open.len(), 1);
        assert_eq!(got.open[0].0, own);
        assert!(got.gone.is_empty() && got.later.is_empty());
        assert_eq!(f.scans, 1);
        // Found where it was last: no second scan.
        assert_eq!(f.open(&[own]).open.len(), 1);
        assert_eq!(f.scans, 1);
    }

    #[test]
    fn a_namespace_a_scan_missed_is_looked_for_again_only_later() {
        let mut f = Finder::default();
        let ghost = u32::MAX - 7;
        for _ in 0..5 {
            let got = f.open_at(&[ghost], None);
            assert!(got.open.is_empty() && got.gone.is_empty());
            assert_eq!(got.later, vec![ghost]);
        }
        assert_eq!(f.scans, 1, "one scan for a namespace that cannot be found");
        // Another namespace never looked for is scanned for at once.
        let other = u32::MAX - 8;
        assert_eq!(f.open_at(&[ghost, other], None).later, vec![ghost, other]);
        assert_eq!(f.scans, 2);
        // After MISS_AGE, scanned for again; still not gone.
        let m = f.missed[&ghost];
        f.missed.insert(
            ghost,
            Miss {
                first: m.first,
                last: m.last - MISS_AGE,
            },
        );
        let got = f.open_at(&[ghost], None);
        assert!(got.gone.is_empty() && got.later == vec![ghost]);
        assert_eq!(f.scans, 3);
    }

    /// A name added to /run/netns since a scan missed a namespace: it is
    /// scanned for at once (a new namespace may have a missed one's inode).
    #[test]
    fn a_new_name_makes_a_miss_stale() {
        let mut f = Finder::default();
        let ghost = u32::MAX - 10;
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        assert_eq!(f.open_at(&[ghost], Some(t)).later, vec![ghost]);
        assert_eq!(f.open_at(&[ghost], Some(t)).later, vec![ghost]);
        assert_eq!(f.scans, 1, "no change: not scanned again within MISS_AGE");
        let t2 = t + Duration::from_millis(1);
        assert_eq!(f.open_at(&[ghost], Some(t2)).later, vec![ghost]);
        assert_eq!(f.scans, 2, "a name came or went: scanned again");
        assert_eq!(f.open_at(&[ghost], Some(t2)).later, vec![ghost]);
        assert_eq!(f.scans, 2);
    }

    #[test]
    fn a_missed_namespace_is_forgotten_only_after_forget_after() {
        let mut f = Finder::default();
        let ghost = u32::MAX - 9;
        assert_eq!(f.open_at(&[ghost], None).later, vec![ghost]);
        // Missed by every scan for FORGET_AFTER: gone, and its miss dropped.
        let now = Instant::now();
        f.missed.insert(
            ghost,
            Miss {
                first: now - FORGET_AFTER,
                last: now - MISS_AGE,
            },
        );
        assert_eq!(f.open_at(&[ghost], None).gone, vec![ghost]);
        assert!(!f.missed.contains_key(&ghost));
    }

    #[test]
    fn a_namespace_found_again_is_no_longer_missed() {
        let own = own().unwrap();
        let mut f = Finder::default();
        let now = Instant::now();
        f.missed.insert(
            own,
            Miss {
                first: now - MISS_AGE * 3,
                last: now - MISS_AGE,
            },
        );
        let got = f.open(&[own]);
        assert_eq!(got.open.len(), 1);
        assert!(!f.missed.contains_key(&own));
    }

    #[test]
    fn a_reused_place_is_not_taken_for_the_namespace() {
        let own = own().unwrap();
        let mut f = Finder::default();
        // Known at a path that now holds another namespace (a pid reused):
        // found again by a scan, not opened there.
        f.known.insert(own, PathBuf::from("/proc/self/ns/mnt"));
        let got = f.open(&[own]);
        assert_eq!(got.open.len(), 1);
        assert_eq!(f.scans, 1);
        assert_ne!(f.known[&own], PathBuf::from("/proc/self/ns/mnt"));
    }
}
