//! Acting on bloat: per-flow congestion control policy and the receiver's
//! Dynamic Receive Window Adjustment (README, "Acting on bloat").
//!
//! Rules come from `[[policy]]` tables of the config and from `--policy` on
//! the command line, in that order; the first rule that selects a
//! connection at its handshake decides its congestion control (and whether
//! DRWA is forced on it), the first bulk rule that selects it switches it
//! once it has sent the rule's bytes. Everything is checked before anything
//! is attached: a rule naming an algorithm the kernel does not have, a
//! cgroup that does not exist, or a rule that can never apply because an
//! earlier one selects every connection it does, is bad input (exit 2).
//!
//! Three hops from the kernel to the screen: bpf/policy_ops.h (the sock_ops
//! program applies the rules and DRWA and writes what it did into the
//! socket's record, `bloatd_sock.pol`), this module (the record into
//! `SocketPolicy`, the counters into /metrics), the dashboard
//! (bloatd_model::SocketPolicy).
//!
//! - [`rules`]: parsing and the checks that need nothing from the system;
//! - [`kernel`]: resolving rules against this system, the record and the
//!   counters back into the view.

mod kernel;
mod rules;

pub use kernel::{lambda_x256, policy_counts, resolve, socket_policy, Resolved};
pub use rules::{check_config_value, describe_actions, describe_selectors, parse_flag, validate};

use bloatd_model::api::PolicyCounts;
use bloatd_model::policy::DrwaMode;

/// /metrics: sockets under each action (gauge), what the actions did
/// (counters), whether DRWA is on. Labels: `action` only (cc, bulk, drwa).
pub fn encode_metrics(
    e: &mut prometheus_client::encoding::DescriptorEncoder,
    c: &PolicyCounts,
    drwa: DrwaMode,
) -> Result<(), std::fmt::Error> {
    use prometheus_client::encoding::{EncodeLabelSet, NoLabelSet};
    use prometheus_client::metrics::MetricType;
    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct Action {
        action: &'static str,
    }
    let mut m = e.encode_descriptor(
        "policy_sockets",
        "Live sockets under each policy action: cc (a rule chose the congestion control at the handshake), bulk (a bulk rule switched it mid-flow), drwa (DRWA clamps the receive window now)",
        None,
        MetricType::Gauge,
    )?;
    for (action, v) in [
        ("cc", c.cc_sockets),
        ("bulk", c.bulk_sockets),
        ("drwa", c.drwa_sockets),
    ] {
        m.encode_family(&Action { action })?.encode_gauge(&v)?;
    }
    let mut m = e.encode_descriptor(
        "policy_actions",
        "What the policy did: cc (congestion control set at a handshake), bulk (switched mid-flow), drwa (a DRWA round set a window clamp), drwa_held (a DRWA cut taken back: the window fell, the RTT did not), drwa_restore (a window given back), drwa_recovered (a window given back that a bloatd which did not stop had clamped)",
        None,
        MetricType::Counter,
    )?;
    for (action, v) in [
        ("cc", c.cc_set_total),
        ("bulk", c.bulk_switched_total),
        ("drwa", c.drwa_rounds_total),
        ("drwa_held", c.drwa_held_total),
        ("drwa_restore", c.drwa_restored_total),
        ("drwa_recovered", c.drwa_recovered_total),
    ] {
        m.encode_family(&Action { action })?
            .encode_counter::<NoLabelSet, _, u64>(&v, None)?;
    }
    let mut m = e.encode_descriptor(
        "policy_failures",
        "Policy actions the kernel refused: cc (bpf_setsockopt TCP_CONGESTION), drwa (TCP_WINDOW_CLAMP)",
        None,
        MetricType::Counter,
    )?;
    for (action, v) in [("cc", c.cc_failed_total), ("drwa", c.drwa_failed_total)] {
        m.encode_family(&Action { action })?
            .encode_counter::<NoLabelSet, _, u64>(&v, None)?;
    }
    e.encode_descriptor(
        "drwa_enabled",
        "1 while DRWA is switched on for every armed receiver (drwa = \"on\", the API, bloatd top's key)",
        None,
        MetricType::Gauge,
    )?
    .encode_gauge(&((drwa == DrwaMode::On) as i64))
}
