//! Probes: loads bpf/probes.bpf.c into the kernel and reads what it keeps.
//!
//! Probes (BTF tracepoints, see the C file for why each): tcp_probe,
//! inet_sock_set_state, tcp_retransmit_skb, tcp_cong_state_set; a cgroup
//! sock_ops program on the root cgroup that samples senders after they
//! close their end; an iter/tcp program run once at start to pick up
//! existing sockets; an iterator over the socket storage map that reads
//! every record, refreshed on the spot.
//! Produces: `BloatdSock` records, from the `samples` ring buffer (at most
//! one per socket per interval) or from the iterator; the floors of the
//! paths (`floors`); and the probes' own counters (`stats`) and run-time
//! statistics.
//!
//! Every attachment is a BPF link owned by a file descriptor of this
//! process: when the process ends, however it ends, the kernel detaches all.

#[allow(dead_code)] // generated: every constant of the C enums
pub mod abi;
#[cfg(test)]
mod floor_tests;
pub mod kernel;
mod map_iter;
#[cfg(test)]
mod merge_tests;
pub(crate) mod netns;
pub mod policy;
#[cfg(test)]
mod sampler_tests;
mod stats;

use crate::error::{Chain, Error};
use crate::settings::Config;
use abi::{
    stat, BloatdCcStats, BloatdControl, BloatdFloor, BloatdRoleStats, BloatdSample,
    BloatdSamplerCpu, BloatdSock, BloatdSockCounts, BloatdSvcKey, BloatdSvcStats,
};
use aya::maps::{Array, HashMap as BpfHashMap, Map, MapData, PerCpuArray, RingBuf};
use aya::programs::{BtfTracePoint, CgroupAttachMode, Iter, SockOps};
use aya::{Btf, Ebpf, EbpfLoader};
use map_iter::{MapIter, Slots};
use std::collections::HashSet;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Mutex;
use std::time::Duration;

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/probes.bpf.o"));

/// The BTF tracepoint programs of the object, in attach order; the last
/// only where the kernel has it (probes/kernel.rs, CONG_STATE_TRACEPOINT).
pub const TRACEPOINTS: [&str; 4] = [
    "tcp_probe",
    "inet_sock_set_state",
    "tcp_retransmit_skb",
    "tcp_cong_state_set",
];

pub const BTF_PATH: &str = "/sys/kernel/btf/vmlinux";
/// Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup on a unified
/// host, /sys/fs/cgroup/unified on a hybrid one): a sock_ops program
/// attached to its root sees every socket.
pub fn cgroup2_root() -> Option<std::path::PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_dev, dir, fstype) = (f.next()?, f.next()?, f.next()?);
        (fstype == "cgroup2").then(|| std::path::PathBuf::from(dir))
    })
}

/// What bloatd loaded into the kernel, shared by whoever reads it: the
/// programs, the statistics maps, the policy's maps. Every method takes
/// `&self`; the two maps it changes are behind their own locks.
pub struct Probes {
    ebpf: Ebpf,
    /// How reads reach the sockets of other network namespaces.
    reach: NetnsReach,
    /// The floor maps (peers, prefixes).
    floors: [MapData; 2],
    /// Why closing senders are not sampled, if they are not.
    sockops_error: Option<String>,
    /// What the kernel offers beyond the core.
    kernel: crate::probes::kernel::Kernel,
    stats: PerCpuArray<MapData, u64>,
    cc_stats: PerCpuArray<MapData, BloatdCcStats>,
    sock_counts: Array<MapData, BloatdSockCounts>,
    cc_names: Array<MapData, [u8; 16]>,
    /// Queueing delay and RTT histograms per (cgroup, cc, role), and the
    /// map's bound (service_ops.h).
    svc_stats: Mutex<BpfHashMap<MapData, BloatdSvcKey, BloatdSvcStats>>,
    service_entries: u32,
    /// Adaptive sampling's state on each CPU (sampler.h), and the hot sockets.
    sampler: PerCpuArray<MapData, BloatdSamplerCpu>,
    /// struct bloatd_hot read as words: the count first (a generated type
    /// of 4,096 slots would have no Default).
    hot: Array<MapData, [u32; 2 + 2 * abi::limits::HOT_SLOTS as usize]>,
    map_capacity: u32,
    /// Holding this fd keeps kernel.bpf_stats_enabled on; dropped with us.
    _stats_fd: Option<OwnedFd>,
    /// The policy's rules, switches and counters.
    pub policy: Mutex<policy::PolicyMaps>,
}

