//! Capabilities: what the daemon needs to load, and the little it keeps.
//!
//! Measured on 6.18 (`setpriv --bounding-set`, README "Operating bloatd"):
//! loading the tracepoint probes, the iterators and the struct_ops
//! congestion controls needs CAP_BPF and CAP_PERFMON; registering also
//! enters every network namespace (setns: CAP_SYS_ADMIN, and opening
//! /proc/PID/ns/net of a process with more capabilities than ours:
//! CAP_SYS_PTRACE); a cgroup sock_ops program needs CAP_NET_ADMIN;
//! `--bpf-stats` (BPF_ENABLE_STATS) CAP_SYS_ADMIN; giving the API socket
//! its group CAP_CHOWN. Everything afterwards works on file descriptors the
//! daemon already holds (map reads and updates, iterator reads, link
//! detach) or on files root owns (the default congestion control sysctl,
//! the run directory), and needs no capability at all, except one step:
//! before unregistering a congestion control at stop, bloatd moves other
//! namespaces' defaults off it, which is setns again. So after start the
//! daemon keeps CAP_SYS_ADMIN and CAP_SYS_PTRACE in its permitted set only
//! (not effective: no syscall runs with them) and raises them for that step,
//! and on the short-lived thread that reads the sockets of other network
//! namespaces (a TCP iterator walks the reader's namespace: setns again;
//! probes/netns.rs).
//!
//! One kernel-dependent exception: where `kernel.unprivileged_bpf_disabled`
//! is set, kernels before 5.19 refuse *every* bpf() command, map reads on
//! held descriptors included, to a thread without CAP_BPF (Ubuntu 22.04's
//! 5.15 sets it: every read failed there with EPERM). Later kernels check
//! only map and program creation. Start tries one command on a thread with
//! no capability ([`bpf_needs_cap`]) and, where it is refused, keeps
//! CAP_BPF effective, and only it.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

/// Linux capability numbers (linux/capability.h).
const CAP_SYS_PTRACE: u32 = 19;
pub const CAP_SYS_ADMIN: u32 = 21;
const CAP_BPF: u32 = 39;

/// Set at start when this kernel refuses bpf() commands without CAP_BPF.
static BPF_GATED: AtomicBool = AtomicBool::new(false);

/// Capabilities that stay effective after start: CAP_BPF where the kernel
/// gates every bpf() command on it, else none.
fn effective_kept() -> u64 {
    if BPF_GATED.load(Ordering::Relaxed) {
        mask(&[CAP_BPF])
    } else {
        0
    }
}

/// Kept (permitted, not effective) while running, for the stop.
pub const KEEP: &[u32] = &[CAP_SYS_ADMIN, CAP_SYS_PTRACE];

const VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct Header {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Data {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

fn mask(caps: &[u32]) -> u64 {
    caps.iter().fold(0u64, |m, &c| m | (1u64 << c))
}

fn capset(effective: u64, permitted: u64) -> io::Result<()> {
    let mut hdr = Header {
        version: VERSION_3,
        pid: 0,
    };
    let data = [
        Data {
            effective: effective as u32,
            permitted: permitted as u32,
            inheritable: 0,
        },
        Data {
            effective: (effective >> 32) as u32,
            permitted: (permitted >> 32) as u32,
            inheritable: 0,
        },
    ];
    // SAFETY: a version-3 header and two data structs, as capset(2) wants.
    if unsafe { libc::syscall(libc::SYS_capset, &mut hdr as *mut Header, data.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// (effective, permitted) of the calling thread.
pub fn current() -> io::Result<(u64, u64)> {
    let mut hdr = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: as in capset.
    if unsafe { libc::syscall(libc::SYS_capget, &mut hdr as *mut Header, data.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let join = |f: fn(&Data) -> u32| f(&data[0]) as u64 | ((f(&data[1]) as u64) << 32);
    Ok((join(|d| d.effective), join(|d| d.permitted)))
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(1)
}

/// The threads of the process once short-lived ones have gone, waiting up
/// to a second. Start enters other network namespaces from a short-lived
/// thread (DRWA's give-back, the congestion controls' defaults) and joins
/// it, but a joined thread can still be listed in /proc/self/task: join
/// returns when the kernel clears the thread's tid, early in its exit,
/// before the task is reaped (seen on 6.1 in a one-CPU VM: "2 threads").
fn threads_settled() -> usize {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    loop {
        let n = threads();
        if n == 1 || std::time::Instant::now() >= deadline {
            return n;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// After start: keep only [`KEEP`], permitted but not effective; no
/// inheritable or ambient capabilities, and no_new_privs so that no program
/// bloatd could be made to run gains any. Capabilities belong to threads:
/// this runs while the process has one thread, so every later thread
/// inherits the reduced set.
pub fn drop_after_start() -> io::Result<()> {
    let n = threads_settled();
    if n != 1 {
        return Err(io::Error::other(format!(
            "{n} threads: capabilities can only be dropped for the whole process while it has one"
        )));
    }
    // SAFETY: plain prctl calls with integer arguments.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        // EINVAL on kernels without ambient capabilities: nothing to clear.
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
    }
    let gated = bpf_needs_cap()?;
    BPF_GATED.store(gated, Ordering::Relaxed);
    if gated {
        tracing::info!("this kernel refuses bpf() commands without CAP_BPF (kernel.unprivileged_bpf_disabled, before Linux 5.19): CAP_BPF stays effective");
    }
    let (_, permitted) = current()?;
    let keep = effective_kept();
    capset(permitted & keep, permitted & (mask(KEEP) | keep))
}

/// Does a thread without capabilities get EPERM from a bpf() command that
/// needs none on kernels that do not gate them all? Asked with
/// BPF_OBJ_GET_INFO_BY_FD on no descriptor: EBADF where only creation is
/// checked, EPERM where the sysctl gates every command. Tried on a
/// short-lived thread (capabilities are per thread) that has dropped its
/// effective set; the caller's thread is untouched.
fn bpf_needs_cap() -> io::Result<bool> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let (_, permitted) = current()?;
            capset(0, permitted)?;
            // SAFETY: all-zero is a valid bpf_attr; bpf_fd u32::MAX is no
            // descriptor, so the command can only fail.
            let mut attr: aya_obj::generated::bpf_attr = unsafe { std::mem::zeroed() };
            attr.info.bpf_fd = u32::MAX;
            // SAFETY: a bpf_attr of the size passed.
            let ret = unsafe {
                libc::syscall(
                    libc::SYS_bpf,
                    aya_obj::generated::bpf_cmd::BPF_OBJ_GET_INFO_BY_FD as libc::c_int,
                    &mut attr as *mut _,
                    std::mem::size_of::<aya_obj::generated::bpf_attr>() as libc::c_uint,
                )
            };
            let err = io::Error::last_os_error();
            Ok(ret < 0 && err.raw_os_error() == Some(libc::EPERM))
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the capability probe thread panicked")))
    })
}

/// Raise the kept capabilities on the calling thread only (capabilities
/// are per thread; threads spawned after this call inherit them).
pub fn raise_kept() -> io::Result<()> {
    let (_, permitted) = current()?;
    capset(permitted & (mask(KEEP) | effective_kept()), permitted)
}

/// Raise the kept capabilities for the stop (restoring other namespaces'
/// defaults before the congestion controls go away).
pub fn raise_for_stop() {
    if let Err(e) = raise_kept() {
        tracing::warn!("cannot raise CAP_SYS_ADMIN for the stop: {e}; namespaces defaulting to bloatd's algorithms may keep them");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `bloatd start` may need (the module comment says why each):
    /// exactly the service's bounding set.
    const START: &[&str] = &[
        "CAP_BPF",
        "CAP_PERFMON",
        "CAP_NET_ADMIN",
        "CAP_SYS_ADMIN",
        "CAP_SYS_PTRACE",
        "CAP_CHOWN",
    ];

    #[test]
    fn masks_span_both_words() {
        assert_eq!(mask(&[0]), 1);
        assert_eq!(mask(&[39]) >> 32, 1 << 7);
        assert_eq!(mask(KEEP), (1 << 19) | (1 << 21));
        assert_eq!(mask(&[CAP_BPF]) >> 32, 1 << 7);
    }

    #[test]
    fn the_unit_bounds_exactly_what_start_needs() {
        let unit = include_str!("../dist/bloatd.service");
        let line = unit
            .lines()
            .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
            .expect("a bounding set");
        let mut unit_caps: Vec<&str> = line.split_whitespace().collect();
        let mut start = START.to_vec();
        unit_caps.sort();
        start.sort();
        assert_eq!(unit_caps, start);
        let kept = ["CAP_SYS_PTRACE", "CAP_SYS_ADMIN"];
        assert!(kept.iter().all(|k| START.contains(k)));
    }
}
