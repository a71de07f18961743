//! The queueing delay and RTT histograms of /metrics by service: the
//! totals of [`super::labels`], one row per (cc, role, service), the
//! service label bounded to the top N and "other" (metrics.rs writes them).
//! Summed over `service` they are the histograms by congestion control and
//! role as before.

use super::labels::ServiceLabels;
use crate::probes::abi::BloatdSvcStats;

/// One exported histogram pair: its labels and counts.
#[derive(Clone, Debug)]
pub struct ServiceHist {
    pub service: String,
    pub cc: String,
    /// 0 sender, 1 receiver (as the kernel's statistics).
    pub role: usize,
    pub stats: BloatdSvcStats,
}

/// The totals to export, with each congestion control index named
/// (`cc_name`); indexes that carry one name are summed.
pub fn service_hists(labels: &ServiceLabels, cc_name: &dyn Fn(u32) -> String) -> Vec<ServiceHist> {
    let mut out: Vec<ServiceHist> = Vec::new();
    for (service, cc, role, stats) in labels.totals() {
        let cc = cc_name(cc);
        let role = (role as usize).min(1);
        match out
            .iter_mut()
            .find(|h| h.service == service && h.cc == cc && h.role == role)
        {
            Some(h) => {
                for (a, b) in h.stats.delay.iter_mut().zip(stats.delay.iter()) {
                    for (x, y) in a.iter_mut().zip(b.iter()) {
                        *x += y;
                    }
                }
                for (x, y) in h.stats.delay_sum_us.iter_mut().zip(stats.delay_sum_us) {
                    *x += y;
                }
            }
            None => out.push(ServiceHist {
                service: service.to_string(),
                cc,
                role,
                stats: *stats,
            }),
        }
    }
    out.sort_by(|a, b| (&a.cc, a.role, &a.service).cmp(&(&b.cc, b.role, &b.service)));
    out
}
