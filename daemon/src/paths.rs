//! The bottleneck view: sockets grouped by the path they share (network
//! namespace, peer or prefix, interface), with the path's floor and the
//! queue its sockets wait in now. `bloatd paths`, `/v1/paths`, and the
//! paths table of `bloatd top` show it.

use bloatd_model::{FloorSource, NetPath, Socket};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// `addr` with only its first `bits` bits.
pub fn mask(addr: IpAddr, bits: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - bits.min(32) as u32)
            };
            IpAddr::V4((u32::from(a) & m).into())
        }
        IpAddr::V6(a) => {
            let m = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - bits.min(128) as u32)
            };
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

/// A path's key: namespace, peer (or the network address of its prefix),
/// prefix length, interface.
pub type PathKey<'a> = (u32, IpAddr, u8, &'a str);

/// Group sockets into paths: one per (namespace, peer, interface), or per
/// prefix when `prefix` gives the IPv4 and IPv6 prefix lengths. Worst
/// queue first.
pub fn paths_of(socks: &[Socket], prefix: Option<(u8, u8)>) -> Vec<NetPath> {
    let mut paths: Vec<NetPath> = groups(socks, prefix)
        .into_iter()
        .map(|(key, members)| path_of(key, &members))
        .collect();
    paths.sort_by(|a, b| {
        b.queue_delay_p50_us
            .cmp(&a.queue_delay_p50_us)
            .then(b.queue_delay_max_us.cmp(&a.queue_delay_max_us))
            .then(a.peer.cmp(&b.peer))
    });
    paths
}

/// The sockets of each path (as `paths_of` groups them).
pub fn groups(socks: &[Socket], prefix: Option<(u8, u8)>) -> BTreeMap<PathKey<'_>, Vec<&Socket>> {
    let mut groups: BTreeMap<PathKey<'_>, Vec<&Socket>> = BTreeMap::new();
    for s in socks {
        let full = if s.remote_addr.is_ipv4() { 32 } else { 128 };
        let bits = match (prefix, s.remote_addr) {
            (Some((v4, _)), IpAddr::V4(_)) => v4,
            (Some((_, v6)), IpAddr::V6(_)) => v6,
            (None, _) => full,
        };
        groups
            .entry((
                s.netns,
                mask(s.remote_addr, bits),
                bits,
                s.interface.as_str(),
            ))
            .or_default()
            .push(s);
    }
    groups
}

