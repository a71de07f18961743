//! Sort orders of the socket table.

use crate::Socket;
use std::cmp::Ordering;

/// Columns the table can be sorted by; `s` cycles through them in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    /// Queueing delay from the socket's side, largest first (the default:
    /// the worst queue is what the user came to see).
    QueueDelay,
    /// RTT from the socket's side, largest first.
    Rtt,
    /// Throughput, largest first.
    Throughput,
    /// Congestion window, largest first.
    Cwnd,
    /// Retransmitted segments, most first.
    Retrans,
    /// Process name, A to Z.
    Process,
}

impl SortKey {
    pub const ALL: [SortKey; 6] = [
        SortKey::QueueDelay,
        SortKey::Rtt,
        SortKey::Throughput,
        SortKey::Cwnd,
        SortKey::Retrans,
        SortKey::Process,
    ];

    pub fn next(self) -> SortKey {
        let i = Self::ALL.iter().position(|k| *k == self).unwrap_or(0);
        Self::ALL[(i + 1) % Self::ALL.len()]
    }

    pub fn label(self) -> &'static str {
        match self {
            SortKey::QueueDelay => "qdelay",
            SortKey::Rtt => "rtt",
            SortKey::Throughput => "throughput",
            SortKey::Cwnd => "cwnd",
            SortKey::Retrans => "retrans",
            SortKey::Process => "process",
        }
    }

    /// The key a label names (`qdelay`, `rtt`, ...: the API's `sort`).
    pub fn from_label(label: &str) -> Option<SortKey> {
        Self::ALL.into_iter().find(|k| k.label() == label)
    }

    /// Whether the key sorts largest first.
    pub fn descending(self) -> bool {
        self != SortKey::Process
    }

    /// Total order on sockets: the key, then the queueing delay, then the
    /// cookie, so that equal rows never swap places between frames.
    pub fn compare(self, a: &Socket, b: &Socket) -> Ordering {
        let by_key = match self {
            SortKey::QueueDelay => b.view_queue_delay_us().cmp(&a.view_queue_delay_us()),
            SortKey::Rtt => b.view_rtt_us().cmp(&a.view_rtt_us()),
            SortKey::Throughput => b.throughput_bps.cmp(&a.throughput_bps),
            SortKey::Cwnd => b.cwnd.cmp(&a.cwnd),
            SortKey::Retrans => b.retrans.cmp(&a.retrans),
            // Sockets without a known process go last.
            SortKey::Process => match (&a.comm, &b.comm) {
                (Some(x), Some(y)) => x.cmp(y),
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (None, None) => Ordering::Equal,
            },
        };
        by_key
            .then_with(|| b.view_queue_delay_us().cmp(&a.view_queue_delay_us()))
            .then_with(|| a.cookie.cmp(&b.cookie))
    }
}
