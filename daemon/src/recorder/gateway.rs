//! A path's gateway: the next hop toward its peer in its namespace's
//! routing table, read once when its episode opens (/proc/PID/net/route
//! and ipv6_route of a process holding one of its sockets, which shows
//! that process's namespace; else bloatd's own table when the path is in
//! bloatd's namespace).

use bloatd_model::journal::EpisodePath;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The longest-prefix route's gateway toward `peer` out of `interface`
/// ("" matches any) in a /proc/net/route table (IPv4: little-endian hex
/// fields). None: directly connected, or no route.
pub fn from_route_v4(table: &str, peer: Ipv4Addr, interface: &str) -> Option<IpAddr> {
    let peer = u32::from(peer);
    let mut best: Option<(u32, u32)> = None; // (mask, gateway)
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 || (!interface.is_empty() && f[0] != interface) {
            continue;
        }
        // The kernel prints each address's bytes (network order) as one
        // native-endian word: back to its bytes, then to a number.
        let hex = |s: &str| {
            u32::from_str_radix(s, 16)
                .ok()
                .map(|n| u32::from(Ipv4Addr::from(n.to_ne_bytes())))
        };
        let (Some(dest), Some(gw), Some(mask)) = (hex(f[1]), hex(f[2]), hex(f[7])) else {
            continue;
        };
        if peer & mask == dest && best.is_none_or(|(m, _)| mask.count_ones() > m.count_ones()) {
            best = Some((mask, gw));
        }
    }
    best.and_then(|(_, gw)| (gw != 0).then(|| IpAddr::V4(Ipv4Addr::from(gw))))
}

/// The same in a /proc/net/ipv6_route table.
pub fn from_route_v6(table: &str, peer: Ipv6Addr, interface: &str) -> Option<IpAddr> {
    let peer = u128::from(peer);
    let mut best: Option<(u32, u128)> = None;
    for line in table.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || (!interface.is_empty() && f[9] != interface) {
            continue;
        }
        let (Ok(dest), Ok(len), Ok(gw)) = (
            u128::from_str_radix(f[0], 16),
            u32::from_str_radix(f[1], 16),
            u128::from_str_radix(f[4], 16),
        ) else {
            continue;
        };
        let mask = if len == 0 {
            0
        } else {
            u128::MAX << (128 - len.min(128))
        };
        if peer & mask == dest && best.is_none_or(|(l, _)| len > l) {
            best = Some((len, gw));
        }
    }
    best.and_then(|(_, gw)| (gw != 0).then(|| IpAddr::V6(Ipv6Addr::from(gw))))
}

/// The inode of a namespace link (/proc/PID/ns/net).
fn ns_inode(link: &str) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(link).ok().map(|m| m.ino() as u32)
}

/// The gateway of `path` as its namespace routes it now, best effort
/// (once an episode opens). Another process's namespace link and route
/// table take CAP_SYS_PTRACE where it holds more capabilities than bloatd
/// kept (caps.rs): read on a short-lived thread with the kept ones raised.
pub fn lookup(path: &EpisodePath, pid: Option<u32>) -> Option<IpAddr> {
    crate::probes::netns::on_own_thread(|| lookup_here(path, pid)).flatten()
}

fn lookup_here(path: &EpisodePath, pid: Option<u32>) -> Option<IpAddr> {
    let proc_dir = match pid {
        Some(p) if ns_inode(&format!("/proc/{p}/ns/net")) == Some(path.netns) => {
            format!("/proc/{p}/net")
        }
        _ if ns_inode("/proc/self/ns/net") == Some(path.netns) => "/proc/self/net".into(),
        _ => return None,
    };
    match path.peer {
        IpAddr::V4(a) => std::fs::read_to_string(format!("{proc_dir}/route"))
            .ok()
            .and_then(|t| from_route_v4(&t, a, &path.interface)),
        IpAddr::V6(a) => std::fs::read_to_string(format!("{proc_dir}/ipv6_route"))
            .ok()
            .and_then(|t| from_route_v6(&t, a, &path.interface)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lab's sender (`ip -n bllab-snd route`): 10.9.1.0/24 on eth0, a
    /// default via 10.9.1.2; a more specific route via 10.9.1.3.
    const V4: &str =
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t0201090A\t0003\t0\t0\t0\t00000000\t0\t0\t0
eth0\t0001090A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
eth0\t0003090A\t0301090A\t0003\t0\t0\t0\t00FFFFFF\t0\t0\t0
";

    #[test]
    fn the_longest_prefix_gives_the_gateway() {
        let gw = |a: &str, i: &str| from_route_v4(V4, a.parse().unwrap(), i);
        assert_eq!(gw("10.9.2.2", "eth0"), Some("10.9.1.2".parse().unwrap()));
        assert_eq!(gw("10.9.3.7", ""), Some("10.9.1.3".parse().unwrap()));
        assert_eq!(gw("10.9.1.9", "eth0"), None, "directly connected");
        assert_eq!(gw("10.9.2.2", "wlan0"), None, "no route out of wlan0");
    }

    #[test]
    fn ipv6_routes_too() {
        let t = "fd090001000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0
00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd090001000000000000000000000002 00000400 00000001 00000000 00000003     eth0
";
        let gw = |a: &str| from_route_v6(t, a.parse().unwrap(), "eth0");
        assert_eq!(gw("fd09:2::2"), Some("fd09:1::2".parse().unwrap()));
        assert_eq!(gw("fd09:1::7"), None);
    }
}
