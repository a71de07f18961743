//! The daemon's side of bloatd's congestion controls: registration at
//! start, their exported state in the view model, and the host's default
//! congestion control, which `stop` puts back as it was.

use crate::error::{Chain, Error, Result};
use bloatd_cc::{Algo, Registration};
use bloatd_model::CcState;
use std::collections::HashMap;

pub struct CcSet {
    reg: Option<Registration>,
    /// Why this kernel cannot run them, when it cannot (one line).
    declined: Option<String>,
    /// The host default before bloatd first changed it.
    prev_default: Option<String>,
    /// The daemon's run directory, where that default is also kept
    /// (SAVED_DEFAULT): a daemon that dies without dropping this (a panic,
    /// `kill -9`) leaves it for the next start or stop to put back.
    run_dir: Option<std::path::PathBuf>,
}

/// The file of the run directory that holds the host's default congestion
/// control from before a daemon changed it, while that daemon runs.
pub const SAVED_DEFAULT: &str = "default_cc";

/// A default a daemon that did not stop left changed: put back the one
/// the host had (kept in `dir`), whatever this start's or stop's flags, and
/// say so. The caller holds the run directory's lock: no daemon runs.
pub fn restore_left(dir: &crate::rundir::RunDir) -> Option<String> {
    use std::io::Read;
    let mut f = dir.open_file(SAVED_DEFAULT, libc::O_RDONLY, 0).ok()?;
    let mut prev = String::new();
    let read = f.read_to_string(&mut prev);
    let prev = prev.trim();
    let line = match read {
        Ok(_) if !prev.is_empty() && prev.bytes().all(|b| b.is_ascii_graphic()) => {
            let now = bloatd_cc::kernel_default().unwrap_or_default();
            if now == prev {
                None
            } else {
                Some(match bloatd_cc::set_kernel_default(prev) {
                    Ok(()) => format!(
                        "restored the default congestion control {prev} (a bloatd that did not stop left {now})"
                    ),
                    Err(e) => format!(
                        "cannot restore the default congestion control {prev} that a bloatd which did not stop changed to {now}: {}", Chain(&e)
                    ),
                })
            }
        }
        _ => Some(format!(
            "ignored {} in the run directory: it names no congestion control",
            SAVED_DEFAULT
        )),
    };
    dir.unlink(SAVED_DEFAULT);
    line
}

/// Keep `prev` in the run directory (SAVED_DEFAULT), written whole (a
/// temporary file renamed over it).
fn save_default(run_dir: &std::path::Path, prev: &str) -> std::io::Result<()> {
    use std::io::Write;
    let dir = crate::rundir::RunDir::open(run_dir)?;
    let tmp = format!("{SAVED_DEFAULT}.tmp");
    let mut f = dir.open_file(&tmp, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC, 0o600)?;
    writeln!(f, "{prev}")?;
    f.sync_all()?;
    dir.rename(&tmp, SAVED_DEFAULT)
}

/// Whether a registration failure is this kernel's lack of a feature (the
/// congestion controls are then declined, with one line, and the rest of
/// bloatd starts) or something the user must fix (another bloatd holds the
/// names, no privilege: start fails). The kernel's BPF TCP congestion
/// controls call TCP kfuncs, which came in Linux 5.13; the verifier of an
/// older kernel refuses the programs.
fn declined(e: &bloatd_cc::Error) -> Option<String> {
    use bloatd_cc::Error as CcError;
    let what = match e {
        CcError::VerifierRejected { name, .. } => format!("the kernel's verifier refused {name}"),
        CcError::Load { name, .. } => format!("the kernel refused to load {name}"),
        CcError::MissingBtf => "no kernel BTF".to_string(),
        _ => return None,
    };
    Some(format!(
        "{what}: BPF congestion controls need struct_ops with TCP kfuncs (Linux 5.13); the daemon's log has the kernel's words"
    ))
}

