//! The policy's maps (bpf/policy_ops.h): the rules the sock_ops program
//! applies, the live switches (DRWA on/off, stopping), its counters, and
//! what DRWA must give back.
//!
//! What DRWA found on each socket before it clamped it lives in the socket
//! storage `drwa_saved`, which the daemon pins under bpffs
//! ([`saved_pin`]): a daemon that dies without stopping (kill -9, a panic,
//! the OOM killer, systemd's stop timeout) leaves it behind, and the next
//! `bloatd start` or `bloatd stop` gives every window back with the TCP
//! iterator `restore_windows`, then removes the pin. A panic gives them
//! back on its way out ([`GiveBack`], the daemon's panic hook).

use super::abi::{
    policy_action, policy_count, BloatdPathKey, BloatdPolicyCounts, BloatdPolicyCtl,
    BloatdPolicyRule,
};
use super::map_iter::{map_update, MapIter};
use crate::error::{Chain, Error};
use aya::maps::{Array, HashMap as BpfHashMap, MapData, MapInfo, MapType};
use aya::Ebpf;
use bloatd_model::BottleneckClass;
use std::collections::HashMap;
use std::net::IpAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// The BPF file system systemd mounts at boot.
pub const BPFFS: &str = "/sys/fs/bpf";
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;
/// The socket storage DRWA's restore state lives in (policy_ops.h).
pub const SAVED_MAP: &str = "drwa_saved";

/// What the probes are loaded with.
#[derive(Clone, Debug, Default)]
pub struct PolicyConfig {
    /// The rules, in order (resolved: policy.rs).
    pub rules: Vec<BloatdPolicyRule>,
    /// Ask new connections for a callback per segment they send, so DRWA
    /// can act on them (drwa "on" or "off").
    pub drwa_armed: bool,
    /// DRWA switched on at start.
    pub drwa_on: bool,
    /// Where `drwa_saved` is pinned (reused if a daemon left it there);
    /// None: not pinned (DRWA disabled and nothing left, or no bpffs).
    pub saved_pin: Option<PathBuf>,
}

impl PolicyConfig {
    /// The same policy on a kernel that declines DRWA
    /// (kernel.rs, `drwa_declined`): nothing armed, no rule's DRWA action,
    /// and no pin (the directory made for one goes).
    pub fn without_drwa(&self) -> PolicyConfig {
        let mut rules = self.rules.clone();
        for r in &mut rules {
            r.actions &= !(policy_action::DRWA as u8);
        }
        if let Some(pin) = self.saved_pin.as_deref().filter(|p| !pinned_usable(p)) {
            unpin(pin);
        }
        PolicyConfig {
            rules,
            drwa_armed: false,
            drwa_on: false,
            saved_pin: None,
        }
    }
}

/// Bytes of the run directory's path kept readable in its pin's name.
const PIN_READABLE: usize = 100;

/// Where the daemon of `run_dir` pins `drwa_saved`: one directory per run
/// directory, so daemons of different run directories never give back
/// each other's windows. Named for the run directory (/run/bloatd:
/// /sys/fs/bpf/bloatd/run_bloatd-HASH), where HASH (FNV-1a of its absolute
/// path) tells apart paths alike in their readable part (/run/a_b and
/// /run/a/b, two long ones with a common start), and the name stays within
/// a bpffs name's 255 bytes.
pub fn saved_pin(run_dir: &Path) -> PathBuf {
    // Spelled one way: /run/bloatd/ and /run//bloatd are /run/bloatd.
    let abs: PathBuf = std::path::absolute(run_dir)
        .unwrap_or_else(|_| run_dir.to_path_buf())
        .components()
        .collect();
    let readable = abs.to_string_lossy().trim_matches('/').replace('/', "_");
    let mut cut = readable.len().min(PIN_READABLE);
    while !readable.is_char_boundary(cut) {
        cut -= 1;
    }
    // FNV-1a: the same in every build and version (std's hashers promise
    // neither), as the next version must find this one's pin.
    let hash = abs
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
        });
    let tag = format!("{}-{hash:016x}", &readable[..cut]);
    Path::new(BPFFS).join("bloatd").join(tag).join(SAVED_MAP)
}

fn is_bpffs(dir: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: a valid path and a zeroed statfs to fill.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    (unsafe { libc::statfs(c.as_ptr(), &mut st) }) == 0 && st.f_type as i64 == BPF_FS_MAGIC
}