/// One path of `groups`: its floor, its queue now, its sockets.
pub fn path_of(key: PathKey<'_>, members: &[&Socket]) -> NetPath {
    let (netns, peer, prefix_len, interface) = key;
    // The lowest floor of its sockets (they share the peer's, unless one
    // measured below it since) and where that one came from.
    let floor = members
        .iter()
        .filter(|s| s.floor_us > 0)
        .min_by_key(|s| s.floor_us)
        .map(|s| (s.floor_us, s.floor_source.unwrap_or(FloorSource::Socket)));
    let measured: Vec<&&Socket> = members
        .iter()
        .filter(|s| s.view_rtt_us() > 0 && s.floor_us > 0)
        .collect();
    let active: Vec<&&Socket> = measured.iter().copied().filter(|s| s.is_active()).collect();
    let mut delays: Vec<u32> = if active.is_empty() {
        &measured
    } else {
        &active
    }
    .iter()
    .map(|s| s.view_queue_delay_us())
    .collect();
    delays.sort_unstable();
    let mut ccs: Vec<String> = members.iter().map(|s| s.cc.clone()).collect();
    ccs.sort();
    ccs.dedup();
    let mut services: Vec<String> = members.iter().map(|s| s.service.clone()).collect();
    services.sort();
    services.dedup();
    NetPath {
        netns,
        peer,
        prefix_len,
        interface: interface.to_string(),
        floor_us: floor.map_or(0, |f| f.0),
        floor_source: floor.map_or(FloorSource::Socket, |f| f.1),
        queue_delay_p50_us: delays
            .get(delays.len().saturating_sub(1) / 2)
            .copied()
            .unwrap_or(0),
        queue_delay_max_us: delays.last().copied().unwrap_or(0),
        sockets: members.len() as u32,
        measured: measured.len() as u32,
        throughput_bps: members.iter().map(|s| s.throughput_bps).sum(),
        ccs,
        services,
        bottleneck: None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use bloatd_model::fixtures;

    /// A sender toward `peer` with a floor and a queue, through wlan0.
    pub(crate) fn sock(
        cookie: u64,
        peer: &str,
        floor_ms: u32,
        queue_ms: u32,
        idle_ms: u64,
    ) -> Socket {
        let mut s = fixtures::sending(fixtures::socket(cookie), floor_ms * 1000, queue_ms * 1000);
        s.remote_addr = peer.parse().unwrap();
        s.cc = if cookie.is_multiple_of(2) {
            "cubic".into()
        } else {
            "bbr".into()
        };
        s.floor_source = Some(FloorSource::Peer);
        s.interface = "wlan0".into();
        s.throughput_bps = 1_000_000;
        s.idle_ms = idle_ms;
        s
    }

    #[test]
    fn sockets_toward_one_peer_make_one_path_worst_first() {
        let socks = vec![
            sock(1, "93.184.216.34", 40, 400, 0),
            sock(2, "93.184.216.34", 40, 460, 0),
            sock(3, "93.184.216.34", 40, 450, 0),
            sock(4, "1.1.1.1", 10, 2, 0),
        ];
        let paths = paths_of(&socks, None);
        assert_eq!(paths.len(), 2);
        let p = &paths[0];
        assert_eq!(
            (p.peer.to_string(), p.sockets, p.floor_us),
            ("93.184.216.34".into(), 3, 40_000)
        );
        assert_eq!(
            (p.queue_delay_p50_us, p.queue_delay_max_us),
            (450_000, 460_000)
        );
        assert_eq!(p.throughput_bps, 3_000_000);
        assert_eq!(p.ccs, vec!["bbr", "cubic"]);
        assert_eq!((p.grade(), p.rpm()), (Some("F"), Some(122))); // 60000 / 490 ms
        assert_eq!((paths[1].grade(), paths[1].rpm()), (Some("A+"), Some(5000)));
    }

    /// A path none of whose sockets has an RTT sample yet (a connection
    /// still in its handshake, a listener's peer) has no queue to grade:
    /// no A+ and no RPM of 0.
    #[test]
    fn a_path_without_rtt_has_no_grade() {
        let mut s = sock(1, "10.9.2.2", 40, 0, 0);
        s.srtt_us = 0;
        s.floor_us = 0;
        let paths = paths_of(&[s], None);
        let p = &paths[0];
        assert_eq!((p.measured, p.grade(), p.rpm()), (0, None, None));
        assert_eq!(
            p.measured_text(),
            ["-", "-", "-", "-", "-"].map(String::from)
        );
        assert_eq!(
            paths_of(&[sock(1, "10.9.2.2", 40, 3, 0)], None)[0].measured_text(),
            ["40ms", "3.0ms", "3.0ms", "A+", "1395"].map(String::from)
        );
    }

    #[test]
    fn idle_sockets_do_not_speak_for_the_queue_now() {
        let paths = paths_of(
            &[
                sock(1, "10.9.2.2", 40, 900, 30_000),
                sock(2, "10.9.2.2", 40, 100, 0),
            ],
            None,
        );
        assert_eq!(paths[0].queue_delay_p50_us, 100_000);
    }

    #[test]
    fn by_prefix_groups_neighbours() {
        let socks = vec![
            sock(1, "10.9.2.2", 40, 100, 0),
            sock(2, "10.9.2.77", 41, 120, 0),
            sock(3, "fd00::1", 5, 0, 0),
        ];
        let paths = paths_of(&socks, Some((24, 64)));
        assert_eq!(paths.len(), 2);
        assert_eq!(
            (paths[0].peer, paths[0].prefix_len),
            ("10.9.2.0".parse().unwrap(), 24)
        );
        assert_eq!((paths[0].sockets, paths[0].floor_us), (2, 40_000));
        assert_eq!(
            (paths[1].peer, paths[1].prefix_len),
            ("fd00::".parse().unwrap(), 64)
        );
    }

    #[test]
    fn grades_follow_the_tests_people_know() {
        for (ms, g) in [
            (4, "A+"),
            (5, "A"),
            (29, "A"),
            (59, "B"),
            (199, "C"),
            (399, "D"),
            (400, "F"),
        ] {
            assert_eq!(bloatd_model::grade(ms * 1000), g, "{ms} ms");
        }
    }
}
