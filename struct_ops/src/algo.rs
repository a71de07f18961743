//! The two congestion controls bloatd carries, and the BPF objects that hold them.

use std::fmt;
use std::str::FromStr;

/// A bloatd congestion control, registered with the kernel under [`Algo::name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algo {
    /// `bloatd_westwood`: Westwood+, cwnd = BWE x RTTmin after congestion.
    Westwood,
    /// `bloatd_cubic`: CUBIC (RFC 9438) with HyStart.
    Cubic,
}

/// A BPF object embedded at build time. libelf parses ELF in place, so keep
/// the bytes 8-byte aligned like a file read into memory would be.
#[repr(C, align(8))]
struct Aligned<B: ?Sized>(B);

static WESTWOOD_OBJ: &Aligned<[u8]> =
    &Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/westwood.bpf.o")));
static CUBIC_OBJ: &Aligned<[u8]> =
    &Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/cubic.bpf.o")));

impl Algo {
    /// Every algorithm, in a stable order.
    pub const ALL: [Algo; 2] = [Algo::Westwood, Algo::Cubic];

    /// The name the kernel knows it by (tcp_available_congestion_control,
    /// setsockopt TCP_CONGESTION, `ss -ti`).
    pub fn name(self) -> &'static str {
        match self {
            Algo::Westwood => "bloatd_westwood",
            Algo::Cubic => "bloatd_cubic",
        }
    }

    /// The algorithm registered under `name`, if it is one of bloatd's.
    pub fn from_name(name: &str) -> Option<Algo> {
        Algo::ALL.into_iter().find(|a| a.name() == name)
    }

    /// Congestion controls that take over a network namespace's default
    /// when this one is unregistered: the kernel's own implementation of
    /// the same algorithm if it is available, else Reno, which every
    /// kernel has built in and allows in every namespace (Westwood+ probes
    /// exactly like Reno).
    pub fn fallbacks(self) -> &'static [&'static str] {
        match self {
            Algo::Westwood => &["westwood", "reno"],
            Algo::Cubic => &["cubic", "reno"],
        }
    }

    pub(crate) fn object(self) -> &'static [u8] {
        match self {
            Algo::Westwood => &WESTWOOD_OBJ.0,
            Algo::Cubic => &CUBIC_OBJ.0,
        }
    }

    /// Name of the `.struct_ops.link` map (the tcp_congestion_ops) in the object.
    pub(crate) fn ops_map(self) -> &'static str {
        self.name()
    }

    /// Name of the per-socket state map in the object.
    pub(crate) fn state_map(self) -> &'static str {
        match self {
            Algo::Westwood => "westwood_states",
            Algo::Cubic => "cubic_states",
        }
    }
}

impl fmt::Display for Algo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algo {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Algo::from_name(s).ok_or_else(|| {
            let names: Vec<_> = Algo::ALL.iter().map(|a| a.name()).collect();
            format!(
                "unknown bloatd congestion control '{s}' (known: {})",
                names.join(", ")
            )
        })
    }
}

/// When Westwood+ applies its measured pipe. Both set ssthresh = cwnd =
/// BWE x RTTmin when a recovery completes and ssthresh = BWE x RTTmin at a
/// timeout; they differ in what `ssthresh()` returns on three duplicate
/// ACKs or ECN, and so in what proportional rate reduction sends during the
/// recovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WestwoodSsthresh {
    /// The kernel's net/ipv4/tcp_westwood.c: Reno's cwnd/2.
    #[default]
    Kernel,
    /// The Westwood+ papers: BWE x RTTmin at once.
    Paper,
}

impl WestwoodSsthresh {
    pub const ALL: [WestwoodSsthresh; 2] = [WestwoodSsthresh::Kernel, WestwoodSsthresh::Paper];

    pub fn name(self) -> &'static str {
        match self {
            WestwoodSsthresh::Kernel => "kernel",
            WestwoodSsthresh::Paper => "paper",
        }
    }

    pub fn from_name(name: &str) -> Option<WestwoodSsthresh> {
        Self::ALL.into_iter().find(|v| v.name() == name)
    }
}

impl std::fmt::Display for WestwoodSsthresh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How the kernel holds a registration (see `stale.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegisterBy {
    /// A struct_ops link (Linux 6.4): registered while its descriptor lives.
    Link,
    /// An update of the struct_ops map (before 6.4): registered until its
    /// element is deleted; a killed holder's registration is removed at the
    /// next registration of the same name.
    MapUpdate,
}

impl RegisterBy {
    /// What this kernel offers: a link where it has struct_ops links.
    pub fn detect() -> RegisterBy {
        if crate::stale::struct_ops_links() {
            RegisterBy::Link
        } else {
            RegisterBy::MapUpdate
        }
    }
}

/// How the algorithms are set up at load (BPF read-only data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    pub westwood_ssthresh: WestwoodSsthresh,
    /// At most one cwnd/pipe observation per socket per this many
    /// microseconds (the daemon's sampling interval).
    pub ratio_interval_us: u32,
    /// How to register: None, what the kernel offers
    /// ([`RegisterBy::detect`]); the tests force the map update on kernels
    /// that have links too, to run the fallback there.
    pub register_by: Option<RegisterBy>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            westwood_ssthresh: WestwoodSsthresh::default(),
            ratio_interval_us: 100_000,
            register_by: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// cc_idle.h's cubic_idle_us, the arithmetic bloatd_cubic runs on
    /// CA_EVENT_TX_START, compiled for the host: (now_jiffies, lsndtime,
    /// hz) -> microseconds.
    #[test]
    fn cubic_idle_shift_counts_long_pauses_in_full() {
        use bloatd_bpf_testing::cubic_idle_us as shift;
        assert_eq!(shift(1000, 900, 1000), 100_000);
        // 40 minutes idle: beyond the 2^31 us (35.8 min) a microsecond
        // difference would wrap at, the epoch still moves by all of it
        let forty_min_us = 40 * 60 * 1_000_000u64;
        assert!(forty_min_us > 1 << 31);
        assert_eq!(shift(3_000_000, 600_000, 1000), forty_min_us);
        assert_eq!(shift(600_000, 0, 250), forty_min_us);
        // jiffies wrapped between the last send and now: 356 jiffies
        assert_eq!(shift(100, 0xFFFF_FF00, 1000), 356_000);
        // nothing to shift: last send not in the past, no idle, HZ unknown
        assert_eq!(shift(900, 1000, 1000), 0);
        assert_eq!(shift(1000, 1000, 1000), 0);
        assert_eq!(shift(1000, 900, 0), 0);
    }

    #[test]
    fn names_round_trip() {
        for a in Algo::ALL {
            assert_eq!(Algo::from_name(a.name()), Some(a));
            assert_eq!(a.name().parse::<Algo>(), Ok(a));
            // the kernel's TCP_CA_NAME_MAX is 16 including the NUL
            assert!(a.name().len() < 16, "{a} too long for the kernel");
        }
        assert_eq!(Algo::from_name("cubic"), None);
        assert!("westwood"
            .parse::<Algo>()
            .unwrap_err()
            .contains("bloatd_westwood"));
    }

    #[test]
    fn objects_are_bpf_elf() {
        for a in Algo::ALL {
            let o = a.object();
            assert_eq!(&o[..4], b"\x7fELF", "{a}");
            // e_machine 247 = EM_BPF
            assert_eq!(u16::from_le_bytes([o[18], o[19]]), 247, "{a}");
            assert_eq!(o.as_ptr() as usize % 8, 0);
        }
    }
}
