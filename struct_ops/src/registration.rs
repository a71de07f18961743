//! Loading and registering the struct_ops objects.
//!
//! Each algorithm is registered through a `.struct_ops.link` where the
//! kernel has struct_ops links (Linux 6.4): it keeps the algorithm
//! registered exactly as long as the link file descriptor lives, so a
//! bloatd that dies for any reason leaves nothing registered. Before 6.4
//! the same object's map is registered by a map update instead, which
//! outlives a killed process: such a stale registration is removed when the
//! name is registered again (`stale.rs`). Sockets that already use an
//! algorithm hold their own reference and keep working after it is
//! unregistered; they only stop showing up in the state map once the map's
//! last user (those sockets' programs) is gone.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use libbpf_rs::{
    libbpf_sys, ErrorKind, Link, MapCore, MapFlags, MapHandle, Object, ObjectBuilder, OpenObject,
    PrintLevel,
};

use crate::state::{
    decode, monotonic_us, value_size, RatioHistogram, RawRatioHist, RawWestwoodConfig,
};
use crate::sysctl::{
    adopt_netns_defaults, kernel_available, retire_netns_defaults, NetnsDefaultChange,
};
use crate::{Algo, AlgoState, Error, Options, RegisterBy, WestwoodSsthresh};

/// bloatd's congestion controls registered by this process. Dropping it
/// unregisters them all.
pub struct Registration {
    loaded: Vec<Loaded>,
    netns_changes: Vec<NetnsDefaultChange>,
    by: RegisterBy,
    /// Algorithms whose stale registration (a killed holder's) was removed.
    stale_removed: Vec<Algo>,
}

/// One registered algorithm. Field order is drop order: the link goes first
/// (unregisters), then the map handle and the object (programs, maps).
struct Loaded {
    algo: Algo,
    _link: Link,
    states: MapHandle,
    /// cc_bpf.h `export_failures`: snapshots the state map refused.
    failures: MapHandle,
    /// westwood.bpf.c `cwnd_pipe_ratio` (Westwood+ only).
    ratio: Option<MapHandle>,
    _object: Object,
}

impl Registration {
    /// Load and register `algos` (duplicates ignored). On error nothing stays
    /// registered. Network namespaces whose default still names a killed
    /// bloatd's instance of an algorithm are pointed at the new one (see
    /// [`Registration::netns_default_changes`]). `opts` are set before load.
    pub fn register(algos: &[Algo], opts: &Options) -> Result<Registration, Error> {
        if !Path::new("/sys/kernel/btf/vmlinux").exists() {
            return Err(Error::MissingBtf);
        }
        let mut reg = Registration {
            loaded: Vec::new(),
            netns_changes: Vec::new(),
            by: opts.register_by.unwrap_or_else(RegisterBy::detect),
            stale_removed: Vec::new(),
        };
        for &algo in algos {
            if !reg.registered().contains(&algo) {
                if crate::stale::remove_stale(algo) > 0 {
                    wait_gone(algo)?;
                    reg.stale_removed.push(algo);
                }
                // on error `reg` drops and unregisters what came before
                reg.loaded.push(load(algo, opts, reg.by)?);
                let adopted = adopt_netns_defaults(algo)?;
                reg.netns_changes.extend(adopted);
            }
        }
        Ok(reg)
    }

    /// How the kernel holds these registrations.
    pub fn registered_by(&self) -> RegisterBy {
        self.by
    }

    /// Algorithms whose stale registration, left by a holder that was
    /// killed (map update, before Linux 6.4), was removed first.
    pub fn stale_removed(&self) -> &[Algo] {
        &self.stale_removed
    }

    /// What this registration holds, in registration order.
    pub fn registered(&self) -> Vec<Algo> {
        self.loaded.iter().map(|l| l.algo).collect()
    }

    /// Unregister `algo`. Network namespaces whose default it is are moved
    /// to a fallback first (see [`retire_netns_defaults`]); sockets using it
    /// keep it until they close. The name is gone from
    /// tcp_available_congestion_control when this returns Ok.
    pub fn unregister(&mut self, algo: Algo) -> Result<(), Error> {
        let idx = self
            .loaded
            .iter()
            .position(|l| l.algo == algo)
            .ok_or(Error::NotRegistered { name: algo.name() })?;
        let retired = retire_netns_defaults(algo);
        let loaded = self.loaded.remove(idx);
        drop(loaded);
        self.netns_changes.extend(retired?);
        wait_gone(algo)
    }

