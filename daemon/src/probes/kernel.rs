//! What this kernel offers bloatd, detected at start.
//!
//! The core (the probes, the socket model, the API, `/metrics`, `top`)
//! needs kernel BTF, the BTF tracepoints tcp_probe, inet_sock_set_state and
//! tcp_retransmit_skb, socket local storage in tracing programs (Linux
//! 5.11: where each socket's record lives) and BPF atomic fetch-and-add
//! (Linux 5.12: the socket map's bound). A kernel without one of them is
//! refused before anything is attached, with exit 2 and a message naming
//! the minimum and what is missing ([`check_core`]). The last two are asked
//! of the verifier with the programs of bpf/features.bpf.c, which are loaded
//! and never attached.
//!
//! Every other part is a [`Feature`]: it runs as designed, runs by a
//! fallback the kernel allows, or is declined, each with one line naming
//! the kernel feature and the version that brings it (`bloatd start`,
//! `status`, `/metrics`, top's header; README, "Supported kernels").

use crate::error::{Chain, Error};
use aya::programs::{BtfTracePoint, Iter};
use aya::{Btf, EbpfLoader};
use aya_obj::btf::BtfKind;
use bloatd_model::{Feature, FeatureState};

static FEATURES: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/features.bpf.o"));

/// The oldest Linux the core runs on (README, "Supported kernels").
pub const CORE_MINIMUM: &str = "5.12";

/// Tracepoints the core attaches: every kernel with BTF has them.
pub const CORE_TRACEPOINTS: [&str; 3] = ["tcp_probe", "inet_sock_set_state", "tcp_retransmit_skb"];
/// Congestion state changes as they happen (Linux 5.19); before, the probes
/// read the state at each sample.
pub const CONG_STATE_TRACEPOINT: &str = "tcp_cong_state_set";

/// What the core asks of the verifier: (program in features.bpf.c, the
/// kernel feature, the Linux version that brought it).
const CORE_PROGRAMS: [(&str, &str, &str); 2] = [
    (
        "sk_storage_tracing",
        "socket local storage in tracing programs",
        "5.11",
    ),
    ("atomic_fetch", "BPF atomic fetch-and-add", "5.12"),
];

/// The kernel's release (`uname -r`).
pub fn release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

pub(crate) fn too_old(missing: String) -> Error {
    Error::KernelTooOld {
        release: release(),
        minimum: CORE_MINIMUM,
        missing,
    }
}

/// Does the kernel have the BTF tracepoint `name`?
pub fn has_tracepoint(btf: &Btf, name: &str) -> bool {
    btf.id_by_type_name_kind(&format!("btf_trace_{name}"), BtfKind::Typedef)
        .is_ok()
}

/// [`check_core`] on the running kernel's BTF: `bloatd start` asks before
/// it starts the daemon, so a kernel that is too old gets exit 2.
pub fn check() -> Result<(), Error> {
    let btf = Btf::from_sys_fs().map_err(|_| Error::NoBtf)?;
    check_core(&btf)
}

/// Refuse a kernel the core cannot run on, naming what it lacks.
pub fn check_core(btf: &Btf) -> Result<(), Error> {
    for tp in CORE_TRACEPOINTS {
        if !has_tracepoint(btf, tp) {
            return Err(too_old(format!(
                "the BTF tracepoint {tp} (Linux 5.5 with BTF)"
            )));
        }
    }
    let mut obj = EbpfLoader::new()
        .btf(Some(btf))
        .load(FEATURES)
        .map_err(|e| too_old(format!("BPF socket local storage maps ({})", Chain(&e))))?;
    for (name, what, since) in CORE_PROGRAMS {
        let prog: &mut BtfTracePoint = obj
            .program_mut(name)
            .ok_or_else(|| Error::object(format!("feature probe {name} missing")))?
            .try_into()
            .map_err(Error::object)?;
        if let Err(e) = prog.load("tcp_probe", btf) {
            tracing::debug!("feature probe {name}: {}", Chain(&e));
            return Err(too_old(format!("{what} (Linux {since})")));
        }
    }
    Ok(())
}

/// The optional kernel features the probes adapt to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kernel {
    /// The tcp_cong_state_set tracepoint (Linux 5.19).
    pub cong_state_tracepoint: bool,
    /// Microsecond TCP timestamps, tcp_sock.tcp_usec_ts (Linux 6.7).
    pub usec_ts: bool,
    /// A socket's cgroup v2 as a pointer of its own,
    /// sock_cgroup_data.cgroup (Linux 5.15); before, it shares a word with
    /// net_cls/net_prio v1 data (service_ops.h).
    pub sock_cgroup_ptr: bool,
    /// bpf_setsockopt from the TCP iterator (Linux 5.15), with which DRWA
    /// gives receive windows back (policy_ops.h, restore_windows).
    pub tcp_iter_setsockopt: bool,
}

