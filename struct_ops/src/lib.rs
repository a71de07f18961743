//! bloatd-cc: bloatd's congestion controls, `bloatd_westwood` (Westwood+)
//! and `bloatd_cubic` (CUBIC with HyStart), as BPF struct_ops, and their
//! loader.
//!
//! - BPF side: `struct_ops/westwood.bpf.c`, `struct_ops/cubic.bpf.c`; the
//!   exported per-socket state is defined in `struct_ops/cc_state.h`.
//! - [`Registration`] registers them with the kernel (libbpf-rs: a
//!   struct_ops link from Linux 6.4, a map update before, see
//!   [`RegisterBy`]), unregisters them on drop, and reads their state
//!   ([`Registration::states`], keyed by socket cookie).
//! - [`kernel_available`], [`kernel_default`], [`set_kernel_default`]: the
//!   kernel's congestion control sysctls.
//!
//! Registration is global (every network namespace sees the algorithms);
//! the state maps cover sockets of every namespace.

mod algo;
mod error;
mod kconfig;
mod registration;
mod stale;
mod state;
mod sysctl;

pub use algo::{Algo, Options, RegisterBy, WestwoodSsthresh};
pub use error::{Error, Result};
pub use registration::Registration;
pub use state::{AlgoState, CubicState, RatioHistogram, WestwoodState};
pub use sysctl::{
    kernel_available, kernel_default, network_namespaces, retire_netns_defaults,
    set_kernel_default, Netns, NetnsDefaultChange,
};

// The daemon keeps the Registration in shared state and reads states() from
// its sampler thread: keep it Send + Sync (libbpf-rs objects and links are).
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Registration>();
};