    /// Network namespace defaults this registration changed: adopted at
    /// registration, or moved to a fallback before unregistering.
    pub fn netns_default_changes(&self) -> &[NetnsDefaultChange] {
        &self.netns_changes
    }

    /// The exported state of every socket that uses a registered algorithm
    /// and has a cookie, keyed by socket cookie. One batched map read per
    /// algorithm.
    pub fn states(&self) -> Result<HashMap<u64, AlgoState>, Error> {
        let now_us = monotonic_us();
        let mut out = HashMap::new();
        for l in &self.loaded {
            let size = value_size(l.algo);
            read_hash(l.states.as_fd(), size, |cookie, bytes| {
                if let Some(s) = decode(l.algo, bytes, now_us) {
                    out.insert(cookie, s);
                }
            })
            .map_err(|e| Error::io(format!("reading {}", l.algo.state_map()), e))?;
        }
        Ok(out)
    }

    /// Per algorithm, the state snapshots its map refused since it was
    /// registered (full at max_entries, or out of memory): each one is a
    /// socket whose state stays stale until its next export.
    pub fn export_failures(&self) -> Result<Vec<(Algo, u64)>, Error> {
        self.loaded
            .iter()
            .map(|l| {
                let per_cpu = l
                    .failures
                    .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
                    .map_err(|source| Error::Bpf {
                        what: "reading export_failures",
                        source,
                    })?
                    .unwrap_or_default();
                let n = per_cpu
                    .iter()
                    .filter_map(|v| {
                        v.get(..8).map(|b| {
                            u64::from_ne_bytes(b.try_into().expect("8 bytes, by get(..8)"))
                        })
                    })
                    .sum();
                Ok((l.algo, n))
            })
            .collect()
    }

    /// Westwood+'s cwnd/pipe histogram as the kernel counted it so far
    /// (None without bloatd_westwood).
    pub fn westwood_cwnd_pipe_ratio(&self) -> Result<Option<RatioHistogram>, Error> {
        let Some(l) = self.loaded.iter().find(|l| l.algo == Algo::Westwood) else {
            return Ok(None);
        };
        let ratio = l
            .ratio
            .as_ref()
            .expect("bloatd_westwood has cwnd_pipe_ratio");
        let per_cpu = ratio
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
            .map_err(|source| Error::Bpf {
                what: "reading cwnd_pipe_ratio",
                source,
            })?
            .unwrap_or_default();
        let size = std::mem::size_of::<RawRatioHist>();
        let cpus: Vec<RawRatioHist> = per_cpu
            .iter()
            .filter(|v| v.len() >= size)
            // SAFETY: length checked; RawRatioHist is plain old data
            .map(|v| unsafe { std::ptr::read_unaligned(v.as_ptr().cast()) })
            .collect();
        Ok(Some(RatioHistogram::from_cpus(&cpus)))
    }

    /// Map id and struct_ops program ids of `algo` (for `bpftool`, BPF stats).
    pub fn prog_ids(&self, algo: Algo) -> Vec<(String, u32)> {
        let Some(l) = self.loaded.iter().find(|l| l.algo == algo) else {
            return Vec::new();
        };
        l._object
            .progs()
            .map(|p| (p.name().to_string_lossy().into_owned(), prog_id(p.as_fd())))
            .collect()
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        while let Some(l) = self.loaded.pop() {
            let _ = retire_netns_defaults(l.algo);
            drop(l);
        }
    }
}

fn prog_id(fd: BorrowedFd<'_>) -> u32 {
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of_val(&info) as u32;
    // SAFETY: info is a valid bpf_prog_info of `len` bytes.
    let ret = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
    if ret == 0 {
        info.id
    } else {
        0
    }
}

