//! Which service is bloated: every socket attributed to the service it
//! serves, and the services' own views (README, "Services").
//!
//! Three hops from the kernel to the screen: bpf/service_ops.h (each socket's
//! cgroup v2 id, read once when its record is made; the owner of an accepted
//! connection, cloned from its listener; per-sample queue and RTT histograms
//! per cgroup), this module (ids named as services, sockets grouped into
//! services, the histograms folded into a bounded set of label values), and
//! the views (`bloatd services`, `/v1/services`, the dashboard's services
//! view, /metrics' `service` label).
//!
//! - [`names`]: a cgroup id as a service name (systemd unit, container,
//!   cgroup path), found by walking the cgroup v2 hierarchy when an id is
//!   new, never per read;
//! - [`view`]: sockets grouped by service, with the wait of its users split
//!   between the network's queue and its own unsent backlog;
//! - [`labels`]: the kernel's per-cgroup histograms folded into the
//!   `service` label of /metrics, bounded to the top N and "other".

pub mod labels;
pub mod metrics;
pub mod names;
pub mod view;

pub use names::ServiceNames;
pub use view::services_of;