/// Make `pin`'s directory on bpffs, mounting the BPF file system at
/// /sys/fs/bpf first where nothing is (systemd does at boot; a machine
/// without it may have none). Err: why DRWA's clamps cannot be pinned.
pub fn prepare_pin(pin: &Path) -> Result<(), Error> {
    let root = Path::new(BPFFS);
    if !is_bpffs(root) {
        let c = |s: &str| std::ffi::CString::new(s).expect("a constant without NUL");
        // SAFETY: plain mount(2) with valid strings.
        let r = unsafe {
            libc::mount(
                c("bpf").as_ptr(),
                c(BPFFS).as_ptr(),
                c("bpf").as_ptr(),
                0,
                c("mode=0700").as_ptr() as *const libc::c_void,
            )
        };
        if r != 0 {
            return Err(Error::PinMount(std::io::Error::last_os_error()));
        }
        tracing::info!("mounted the BPF file system at {BPFFS} (for DRWA's crash-safe state)");
    }
    let dir = pin.parent().unwrap_or(root);
    std::fs::create_dir_all(dir).map_err(|e| Error::PinDir(dir.to_path_buf(), e))
}

/// Is the map pinned at `pin` one this bloatd can read: socket storage of
/// this version's record? A map of another layout is unpinned (its
/// windows cannot be given back by this version), named in the log.
pub fn pinned_usable(pin: &Path) -> bool {
    if !pin.exists() {
        return false;
    }
    let want = std::mem::size_of::<super::abi::BloatdDrwaSaved>() as u32;
    match MapInfo::from_pin(pin) {
        Ok(i) if matches!(i.map_type(), Ok(MapType::SkStorage)) && i.value_size() == want => true,
        Ok(i) => {
            tracing::warn!(
                "{} holds a map of another bloatd version (value size {}, want {want}): its DRWA window clamps cannot be given back; removing it",
                pin.display(),
                i.value_size()
            );
            unpin(pin);
            false
        }
        Err(e) => {
            tracing::warn!("{}: {}; removing it", pin.display(), Chain(&e));
            unpin(pin);
            false
        }
    }
}

/// Remove the pin and the directories it leaves empty.
pub fn unpin(pin: &Path) {
    match std::fs::remove_file(pin) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!("cannot remove {}: {e}", pin.display()),
    }
    let mut dir = pin.parent();
    while let Some(d) = dir {
        if d == Path::new(BPFFS) || std::fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
}

/// Gives back every window DRWA clamps: the restore iterator in every
/// network namespace, `stopping` set first so no ACK clamps again, then
/// the pin removed. Shared with the daemon's panic hook, which holds it
/// weakly (a panic may come while the engine is locked).
pub struct GiveBack {
    restore: MapIter,
    /// policy_ctl, written directly: the hook cannot wait for a lock.
    ctl: OwnedFd,
    pin: Mutex<Option<PathBuf>>,
    done: AtomicBool,
}

static PANIC_GIVE_BACK: Mutex<Option<Weak<GiveBack>>> = Mutex::new(None);

impl GiveBack {
    /// Every window DRWA clamps in the namespaces this process can enter;
    /// returns how many.
    pub fn windows(&self) -> u64 {
        restore_in_every_netns(&self.restore)
    }

    /// The last thing before the process ends (a stop, a panic): DRWA off
    /// for good, every window back, the pin gone. Runs once.
    pub fn all(&self) -> u64 {
        if self.done.swap(true, Ordering::SeqCst) {
            return 0;
        }
        let stop = BloatdPolicyCtl {
            drwa_on: 0,
            stopping: 1,
        };
        if let Err(e) = map_update(self.ctl.as_fd(), &0u32, &stop) {
            tracing::warn!("setting DRWA's stop switch: {e}");
        }
        let n = self.windows();
        if let Some(pin) = self.pin.lock().unwrap_or_else(|e| e.into_inner()).take() {
            unpin(&pin);
        }
        n
    }

    /// The give-back a panic runs (cmd/start.rs, the panic hook), if the
    /// daemon has one: DRWA armed, the engine alive.
    pub fn for_panic() -> Option<Arc<GiveBack>> {
        PANIC_GIVE_BACK.lock().ok()?.as_ref()?.upgrade()
    }
}

/// What the daemon wrote into the kernel's `path_classes` (policy_ops.h),
/// so that it writes only what changed: per peer, the kernel's class and
/// whether the kernel holds it (false: the map was full).
#[derive(Default)]
pub struct ClassesWritten {
    by_peer: HashMap<(u32, IpAddr), (u32, bool)>,
    /// A write failed since the last entry was deleted: retry those only
    /// once one is (a full map refuses every insert until then).
    full: bool,
}