/// Closing a struct_ops link unregisters synchronously when we held the last
/// reference; if the name is still there, someone else holds the link
/// (pinned in bpffs, or an fd passed to another process).
fn wait_gone(algo: Algo) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let avail = kernel_available()
            .map_err(|e| Error::io("reading tcp_available_congestion_control", e))?;
        if !avail.iter().any(|a| a == algo.name()) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::StillRegistered { name: algo.name() });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// libbpf reports verifier logs and load failures through its print
/// callback, which is process-wide: loads are serialized and the output of
/// the current one is collected here.
static LOAD_LOCK: Mutex<()> = Mutex::new(());
static LOAD_LOG: Mutex<String> = Mutex::new(String::new());
const LOG_KEEP_BYTES: usize = 64 * 1024;

fn capture_log(_level: PrintLevel, msg: String) {
    let mut log = LOAD_LOG.lock().unwrap_or_else(|e| e.into_inner());
    log.push_str(&msg);
    if log.len() > LOG_KEEP_BYTES {
        let mut cut = log.len() - LOG_KEEP_BYTES;
        while !log.is_char_boundary(cut) {
            cut += 1;
        }
        log.drain(..cut);
    }
}

/// The last `lines` lines of `log`.
fn tail(log: &str, lines: usize) -> String {
    let all: Vec<&str> = log.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn load(algo: Algo, opts: &Options, by: RegisterBy) -> Result<Loaded, Error> {
    let name = algo.name();
    if kernel_available()
        .map(|v| v.iter().any(|a| a == name))
        .unwrap_or(false)
    {
        return Err(Error::AlreadyRegistered { name });
    }

    let _serial = LOAD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    LOAD_LOG.lock().unwrap_or_else(|e| e.into_inner()).clear();
    let prev_print = libbpf_rs::set_print(Some((PrintLevel::Info, capture_log)));
    let result = open_load_attach(algo, opts, by);
    libbpf_rs::set_print(prev_print);
    let log = std::mem::take(&mut *LOAD_LOG.lock().unwrap_or_else(|e| e.into_inner()));

    result.map_err(|(step, e)| classify(algo, step, e, &log))
}

/// The algorithm's object, opened. Where the kernel publishes no config,
/// libbpf would refuse the object's `__kconfig` externs: it is handed the
/// one value they need, measured (kconfig.rs).
fn open_object(algo: Algo) -> Result<OpenObject, libbpf_rs::Error> {
    let kconfig = crate::kconfig::kconfig_override().map_err(|e| {
        libbpf_rs::Error::from(std::io::Error::new(std::io::ErrorKind::NotFound, e))
    })?;
    let Some(kconfig) = kconfig else {
        return ObjectBuilder::default().open_memory(algo.object());
    };
    let kconfig = std::ffi::CString::new(kconfig).expect("no NUL in a kconfig line");
    let name = std::ffi::CString::new(algo.name()).expect("no NUL in a name");
    let opts = libbpf_sys::bpf_object_open_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_object_open_opts>() as libbpf_sys::size_t,
        object_name: name.as_ptr(),
        kconfig: kconfig.as_ptr(),
        ..Default::default()
    };
    let obj = algo.object();
    // SAFETY: the object bytes and the option strings outlive the call
    // (libbpf copies what it keeps); a null result sets errno.
    let ptr = unsafe {
        libbpf_sys::bpf_object__open_mem(
            obj.as_ptr().cast(),
            obj.len() as libbpf_sys::size_t,
            &opts,
        )
    };
    let ptr = std::ptr::NonNull::new(ptr)
        .ok_or_else(|| libbpf_rs::Error::from(std::io::Error::last_os_error()))?;
    // SAFETY: a bpf_object libbpf just opened, owned by nothing else.
    Ok(unsafe { OpenObject::from_ptr(ptr) })
}

