//! Which rows a dashboard gets, and the host's summary: done by the source
//! (the daemon for the API, the process itself in embedded mode) so the
//! dashboard receives a page, not the host.

use crate::filter::Filter;
use crate::sort::SortKey;
use crate::{CcDelay, HostSummary, Role, SnapshotRequest, Socket};
use std::collections::HashMap;

/// The host's bloat over `sockets` (all of them: the filter does not apply):
/// senders by congestion control, receivers together (see [`CcDelay`]).
pub fn summarize(sockets: &[Socket], threshold_us: u32) -> HostSummary {
    let mut per_cc: HashMap<(Role, &str), Vec<u32>> = HashMap::new();
    let mut summary = HostSummary {
        sockets: sockets.len(),
        ..Default::default()
    };
    for s in sockets {
        let delay_us = s.view_queue_delay_us();
        if s.view_rtt_us() > 0 && s.view_min_rtt_us() > 0 {
            let cc = match s.role {
                Role::Sender => s.cc.as_str(),
                Role::Receiver => "",
            };
            per_cc.entry((s.role, cc)).or_default().push(delay_us);
            summary.worst_queue_delay_us = summary.worst_queue_delay_us.max(delay_us);
        }
        if s.is_bloated(threshold_us) {
            summary.bloated += 1;
        }
    }
    summary.per_cc = per_cc
        .into_iter()
        .map(|((role, cc), mut delays)| distribution(role, cc, &mut delays))
        .collect();
    summary
        .per_cc
        .sort_by(|a, b| (a.role == Role::Receiver, &a.cc).cmp(&(b.role == Role::Receiver, &b.cc)));
    summary
}

/// What a dashboard asking `req` draws, from every socket: the sockets
/// passing its filter, the first `limit` of them in its sort order (plus
/// the socket whose series it asks for, wherever it ranks), how many
/// passed, and the host's summary over all. Done once by the daemon for
/// the API and in process for embedded mode, so the client decodes and
/// draws a page, not the host; only the page is copied out of `sockets`,
/// which the daemon shares between the dashboards that ask within a read.
/// An unknown sort key or a bad filter is an error the caller returns to
/// the client.
pub fn select_rows(
    sockets: &[Socket],
    req: &SnapshotRequest,
    threshold_us: u32,
) -> crate::Result<(Vec<Socket>, usize, HostSummary)> {
    let summary = summarize(sockets, threshold_us);
    let sort = match req.sort.as_deref() {
        None => SortKey::QueueDelay,
        Some(l) => SortKey::from_label(l).ok_or_else(|| {
            let keys: Vec<&str> = SortKey::ALL.iter().map(|k| k.label()).collect();
            crate::Error::SortKey {
                key: l.to_string(),
                keys: keys.join(", "),
            }
        })?,
    };
    let filter = Filter::parse(req.filter.as_deref().unwrap_or(""))?;
    let mut rows: Vec<&Socket> = Vec::new();
    let mut pinned = None;
    for s in sockets {
        if filter.matches(s) {
            rows.push(s);
        } else if Some(s.cookie) == req.series {
            pinned = Some(s);
        }
    }
    let matched = rows.len();
    let limit = req.limit.unwrap_or(usize::MAX).max(1);
    let cmp = |a: &&Socket, b: &&Socket| sort.compare(a, b);
    if limit < rows.len() {
        rows.select_nth_unstable_by(limit - 1, cmp);
        let beyond = rows.split_off(limit);
        pinned = pinned.or_else(|| beyond.into_iter().find(|s| Some(s.cookie) == req.series));
    }
    rows.sort_unstable_by(cmp);
    rows.extend(pinned);
    Ok((rows.into_iter().cloned().collect(), matched, summary))
}

/// p50, p90 (nearest rank) and max of `delays`, which must not be empty.
/// Linear: `select_nth_unstable` instead of a sort.
fn distribution(role: Role, cc: &str, delays: &mut [u32]) -> CcDelay {
    let n = delays.len();
    let nearest_rank = |p: usize| (n * p).div_ceil(100).max(1) - 1;
    let p50_us = *delays.select_nth_unstable(nearest_rank(50)).1;
    let p90_us = *delays.select_nth_unstable(nearest_rank(90)).1;
    let max_us = *delays.select_nth_unstable(n - 1).1;
    CcDelay {
        cc: cc.to_string(),
        role,
        sockets: n,
        p50_us,
        p90_us,
        max_us,
    }
}