/// What one sync did: entries written, deleted, refused (map full).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassSync {
    pub written: u32,
    pub deleted: u32,
    pub refused: u32,
}

impl ClassesWritten {
    /// Bring the kernel's entries to `want` (each peer's class; a peer
    /// absent is unknown), through `put` and `del`: a peer whose class
    /// changed is written, a peer no longer in `want` deleted, and one
    /// whose class is the same is not touched.
    pub fn sync(
        &mut self,
        want: &[((u32, IpAddr), BottleneckClass)],
        mut op: impl FnMut(&BloatdPathKey, Option<u32>) -> std::io::Result<()>,
    ) -> ClassSync {
        let mut out = ClassSync::default();
        let wanted: HashMap<(u32, IpAddr), u32> = want
            .iter()
            .map(|(k, c)| (*k, crate::policy::kernel_class(*c)))
            .collect();
        self.by_peer.retain(|peer, (_, held)| {
            if wanted.contains_key(peer) {
                return true;
            }
            // Not found is gone already: deleted all the same.
            if *held && op(&class_key(*peer), None).is_ok() {
                out.deleted += 1;
            }
            false
        });
        if out.deleted > 0 {
            self.full = false;
        }
        for (peer, class) in wanted {
            let was = self.by_peer.get(&peer).copied();
            if was == Some((class, true)) || (self.full && was == Some((class, false))) {
                continue;
            }
            let held = op(&class_key(peer), Some(class)).is_ok();
            if held {
                out.written += 1;
            } else {
                out.refused += 1;
                self.full = true;
                // What it held before is wrong now: unknown (act as
                // without a class) rather than a stale class.
                if matches!(was, Some((_, true))) && op(&class_key(peer), None).is_ok() {
                    out.deleted += 1;
                }
            }
            self.by_peer.insert(peer, (class, held));
        }
        out
    }
}

/// The kernel's key of a peer's class: its floor's (bpf/floor.h,
/// floor_key, with the peer's bits). Peers are IPv4 for a v4-mapped
/// address on both sides (tracker.rs, addr).
pub(crate) fn class_key((netns, peer): (u32, IpAddr)) -> BloatdPathKey {
    let mut k = BloatdPathKey {
        netns,
        ..Default::default()
    };
    match peer {
        IpAddr::V4(a) => {
            k.family = libc::AF_INET as u16;
            k.prefix_len = 32;
            k.addr[..4].copy_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            k.family = libc::AF_INET6 as u16;
            k.prefix_len = 128;
            k.addr = a.octets();
        }
    }
    k
}

pub struct PolicyMaps {
    /// Each classified peer's class, for the gate and `path` rules.
    classes: BpfHashMap<MapData, BloatdPathKey, u32>,
    classes_written: ClassesWritten,
    rules: Array<MapData, BloatdPolicyRule>,
    ctl: Array<MapData, BloatdPolicyCtl>,
    /// Another descriptor of policy_ctl, for [`GiveBack`].
    ctl_fd: OwnedFd,
    counts: Array<MapData, BloatdPolicyCounts>,
    armed: bool,
    /// iter/tcp `restore_windows`: gives windows back (idle receivers at
    /// stop, what a daemon that did not stop left).
    give_back: Option<Arc<GiveBack>>,
}