fn open_load_attach(
    algo: Algo,
    opts: &Options,
    by: RegisterBy,
) -> Result<Loaded, (&'static str, libbpf_rs::Error)> {
    let mut open = open_object(algo).map_err(|e| ("open", e))?;
    if by == RegisterBy::MapUpdate {
        // The same object without BPF_F_LINK: a map the kernel registers
        // when it is written (libbpf's attach does the write, and its
        // detach deletes the element).
        let mut ops = open
            .maps_mut()
            .find(|m| m.name() == algo.ops_map())
            .expect("struct_ops map is in the object");
        let flags = ops.map_flags() & !libbpf_sys::BPF_F_LINK;
        ops.set_map_flags(flags).map_err(|e| ("open", e))?;
    }
    if algo == Algo::Westwood {
        // westwood.bpf.c: `westwood_config`, alone in its section
        let cfg = RawWestwoodConfig {
            paper_ssthresh: u32::from(opts.westwood_ssthresh == WestwoodSsthresh::Paper),
            ratio_interval_us: opts.ratio_interval_us.max(1),
        };
        let mut data = open
            .maps_mut()
            .find(|m| m.name() == ".rodata.westwood")
            .expect(".rodata.westwood is in the object");
        let bytes = data
            .initial_value_mut()
            .expect(".rodata.westwood has a value");
        let size = std::mem::size_of::<RawWestwoodConfig>();
        assert!(bytes.len() >= size, ".rodata.westwood holds the config");
        // SAFETY: RawWestwoodConfig is plain old data of `size` bytes
        let raw = unsafe {
            std::slice::from_raw_parts((&cfg as *const RawWestwoodConfig).cast::<u8>(), size)
        };
        bytes[..size].copy_from_slice(raw);
    }
    let mut object = open.load().map_err(|e| ("load", e))?;
    let states = object
        .maps()
        .find(|m| m.name() == algo.state_map())
        .map(|m| MapHandle::try_from(&m))
        .expect("state map is in the object")
        .map_err(|e| ("state map", e))?;
    let failures = object
        .maps()
        .find(|m| m.name() == "export_failures")
        .map(|m| MapHandle::try_from(&m))
        .expect("export_failures is in the object")
        .map_err(|e| ("export_failures map", e))?;
    let ratio = object
        .maps()
        .find(|m| m.name() == "cwnd_pipe_ratio")
        .map(|m| MapHandle::try_from(&m))
        .transpose()
        .map_err(|e| ("cwnd_pipe_ratio map", e))?;
    let link = object
        .maps_mut()
        .find(|m| m.name() == algo.ops_map())
        .expect("struct_ops map is in the object")
        .attach_struct_ops()
        .map_err(|e| ("register", e))?;
    Ok(Loaded {
        algo,
        _link: link,
        states,
        failures,
        ratio,
        _object: object,
    })
}

fn classify(algo: Algo, step: &'static str, e: libbpf_rs::Error, log: &str) -> Error {
    let name = algo.name();
    if step == "register" && e.kind() == ErrorKind::AlreadyExists {
        return Error::AlreadyRegistered { name };
    }
    if let Some(start) = log.find("-- BEGIN PROG LOAD LOG --") {
        let end = log[start..]
            .find("-- END PROG LOAD LOG --")
            .map_or(log.len(), |i| start + i);
        return Error::VerifierRejected {
            name,
            step,
            err: e,
            log_tail: tail(&log[start..end], 25),
        };
    }
    if e.kind() == ErrorKind::PermissionDenied {
        return Error::LoadNotRoot { name, step, err: e };
    }
    Error::Load {
        name,
        step,
        err: e,
        log_tail: tail(log, 15),
    }
}

