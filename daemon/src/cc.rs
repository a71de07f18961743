//! The daemon's side of bloatd's congestion controls: registration at
//! start, their exported state in the view model, and the host's default
//! congestion control, which `stop` puts back as it was.

use bloatd_cc::{Algo, Registration};
use bloatd_model::CcState;
use std::collections::HashMap;

pub struct CcSet {
    reg: Option<Registration>,
    /// The host default before bloatd first changed it.
    prev_default: Option<String>,
}

impl CcSet {
    pub fn register(names: &[String], opts: &bloatd_cc::Options) -> anyhow::Result<CcSet> {
        let algos: Vec<Algo> = names
            .iter()
            .map(|n| {
                Algo::from_name(n)
                    .ok_or_else(|| anyhow::anyhow!("unknown congestion control '{n}'"))
            })
            .collect::<anyhow::Result<_>>()?;
        let reg = if algos.is_empty() {
            None
        } else {
            Some(Registration::register(&algos, opts)?)
        };
        Ok(CcSet {
            reg,
            prev_default: None,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.reg.is_none()
    }

    pub fn names(&self) -> Vec<String> {
        match &self.reg {
            Some(r) => r
                .registered()
                .iter()
                .map(|a| a.name().to_string())
                .collect(),
            None => Vec::new(),
        }
    }

    /// Exported state of every socket using a bloatd algorithm, by cookie.
    pub fn states(&self) -> HashMap<u64, CcState> {
        let Some(r) = &self.reg else {
            return HashMap::new();
        };
        match r.states() {
            Ok(states) => states.into_iter().map(|(c, s)| (c, view(&s))).collect(),
            Err(e) => {
                tracing::warn!("reading congestion control state: {e}");
                HashMap::new()
            }
        }
    }

    /// Per registered algorithm, state snapshots its map refused.
    pub fn export_failures(&self) -> Vec<(String, u64)> {
        let Some(r) = &self.reg else {
            return Vec::new();
        };
        match r.export_failures() {
            Ok(v) => v
                .into_iter()
                .map(|(a, n)| (a.name().to_string(), n))
                .collect(),
            Err(e) => {
                tracing::warn!("reading congestion control export failures: {e}");
                Vec::new()
            }
        }
    }

    /// Westwood+'s cwnd/pipe histogram, counted in the kernel (None
    /// without bloatd_westwood).
    pub fn westwood_cwnd_pipe_ratio(&self) -> Option<bloatd_cc::RatioHistogram> {
        let r = self.reg.as_ref()?;
        match r.westwood_cwnd_pipe_ratio() {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!("reading the cwnd/pipe histogram: {e}");
                None
            }
        }
    }

    /// Set the host's default congestion control, remembering the first
    /// previous value so `stop` can restore it. Returns the previous one.
    pub fn set_default(&mut self, name: &str) -> anyhow::Result<String> {
        let prev = set_default(name)?;
        if self.prev_default.is_none() && prev != name {
            self.prev_default = Some(prev.clone());
        }
        Ok(prev)
    }

    fn restore_default(&mut self) {
        if let Some(prev) = self.prev_default.take() {
            match bloatd_cc::set_kernel_default(&prev) {
                Ok(()) => tracing::info!("restored default congestion control {prev}"),
                Err(e) => {
                    tracing::warn!("could not restore default congestion control {prev}: {e}")
                }
            }
        }
    }
}

impl Drop for CcSet {
    fn drop(&mut self) {
        // The default must not name an algorithm that is about to go away.
        self.restore_default();
    }
}

/// Set net.ipv4.tcp_congestion_control of our network namespace, after
/// checking the name is available. Returns the previous default.
pub fn set_default(name: &str) -> anyhow::Result<String> {
    let available = bloatd_cc::kernel_available()?;
    if !available.iter().any(|a| a == name) {
        anyhow::bail!(
            "congestion control '{name}' is not available (available: {})",
            available.join(" ")
        );
    }
    let prev = bloatd_cc::kernel_default()?;
    bloatd_cc::set_kernel_default(name)?;
    Ok(prev)
}

/// Convert the loader's state into the view model.
pub fn view(s: &bloatd_cc::AlgoState) -> CcState {
    match s {
        bloatd_cc::AlgoState::Westwood(w) => CcState::Westwood {
            bwe_bytes_per_s: w.bwe_bytes_per_s,
            min_rtt_us: w.min_rtt_us,
            pipe_segments: w.pipe_segments(),
        },
        bloatd_cc::AlgoState::Cubic(c) => CcState::Cubic {
            w_max_segments: c.w_max_segments,
            k_ms: c.k_ms,
            epoch_age_ms: c.epoch_age_us.map(|us| (us / 1000) as u32),
            min_rtt_us: c.min_rtt_us,
            hystart_round: c.hystart_round,
            hystart_found: c.hystart_found_ack_train || c.hystart_found_delay,
        },
    }
}