/// The maps a read of every socket uses, and the watched sockets' stream:
/// owned by the one reader (engine/reader.rs), apart from the maps a
/// scrape reads.
pub struct SocketReads {
    ring: RingBuf<MapData>,
    /// Walks the sockets of the reading thread's network namespace into
    /// `slots`, the array `dump` (held by `_dump`), taking each one's
    /// record from `_socks`.
    dump: MapIter,
    slots: Slots,
    _dump: MapData,
    _socks: MapData,
    /// The namespaces records were made in (netns_seen), and where to find
    /// them to walk them (netns.rs).
    netns_seen: BpfHashMap<MapData, u32, u32>,
    netns: netns::Finder,
    reach: NetnsReach,
    watch: BpfHashMap<MapData, u64, u8>,
    control: Array<MapData, BloatdControl>,
    watched: HashSet<u64>,
}

impl Drop for Probes {
    /// Before the programs go (the fields drop after this): receivers DRWA
    /// clamps get their windows back.
    fn drop(&mut self) {
        let left = self
            .policy
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .release_windows(Duration::from_secs(2));
        if left > 0 {
            tracing::warn!(
                "{left} receivers keep DRWA's window clamp for their life: bloatd could not enter their network namespace (no process or /run/netns name holds it)"
            );
        }
    }
}

extern "C" {
    // bpf/floor_host.c: floor.h's floor_get, as the probes read a floor.
    fn bloatd_floor_get(f: *const BloatdFloor, win_s: u32, t_s: u32, source: *mut u32) -> u32;
}

/// A floor as the probes read it at `now_s` (seconds of CLOCK_MONOTONIC)
/// with a window of `window_s`: (floor_us, source), None once expired.
pub fn floor_now(f: &BloatdFloor, window_s: u32, now_s: u32) -> Option<(u32, u32)> {
    let mut source = 0;
    // SAFETY: pure C function reading a plain-data struct.
    let us = unsafe { bloatd_floor_get(f, window_s, now_s, &mut source) };
    (us > 0).then_some((us, source))
}

/// Merge `x` (another CPU's copy, or another index of the same name) into
/// `sum`. Counts and sums add up. The bloated-socket slots do not: a slot
/// holds the count of one second, stamped with that second, and each CPU
/// stamps its own copy; a stamp is a value, not a quantity. Per slot the
/// newest second wins and only the counts stamped with it add up (a CPU
/// whose slot still holds an older second saw no bloated socket in it).
pub fn merge_cc_stats(sum: &mut BloatdCcStats, x: &BloatdCcStats) {
    for (a, b) in sum.role.iter_mut().zip(x.role.iter()) {
        merge_role_stats(a, b);
    }
}

fn merge_role_stats(a: &mut BloatdRoleStats, b: &BloatdRoleStats) {
    let add = |a: &mut [u64], b: &[u64]| {
        for (a, b) in a.iter_mut().zip(b) {
            *a = a.wrapping_add(*b);
        }
    };
    for (a, b) in a.delay.iter_mut().zip(b.delay.iter()) {
        add(a, b);
    }
    add(&mut a.delay_sum_us, &b.delay_sum_us);
    add(&mut a.cwnd, &b.cwnd);
    add(
        std::slice::from_mut(&mut a.cwnd_sum),
        std::slice::from_ref(&b.cwnd_sum),
    );
    add(
        std::slice::from_mut(&mut a.retrans),
        std::slice::from_ref(&b.retrans),
    );
    for i in 0..a.bloated_sec.len() {
        match b.bloated_sec[i].cmp(&a.bloated_sec[i]) {
            std::cmp::Ordering::Greater => {
                a.bloated_sec[i] = b.bloated_sec[i];
                a.bloated[i] = b.bloated[i];
            }
            std::cmp::Ordering::Equal => a.bloated[i] += b.bloated[i],
            std::cmp::Ordering::Less => {}
        }
    }
}

