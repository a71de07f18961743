//! bloatd-cc's one error type: every way registering, unregistering or
//! inspecting a congestion control fails, each a sentence a user can act
//! on; an errno or libbpf's error is kept whole as the source (printed
//! after the sentence by a printer of the chain, e.g. the daemon's
//! `Chain`).

use std::io;

use thiserror::Error;

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Why registering, unregistering or inspecting a bloatd congestion control failed.
#[derive(Debug, Error)]
pub enum Error {
    #[error(
        "{name} is already registered (another bloatd running, or a struct_ops link pinned by \
         someone else: see `bpftool struct_ops list`)"
    )]
    AlreadyRegistered { name: &'static str },

    #[error(
        "kernel BTF not found at /sys/kernel/btf/vmlinux: BPF congestion controls need a kernel \
         built with CONFIG_DEBUG_INFO_BTF=y (and 5.13 or newer for the TCP kfuncs)"
    )]
    MissingBtf,

    #[error(
        "not allowed to {what}: run as root (loading struct_ops needs CAP_BPF, CAP_NET_ADMIN \
         and CAP_PERFMON; writing sysctls needs root)"
    )]
    NotRoot { what: String },

    /// libbpf's error sits inside the sentence, before the log: `step`
    /// ("open", "load", "register") and what libbpf said, with its context.
    #[error("the kernel's BPF verifier rejected {name}: {step}: {err:#}\n--- verifier log (tail) ---\n{log_tail}")]
    VerifierRejected {
        name: &'static str,
        step: &'static str,
        err: libbpf_rs::Error,
        log_tail: String,
    },

    #[error("loading {name} failed: {step}: {err:#}\n--- libbpf log (tail) ---\n{log_tail}")]
    Load {
        name: &'static str,
        step: &'static str,
        err: libbpf_rs::Error,
        log_tail: String,
    },

    /// `NotRoot` for a load libbpf refused (EPERM with no verifier log).
    #[error(
        "not allowed to load {name} ({step}: {err:#}): run as root (loading struct_ops needs \
         CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON; writing sysctls needs root)"
    )]
    LoadNotRoot {
        name: &'static str,
        step: &'static str,
        err: libbpf_rs::Error,
    },

    #[error("{name} is still listed in tcp_available_congestion_control after its link was closed: is its struct_ops link pinned? (see `bpftool link list`)")]
    StillRegistered { name: &'static str },

    #[error("{name} is not registered by this process")]
    NotRegistered { name: &'static str },

    #[error("unknown congestion control '{name}' (the kernel offers: {available})")]
    UnknownCc { name: String, available: String },

    #[error(
        "'{name}' is restricted in this network namespace: only the initial namespace may default \
         to it; allow it with `sysctl -w net.ipv4.tcp_allowed_congestion_control=\"... {name}\"` \
         in the initial namespace, or set it per socket (setsockopt TCP_CONGESTION)"
    )]
    Restricted { name: String },

    #[error(
        "not allowed to enter network namespace {netns}: setns needs CAP_SYS_ADMIN (and \
         CAP_SYS_PTRACE for the namespaces of processes with more capabilities): run as root; \
         in a container, add both (bloatd's Helm chart does when `cc` is not empty)"
    )]
    NoSetns { netns: String },

    #[error(
        "net.ipv4.tcp_congestion_control is read-only here (/proc/sys is mounted read-only, as \
         in a container): set the default with sysctl on the host, or per connection with a \
         policy rule (cc = ...)"
    )]
    ReadOnlySysctl,

    /// The kernel publishes no config, and libbpf needs its HZ (kconfig.rs).
    #[error(
        "the kernel publishes no config (/boot/config-RELEASE, /proc/config.gz) and \
         /proc/timer_list does not give its HZ"
    )]
    NoKconfig,

    /// `what` failed; the errno is the source (printed after it by a
    /// printer of the chain).
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },

    /// `what` failed in libbpf; its error is the source.
    #[error("{what}")]
    Bpf {
        what: &'static str,
        #[source]
        source: libbpf_rs::Error,
    },
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}
