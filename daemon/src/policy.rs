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
//! - [`resolve`]: resolving rules against this system, the record and the
//!   counters back into the view.

mod resolve;
mod rules;

pub use resolve::{kernel_class, policy_counts, resolve, socket_policy};
pub use rules::{check_config_value, check_gate, describe_actions, describe_selectors, validate};