impl PolicyMaps {
    /// Take the maps from the loaded object and write the rules and the
    /// switches, before the sock_ops program is attached.
    pub fn load(ebpf: &mut Ebpf, cfg: &PolicyConfig) -> Result<PolicyMaps, Error> {
        let mut take = |name: &'static str| {
            ebpf.take_map(name)
                .ok_or_else(|| Error::object(format!("map {name} missing from object")))
        };
        let ctl = take("policy_ctl")?;
        let aya::maps::Map::Array(ctl_data) = &ctl else {
            return Err(Error::object("map policy_ctl is not an array"));
        };
        let ctl_fd = ctl_data
            .fd()
            .as_fd()
            .try_clone_to_owned()
            .map_err(Error::map("policy_ctl"))?;
        let mut maps = PolicyMaps {
            classes: BpfHashMap::try_from(take("path_classes")?)
                .map_err(Error::map("path_classes"))?,
            classes_written: ClassesWritten::default(),
            rules: Array::try_from(take("policy_rules")?).map_err(Error::map("policy_rules"))?,
            ctl: Array::try_from(ctl).map_err(Error::map("policy_ctl"))?,
            ctl_fd,
            counts: Array::try_from(take("policy_counts")?).map_err(Error::map("policy_counts"))?,
            armed: cfg.drwa_armed,
            give_back: None,
        };
        for (i, r) in cfg.rules.iter().enumerate() {
            maps.rules
                .set(i as u32, *r, 0)
                .map_err(Error::map("policy_rules"))?;
        }
        maps.set_drwa(cfg.drwa_on)?;
        Ok(maps)
    }

    /// The iterator that restores windows, and the pin it empties.
    pub fn set_restore(&mut self, it: MapIter, pin: Option<PathBuf>) -> Result<(), Error> {
        let ctl = self.ctl_fd.try_clone().map_err(Error::map("policy_ctl"))?;
        self.give_back = Some(Arc::new(GiveBack {
            restore: it,
            ctl,
            pin: Mutex::new(pin),
            done: AtomicBool::new(false),
        }));
        Ok(())
    }

    /// Give back what a daemon that did not stop left pinned, before the
    /// sock_ops program is attached; then, if DRWA is not armed, the pin
    /// goes. Returns how many windows.
    pub fn give_back_left(&mut self) -> u64 {
        let Some(g) = &self.give_back else { return 0 };
        let n = g.windows();
        if !self.armed {
            if let Some(pin) = g.pin.lock().unwrap_or_else(|e| e.into_inner()).take() {
                unpin(&pin);
            }
        }
        n
    }

    /// Where `drwa_saved` is pinned now, if it is.
    pub fn saved_pin(&self) -> Option<PathBuf> {
        let g = self.give_back.as_ref()?;
        g.pin.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// From now on a panic gives the windows back (cmd/start.rs).
    pub fn arm_panic_give_back(&self) {
        if let (Some(g), Ok(mut slot)) = (&self.give_back, PANIC_GIVE_BACK.lock()) {
            *slot = Some(Arc::downgrade(g));
        }
    }

    fn ctl(&self) -> Result<BloatdPolicyCtl, Error> {
        self.ctl.get(&0, 0).map_err(Error::map("policy_ctl"))
    }

    /// DRWA on or off for every armed receiver, now.
    pub fn set_drwa(&mut self, on: bool) -> Result<(), Error> {
        let ctl = BloatdPolicyCtl {
            drwa_on: on as u32,
            ..self.ctl()?
        };
        self.ctl.set(0, ctl, 0).map_err(Error::map("policy_ctl"))
    }

    /// Each classified peer's class into `path_classes`, only what
    /// changed (`ClassesWritten::sync`). A full map leaves a peer out:
    /// unknown, acted on as without classes; said once in the log.
    pub fn set_path_classes(&mut self, want: &[((u32, IpAddr), BottleneckClass)]) {
        let was_full = self.classes_written.full;
        let map = &mut self.classes;
        let sync = self.classes_written.sync(want, |k, v| {
            match v {
                Some(v) => map.insert(*k, v, 0),
                None => map.remove(k),
            }
            .map_err(|e| std::io::Error::other(e.to_string()))
        });
        if sync.refused > 0 && !was_full {
            tracing::warn!(
                "path_classes is full: {} paths have no class in the kernel (the policy acts on them as on unknown paths)",
                sync.refused
            );
        }
    }

    /// A rule on or off, now.
    pub fn set_enabled(&mut self, index: u32, enabled: bool) -> Result<(), Error> {
        let mut r = self
            .rules
            .get(&index, 0)
            .map_err(Error::map("policy_rules"))?;
        r.enabled = enabled as u8;
        self.rules
            .set(index, r, 0)
            .map_err(Error::map("policy_rules"))
    }

    pub fn enabled(&self, index: u32) -> bool {
        self.rules
            .get(&index, 0)
            .map(|r| r.enabled != 0)
            .unwrap_or(false)
    }

    pub fn counts(&self) -> Result<BloatdPolicyCounts, Error> {
        self.counts.get(&0, 0).map_err(Error::map("policy_counts"))
    }

    /// Before the sock_ops program goes: every receiver DRWA clamps gets
    /// its window back at its next ACK (`stopping`), so wait until none is
    /// clamped, at most `timeout`; then the TCP iterator restores the rest
    /// (receivers that sent no ACK meanwhile) in every network namespace
    /// it can enter, and the pin goes. Returns how many are still clamped
    /// (sockets of a namespace no process or /run/netns holds).
    pub fn release_windows(&mut self, timeout: Duration) -> i64 {
        if !self.armed {
            return 0;
        }
        if let Ok(ctl) = self.ctl() {
            let _ = self.ctl.set(0, BloatdPolicyCtl { stopping: 1, ..ctl }, 0);
        }
        let clamped = |m: &Self| {
            m.counts()
                .map(|c| c.n[policy_count::DRWA_SOCKETS as usize])
                .unwrap_or(0)
        };
        let deadline = Instant::now() + timeout;
        while clamped(self) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(g) = &self.give_back {
            g.all();
        }
        clamped(self)
    }
}

