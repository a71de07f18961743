//! Control: what the API may change in the kernel (the default congestion
//! control, DRWA on or off, a rule on or off) and the policy's state as
//! the views and /metrics show it. Each switch is a map write or a sysctl;
//! nothing here reads every socket (the policy's list takes the views').

use super::loaded::Loaded;
use crate::error::{Error, Result};
use bloatd_model::api::{DrwaInfo, PolicyCounts, PolicyInfo, RuleInfo};
use bloatd_model::policy::{DrwaMode, Rule};
use bloatd_model::{BottleneckClass, PolicyState, Socket, SocketPolicy};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

pub struct Control {
    loaded: Arc<Loaded>,
    /// The rules' names, by kernel index, and the rules as configured.
    names: Vec<String>,
    rules: Vec<Rule>,
    drwa: Mutex<DrwaMode>,
}

impl Control {
    pub fn new(loaded: Arc<Loaded>, names: Vec<String>) -> Control {
        Control {
            rules: loaded.cfg.policy.clone(),
            // A kernel that declines DRWA (probes/kernel.rs) armed none.
            drwa: Mutex::new(match loaded.probes.kernel().drwa_declined() {
                Some(_) => DrwaMode::Disabled,
                None => loaded.cfg.drwa,
            }),
            names,
            loaded,
        }
    }

