//! The services view: sockets grouped by the service they serve, with how
//! long its users wait for a round trip and where: in the network's queue
//! (queueing delay above the path's floor), or in the service's own send
//! buffers (bytes written and not sent yet, at the socket's delivery rate),
//! which no RTT shows and TCP_NOTSENT_LOWAT bounds. `bloatd services`,
//! `/v1/services` and the dashboard's services view show it.

use bloatd_model::{ServiceView, Socket};
use std::collections::BTreeMap;

/// The responsiveness draft's trimmed mean: the samples above this
/// percentile are left out (TMP, 95%).
const TRIM_PERCENTILE: usize = 95;

/// Nearest-rank percentile `p` of sorted `v` (0 when empty).
pub fn percentile(v: &[u32], p: usize) -> u32 {
    if v.is_empty() {
        return 0;
    }
    v[(v.len() * p).div_ceil(100).max(1) - 1]
}

/// The single-sided trimmed mean of draft-ietf-ippm-responsiveness: the
/// mean of sorted `v` without the values above its 95th percentile.
pub fn trimmed_mean(v: &[u32]) -> u32 {
    let keep = (v.len() * TRIM_PERCENTILE).div_ceil(100);
    if keep == 0 {
        return 0;
    }
    (v[..keep].iter().map(|&x| x as u64).sum::<u64>() / keep as u64) as u32
}

/// The round trip a user of the socket waits for new data: the RTT from
/// the socket's side, plus the time the data already waiting in its send
/// buffer takes to leave.
fn wait_us(s: &Socket) -> u32 {
    s.view_rtt_us().saturating_add(s.unsent_delay_us)
}

/// Group sockets into services, longest wait first (services with no
/// measured socket last).
pub fn services_of(socks: &[Socket]) -> Vec<ServiceView> {
    let mut out: Vec<ServiceView> = groups(socks)
        .into_iter()
        .map(|(name, members)| service_of(name, &members))
        .collect();
    out.sort_by(|a, b| {
        b.wait_us
            .cmp(&a.wait_us)
            .then(b.queue_delay_p50_us.cmp(&a.queue_delay_p50_us))
            .then(a.service.cmp(&b.service))
    });
    out
}

/// The sockets of each service.
pub fn groups(socks: &[Socket]) -> BTreeMap<&str, Vec<&Socket>> {
    let mut groups: BTreeMap<&str, Vec<&Socket>> = BTreeMap::new();
    for s in socks {
        groups.entry(s.service.as_str()).or_default().push(s);
    }
    groups
}

/// One service of `groups`.
pub fn service_of(name: &str, members: &[&Socket]) -> ServiceView {
    let measured: Vec<&Socket> = members
        .iter()
        .copied()
        .filter(|s| s.view_rtt_us() > 0 && s.floor_us > 0)
        .collect();
    let active: Vec<&Socket> = measured.iter().copied().filter(|s| s.is_active()).collect();
    let now = if active.is_empty() {
        &measured
    } else {
        &active
    };
    let sorted = |f: &dyn Fn(&Socket) -> u32| {
        let mut v: Vec<u32> = now.iter().map(|s| f(s)).collect();
        v.sort_unstable();
        v
    };
    let queue = sorted(&|s| s.view_queue_delay_us());
    // The backlog of the sockets that hold one, beside the bytes they
    // hold: among a service's quiet sockets the p50 of all would be 0 ms
    // next to megabytes unsent.
    let mut unsent: Vec<u32> = members
        .iter()
        .filter(|s| s.unsent_bytes > 0)
        .map(|s| s.unsent_delay_us)
        .collect();
    unsent.sort_unstable();
    let wait = sorted(&wait_us);
    let mut ccs: Vec<String> = members.iter().map(|s| s.cc.clone()).collect();
    ccs.sort();
    ccs.dedup();
    let mut processes: Vec<String> = members.iter().filter_map(|s| s.comm.clone()).collect();
    processes.sort();
    processes.dedup();
    ServiceView {
        service: name.to_string(),
        sockets: members.len() as u32,
        active: active.len() as u32,
        measured: measured.len() as u32,
        queue_delay_p50_us: percentile(&queue, 50),
        queue_delay_p90_us: percentile(&queue, 90),
        queue_delay_max_us: queue.last().copied().unwrap_or(0),
        unsent_bytes: members.iter().map(|s| s.unsent_bytes as u64).sum(),
        unsent_delay_p50_us: percentile(&unsent, 50),
        unsent_delay_max_us: unsent.last().copied().unwrap_or(0),
        wait_us: trimmed_mean(&wait),
        throughput_bps: throughput_bps(members),
        ccs,
        processes,
    }
}

/// The service's sockets' goodput, each flow once: where both ends of a
/// connection are the service's (a download between two of its
/// namespaces), the receiving end's rate is the sending end's again.
fn throughput_bps(members: &[&Socket]) -> u64 {
    once_per_flow(members).map(|s| s.throughput_bps).sum()
}