/// Run the restore iterator in every network namespace it can enter
/// (netns.rs). Returns how many windows it gave back.
fn restore_in_every_netns(it: &MapIter) -> u64 {
    let mut n = 0u64;
    super::netns::in_every("giving back DRWA windows", |label| match it.read() {
        Ok(out) => n += (out.len() / 4) as u64,
        Err(e) => tracing::warn!("giving back DRWA windows in {label}: {e}"),
    });
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The daemon writes a peer's class when it changes, never again while
    /// it stays, deletes it when the peer leaves the classes; a full map
    /// refuses a peer (unknown in the kernel: act as without classes),
    /// which is tried again once an entry is deleted, not every second.
    #[test]
    fn classes_are_written_when_they_change_and_a_full_map_says_unknown() {
        use BottleneckClass::*;
        let peer = |i: u8| (7u32, IpAddr::from([10, 9, 2, i]));
        let mut kernel: HashMap<[u8; 16], u32> = HashMap::new();
        let mut ops = 0u32;
        let bound = 2;
        let mut w = ClassesWritten::default();
        let mut sync = |w: &mut ClassesWritten, want: &[((u32, IpAddr), BottleneckClass)]| {
            w.sync(want, |k, v| {
                ops += 1;
                match v {
                    Some(_) if !kernel.contains_key(&k.addr) && kernel.len() >= bound => {
                        Err(std::io::Error::from_raw_os_error(libc::E2BIG))
                    }
                    Some(v) => {
                        kernel.insert(k.addr, v);
                        Ok(())
                    }
                    None => kernel
                        .remove(&k.addr)
                        .map(|_| ())
                        .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOENT)),
                }
            })
        };
        let s = sync(&mut w, &[(peer(1), Droptail), (peer(2), Aqm)]);
        assert_eq!((s.written, s.deleted, s.refused), (2, 0, 0));
        // The same classes again: nothing written.
        let s = sync(&mut w, &[(peer(1), Droptail), (peer(2), Aqm)]);
        assert_eq!(s, ClassSync::default());
        // A flip: one write.
        let s = sync(&mut w, &[(peer(1), Aqm), (peer(2), Aqm)]);
        assert_eq!((s.written, s.deleted, s.refused), (1, 0, 0));
        // A third peer does not fit; tried once, not again while full.
        let three = [(peer(1), Aqm), (peer(2), Aqm), (peer(3), EcnAqm)];
        assert_eq!(sync(&mut w, &three).refused, 1);
        assert_eq!(sync(&mut w, &three), ClassSync::default());
        // Peer 2 forgotten (or unknown): deleted, and peer 3 fits now.
        let s = sync(&mut w, &[(peer(1), Aqm), (peer(3), EcnAqm)]);
        assert_eq!((s.written, s.deleted, s.refused), (1, 1, 0));
        assert_eq!(kernel.len(), 2);
        assert_eq!(kernel[&class_key(peer(3)).addr], 4);
        assert_eq!(kernel[&class_key(peer(1)).addr], 3);
        assert_eq!(ops, 2 + 1 + 1 + 2);
    }

    #[test]
    fn run_directories_never_share_a_pin() {
        let pin = |d: &str| saved_pin(Path::new(d));
        assert_ne!(pin("/run/a_b"), pin("/run/a/b"));
        // Paths alike beyond a readable part's length, and one whose
        // readable part alone would not fit a bpffs name (255 bytes).
        let long = format!("/run/{}", "x".repeat(300));
        assert_ne!(pin(&long), pin(&format!("{long}y")));
        let wide = format!("/run/{}", "é".repeat(300));
        let name = pin(&wide).parent().unwrap().file_name().unwrap().len();
        assert!(name <= 255, "a {name}-byte name");
        // One directory however it is spelled, and named for it. The name
        // is a contract between versions: a start finds the pin of the one
        // that crashed before an upgrade (docs/operating.md gives it).
        assert_eq!(pin("/run/bloatd/"), pin("/run/bloatd"));
        assert_eq!(
            pin("/run/bloatd"),
            Path::new("/sys/fs/bpf/bloatd/run_bloatd-f52cc0b6bbac5ade/drwa_saved")
        );
    }
}
