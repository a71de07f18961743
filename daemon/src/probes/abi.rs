//! The records the probes share with user space (bpf/bloatd.h, bpf/floor.h).
//! The Rust declarations are generated at build time from the BPF object's
//! BTF (bpf/build_bpf.rs), so they are the C layout by construction.

include!(concat!(env!("OUT_DIR"), "/abi.rs"));
include!(concat!(env!("OUT_DIR"), "/globals.rs"));

pub const AF_INET6: u16 = 10;

/// Linux TCP states (include/net/tcp_states.h): `bloatd_sock.state`, and
/// the index of `bloatd_sock_counts`.
pub const TCP_ESTABLISHED: u8 = 1;

/// A TCP state as `ss` names it.
pub fn tcp_state_name(state: u8) -> &'static str {
    match state {
        1 => "ESTAB",
        2 => "SYN-SENT",
        3 => "SYN-RECV",
        4 => "FIN-WAIT-1",
        5 => "FIN-WAIT-2",
        6 => "TIME-WAIT",
        7 => "CLOSE",
        8 => "CLOSE-WAIT",
        9 => "LAST-ACK",
        10 => "LISTEN",
        11 => "CLOSING",
        12 => "NEW-SYN-RECV",
        _ => "UNKNOWN",
    }
}

// SAFETY: plain old data, every bit pattern is valid.
unsafe impl aya::Pod for BloatdSock {}
unsafe impl aya::Pod for BloatdSample {}
unsafe impl aya::Pod for BloatdCcStats {}
unsafe impl aya::Pod for BloatdSockCounts {}
unsafe impl aya::Pod for BloatdControl {}
unsafe impl aya::Pod for BloatdSamplerCpu {}
unsafe impl aya::Pod for BloatdFloor {}
unsafe impl aya::Pod for BloatdPathKey {}
unsafe impl aya::Pod for BloatdBottleneck {}
unsafe impl aya::Pod for BloatdPolicyRule {}
unsafe impl aya::Pod for BloatdPolicyCtl {}
unsafe impl aya::Pod for BloatdPolicyCounts {}
unsafe impl aya::Pod for BloatdDrwaSaved {}
unsafe impl aya::Pod for BloatdSvcKey {}
unsafe impl aya::Pod for BloatdSvcStats {}