/// The entries of cgroup 0 in `svc_stats`, one per congestion control
/// and role: where the probes count a sample when the map is full
/// ("other"), made before the probes run so they always exist.
fn make_overflow_entries(
    m: &mut BpfHashMap<MapData, BloatdSvcKey, BloatdSvcStats>,
) -> Result<(), Error> {
    for cc_idx in 0..abi::limits::CC_MAX {
        for role in 0..2 {
            let key = BloatdSvcKey {
                cgroup_id: 0,
                cc_idx,
                role,
            };
            m.insert(key, BloatdSvcStats::default(), 0)
                .map_err(Error::map("svc_stats"))?;
        }
    }
    Ok(())
}

/// Read slots beyond the bound: records the startup walk made for sockets
/// that existed before (they are not refused) fit too.
const DUMP_SLACK: u32 = 256;

/// Adaptive sampling's state (sampler.h): each CPU's, and the hot sockets.
#[derive(Clone, Debug)]
pub struct SamplerState {
    pub cpus: Vec<BloatdSamplerCpu>,
    pub hot: u32,
}

impl SamplerState {
    /// One segment in `odds` of a socket that is not hot is looked at (the
    /// largest over CPUs that looked at all).
    pub fn odds(&self) -> u64 {
        self.cpus.iter().map(|c| 1u64 << c.shift).max().unwrap_or(1)
    }

    pub fn looks(&self) -> u64 {
        self.cpus.iter().map(|c| c.looks).sum()
    }
}

/// Whether the daemon may enter other network namespaces (setns:
/// CAP_SYS_ADMIN permitted; it keeps it after start, caps.rs).
fn may_enter_namespaces() -> bool {
    crate::caps::current()
        .map(|(_, permitted)| permitted & (1 << crate::caps::CAP_SYS_ADMIN) != 0)
        .unwrap_or(false)
}

/// How a read reaches the sockets of every network namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NetnsReach {
    /// One walk of the socket storage map sees them all.
    OneWalk,
    /// The kernel refuses map-element iterators: each namespace is entered
    /// in turn (setns, CAP_SYS_ADMIN).
    Entering,
    /// Neither: only the daemon's own namespace is read; the others' sockets
    /// count in the statistics but are not listed.
    OwnOnly,
}

impl NetnsReach {
    /// Entering, if the daemon may; else own only.
    fn entering() -> NetnsReach {
        if may_enter_namespaces() {
            NetnsReach::Entering
        } else {
            NetnsReach::OwnOnly
        }
    }
}

/// The prefixes' floor table's bound: a quarter of the peers' (a prefix
/// serves many peers), at least 16.
pub fn prefix_floor_entries(floor_entries: u32) -> u32 {
    (floor_entries / 4).max(16)
}

/// Floors the LRU bound pushed out: the probes count what they create, the
/// map holds what is left (the daemon deletes none).
pub fn floor_evictions(created: u64, present: u64) -> u64 {
    created.saturating_sub(present)
}

/// Every probe counter (`abi::stat`), summed over CPUs, and the totals
/// made of them: one definition for `status` (`Health`) and /metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counters([u64; stat::MAX as usize]);

impl Default for Counters {
    fn default() -> Self {
        Counters([0; stat::MAX as usize])
    }
}

impl Counters {
    pub fn get(&self, stat: u32) -> u64 {
        self.0[stat as usize]
    }

    /// Events seen by the tracepoint probes.
    pub fn events(&self) -> u64 {
        [stat::PROBE, stat::STATE, stat::RETRANS, stat::CONG]
            .iter()
            .map(|&s| self.get(s))
            .sum()
    }

    /// Updates lost: sockets not tracked (full map), samples lost (full
    /// ring buffer).
    pub fn dropped(&self) -> u64 {
        self.get(stat::DROP_MAP_FULL) + self.get(stat::DROP_RINGBUF)
    }

    /// Records in the socket map now: created minus deleted.
    pub fn map_entries(&self) -> u64 {
        self.get(stat::CREATED)
            .saturating_sub(self.get(stat::DELETED))
    }

    /// Floors the bound pushed out, with `present` floors in the map.
    pub fn floors_evicted(&self, present: u64) -> u64 {
        floor_evictions(self.get(stat::FLOOR_NEW), present)
    }
}

