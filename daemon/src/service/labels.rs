//! The `service` label of /metrics, bounded: the top N services by
//! socket-time get a label value of their own, every other one is summed
//! under "other", so no scrape ever carries more than N + 1 values however
//! many cgroups a host runs (a Kubernetes node makes and removes them all
//! day).
//!
//! The kernel counts each sample's queueing delay and RTT per (cgroup,
//! congestion control, role) in `svc_stats` (bpf/service_ops.h), cumulative.
//! Here every read of it is folded into the daemon's own cumulative
//! histograms per (label, cc, role): each entry's increase since the last
//! read goes to its service's label if the service holds one now, else to
//! "other". Counters therefore only ever grow, whatever moves in or out of
//! the top N: a service that enters starts a new series, one that leaves
//! stops its series and counts as "other" from then on.
//!
//! Socket-time is what the histograms count (one observation per active
//! socket per sampling interval), decayed with a half-life of
//! [`HALF_LIFE`], so the labels follow the services busy lately. A service
//! takes the label of a weaker one only when its socket-time is
//! [`HYSTERESIS`] times larger: two services of similar size do not swap
//! series at every scrape.
//!
//! Entries the kernel keeps for cgroups that stopped counting are deleted
//! (after [`IDLE`], sooner when the map fills), their counts already
//! folded: the kernel's bound holds the services active now.

use crate::probes::abi::{BloatdSvcKey, BloatdSvcStats};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// The label value of everything outside the top N.
pub const OTHER: &str = "other";
/// How fast old socket-time stops counting toward the ranking.
pub const HALF_LIFE: Duration = Duration::from_secs(600);
/// How much more socket-time a service needs to take a label from one
/// that holds it.
pub const HYSTERESIS: f64 = 1.5;
/// An entry whose counts did not move for this long is deleted from the
/// kernel's map.
pub const IDLE: Duration = Duration::from_secs(60);
/// Above this share of the kernel's bound, entries idle for one read go.
const FULL_SHARE: f64 = 0.75;

/// (cgroup id, congestion control index, role) of a kernel entry.
type Key = (u64, u32, u32);
/// (label, congestion control index, role) of an exported histogram.
type LabelKey = (String, u32, u32);

fn key_of(k: &BloatdSvcKey) -> Key {
    (k.cgroup_id, k.cc_idx, k.role)
}

/// Observations in a histogram pair (the queueing delay histogram's).
pub fn observations(s: &BloatdSvcStats) -> u64 {
    s.delay[0].iter().sum()
}

/// `now - last`, field by field; a field below its last value means the
/// kernel made the entry anew (it was deleted): then all of `now` is new.
fn delta(now: &BloatdSvcStats, last: &BloatdSvcStats) -> BloatdSvcStats {
    let fields = |s: &BloatdSvcStats| -> Vec<u64> {
        s.delay
            .iter()
            .flatten()
            .chain(s.delay_sum_us.iter())
            .copied()
            .collect()
    };
    let (n, l) = (fields(now), fields(last));
    if n.iter().zip(&l).any(|(a, b)| a < b) {
        return *now;
    }
    let mut d = BloatdSvcStats::default();
    add(&mut d, now);
    sub(&mut d, last);
    d
}

fn add(sum: &mut BloatdSvcStats, x: &BloatdSvcStats) {
    for (h, xh) in sum.delay.iter_mut().zip(x.delay.iter()) {
        for (b, xb) in h.iter_mut().zip(xh.iter()) {
            *b = b.wrapping_add(*xb);
        }
    }
    for (s, xs) in sum.delay_sum_us.iter_mut().zip(x.delay_sum_us.iter()) {
        *s = s.wrapping_add(*xs);
    }
}

fn sub(sum: &mut BloatdSvcStats, x: &BloatdSvcStats) {
    for (h, xh) in sum.delay.iter_mut().zip(x.delay.iter()) {
        for (b, xb) in h.iter_mut().zip(xh.iter()) {
            *b = b.wrapping_sub(*xb);
        }
    }
    for (s, xs) in sum.delay_sum_us.iter_mut().zip(x.delay_sum_us.iter()) {
        *s = s.wrapping_sub(*xs);
    }
}

/// What a kernel entry looked like at the last read.
struct Seen {
    stats: BloatdSvcStats,
    /// When its counts last moved.
    moved: Instant,
}

pub struct ServiceLabels {
    /// How many services get a label of their own.
    n: usize,
    seen: HashMap<Key, Seen>,
    /// The exported histograms, cumulative since start.
    totals: HashMap<LabelKey, BloatdSvcStats>,
    /// Decayed socket-time (observations) per service.
    score: HashMap<String, f64>,
    labelled: HashSet<String>,
    last_fold: Option<Instant>,
}

impl ServiceLabels {
    pub fn new(n: usize) -> ServiceLabels {
        ServiceLabels {
            n: n.max(1),
            seen: HashMap::new(),
            totals: HashMap::new(),
            score: HashMap::new(),
            labelled: HashSet::new(),
            last_fold: None,
        }
    }

