//! The causes bloatd's errors keep, and how a chain of them prints.
//!
//! An error holds what the kernel or aya said as its `source`, typed, so
//! nothing is flattened where it happens; the text a user reads joins the
//! chain at the edge that prints it: `main` with `{:#}`, anywhere else
//! with `Chain`. Either way it reads "what bloatd did: what aya said: the
//! errno or the verifier's log".

use std::fmt;

/// What a library call under bloatd answered: its error kept whole (its
/// own chain too), or a message of bloatd's where there was no call.
#[derive(Debug, thiserror::Error)]
pub enum Cause {
    #[error(transparent)]
    Ebpf(#[from] aya::EbpfError),
    #[error(transparent)]
    Program(#[from] aya::programs::ProgramError),
    #[error(transparent)]
    Map(#[from] aya::maps::MapError),
    #[error(transparent)]
    Link(#[from] aya::programs::links::LinkError),
    #[error("enabling BPF stats")]
    BpfStats(#[source] aya::sys::SyscallError),
    #[error("reading our own network namespace")]
    OwnNetns(#[source] std::io::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Msg(String),
}

impl From<String> for Cause {
    fn from(s: String) -> Cause {
        Cause::Msg(s)
    }
}

impl From<&str> for Cause {
    fn from(s: &str) -> Cause {
        Cause::Msg(s.to_string())
    }
}

/// An error and every source below it, joined by ": " (as anyhow's
/// `{:#}`), for the places that print an error themselves.
pub struct Chain<'a>(pub &'a dyn std::error::Error);

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut src = self.0.source();
        while let Some(inner) = src {
            write!(f, ": {inner}")?;
            src = inner.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::{ProbeError, SockOpsError};
    use aya::programs::ProgramError;

    fn eperm() -> ProgramError {
        aya::sys::SyscallError {
            call: "bpf_prog_load",
            io_error: std::io::Error::from_raw_os_error(libc::EPERM),
        }
        .into()
    }

    /// The chain a user reads is the text the loader flattened before: kept
    /// typed, printed the same by `main` ({:#}) and by `Chain`, no part
    /// twice.
    #[test]
    fn aya_chain_prints_as_before() {
        let want = "loading probe tcp_probe failed: `bpf_prog_load` failed: \
                    Operation not permitted (os error 1)";
        let e = ProbeError::Load {
            name: "tcp_probe",
            source: eperm().into(),
        };
        assert_eq!(Chain(&e).to_string(), want);
        assert_eq!(format!("{:#}", anyhow::Error::from(e)), want);
    }

    #[test]
    fn sock_ops_needed_names_its_cause_once() {
        let e = ProbeError::SockOpsNeeded(SockOpsError::Attach("/sys/fs/cgroup".into(), eperm()));
        let want = "attaching probe sock_ops failed: attaching sock_ops to /sys/fs/cgroup: \
                    `bpf_prog_load` failed: Operation not permitted (os error 1) \
                    (the policy and DRWA need it)";
        assert_eq!(format!("{:#}", anyhow::Error::from(e)), want);
    }

    #[test]
    fn a_message_is_its_own_end() {
        let e = ProbeError::object("map socks is not socket storage");
        assert_eq!(
            format!("{:#}", anyhow::Error::from(e)),
            "BPF object: map socks is not socket storage"
        );
    }

    /// A congestion control's io error reads once, by either printer
    /// (before, `{:#}` printed "reading X: errno: errno").
    #[test]
    fn cc_io_error_prints_its_cause_once() {
        let io = std::io::Error::from_raw_os_error(libc::EACCES);
        let want = format!("reading tcp_available_congestion_control: {io}");
        let e = bloatd_cc::CcError::Io {
            what: "reading tcp_available_congestion_control".into(),
            source: io,
        };
        assert_eq!(Chain(&e).to_string(), want);
        assert_eq!(format!("{:#}", anyhow::Error::from(e)), want);
    }
}