#[cfg(test)]
impl From<[u64; stat::MAX as usize]> for Counters {
    fn from(c: [u64; stat::MAX as usize]) -> Counters {
        Counters(c)
    }
}

/// Check the things a user can fix before touching the kernel, so the
/// message names the cause instead of an errno.
pub fn preflight() -> Result<(), Error> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(Error::NotRoot);
    }
    if !std::path::Path::new(BTF_PATH).exists() {
        return Err(Error::NoBtf);
    }
    Ok(())
}

/// Attach the sock_ops program to the root cgroup, so it sees every
/// socket. A BPF link: the kernel detaches it when bloatd exits, however.
fn attach_sock_ops(ebpf: &mut Ebpf) -> Result<(), Error> {
    let prog: &mut SockOps = ebpf
        .program_mut("sock_ops")
        .ok_or(Error::SockOpsMissing)?
        .try_into()?;
    prog.load().map_err(Error::SockOpsLoad)?;
    let root = cgroup2_root().ok_or(Error::NoCgroup2)?;
    let cgroup = match std::fs::File::open(&root) {
        Ok(f) => f,
        Err(e) => return Err(Error::CgroupRoot(root, e)),
    };
    // aya attaches through bpf_link_create here, whose cgroup links always
    // coexist with other programs (BPF_F_ALLOW_MULTI is implied, and the
    // kernel rejects the flag itself with EINVAL): Single means "no flags".
    if let Err(e) = prog.attach(&cgroup, CgroupAttachMode::Single) {
        return Err(Error::SockOpsAttach(root, e));
    }
    Ok(())
}

/// Load the iterator program `name` (target `target`) once and attach it:
/// to `map`, or over no map (for reads from any network namespace).
fn iter_link(
    ebpf: &mut Ebpf,
    btf: &Btf,
    name: &'static str,
    target: &str,
    map: Option<&MapData>,
) -> Result<MapIter, Error> {
    let prog: &mut Iter = ebpf
        .program_mut(name)
        .ok_or_else(|| Error::object(format!("program {name} missing from object")))?
        .try_into()
        .map_err(Error::object)?;
    prog.load(target, btf).map_err(|e| Error::Load {
        name,
        source: Box::new(e.into()),
    })?;
    let prog_fd = prog.fd().map_err(|e| Error::Load {
        name,
        source: Box::new(e.into()),
    })?;
    match map {
        Some(m) => MapIter::attach(prog_fd.as_fd(), m.fd().as_fd()),
        None => MapIter::attach_unbound(prog_fd.as_fd()),
    }
    .map_err(|e| Error::Attach {
        name,
        source: Box::new(e.into()),
    })
}

/// One walk of the socket iterator in the calling thread's network
/// namespace: its records appended to `into`.
fn walk_netns(
    dump: &MapIter,
    slots: &Slots,
    into: Vec<BloatdSock>,
) -> Result<Vec<BloatdSock>, Error> {
    let bytes = dump.read().map_err(Error::map("socks"))?;
    let n = match bytes.get(..4) {
        Some(b) => u32::from_ne_bytes(b.try_into().expect("4 bytes, by get(..4)")) as usize,
        None => {
            return Err(Error::BpfMap {
                map: "socks",
                source: Box::new(
                    format!("the iterator returned {} bytes, not a count", bytes.len()).into(),
                ),
            })
        }
    };
    if n >= slots.slots() {
        tracing::warn!(
            "more socket records than the {} read slots: some not listed",
            n
        );
    }
    slots.read(n, into).map_err(Error::map("dump"))
}

