//! The queueing delay and RTT histograms of /metrics by service: the
//! totals of [`super::labels`], one series per (cc, role, service), the
//! service label bounded to the top N and "other". Summed over `service`
//! they are the histograms by congestion control and role as before.

use super::labels::ServiceLabels;
use crate::probes::abi::BloatdSvcStats;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::MetricType;

/// One exported histogram pair: its labels and counts.
#[derive(Clone, Debug)]
pub struct ServiceHist {
    pub service: String,
    pub cc: String,
    /// 0 sender, 1 receiver (as the kernel's statistics).
    pub role: usize,
    pub stats: BloatdSvcStats,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CcRoleService {
    cc: String,
    role: &'static str,
    service: String,
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

/// One histogram family (`hist`: the kernel's index, queueing delay or
/// RTT) over (cc, role, service), with bucket bounds `bounds_s`; series
/// with no observation are left out.
pub fn encode(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    hists: &[ServiceHist],
    hist: usize,
    bounds_s: &[f64],
    roles: [&'static str; 2],
) -> Result<(), std::fmt::Error> {
    let mut m = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for h in hists {
        let counts = &h.stats.delay[hist];
        let count: u64 = counts.iter().sum();
        if count == 0 {
            continue;
        }
        let buckets: Vec<(f64, u64)> = bounds_s
            .iter()
            .copied()
            .zip(counts.iter().copied())
            .collect();
        let labels = CcRoleService {
            cc: h.cc.clone(),
            role: roles[h.role],
            service: h.service.clone(),
        };
        m.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
            h.stats.delay_sum_us[hist] as f64 / 1e6,
            count,
            &buckets,
            None,
        )?;
    }
    Ok(())
}