    /// Fold a read of the kernel's entries (`capacity`: its bound), each
    /// cgroup named by `name` (cgroup 0 is the kernel's overflow, always
    /// "other"). Returns the entries the kernel may delete: idle, their
    /// counts folded.
    pub fn fold(
        &mut self,
        entries: &[(BloatdSvcKey, BloatdSvcStats)],
        name: &dyn Fn(u64) -> String,
        now: Instant,
        capacity: usize,
    ) -> Vec<BloatdSvcKey> {
        // What each service counted since the last read.
        let mut new: Vec<(String, u32, u32, BloatdSvcStats)> = Vec::new();
        let mut idle = Vec::new();
        let idle_after = if entries.len() as f64 > FULL_SHARE * capacity as f64 {
            Duration::ZERO
        } else {
            IDLE
        };
        for (k, v) in entries {
            let key = key_of(k);
            let d = match self.seen.get(&key) {
                Some(s) => delta(v, &s.stats),
                None => *v,
            };
            let moved = observations(&d) > 0 || d.delay_sum_us.iter().any(|&x| x > 0);
            let seen = self.seen.entry(key).or_insert(Seen {
                stats: *v,
                moved: now,
            });
            seen.stats = *v;
            if moved {
                seen.moved = now;
            } else if k.cgroup_id != 0 && now.duration_since(seen.moved) >= idle_after {
                idle.push(*k);
            }
            if moved {
                let service = if k.cgroup_id == 0 {
                    OTHER.to_string()
                } else {
                    name(k.cgroup_id)
                };
                new.push((service, k.cc_idx, k.role, d));
            }
        }
        self.rank(&new, now);
        for (service, cc, role, d) in new {
            let label = if self.labelled.contains(&service) {
                service
            } else {
                OTHER.to_string()
            };
            add(self.totals.entry((label, cc, role)).or_default(), &d);
        }
        idle
    }

    /// The kernel deleted these entries: a key that comes back starts anew.
    pub fn forget(&mut self, keys: &[BloatdSvcKey]) {
        for k in keys {
            self.seen.remove(&key_of(k));
        }
    }

    /// Decay the socket-time, add what `new` counted, and choose the
    /// services that hold a label now.
    fn rank(&mut self, new: &[(String, u32, u32, BloatdSvcStats)], now: Instant) {
        let decay = match self.last_fold {
            Some(t) => 0.5f64.powf(now.duration_since(t).as_secs_f64() / HALF_LIFE.as_secs_f64()),
            None => 1.0,
        };
        self.last_fold = Some(now);
        for s in self.score.values_mut() {
            *s *= decay;
        }
        for (service, _, _, d) in new {
            if service != OTHER {
                *self.score.entry(service.clone()).or_default() += observations(d) as f64;
            }
        }
        // Forget services whose socket-time faded (an observation an hour
        // ago weighs 1/64), unless they hold a label.
        let labelled = &self.labelled;
        self.score.retain(|s, v| *v >= 0.01 || labelled.contains(s));
        let mut ranked: Vec<(&String, f64)> = self.score.iter().map(|(s, v)| (s, *v)).collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
        let mut holders: Vec<(String, f64)> = ranked
            .iter()
            .filter(|(s, _)| self.labelled.contains(*s))
            .map(|(s, v)| (s.to_string(), *v))
            .collect();
        for (s, v) in ranked {
            if holders.iter().any(|(h, _)| h == s) {
                continue;
            }
            if holders.len() < self.n {
                holders.push((s.clone(), v));
                continue;
            }
            let (weakest, w) = holders
                .iter()
                .enumerate()
                .min_by(|a, b| a.1 .1.total_cmp(&b.1 .1))
                .map(|(i, h)| (i, h.1))
                .unwrap_or((0, f64::INFINITY));
            if v > HYSTERESIS * w {
                holders[weakest] = (s.clone(), v);
            } else {
                break; // ranked: the rest are weaker still
            }
        }
        self.labelled = holders.into_iter().map(|(s, _)| s).collect();
        // A service that lost its label stops its series.
        let labelled = &self.labelled;
        self.totals
            .retain(|(label, _, _), _| label == OTHER || labelled.contains(label));
    }