/// Takes map `name` out of the object as the typed map `T`.
fn take_map<T>(ebpf: &mut Ebpf, name: &'static str) -> Result<T, Error>
where
    T: TryFrom<Map, Error = aya::maps::MapError>,
{
    let m = ebpf
        .take_map(name)
        .ok_or_else(|| Error::object(format!("map {name} missing from object")))?;
    T::try_from(m).map_err(|e| Error::BpfMap {
        map: name,
        source: Box::new(e.into()),
    })
}

/// Takes map `name` out of the object untyped (socket storage, the LRU
/// floors, the dump array: the iterators and slots take their fds).
fn take_raw(ebpf: &mut Ebpf, name: &'static str) -> Result<Map, Error> {
    ebpf.take_map(name)
        .ok_or_else(|| Error::object(format!("map {name} missing from object")))
}

/// The object with this configuration's constants (`Config::globals`) and
/// map sizes, loaded (maps created), no program loaded yet.
fn open_object(
    cfg: &Config,
    policy: &policy::PolicyConfig,
    btf: &Btf,
    kernel: &crate::probes::kernel::Kernel,
) -> Result<Ebpf, Error> {
    let globals = cfg.globals(crate::settings::Found {
        cong_state_tracepoint: kernel.cong_state_tracepoint,
        policy_nrules: policy.rules.len() as u32,
        drwa_armed: policy.drwa_armed,
    });
    let mut loader = EbpfLoader::new();
    if let Some(pin) = &policy.saved_pin {
        // A map a daemon that did not stop left there is reused.
        loader.map_pin_path(policy::SAVED_MAP, pin.as_path());
    }
    loader.btf(Some(btf));
    globals.apply(&mut loader);
    loader
        .map_max_entries(abi::map::FLOORS, cfg.floor_entries)
        .map_max_entries(
            abi::map::PREFIX_FLOORS,
            prefix_floor_entries(cfg.floor_entries),
        )
        .map_max_entries(abi::map::SVC_STATS, cfg.service_entries)
        .map_max_entries(abi::map::DUMP, cfg.map_capacity + DUMP_SLACK)
        .load(OBJECT)
        .map_err(Error::object)
}

/// Why a tracepoint program of the core did not load. A verifier that
/// gives up within its 1,000,000 instructions (E2BIG: 5.14's, whose
/// pruning is weaker, on tcp_probe) is a kernel too old for the core:
/// refused as the feature probes refuse one, before anything is attached.
fn tracepoint_load_error(name: &'static str, e: aya::programs::ProgramError) -> Error {
    if let aya::programs::ProgramError::LoadError { io_error, .. } = &e {
        if io_error.raw_os_error() == Some(libc::E2BIG) {
            return crate::probes::kernel::too_old(format!(
                "a verifier that takes the probe {name} within its 1,000,000 instructions (this one gave up: BPF_PROG_LOAD E2BIG)"
            ));
        }
    }
    Error::Load {
        name,
        source: Box::new(e.into()),
    }
}

/// Loads and attaches every tracepoint program this kernel has a
/// tracepoint for.
fn attach_tracepoints(
    ebpf: &mut Ebpf,
    btf: &Btf,
    kernel: &crate::probes::kernel::Kernel,
) -> Result<(), Error> {
    for tp in TRACEPOINTS {
        if tp == crate::probes::kernel::CONG_STATE_TRACEPOINT && !kernel.cong_state_tracepoint {
            continue;
        }
        let prog: &mut BtfTracePoint = ebpf
            .program_mut(tp)
            .ok_or_else(|| Error::object(format!("program {tp} missing from object")))?
            .try_into()
            .map_err(Error::object)?;
        prog.load(tp, btf)
            .map_err(|e| tracepoint_load_error(tp, e))?;
        prog.attach().map_err(|e| Error::Attach {
            name: tp,
            source: Box::new(e.into()),
        })?;
    }
    Ok(())
}

/// The policy's maps (rules in place before the program that reads them
/// runs), what a daemon that did not stop left clamped given back, then the
/// sock_ops program. Its error, if it could not attach and nothing needs
/// it (then only closing senders go unsampled).
fn attach_policy(
    ebpf: &mut Ebpf,
    btf: &Btf,
    cfg: &policy::PolicyConfig,
) -> Result<(policy::PolicyMaps, Option<String>), Error> {
    let mut policy_maps = policy::PolicyMaps::load(ebpf, cfg)?;
    if cfg.drwa_armed || cfg.saved_pin.is_some() {
        let it = iter_link(ebpf, btf, "restore_windows", "tcp", None)?;
        policy_maps.set_restore(it, cfg.saved_pin.clone())?;
        // What a daemon that did not stop left clamped goes back before
        // this one's program sees a socket.
        let recovered = policy_maps.give_back_left();
        if recovered > 0 {
            tracing::warn!(
                "gave back {recovered} receive windows a bloatd that did not stop had left clamped by DRWA"
            );
        }
    }
    let sockops_error = match attach_sock_ops(ebpf) {
        Ok(()) => None,
        // Without the program no rule and no DRWA would act: refuse.
        Err(e) if !cfg.rules.is_empty() || cfg.drwa_armed => {
            return Err(Error::SockOpsNeeded(Box::new(e)))
        }
        Err(e) => {
            let e = Chain(&e).to_string();
            tracing::warn!("{e}: senders that closed their end are not sampled");
            Some(e)
        }
    };
    Ok((policy_maps, sockops_error))
}

impl Probes {
    /// Every probe loaded and attached, one helper per kind (object,
    /// tracepoints, policy and sock_ops, iterators); what stays is taking
    /// the maps into the struct's fields, a line each.
    pub fn load(
        cfg: &Config,
        policy_cfg: &policy::PolicyConfig,
    ) -> Result<(Probes, SocketReads), Error> {
        preflight()?;
        let btf = Btf::from_sys_fs().map_err(|_| Error::NoBtf)?;
        crate::probes::kernel::check_core(&btf)?;
        let kernel = crate::probes::kernel::Kernel::detect(&btf);
        let without_drwa;
        let policy_cfg = match kernel.drwa_declined() {
            Some(why) => {
                tracing::info!("{why}");
                without_drwa = policy_cfg.without_drwa();
                &without_drwa
            }
            None => policy_cfg,
        };
        let mut ebpf = open_object(cfg, policy_cfg, &btf, &kernel)?;
        let stats_fd = if cfg.bpf_stats {
            Some(
                aya::sys::enable_stats(aya::sys::Stats::RunTime)
                    .map_err(|e| Error::object(Error::BpfStats(e)))?,
            )
        } else {
            None
        };
        attach_tracepoints(&mut ebpf, &btf, &kernel)?;

        let ring: RingBuf<MapData> = take_map(&mut ebpf, abi::map::SAMPLES)?;
        let Map::SkStorage(socks) = take_raw(&mut ebpf, abi::map::SOCKS)? else {
            return Err(Error::object("map socks is not socket storage"));
        };
        let mut svc_stats: BpfHashMap<MapData, BloatdSvcKey, BloatdSvcStats> =
            take_map(&mut ebpf, abi::map::SVC_STATS)?;
        make_overflow_entries(&mut svc_stats)?;
        let mut floor_maps = Vec::new();
        for name in [abi::map::FLOORS, abi::map::PREFIX_FLOORS] {
            let Map::LruHashMap(m) = take_raw(&mut ebpf, name)? else {
                return Err(Error::object(format!("map {name} is not an LRU hash")));
            };
            floor_maps.push(m);
        }
        let [floors_map, prefix_floors_map]: [MapData; 2] =
            floor_maps.try_into().expect("two floor maps");
        let (policy_maps, sockops_error) = attach_policy(&mut ebpf, &btf, policy_cfg)?;

        let Map::Array(dump_map) = take_raw(&mut ebpf, abi::map::DUMP)? else {
            return Err(Error::object("map dump is not an array"));
        };
        let slots = Slots::new(
            dump_map.fd().as_fd(),
            std::mem::size_of::<BloatdSock>(),
            (cfg.map_capacity + DUMP_SLACK) as usize,
        )
        .map_err(Error::map("dump"))?;
        // Every namespace in one walk where the kernel allows map-element
        // iterators, else namespace by namespace (netns.rs).
        let (dump, reach) = match iter_link(
            &mut ebpf,
            &btf,
            "dump_socks_all",
            "bpf_sk_storage_map",
            Some(&socks),
        ) {
            Ok(it) => (it, NetnsReach::OneWalk),
            Err(e) => {
                tracing::info!("{}: reading sockets namespace by namespace", Chain(&e));
                let it = iter_link(&mut ebpf, &btf, "dump_socks", "tcp", None)?;
                (it, NetnsReach::entering())
            }
        };

        let reads = SocketReads {
            watch: take_map(&mut ebpf, abi::map::WATCH)?,
            control: take_map(&mut ebpf, abi::map::CONTROL)?,
            netns_seen: take_map(&mut ebpf, abi::map::NETNS_SEEN)?,
            ring,
            dump,
            slots,
            _dump: dump_map,
            _socks: socks,
            netns: netns::Finder::default(),
            reach,
            watched: HashSet::new(),
        };
        let mut probes = Probes {
            stats: take_map(&mut ebpf, abi::map::STATS)?,
            cc_stats: take_map(&mut ebpf, abi::map::CC_STATS)?,
            sock_counts: take_map(&mut ebpf, abi::map::SOCK_COUNTS)?,
            cc_names: take_map(&mut ebpf, abi::map::CC_NAMES)?,
            sampler: take_map(&mut ebpf, abi::map::SAMPLER)?,
            hot: take_map(&mut ebpf, abi::map::HOT)?,
            ebpf,
            reach,
            floors: [floors_map, prefix_floors_map],
            sockops_error,
            kernel,
            svc_stats: Mutex::new(svc_stats),
            service_entries: cfg.service_entries,
            map_capacity: cfg.map_capacity,
            _stats_fd: stats_fd,
            policy: Mutex::new(policy_maps),
        };
        probes.seed(&btf)?;
        Ok((probes, reads))
    }

    /// `bloatd stop` with no daemon running: give back the windows a daemon
    /// that did not stop left clamped in the map pinned at `pin`, then
    /// remove the pin. Loads only the restore iterator. None: nothing there.
    pub fn give_back_left(pin: &std::path::Path) -> Result<Option<u64>, Error> {
        if !policy::pinned_usable(pin) {
            return Ok(None);
        }
        preflight()?;
        let btf = Btf::from_sys_fs().map_err(|_| Error::NoBtf)?;
        let mut ebpf = EbpfLoader::new()
            .btf(Some(&btf))
            .map_pin_path(policy::SAVED_MAP, pin)
            .map_max_entries("dump", 1)
            .load(OBJECT)
            .map_err(Error::object)?;
        let it = iter_link(&mut ebpf, &btf, "restore_windows", "tcp", None)?;
        let mut maps = policy::PolicyMaps::load(&mut ebpf, &policy::PolicyConfig::default())?;
        maps.set_restore(it, Some(pin.to_path_buf()))?;
        let n = maps.give_back_left();
        policy::unpin(pin);
        Ok(Some(n))
    }

    /// What exists before start: every task's open files give the sockets
    /// (listeners above all) the process that holds them, then the TCP
    /// iterator records every socket of our network namespace, and of
    /// every other one bloatd may enter, idle ones too, which no
    /// tracepoint would report until they carry traffic (service_ops.h,
    /// seed_owners). The owners only name processes: if they fail,
    /// connections accepted from a listener opened before bloatd show
    /// none, and bloatd goes on.
    fn seed(&mut self, btf: &Btf) -> Result<(), Error> {
        if let Err(e) = self.run_iter_once(btf, "seed_owners", "task_file") {
            tracing::warn!(
                "{}: connections accepted by listeners opened before bloatd show no process",
                Chain(&e)
            );
        }
        let it = iter_link(&mut self.ebpf, btf, "seed_sockets", "tcp", None)?;
        it.read().map_err(|e| Error::Attach {
            name: "seed_sockets",
            source: Box::new(e.into()),
        })?;
        // The other namespaces' sockets too, where bloatd may enter them:
        // an idle one would otherwise wait for a look at its traffic.
        if may_enter_namespaces() {
            let own = netns::own().ok();
            netns::in_every("recording the sockets that exist", |label| {
                if netns::own().ok() != own {
                    if let Err(e) = it.read() {
                        tracing::warn!("recording the sockets of {label}: {e}");
                    }
                }
            });
        }
        Ok(())
    }

    /// Load the iterator program `name` over `target`, run it once, and
    /// drop it.
    fn run_iter_once(&mut self, btf: &Btf, name: &'static str, target: &str) -> Result<(), Error> {
        let prog: &mut Iter = self
            .ebpf
            .program_mut(name)
            .ok_or_else(|| Error::object(format!("program {name} missing from object")))?
            .try_into()
            .map_err(Error::object)?;
        prog.load(target, btf).map_err(|e| Error::Load {
            name,
            source: Box::new(e.into()),
        })?;
        let link_id = prog.attach().map_err(|e| Error::Attach {
            name,
            source: Box::new(e.into()),
        })?;
        let link = prog.take_link(link_id).map_err(|e| Error::Attach {
            name,
            source: Box::new(e.into()),
        })?;
        let mut file = link.into_file().map_err(|e| Error::Attach {
            name,
            source: Box::new(e.into()),
        })?;
        let mut sink = Vec::new();
        file.read_to_end(&mut sink).map_err(|e| Error::Attach {
            name,
            source: Box::new(e.into()),
        })?;
        Ok(())
    }
}

impl SocketReads {
    /// Hand every sample waiting in the ring buffer (watched sockets only)
    /// to `f`.
    pub fn drain(&mut self, mut f: impl FnMut(&BloatdSample)) {
        while let Some(item) = self.ring.next() {
            if item.len() >= std::mem::size_of::<BloatdSample>() {
                // SAFETY: size checked; plain data generated from BTF.
                let x = unsafe { std::ptr::read_unaligned(item.as_ptr() as *const BloatdSample) };
                f(&x);
            }
        }
    }

    /// The sockets whose samples the probes stream (bounded by the map:
    /// 256; beyond it a socket is simply not watched).
    pub fn set_watched(&mut self, cookies: &HashSet<u64>) -> Result<(), Error> {
        for gone in self.watched.difference(cookies) {
            let _ = self.watch.remove(gone);
        }
        let mut now = HashSet::with_capacity(cookies.len());
        for &c in cookies {
            if self.watched.contains(&c) || self.watch.insert(c, 1, 0).is_ok() {
                now.insert(c);
            }
        }
        self.watched = now;
        let ctl = BloatdControl {
            watching: self.watched.len() as u32,
            pad: 0,
        };
        self.control.set(0, ctl, 0).map_err(Error::map("control"))
    }

    /// Every socket record, refreshed from its socket as it is read, in
    /// `into`'s memory (see `Slots::read`): all of them in one walk of the
    /// socket storage map, or (where the kernel refuses that) the records
    /// of this thread's network namespace, then those of every other
    /// namespace records were made in, each walked from a short-lived
    /// thread that enters it with the capabilities the daemon keeps
    /// (netns.rs, caps.rs). Namespaces that cannot be found any more are
    /// forgotten.
    pub fn read_all(&mut self, mut into: Vec<BloatdSock>) -> Result<Vec<BloatdSock>, Error> {
        into.clear();
        let own = netns::own().map_err(|e| Error::BpfMap {
            map: "netns_seen",
            source: Box::new(Error::OwnNetns(e)),
        })?;
        if self.reach != NetnsReach::Entering {
            return walk_netns(&self.dump, &self.slots, into);
        }
        // Each walk passes every socket of the host (the kernel's table is
        // shared by the namespaces unless tcp_child_ehash_entries splits
        // it): only the namespaces that hold records, ours included.
        let seen: Vec<u32> = self.netns_seen.keys().filter_map(Result::ok).collect();
        let mut out = if seen.contains(&own) {
            walk_netns(&self.dump, &self.slots, into)?
        } else {
            into
        };
        let others: Vec<u32> = seen.into_iter().filter(|&k| k != own).collect();
        if others.is_empty() {
            return Ok(out);
        }
        let (dump, slots, finder) = (&self.dump, &self.slots, &mut self.netns);
        let (result, gone) = netns::on_own_thread(move || {
            let found = finder.open(&others);
            for (ino, f) in found.open {
                if let Err(e) = netns::enter(&f) {
                    tracing::debug!("cannot enter network namespace {ino}: {e}");
                    continue;
                }
                match walk_netns(dump, slots, std::mem::take(&mut out)) {
                    Ok(o) => out = o,
                    Err(e) => return (Err(e), found.gone),
                }
            }
            (Ok(out), found.gone)
        })
        .unwrap_or_else(|| {
            let e = Error::BpfMap {
                map: "socks",
                source: Box::new("the namespace reader panicked".into()),
            };
            (Err(e), Vec::new())
        });
        for ino in gone {
            let _ = self.netns_seen.remove(&ino);
        }
        result
    }
}