impl CcSet {
    pub fn register(names: &[String], opts: &bloatd_cc::Options) -> Result<CcSet> {
        let algos: Vec<Algo> = names
            .iter()
            .map(|n| Algo::from_name(n).ok_or_else(|| Error::UnknownCc(n.clone())))
            .collect::<Result<_>>()?;
        let mut set = CcSet {
            reg: None,
            declined: None,
            prev_default: None,
            run_dir: None,
        };
        if algos.is_empty() {
            return Ok(set);
        }
        match Registration::register(&algos, opts) {
            Ok(reg) => {
                for a in reg.stale_removed() {
                    tracing::warn!(
                        "{a}: removed the registration a killed bloatd left (registered by map update, held by no process)"
                    );
                }
                set.reg = Some(reg);
            }
            Err(e) => match declined(&e) {
                Some(why) => {
                    tracing::warn!("congestion controls declined: {}", Chain(&e));
                    set.declined = Some(why);
                }
                None => return Err(e.into()),
            },
        }
        Ok(set)
    }

    /// Why the congestion controls were declined, if they were.
    pub fn declined(&self) -> Option<&str> {
        self.declined.as_deref()
    }

    pub fn is_empty(&self) -> bool {
        self.reg.is_none()
    }

    /// How the kernel holds the registrations (None: nothing registered).
    pub fn registered_by(&self) -> Option<bloatd_cc::RegisterBy> {
        self.reg.as_ref().map(|r| r.registered_by())
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
                tracing::warn!("reading congestion control state: {}", Chain(&e));
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
                tracing::warn!("reading congestion control export failures: {}", Chain(&e));
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
                tracing::warn!("reading the cwnd/pipe histogram: {}", Chain(&e));
                None
            }
        }
    }

    /// Keep the host's default in `run_dir` too when it is changed (the
    /// daemon's set; the embedded dashboard's has none).
    pub fn keep_default_in(&mut self, run_dir: &std::path::Path) {
        self.run_dir = Some(run_dir.to_path_buf());
    }

    /// Set the host's default congestion control, remembering the first
    /// previous value so `stop` can restore it (and, in the run
    /// directory, the next start or stop after a crash). Returns the
    /// previous one.
    pub fn set_default(&mut self, name: &str) -> Result<String> {
        let prev = bloatd_cc::kernel_default()?;
        if self.prev_default.is_none() && prev != name {
            // Kept before it is changed: a crash in between leaves a file
            // naming the default the host still has, which restore_left
            // sees and drops.
            if let Some(dir) = &self.run_dir {
                save_default(dir, &prev).map_err(|e| {
                    Error::context(
                        format!(
                            "cannot keep the host's default congestion control in {}",
                            dir.display()
                        ),
                        e,
                    )
                })?;
            }
        }
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
                    tracing::warn!(
                        "could not restore default congestion control {prev}: {}",
                        Chain(&e)
                    )
                }
            }
        }
        if let Some(dir) = &self.run_dir {
            if let Ok(d) = crate::rundir::RunDir::open(dir) {
                d.unlink(SAVED_DEFAULT);
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
pub fn set_default(name: &str) -> Result<String> {
    let available = bloatd_cc::kernel_available()?;
    if !available.iter().any(|a| a == name) {
        return Err(Error::CcUnavailable {
            name: name.to_string(),
            available: available.join(" "),
        });
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_the_kernel_lacks_is_declined() {
        use bloatd_cc::Error as CcError;
        let refused = CcError::VerifierRejected {
            name: "bloatd_cubic",
            step: "load",
            err: libbpf_rs::Error::from(std::io::Error::from_raw_os_error(libc::EINVAL)),
            log_tail: "unknown func tcp_slow_start#1234\n".into(),
        };
        let why = declined(&refused).expect("a verifier refusal is declined");
        assert!(why.contains("bloatd_cubic") && why.contains("Linux 5.13") && !why.contains('\n'));
        assert!(declined(&CcError::MissingBtf).is_some());
        // what the user must fix still fails start
        assert!(declined(&CcError::AlreadyRegistered {
            name: "bloatd_cubic"
        })
        .is_none());
        assert!(declined(&CcError::NotRoot {
            what: "load".into()
        })
        .is_none());
    }
}