    /// Every exported histogram: (label, congestion control index, role
    /// index, histograms), cumulative since start.
    pub fn totals(&self) -> impl Iterator<Item = (&str, u32, u32, &BloatdSvcStats)> {
        self.totals
            .iter()
            .map(|((label, cc, role), s)| (label.as_str(), *cc, *role, s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry of cgroup `id` (cc 0, role 0) with `n` observations at the
    /// first bucket of both histograms.
    fn entry(id: u64, n: u64) -> (BloatdSvcKey, BloatdSvcStats) {
        let mut s = BloatdSvcStats::default();
        s.delay[0][0] = n;
        s.delay[1][0] = n;
        s.delay_sum_us = [n * 10, n * 20];
        (
            BloatdSvcKey {
                cgroup_id: id,
                cc_idx: 0,
                role: 0,
            },
            s,
        )
    }

    fn name(id: u64) -> String {
        format!("svc{id}")
    }

    fn labels(l: &ServiceLabels) -> HashSet<String> {
        l.totals().map(|(s, _, _, _)| s.to_string()).collect()
    }

    fn count(l: &ServiceLabels) -> u64 {
        l.totals().map(|(_, _, _, s)| observations(s)).sum()
    }

    fn by_label(l: &ServiceLabels) -> HashMap<String, u64> {
        l.totals()
            .map(|(s, _, _, x)| (s.to_string(), observations(x)))
            .collect()
    }

    /// What a scraper sees increase between two scrapes: each series'
    /// growth, a new series in full (a series that stopped is gone).
    fn increase(before: &HashMap<String, u64>, after: &HashMap<String, u64>) -> u64 {
        after
            .iter()
            .map(|(s, v)| v - before.get(s).copied().unwrap_or(0))
            .sum()
    }

    #[test]
    fn a_thousand_cgroups_make_at_most_n_plus_one_values_and_lose_no_count() {
        let mut l = ServiceLabels::new(20);
        let t0 = Instant::now();
        // Cgroup 7 is busy; 1000 others have one socket each.
        let mut entries: Vec<_> = (100..1100).map(|id| entry(id, 10)).collect();
        entries.push(entry(7, 5000));
        l.fold(&entries, &name, t0, 8192);
        let values = labels(&l);
        assert_eq!(values.len(), 21, "{values:?}");
        assert!(values.contains("svc7") && values.contains(OTHER));
        assert_eq!(count(&l), 5000 + 1000 * 10, "every observation counted");
        // More reads while other cgroups get busy and take labels: the
        // values stay bounded, no series ever decreases, and what the
        // series grow by is every observation the kernel made.
        let mut swaps = 0;
        for round in 1..=5u64 {
            let mut added = 0;
            for e in entries.iter_mut() {
                let n = if e.0.cgroup_id % 7 == round { 1000 } else { 3 };
                e.1.delay[0][0] += n;
                e.1.delay[1][0] += n;
                added += n;
            }
            let before = by_label(&l);
            l.fold(&entries, &name, t0 + Duration::from_secs(round * 15), 8192);
            let after = by_label(&l);
            assert!(after.len() <= 21, "round {round}: {}", after.len());
            for (s, v) in &after {
                assert!(*v >= before.get(s).copied().unwrap_or(0), "{s} decreased");
            }
            assert_eq!(increase(&before, &after), added, "round {round}");
            swaps += before.keys().filter(|s| !after.contains_key(*s)).count();
        }
        assert!(swaps > 0, "busier cgroups took labels");
    }

    #[test]
    fn labels_follow_socket_time_with_hysteresis() {
        let mut l = ServiceLabels::new(1);
        let t0 = Instant::now();
        let mut a = entry(1, 100);
        let mut b = entry(2, 90);
        l.fold(&[a, b], &name, t0, 8192);
        assert_eq!(labels(&l), HashSet::from(["svc1".into(), OTHER.into()]));
        // b a little busier than a: not enough to take the label.
        a.1.delay[0][0] += 100;
        b.1.delay[0][0] += 150;
        l.fold(&[a, b], &name, t0 + Duration::from_secs(15), 8192);
        assert!(labels(&l).contains("svc1"));
        // b much busier: it takes the label, a's series stops.
        b.1.delay[0][0] += 1000;
        l.fold(&[a, b], &name, t0 + Duration::from_secs(30), 8192);
        assert_eq!(labels(&l), HashSet::from(["svc2".into(), OTHER.into()]));
    }

    #[test]
    fn idle_entries_go_and_a_new_one_counts_from_zero() {
        let mut l = ServiceLabels::new(5);
        let t0 = Instant::now();
        let (k, mut v) = entry(3, 10);
        assert!(l.fold(&[(k, v)], &name, t0, 8192).is_empty());
        assert!(l.fold(&[(k, v)], &name, t0 + IDLE / 2, 8192).is_empty());
        let idle = l.fold(&[(k, v)], &name, t0 + IDLE, 8192);
        assert_eq!(idle, vec![k]);
        l.forget(&idle);
        // Made anew by the kernel (deleted, then a sample came): 2 new.
        v.delay[0][0] = 2;
        v.delay[1][0] = 2;
        l.fold(&[(k, v)], &name, t0 + IDLE * 2, 8192);
        assert_eq!(count(&l), 12);
        // A map above 75% of its bound lets idle entries go at once.
        let full: Vec<_> = (10..20).map(|id| entry(id, 1)).collect();
        l.fold(&full, &name, t0 + IDLE * 3, 12);
        assert_eq!(l.fold(&full, &name, t0 + IDLE * 3, 12).len(), 10);
    }

    #[test]
    fn the_kernels_overflow_counts_as_other() {
        let mut l = ServiceLabels::new(5);
        l.fold(&[entry(0, 42)], &name, Instant::now(), 8192);
        assert_eq!(labels(&l), HashSet::from([OTHER.into()]));
        assert_eq!(count(&l), 42);
    }
}
