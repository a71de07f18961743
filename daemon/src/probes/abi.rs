//! Rust mirror of `struct bloatd_sock` (bpf/bloatd.h): the value of the
//! kernel's `socks` map and the record of the `samples` ring buffer.
//! `layout_matches_c` pins every field offset against the C compiler.

pub const AF_INET6: u16 = 10;

/// enum bloatd_kind
pub const KIND_SAMPLE: u8 = 1;
pub const KIND_CLOSED: u8 = 2;

/// enum bloatd_stat: indexes of the per-CPU `stats` array.
pub mod stat {
    pub const PROBE: u32 = 0;
    pub const STATE: u32 = 1;
    pub const RETRANS: u32 = 2;
    pub const CONG: u32 = 3;
    pub const ITER: u32 = 4;
    pub const DROP_MAP_FULL: u32 = 5;
    pub const DROP_RINGBUF: u32 = 6;
    pub const CREATED: u32 = 7;
    pub const DELETED: u32 = 8;
    pub const MAX: u32 = 9;
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BloatdSock {
    pub cookie: u64,
    pub update_ns: u64,
    pub sample_ns: u64,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub ca_ops: u64,
    pub netns: u32,
    pub pid: u32,
    pub cwnd: u32,
    pub ssthresh: u32,
    pub inflight: u32,
    pub mss: u32,
    pub srtt_us: u32,
    pub min_rtt_us: u32,
    pub rcv_rtt_us: u32,
    pub rcv_min_rtt_us: u32,
    pub total_retrans: u32,
    pub lost: u32,
    pub rate_delivered: u32,
    pub rate_interval_us: u32,
    pub family: u16,
    pub sport: u16,
    pub dport: u16,
    pub state: u8,
    pub ca_state: u8,
    pub kind: u8,
    pub pad: [u8; 7],
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
    pub comm: [u8; 16],
    pub cc: [u8; 16],
}

// SAFETY: plain old data, every bit pattern is valid.
unsafe impl aya::Pod for BloatdSock {}

impl BloatdSock {
    /// Reinterpret a ring buffer record. None if the size is wrong.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        if b.len() < std::mem::size_of::<Self>() {
            return None;
        }
        // SAFETY: size checked, the type is POD, read_unaligned copes with
        // the ring buffer's 8-byte alignment either way.
        Some(unsafe { std::ptr::read_unaligned(b.as_ptr() as *const Self) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layout_matches_c() {
        let c = include_str!(concat!(env!("OUT_DIR"), "/abi_layout.txt"));
        let rust: Vec<(&str, usize)> = vec![
            ("size", size_of::<BloatdSock>()),
            ("cookie", offset_of!(BloatdSock, cookie)),
            ("update_ns", offset_of!(BloatdSock, update_ns)),
            ("sample_ns", offset_of!(BloatdSock, sample_ns)),
            ("bytes_acked", offset_of!(BloatdSock, bytes_acked)),
            ("bytes_received", offset_of!(BloatdSock, bytes_received)),
            ("ca_ops", offset_of!(BloatdSock, ca_ops)),
            ("netns", offset_of!(BloatdSock, netns)),
            ("pid", offset_of!(BloatdSock, pid)),
            ("cwnd", offset_of!(BloatdSock, cwnd)),
            ("ssthresh", offset_of!(BloatdSock, ssthresh)),
            ("inflight", offset_of!(BloatdSock, inflight)),
            ("mss", offset_of!(BloatdSock, mss)),
            ("srtt_us", offset_of!(BloatdSock, srtt_us)),
            ("min_rtt_us", offset_of!(BloatdSock, min_rtt_us)),
            ("rcv_rtt_us", offset_of!(BloatdSock, rcv_rtt_us)),
            ("rcv_min_rtt_us", offset_of!(BloatdSock, rcv_min_rtt_us)),
            ("total_retrans", offset_of!(BloatdSock, total_retrans)),
            ("lost", offset_of!(BloatdSock, lost)),
            ("rate_delivered", offset_of!(BloatdSock, rate_delivered)),
            ("rate_interval_us", offset_of!(BloatdSock, rate_interval_us)),
            ("family", offset_of!(BloatdSock, family)),
            ("sport", offset_of!(BloatdSock, sport)),
            ("dport", offset_of!(BloatdSock, dport)),
            ("state", offset_of!(BloatdSock, state)),
            ("ca_state", offset_of!(BloatdSock, ca_state)),
            ("kind", offset_of!(BloatdSock, kind)),
            ("saddr", offset_of!(BloatdSock, saddr)),
            ("daddr", offset_of!(BloatdSock, daddr)),
            ("comm", offset_of!(BloatdSock, comm)),
            ("cc", offset_of!(BloatdSock, cc)),
        ];
        let c: Vec<(&str, usize)> = c
            .lines()
            .map(|l| {
                let (name, off) = l.split_once(' ').unwrap();
                (name, off.parse().unwrap())
            })
            .collect();
        assert_eq!(rust, c, "Rust BloatdSock differs from C struct bloatd_sock");
    }
}
