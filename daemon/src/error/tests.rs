//! The texts users read, as they were before the one error type: each
//! chain printed by `Chain` (what `main`, the API and the log print), byte
//! for byte (the integration tests grep them).

use super::*;
use aya::programs::ProgramError;

fn eperm() -> ProgramError {
    aya::sys::SyscallError {
        call: "bpf_prog_load",
        io_error: std::io::Error::from_raw_os_error(libc::EPERM),
    }
    .into()
}

fn chain(e: &Error) -> String {
    Chain(e).to_string()
}

/// The chain a user reads is the text the loader flattened before: kept
/// typed, printed with no part twice.
#[test]
fn aya_chain_prints_as_before() {
    let e = Error::Load {
        name: "tcp_probe",
        source: Box::new(eperm().into()),
    };
    assert_eq!(
        chain(&e),
        "loading probe tcp_probe failed: `bpf_prog_load` failed: \
         Operation not permitted (os error 1)"
    );
}

#[test]
fn sock_ops_needed_names_its_cause_once() {
    let e = Error::SockOpsNeeded(Box::new(Error::SockOpsAttach(
        "/sys/fs/cgroup".into(),
        eperm(),
    )));
    assert_eq!(
        chain(&e),
        "attaching probe sock_ops failed: attaching sock_ops to /sys/fs/cgroup: \
         `bpf_prog_load` failed: Operation not permitted (os error 1) \
         (the policy and DRWA need it)"
    );
}

#[test]
fn a_message_is_its_own_end() {
    let e = Error::object("map socks is not socket storage");
    assert_eq!(chain(&e), "BPF object: map socks is not socket storage");
}

/// A congestion control's io error reads once.
#[test]
fn cc_io_error_prints_its_cause_once() {
    let io = std::io::Error::from_raw_os_error(libc::EACCES);
    let want = format!("reading tcp_available_congestion_control: {io}");
    let e = Error::from(bloatd_cc::Error::Io {
        what: "reading tcp_available_congestion_control".into(),
        source: io,
    });
    assert_eq!(chain(&e), want);
}

/// A context over an errno reads "{what}: {errno}", as it always did.
#[test]
fn a_context_reads_what_then_the_errno() {
    let enoent = || std::io::Error::from_raw_os_error(libc::ENOENT);
    let e = Error::context("cannot open pid file /run/bloatd/bloatd.pid", enoent());
    assert_eq!(
        chain(&e),
        format!("cannot open pid file /run/bloatd/bloatd.pid: {}", enoent())
    );
    let e = Error::ClientIo {
        path: "/run/bloatd/bloatd.sock".into(),
        source: enoent(),
    };
    assert_eq!(
        chain(&e),
        format!("talking to bloatd at /run/bloatd/bloatd.sock: {}", enoent())
    );
    let e = Error::MalformedBy(Box::new(Error::context("reading the answer", enoent())));
    assert_eq!(
        chain(&e),
        format!(
            "bloatd sent a malformed answer: reading the answer: {}",
            enoent()
        )
    );
}

/// `bloatd: ...` for a config that does not parse, or a flag over it.
#[test]
fn config_errors_read_as_before() {
    let e = Error::ConfigParse {
        path: "/etc/bloatd/bloatd.toml".into(),
        source: Box::new(Error::invalid(
            "unknown key `intervall_ms` (did you mean `interval_ms`?)",
        )),
    };
    assert_eq!(
        chain(&e),
        "config file /etc/bloatd/bloatd.toml: unknown key `intervall_ms` (did you mean `interval_ms`?)"
    );
    let e = Error::config(Error::context(
        "--interval",
        Error::Value(Box::new("x".parse::<u64>().unwrap_err())),
    ));
    assert_eq!(
        chain(&e),
        "config: --interval: invalid digit found in string"
    );
    let e = Error::ConfigRead {
        path: "/nope.toml".into(),
        source: std::io::Error::from_raw_os_error(libc::ENOENT),
    };
    assert_eq!(
        chain(&e),
        "cannot read config file /nope.toml: No such file or directory (os error 2)"
    );
}

/// The errno inside a sentence stays where it was.
#[test]
fn an_errno_inside_a_sentence_stays_there() {
    let e = Error::PidExe {
        pid: 42,
        file: "/run/bloatd/bloatd.pid".into(),
        err: std::io::Error::from_raw_os_error(libc::ENOENT),
    };
    assert_eq!(
        chain(&e),
        "pid 42 named by /run/bloatd/bloatd.pid: No such file or directory (os error 2): refusing to signal it"
    );
    let e = Error::PinMount(std::io::Error::from_raw_os_error(libc::EPERM));
    assert_eq!(
        chain(&e),
        "no BPF file system at /sys/fs/bpf and mounting one failed (Operation not permitted \
         (os error 1)): `mount -t bpf bpf /sys/fs/bpf`"
    );
}

/// The journal's errors as the recorder logs them and `bloatd incidents`
/// prints them.
#[test]
fn journal_errors_read_as_before() {
    let e = Error::JournalIo {
        path: "/var/lib/bloatd/journal.lock".into(),
        what: "cannot open the lock",
        source: std::io::Error::from_raw_os_error(libc::EACCES),
    };
    let want =
        "/var/lib/bloatd/journal.lock: cannot open the lock: Permission denied (os error 13)";
    assert_eq!(chain(&e), want);
    let e = Error::JournalUnreadable(Box::new(e));
    assert_eq!(
        e.to_string(),
        format!("bloatd is not running, and its journal cannot be read: {want} (try sudo)")
    );
    assert_eq!(
        Error::NoSuchEpisode(7).to_string(),
        "no episode 7 (bloatd incidents lists them)"
    );
}

/// `bloatd stop` and `bloatd start`'s refusals.
#[test]
fn start_and_stop_refusals_read_as_before() {
    assert_eq!(
        Error::DidNotStop { pid: 9 }.to_string(),
        format!("bloatd (pid 9) did not stop within 15 s. `kill -9 9` ends it: {CRASH_LEAVES}; then `bloatd stop` or the next `bloatd start` gives them back")
    );
    assert_eq!(
        Error::AlreadyRunning("?".into()).to_string(),
        "bloatd is already running (pid ?); `bloatd stop` first to restart it"
    );
    assert_eq!(
        Error::PortInUse("127.0.0.1:9100".parse().unwrap()).to_string(),
        "port in use: 127.0.0.1:9100 is already taken by another program (choose another with --listen)"
    );
    assert_eq!(
        Error::NotRunning("/run/bloatd/bloatd.sock".into()).to_string(),
        "bloatd is not running (no API socket at /run/bloatd/bloatd.sock)"
    );
    assert_eq!(
        Error::NoBtf.to_string(),
        "kernel BTF not found at /sys/kernel/btf/vmlinux: bloatd needs a kernel built with CONFIG_DEBUG_INFO_BTF=y"
    );
}

/// Only a kernel too old is bad input (exit 2) among the run's errors.
#[test]
fn only_a_kernel_too_old_is_bad_input() {
    let old = Error::KernelTooOld {
        release: "5.10".into(),
        minimum: "5.15",
        missing: "x".into(),
    };
    assert!(old.is_bad_input());
    assert!(!Error::NotRoot.is_bad_input());
}

/// An error crosses threads (the namespace reader, the recorder's) and
/// clap's value parsers.
#[test]
fn errors_are_send_and_sync() {
    fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<Error>();
}