    fn policy_maps(&self) -> MutexGuard<'_, crate::probes::policy::PolicyMaps> {
        self.loaded
            .probes
            .policy
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub fn drwa(&self) -> DrwaMode {
        *self.drwa.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The host's default congestion control set to `name`, as user `uid`
    /// asked; the previous one.
    pub fn set_default_cc(&self, name: &str, uid: u32) -> Result<String> {
        let previous = self.loaded.cc_mut().set_default(name)?;
        tracing::info!("default congestion control {previous} -> {name} (asked by uid {uid})");
        Ok(previous)
    }

    /// From now on a panic gives DRWA's windows back (cmd/start.rs).
    pub fn arm_panic_give_back(&self) {
        self.policy_maps().arm_panic_give_back();
    }

    /// DRWA on or off, live, as user `uid` asked. Err: DRWA was not armed
    /// at start.
    pub fn set_drwa(&self, on: bool, uid: u32) -> Result<()> {
        if let Some(why) = self.loaded.probes.kernel().drwa_declined() {
            return Err(Error::DrwaDeclined(why));
        }
        let mut drwa = self.drwa.lock().unwrap_or_else(PoisonError::into_inner);
        if *drwa == DrwaMode::Disabled {
            return Err(Error::DrwaDisabled);
        }
        self.policy_maps().set_drwa(on)?;
        *drwa = if on { DrwaMode::On } else { DrwaMode::Off };
        tracing::info!("DRWA switched {} (asked by uid {uid})", drwa.as_str());
        Ok(())
    }

    /// A rule on or off, live, as user `uid` asked. Err: no rule of that
    /// name.
    pub fn set_rule_enabled(&self, name: &str, enabled: bool, uid: u32) -> Result<()> {
        let i = self
            .names
            .iter()
            .position(|n| n == name)
            .ok_or_else(|| Error::NoRule {
                name: crate::text::printable(name),
                rules: if self.names.is_empty() {
                    "none".into()
                } else {
                    self.names.join(", ")
                },
            })?;
        self.policy_maps().set_enabled(i as u32, enabled)?;
        tracing::info!(
            "policy rule {name} {} (asked by uid {uid})",
            if enabled { "enabled" } else { "disabled" }
        );
        Ok(())
    }

    /// `GET /v1/policy`: the rules with the sockets (`socks`: every socket
    /// of a recent read) each acts on now, DRWA, and the counters.
    pub fn policy_info(&self, socks: &[Socket]) -> PolicyInfo {
        use crate::policy::{describe_actions, describe_selectors};
        let maps = self.policy_maps();
        let rules = self
            .names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let rule = self.rules.get(i).cloned();
                let acts = |p: &SocketPolicy| {
                    p.chose_cc() == Some(name.as_str())
                        || p.notsent_lowat_rule.as_deref() == Some(name.as_str())
                        || p.drwa.as_ref().is_some_and(|d| d.by == *name)
                };
                RuleInfo {
                    name: name.clone(),
                    selects: rule.as_ref().map(describe_selectors).unwrap_or_default(),
                    does: rule.as_ref().map(describe_actions).unwrap_or_default(),
                    enabled: maps.enabled(i as u32),
                    sockets: socks
                        .iter()
                        .filter(|s| s.policy.as_ref().is_some_and(acts))
                        .count(),
                    waiting: socks
                        .iter()
                        .filter(|s| {
                            s.policy.as_ref().is_some_and(|p| {
                                p.bulk_waiting && p.bulk_rule.as_deref() == Some(name)
                            })
                        })
                        .count(),
                    rule,
                }
            })
            .collect();
        let saved_pin = maps.saved_pin().map(|p| p.display().to_string());
        drop(maps);
        PolicyInfo {
            drwa: DrwaInfo {
                mode: self.drwa().as_str().into(),
                lambda: self.loaded.cfg.drwa_lambda,
                min_bytes: self.loaded.cfg.drwa_min_bytes,
                saved_pin,
            },
            rules,
            counts: self.policy_counts().unwrap_or_default(),
            drwa_connections: socks
                .iter()
                .filter_map(|s| {
                    let d = s.policy.as_ref()?.drwa.as_ref()?;
                    (d.rounds > 0).then(|| bloatd_model::api::DrwaConnection {
                        netns: s.netns,
                        local: s.local_endpoint(),
                        remote: s.remote_endpoint(),
                        drwa: d.clone(),
                    })
                })
                .collect(),
        }
    }

    /// Each classified peer's class to the kernel (bpf/policy_ops.h,
    /// `path_classes`): only what changed since the last call.
    pub fn set_path_classes(&self, classes: &[((u32, std::net::IpAddr), BottleneckClass)]) {
        self.policy_maps().set_path_classes(classes);
    }

    /// The policy's counters, as the kernel keeps them.
    pub fn policy_counts(&self) -> Option<PolicyCounts> {
        self.policy_maps()
            .counts()
            .ok()
            .map(|c| crate::policy::policy_counts(&c))
    }

    /// The policy's state in a snapshot: None when there is no policy.
    pub fn policy_state(&self) -> Option<PolicyState> {
        let drwa = self.drwa();
        if self.names.is_empty() && drwa == DrwaMode::Disabled {
            return None;
        }
        let c = self.policy_counts().unwrap_or_default();
        Some(PolicyState {
            drwa: drwa.as_str().into(),
            rules: self.names.len(),
            cc_sockets: c.cc_sockets,
            bulk_sockets: c.bulk_sockets,
            drwa_sockets: c.drwa_sockets,
            refused: None, // the server's to say, per reader
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Chain;

    /// What `bloatd policy` prints when a switch is refused: the text it
    /// printed when these were Strings (test_policy.py matches on it), and
    /// the kernel's refusal with its whole chain, nothing added.
    #[test]
    fn refusals_read_as_before() {
        let e = Error::NoRule {
            name: "nope".into(),
            rules: "none".into(),
        };
        assert_eq!(e.to_string(), "no policy rule named 'nope' (rules: none)");
        assert!(Error::DrwaDisabled
            .to_string()
            .starts_with("DRWA is disabled in this bloatd: start it with --drwa=off"));
        let io = std::io::Error::from_raw_os_error(libc::ENOENT);
        let want = format!("reading BPF map policy_ctl: {io}");
        let e = Error::map("policy_ctl")(io);
        assert_eq!(Chain(&e).to_string(), want);
    }
}