impl Kernel {
    pub fn detect(btf: &Btf) -> Kernel {
        Kernel {
            cong_state_tracepoint: has_tracepoint(btf, CONG_STATE_TRACEPOINT),
            usec_ts: struct_has_member("tcp_sock", "tcp_usec_ts"),
            sock_cgroup_ptr: struct_has_member("sock_cgroup_data", "cgroup"),
            tcp_iter_setsockopt: verifier_takes_iter(btf, "tcp_iter_setsockopt", "tcp"),
        }
    }

    /// Why DRWA is declined on this kernel, if it is.
    pub fn drwa_declined(&self) -> Option<&'static str> {
        (!self.tcp_iter_setsockopt).then_some(DRWA_DECLINED)
    }
}

/// DRWA's line where the kernel cannot give windows back.
const DRWA_DECLINED: &str = "DRWA declined (--drwa and rules' drwa = true do nothing): giving a receive window back from the TCP iterator (bpf_setsockopt in iter/tcp) needs Linux 5.15, and without it a bloatd killed while clamping would leave the windows clamped";

/// Does the verifier take the iterator program `name` of
/// bpf/features.bpf.c over `target`? (Loaded, never attached.)
fn verifier_takes_iter(btf: &Btf, name: &str, target: &str) -> bool {
    let Ok(mut obj) = EbpfLoader::new().btf(Some(btf)).load(FEATURES) else {
        return false;
    };
    let Some(prog) = obj.program_mut(name) else {
        return false;
    };
    let prog: Result<&mut Iter, _> = prog.try_into();
    match prog.map(|p| p.load(target, btf)) {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            tracing::debug!("feature probe {name}: {}", Chain(&e));
            false
        }
        Err(e) => {
            tracing::debug!("feature probe {name}: {}", Chain(&e));
            false
        }
    }
}

/// Does the kernel's `struct name` have a member `member` (its BTF)?
fn struct_has_member(name: &str, member: &str) -> bool {
    use libbpf_rs::btf::types::Struct;
    let Ok(btf) = libbpf_rs::btf::Btf::from_vmlinux() else {
        return false;
    };
    let Some(s) = btf.type_by_name::<Struct<'_>>(name) else {
        return false;
    };
    let found = s
        .iter()
        .any(|m| m.name.is_some_and(|n| n == std::ffi::OsStr::new(member)));
    found
}

fn feature(name: &str, state: FeatureState, detail: String) -> Feature {
    Feature {
        name: name.into(),
        state,
        detail,
    }
}

/// How bloatd's congestion controls are registered, for [`features`].
pub struct CcRegistration<'a> {
    pub names: &'a [String],
    pub by: bloatd_cc::RegisterBy,
}