/// Read every (u64 key, value) of a hash map with BPF_MAP_LOOKUP_BATCH: one
/// system call per `batch` entries, each entry copied under its bucket lock
/// (so never half updated by the BPF side).
fn read_hash(
    fd: BorrowedFd<'_>,
    value_size: usize,
    mut each: impl FnMut(u64, &[u8]),
) -> std::io::Result<()> {
    let mut batch: usize = 256;
    let mut keys = vec![0u64; batch];
    let mut values = vec![0u8; batch * value_size];
    let mut token: u64 = 0;
    let mut first = true;
    let opts = libbpf_sys::bpf_map_batch_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_map_batch_opts>() as _,
        ..Default::default()
    };
    loop {
        let mut count = batch as u32;
        let mut next: u64 = 0;
        let in_batch: *mut u64 = if first {
            std::ptr::null_mut()
        } else {
            &mut token
        };
        // SAFETY: buffers hold `count` keys and values; tokens are key sized.
        let ret = unsafe {
            libbpf_sys::bpf_map_lookup_batch(
                fd.as_raw_fd(),
                in_batch.cast(),
                (&mut next as *mut u64).cast(),
                keys.as_mut_ptr().cast(),
                values.as_mut_ptr().cast(),
                &mut count,
                &opts,
            )
        };
        let errno = if ret < 0 { -ret } else { 0 };
        match errno {
            0 | libc::ENOENT => {
                for i in 0..count as usize {
                    each(keys[i], &values[i * value_size..(i + 1) * value_size]);
                }
                if errno == libc::ENOENT {
                    return Ok(());
                }
                token = next;
                first = false;
            }
            // a hash bucket holds more entries than fit in one batch
            libc::ENOSPC => {
                batch *= 2;
                keys.resize(batch, 0);
                values.resize(batch * value_size, 0);
            }
            libc::EINTR | libc::EAGAIN => {}
            _ => return Err(std::io::Error::from_raw_os_error(errno)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(errno: i32) -> libbpf_rs::Error {
        libbpf_rs::Error::from(std::io::Error::from_raw_os_error(errno))
    }

    #[test]
    fn verifier_log_tail_is_kept() {
        let mut log =
            String::from("libbpf: prog 'x': BPF program load failed: Permission denied\n");
        log.push_str("libbpf: prog 'x': -- BEGIN PROG LOAD LOG --\n");
        for i in 0..40 {
            log.push_str(&format!("{i}: (79) r1 = *(u64 *)(r1 +0)\n"));
        }
        log.push_str("R1 invalid mem access 'scalar'\n-- END PROG LOAD LOG --\nlibbpf: failed to load object\n");
        let e = classify(Algo::Cubic, "load", err(libc::EACCES), &log);
        let Error::VerifierRejected { name, log_tail, .. } = &e else {
            panic!("{e}")
        };
        assert_eq!(*name, "bloatd_cubic");
        assert!(
            log_tail.ends_with("R1 invalid mem access 'scalar'"),
            "{log_tail}"
        );
        assert_eq!(log_tail.lines().count(), 25);
        assert!(
            e.to_string().contains("verifier rejected bloatd_cubic"),
            "{e}"
        );
    }

    #[test]
    fn eperm_without_verifier_log_means_privileges() {
        let e = classify(
            Algo::Westwood,
            "load",
            err(libc::EPERM),
            "libbpf: Error in bpf_object__probe_loading()\n",
        );
        assert!(matches!(e, Error::LoadNotRoot { .. }), "{e}");
        // The text it had as NotRoot { what: "load NAME (STEP: ERR)" }.
        let as_before = Error::NotRoot {
            what: format!("load bloatd_westwood (load: {:#})", err(libc::EPERM)),
        };
        assert_eq!(e.to_string(), as_before.to_string());
        assert!(e.to_string().contains("run as root"), "{e}");
    }

    /// libbpf's error, kept whole, prints where its text was (`{step}:
    /// {err:#}`, between the sentence and the log).
    #[test]
    fn a_load_error_reads_as_before() {
        let e = classify(Algo::Cubic, "load", err(libc::EINVAL), "libbpf: x\n");
        let message = format!("load: {:#}", err(libc::EINVAL));
        assert_eq!(
            e.to_string(),
            format!("loading bloatd_cubic failed: {message}\n--- libbpf log (tail) ---\nlibbpf: x")
        );
    }

    #[test]
    fn eexist_on_register_means_taken() {
        let e = classify(Algo::Westwood, "register", err(libc::EEXIST), "");
        assert!(
            matches!(
                e,
                Error::AlreadyRegistered {
                    name: "bloatd_westwood"
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn log_is_bounded() {
        LOAD_LOG.lock().unwrap().clear();
        for _ in 0..(LOG_KEEP_BYTES / 10) {
            capture_log(PrintLevel::Info, "0123456789abcdef\n".into());
        }
        let len = LOAD_LOG.lock().unwrap().len();
        LOAD_LOG.lock().unwrap().clear();
        assert!(len <= LOG_KEEP_BYTES, "{len}");
    }
}