/// `members`, each flow once: the receiving end of a connection whose
/// sending end is among them is left out (its bytes are the sender's).
pub fn once_per_flow<'a, 'b>(
    members: &'b [&'a Socket],
) -> impl Iterator<Item = &'a Socket> + use<'a, 'b> {
    let ends: std::collections::HashSet<_> = members
        .iter()
        .map(|s| (s.local_endpoint(), s.remote_endpoint()))
        .collect();
    members.iter().copied().filter(move |s| {
        s.role != bloatd_model::Role::Receiver
            || !ends.contains(&(s.remote_endpoint(), s.local_endpoint()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bloatd_model::fixtures;

    /// A sender of `service` with a floor, a queue and an unsent backlog.
    fn sock(cookie: u64, service: &str, queue_ms: u32, unsent_ms: u32) -> Socket {
        let mut s = fixtures::sending(fixtures::socket(cookie), 40_000, queue_ms * 1000);
        s.service = service.into();
        s.unsent_delay_us = unsent_ms * 1000;
        s.unsent_bytes = unsent_ms * 1250; // 10 Mbit/s
        s.throughput_bps = 1_000_000;
        s
    }

    #[test]
    fn the_trimmed_mean_leaves_out_what_is_above_the_95th_percentile() {
        let mut v: Vec<u32> = (1..=100).collect();
        v.sort_unstable();
        // 1..95 kept: mean 48.
        assert_eq!(trimmed_mean(&v), 48);
        assert_eq!(trimmed_mean(&[7]), 7);
        assert_eq!(trimmed_mean(&[]), 0);
        // 20 samples: the top one goes.
        let mut v: Vec<u32> = vec![100; 19];
        v.push(10_000);
        assert_eq!(trimmed_mean(&v), 100);
    }

    #[test]
    fn the_backlog_is_that_of_the_sockets_holding_one() {
        // One bulk sender 1.4 MB behind, three quiet sockets (seen in
        // `make demo`: BACKLOG 0.0 ms beside UNSENT 1.4 MB).
        let mut socks = vec![sock(1, "web.service", 400, 1120)];
        socks.extend((2..5).map(|c| sock(c, "web.service", 400, 0)));
        let v = services_of(&socks);
        assert_eq!(v[0].unsent_bytes, 1_400_000);
        assert_eq!(v[0].unsent_delay_p50_us, 1_120_000);
    }

    #[test]
    fn a_flow_with_both_ends_in_the_service_counts_once() {
        let snd = sock(1, "/", 400, 0);
        let mut rcv = sock(2, "/", 400, 0);
        rcv.role = bloatd_model::Role::Receiver;
        (rcv.local_addr, rcv.local_port) = (snd.remote_addr, snd.remote_port);
        (rcv.remote_addr, rcv.remote_port) = (snd.local_addr, snd.local_port);
        let mut other = sock(3, "/", 400, 0);
        other.role = bloatd_model::Role::Receiver;
        other.remote_port = 9;
        let v = services_of(&[snd, rcv, other]);
        // 1 Mbit/s each: the flow once, and the receiver of another flow.
        assert_eq!(v[0].throughput_bps, 2_000_000);
    }

    #[test]
    fn two_services_separate_the_network_queue_from_the_backlog() {
        let socks = vec![
            sock(1, "bulk.service", 400, 2000),
            sock(2, "bulk.service", 420, 1800),
            sock(3, "web.service", 400, 0),
            sock(4, "web.service", 380, 0),
            sock(5, "web.service", 410, 0),
        ];
        let v = services_of(&socks);
        assert_eq!(v.len(), 2);
        let (bulk, web) = (&v[0], &v[1]);
        assert_eq!((bulk.service.as_str(), bulk.sockets), ("bulk.service", 2));
        assert_eq!((web.service.as_str(), web.sockets), ("web.service", 3));
        // Both wait in the same network queue; bulk also in its own buffers.
        assert_eq!(
            (bulk.queue_delay_p50_us, bulk.queue_delay_max_us),
            (400_000, 420_000)
        );
        assert_eq!(
            (bulk.unsent_delay_p50_us, bulk.unsent_delay_max_us),
            (1_800_000, 2_000_000)
        );
        assert_eq!(bulk.unsent_bytes, 4_750_000);
        // Floor 40 + queue + backlog, the mean of the two.
        assert_eq!(bulk.wait_us, (2_440_000 + 2_260_000) / 2);
        assert_eq!(bulk.rpm(), Some(25));
        assert_eq!(
            (
                web.queue_delay_p50_us,
                web.queue_delay_p90_us,
                web.unsent_delay_p50_us
            ),
            (400_000, 410_000, 0)
        );
        assert_eq!((web.grade(), web.rpm()), (Some("F"), Some(137))); // 60000 / 436.7 ms
        assert_eq!(web.throughput_bps, 3_000_000);
        let line = bloatd_model::worst_service_sentence(&v).unwrap();
        assert!(
            line.starts_with("bulk.service's users wait 2350ms a round trip: 400ms network queue, 1800ms own send buffers"),
            "{line}"
        );
    }

    #[test]
    fn idle_sockets_do_not_speak_for_the_wait_now() {
        let mut idle = sock(1, "a.service", 900, 0);
        idle.idle_ms = 30_000;
        let v = services_of(&[idle, sock(2, "a.service", 100, 0)]);
        assert_eq!((v[0].active, v[0].queue_delay_p50_us), (1, 100_000));
        assert_eq!(v[0].sockets, 2);
    }

    /// A service none of whose sockets has an RTT sample yet (a listener,
    /// a connection still in its handshake) is no A+ at 0 RPM: nothing to
    /// grade, shown as "-".
    #[test]
    fn no_grade_without_an_rtt() {
        let mut s = sock(1, "new.service", 0, 0);
        s.srtt_us = 0;
        s.floor_us = 0;
        let v = services_of(&[s]);
        assert_eq!((v[0].measured, v[0].grade(), v[0].rpm()), (0, None, None));
        assert!(v[0].measured_text().iter().all(|c| c == "-"));
        assert_eq!(bloatd_model::worst_service_sentence(&v), None);
    }
}
