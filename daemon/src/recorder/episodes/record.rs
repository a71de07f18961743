//! What the detector writes: an episode's summary, its points and its
//! flows' (each read while it is open, whole when it closes), and each
//! active path's row a minute.

use super::*;

impl Detector {
    /// At a read in a new minute: the rows of the minute before.
    pub(super) fn end_minute(&mut self, t_ms: u64, out: &mut Vec<Write>) {
        let minute = t_ms / 60_000;
        let was = self.minute.replace(minute);
        let Some(was) = was.filter(|&w| w != minute) else {
            return;
        };
        let rows: Vec<MinuteRow> = std::mem::take(&mut self.minutes)
            .into_iter()
            .map(|((netns, peer, prefix_len, interface), mut acc)| {
                acc.queues.sort_unstable();
                MinuteRow {
                    t_ms: was * 60_000,
                    netns,
                    peer,
                    prefix_len,
                    interface,
                    queue_p50_us: crate::service::view::percentile(&acc.queues, 50),
                    queue_p90_us: crate::service::view::percentile(&acc.queues, 90),
                    queue_max_us: acc.queue_max_us,
                    rate_bps: rate_bps(acc.bytes, 60_000),
                    sockets: acc.sockets,
                    paths: None,
                }
            })
            .collect();
        if !rows.is_empty() {
            out.push(Write::Minutes(rows));
        }
    }
}

impl Followed {
    /// The flows kept: the TOP_FLOWS largest by bytes, largest first, with
    /// their median queue.
    pub(super) fn top_flows(&self) -> Vec<FlowTrack> {
        let mut v: Vec<FlowTrack> = self.flows.clone();
        v.sort_by(|a, b| b.flow.bytes.cmp(&a.flow.bytes).then(a.idx.cmp(&b.idx)));
        v.truncate(TOP_FLOWS);
        for t in v.iter_mut() {
            let mut q = t.queues.clone();
            q.sort_unstable();
            t.flow.queue_p50_us = crate::service::view::percentile(&q, 50);
        }
        v
    }

    pub(super) fn summary(&self, threshold_us: u32) -> Episode {
        let mut q: Vec<u32> = self.points.iter().map(|p| p.queue_us).collect();
        q.sort_unstable();
        let end_ms = match self.below_since {
            Some(_) => self.over_ms.max(self.start_ms),
            None => self.last_ms,
        };
        let span_ms = end_ms.saturating_sub(self.start_ms);
        let mut actions = EpisodeActions {
            drwa: self.policy_start.as_ref().map(|p| p.drwa.clone()),
            drwa_at_end: self.policy_last.as_ref().map(|p| p.drwa.clone()),
            ..Default::default()
        };
        if let (Some(a), Some(b)) = (&self.policy_start, &self.policy_last) {
            actions.bulk_switched = b
                .counts
                .bulk_switched_total
                .saturating_sub(a.counts.bulk_switched_total);
            actions.drwa_rounds = b
                .counts
                .drwa_rounds_total
                .saturating_sub(a.counts.drwa_rounds_total);
            actions.drwa_held = b
                .counts
                .drwa_held_total
                .saturating_sub(a.counts.drwa_held_total);
        }
        let mut rules = BTreeSet::new();
        for t in &self.flows {
            if !t.flow.policy.is_empty() {
                actions.flows_acted_on += 1;
            }
            if t.flow.policy.contains('D') {
                actions.flows_clamped += 1;
            }
            rules.extend(t.flow.rules.iter().cloned());
        }
        actions.rules = rules.into_iter().collect();
        Episode {
            id: self.id.unwrap_or(0),
            kind: self.kind,
            path: self.path.clone(),
            service: self.service.clone(),
            start_ms: self.start_ms,
            end_ms,
            open: true,
            cut: None,
            threshold_us,
            floor_us: self.floor.map_or(0, |f| f.0),
            floor_source: self.floor.and_then(|f| f.1),
            queue_peak_us: self.peak_us,
            queue_p50_us: crate::service::view::percentile(&q, 50),
            queue_p90_us: crate::service::view::percentile(&q, 90),
            throughput_bps: rate_bps(self.bytes, span_ms),
            bytes: self.bytes,
            sockets_max: self.sockets_max,
            flows: self.seen.len() as u32,
            services: self.services.iter().cloned().collect(),
            processes: self.processes.iter().cloned().collect(),
            ccs: self.ccs.iter().cloned().collect(),
            actions,
            bottleneck: self.bottleneck,
            owner: self.owner,
        }
    }

    /// The journal's writes for a confirmed episode: its summary and flows,
    /// its points not written yet; closing, the final summary and a prune
    /// of the flows not kept.
    pub(super) fn writes(&mut self, threshold_us: u32, closing: bool) -> Vec<Write> {
        let id = self.id.expect("a confirmed episode");
        let top = self.top_flows();
        let mut out = Vec::new();
        let mut named: Vec<u32> = top.iter().map(|t| t.idx).collect();
        named.sort_unstable();
        let due = match &self.summary_written {
            None => true,
            Some((at, was)) => {
                closing || *was != named || self.last_ms.saturating_sub(*at) >= SUMMARY_EVERY_MS
            }
        };
        if due {
            let mut episode = self.summary(threshold_us);
            episode.open = !closing;
            out.push(Write::Episode(Box::new(EpisodeRecord {
                episode,
                flows: top.iter().map(|t| (t.idx, t.flow.clone())).collect(),
            })));
            self.summary_written = Some((self.last_ms, named));
        }
        // The path's points up to the episode's end (a closing episode's
        // points after its first read below are not its own).
        let end = if closing {
            self.below_since.unwrap_or(u64::MAX)
        } else {
            u64::MAX
        };
        let new: Vec<Point> = self
            .points
            .iter()
            .filter(|p| p.t_ms > self.written_until_ms && p.t_ms <= end)
            .map(Point::of_path)
            .collect();
        if let Some(last) = new.last() {
            self.written_until_ms = last.t_ms;
            out.push(Write::Points {
                episode: id,
                flow: 0,
                points: new,
            });
        }
        for t in &top {
            let new: Vec<Point> = t
                .points
                .iter()
                .filter(|p| p.t_ms > t.written_until_ms && p.t_ms <= end)
                .map(Point::of_flow)
                .collect();
            if let Some(last) = new.last() {
                if let Some(mine) = self.flows.iter_mut().find(|x| x.idx == t.idx) {
                    mine.written_until_ms = last.t_ms;
                }
                out.push(Write::Points {
                    episode: id,
                    flow: t.idx,
                    points: new,
                });
            }
        }
        if closing {
            out.push(Write::Prune {
                episode: id,
                keep: top.iter().map(|t| t.idx).collect(),
            });
        }
        out
    }
}
