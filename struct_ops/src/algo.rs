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

#[cfg(test)]
mod tests {
    use super::*;

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