/// Every part beyond the core and how this kernel runs it. `sockops_error`:
/// why the cgroup sock_ops program is not attached, if it is not.
// Long (85 lines) on purpose: a table, one entry per feature with its on and
// fallback text side by side; helpers would only scatter it.
pub fn features(
    k: &Kernel,
    sockops_error: Option<&str>,
    cc: Option<CcRegistration<'_>>,
    cc_declined: Option<&str>,
) -> Vec<Feature> {
    use FeatureState::{Fallback, Off, On};
    let mut out = vec![
        if k.cong_state_tracepoint {
            feature(
                "ca_state_events",
                On,
                "congestion state changes from the tcp_cong_state_set tracepoint".into(),
            )
        } else {
            feature(
                "ca_state_events",
                Fallback,
                "congestion state read at each sample: the tcp_cong_state_set tracepoint needs Linux 5.19".into(),
            )
        },
        if k.usec_ts {
            feature(
                "rcv_rtt_usec",
                On,
                "receiver RTT from microsecond TCP timestamps where a connection agreed on them, millisecond ones elsewhere".into(),
            )
        } else {
            feature(
                "rcv_rtt_usec",
                Fallback,
                "receiver RTT from millisecond TCP timestamps: microsecond ones (tcp_sock.tcp_usec_ts) need Linux 6.7".into(),
            )
        },
        if k.sock_cgroup_ptr {
            feature(
                "services",
                On,
                "each socket's service from its cgroup v2".into(),
            )
        } else {
            feature(
                "services",
                Fallback,
                "each socket's service from its cgroup v2, but sockets of processes in a net_cls or net_prio v1 cgroup count as the root (\"/\"): the kernel keeps their cgroup v2 apart only from Linux 5.15".into(),
            )
        },
        match k.drwa_declined() {
            None => feature(
                "drwa",
                On,
                "DRWA available: the TCP iterator gives the receive windows it clamps back, at stop and at the start after a crash".into(),
            ),
            Some(why) => feature("drwa", Off, why.into()),
        },
        match sockops_error {
            None => feature(
                "sock_ops",
                On,
                "cgroup sock_ops program: closing senders sampled, policy and DRWA available"
                    .into(),
            ),
            Some(e) => feature(
                "sock_ops",
                Off,
                format!("{e}: senders that closed their end are not sampled, no policy or DRWA"),
            ),
        },
    ];
    if let Some(cc) = cc.filter(|c| !c.names.is_empty()) {
        let names = cc.names.join(" ");
        out.push(match cc.by {
            bloatd_cc::RegisterBy::Link => feature(
                "cc_link",
                On,
                format!("{names} registered through struct_ops links"),
            ),
            bloatd_cc::RegisterBy::MapUpdate => feature(
                "cc_link",
                Fallback,
                format!("{names} registered by map update (struct_ops links need Linux 6.4): a killed bloatd's registration is removed at the next start"),
            ),
        });
    }
    if let Some(why) = cc_declined {
        out.push(feature(
            "cc_link",
            Off,
            format!("bloatd_westwood and bloatd_cubic not registered: {why}"),
        ));
    }
    out
}

/// The lines `bloatd start` prints for parts not fully on.
pub fn notes(features: &[Feature]) -> Vec<String> {
    features
        .iter()
        .filter(|f| f.state != FeatureState::On)
        .map(|f| format!("{} {}: {}", f.name, f.state.as_str(), f.detail))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: Kernel = Kernel {
        cong_state_tracepoint: false,
        usec_ts: false,
        sock_cgroup_ptr: false,
        tcp_iter_setsockopt: false,
    };
    const NEW: Kernel = Kernel {
        cong_state_tracepoint: true,
        usec_ts: true,
        sock_cgroup_ptr: true,
        tcp_iter_setsockopt: true,
    };

    #[test]
    fn fallbacks_name_the_kernel_feature_and_version() {
        let names = ["bloatd_westwood".to_string()];
        let f = features(
            &OLD,
            None,
            Some(CcRegistration {
                names: &names,
                by: bloatd_cc::RegisterBy::MapUpdate,
            }),
            None,
        );
        let by_name = |n: &str| f.iter().find(|x| x.name == n).unwrap();
        assert_eq!(by_name("ca_state_events").state, FeatureState::Fallback);
        assert!(by_name("ca_state_events").detail.contains("Linux 5.19"));
        assert!(by_name("rcv_rtt_usec").detail.contains("Linux 6.7"));
        assert!(by_name("cc_link").detail.contains("Linux 6.4"));
        assert!(by_name("services").detail.contains("Linux 5.15"));
        assert_eq!(by_name("drwa").state, FeatureState::Off);
        assert!(by_name("drwa").detail.contains("Linux 5.15"));
        assert_eq!(by_name("sock_ops").state, FeatureState::On);
        assert_eq!(notes(&f).len(), 5, "{:?}", notes(&f));
    }

    #[test]
    fn without_congestion_controls_no_cc_line() {
        let f = features(&NEW, Some("no cgroup v2 hierarchy is mounted"), None, None);
        assert!(f.iter().all(|x| x.name != "cc_link"));
        let notes = notes(&f);
        assert_eq!(notes.len(), 1);
        assert!(
            notes[0].starts_with("sock_ops off: no cgroup v2"),
            "{notes:?}"
        );
    }

    #[test]
    fn congestion_controls_a_kernel_refuses_are_declined_in_one_line() {
        let why = "the kernel's verifier refused bloatd_cubic: BPF congestion controls need struct_ops with TCP kfuncs (Linux 5.13)";
        let f = features(&NEW, None, None, Some(why));
        let cc = f.iter().find(|x| x.name == "cc_link").unwrap();
        assert_eq!(cc.state, FeatureState::Off);
        assert!(
            cc.detail.contains("Linux 5.13") && !cc.detail.contains('\n'),
            "{}",
            cc.detail
        );
        assert_eq!(notes(&f).len(), 1);
    }
}
