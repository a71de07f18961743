//! bloatd's one error type, [`Error`], and how a chain of errors prints.
//!
//! Every function of the daemon that can fail returns [`Result`]. An error
//! names what bloatd did and holds what the library under it said (aya,
//! std::io, rusqlite, serde_json, bloatd-cc, …) whole, as its `source`:
//! nothing is flattened where it happens. The text a user reads joins the
//! chain at the edge that prints it, with [`Chain`] (`main`, the API's
//! error bodies, the log): "what bloatd did: what aya said: the errno or
//! the verifier's log".
//!
//! A library error whose own chain would print differently from the
//! sentence users have always read (rusqlite's repeats its code; an errno
//! in the middle of a sentence) sits in the sentence instead: a field of
//! its variant, still whole, not its source. Where no library call failed,
//! a variant carries bloatd's own words; `Invalid` is what is wrong with a
//! config value, a flag or a rule (bad input), `Msg` any other message of
//! bloatd's (e.g. what the daemon wrote on its readiness pipe).

use crate::cmd::stop::CRASH_LEAVES;
use crate::probes::policy::BPFFS;
use crate::probes::BTF_PATH;
use std::fmt;
use std::path::PathBuf;

/// `Result` with bloatd's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    // ---------------------------------------- what a library answered
    #[error(transparent)]
    Ebpf(#[from] aya::EbpfError),
    #[error(transparent)]
    Program(#[from] aya::programs::ProgramError),
    #[error(transparent)]
    AyaMap(#[from] aya::maps::MapError),
    #[error(transparent)]
    Link(#[from] aya::programs::links::LinkError),
    #[error("enabling BPF stats")]
    BpfStats(#[source] aya::sys::SyscallError),
    #[error("reading our own network namespace")]
    OwnNetns(#[source] std::io::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Cc(#[from] bloatd_cc::Error),
    #[error(transparent)]
    Model(#[from] bloatd_model::Error),
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Nul(#[from] std::ffi::NulError),
    /// A flag's value that does not parse as its type (an integer, an
    /// address, …).
    #[error(transparent)]
    Value(Box<dyn std::error::Error + Send + Sync>),
    /// `what` failed: the source says why.
    #[error("{what}")]
    Context {
        what: String,
        #[source]
        source: Box<Error>,
    },
    /// What is wrong with a config value, a flag or a rule (bad input).
    #[error("{0}")]
    Invalid(String),
    /// bloatd's own words, where no library call failed and no other
    /// variant fits (e.g. what the daemon wrote on its readiness pipe).
    #[error("{0}")]
    Msg(String),

    // ---------------------------------------- the probes (probes/)
    #[error("bloatd needs root (CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN) to load its probes: run it with sudo")]
    NotRoot,
    #[error("kernel BTF not found at {BTF_PATH}: bloatd needs a kernel built with CONFIG_DEBUG_INFO_BTF=y")]
    NoBtf,
    #[error("this kernel ({release}) is too old for bloatd: it needs Linux {minimum} or newer, and this one lacks {missing}; nothing was attached (README, \"Supported kernels\")")]
    KernelTooOld {
        release: String,
        minimum: &'static str,
        missing: String,
    },
    #[error("loading probe {name} failed")]
    Load {
        name: &'static str,
        source: Box<Error>,
    },
    #[error("attaching probe {name} failed")]
    Attach {
        name: &'static str,
        source: Box<Error>,
    },
    #[error("BPF object")]
    Object(#[source] Box<Error>),
    #[error("reading BPF map {map}")]
    BpfMap {
        map: &'static str,
        source: Box<Error>,
    },
    /// The policy or DRWA needs the sock_ops program, which did not attach.
    #[error("attaching probe sock_ops failed: {} (the policy and DRWA need it)", Chain(&**.0))]
    SockOpsNeeded(Box<Error>),
    // Why the sock_ops program is not attached (then only closing senders
    // go unsampled, unless the policy or DRWA needs it).
    #[error("program sock_ops missing from object")]
    SockOpsMissing,
    #[error("loading sock_ops")]
    SockOpsLoad(#[source] aya::programs::ProgramError),
    #[error("no cgroup v2 hierarchy is mounted")]
    NoCgroup2,
    #[error("cgroup v2 root {}", .0.display())]
    CgroupRoot(PathBuf, #[source] std::io::Error),
    #[error("attaching sock_ops to {}", .0.display())]
    SockOpsAttach(PathBuf, #[source] aya::programs::ProgramError),
    // Why DRWA's clamps cannot be pinned (then they are not crash-safe).
    /// The errno sits inside the sentence: the fix comes after it.
    #[error(
        "no BPF file system at {BPFFS} and mounting one failed ({0}): `mount -t bpf bpf {BPFFS}`"
    )]
    PinMount(std::io::Error),
    #[error("{}", .0.display())]
    PinDir(PathBuf, #[source] std::io::Error),

    // ---------------------------------------- switches asked for live (engine/control.rs)
    #[error("DRWA is disabled in this bloatd: start it with --drwa=off (armed, switched on live) or --drwa, or drwa = \"off\" in the config")]
    DrwaDisabled,
    /// This kernel cannot run DRWA (the start said why).
    #[error("{0}")]
    DrwaDeclined(&'static str),
    #[error("no policy rule named '{name}' (rules: {rules})")]
    NoRule { name: String, rules: String },
    #[error("{who} may watch but not {what}: that changes the kernel and needs {needs}")]
    MayNotAct {
        who: String,
        what: String,
        needs: String,
    },
    #[error("cannot {0}: the daemon could not read this connection's credentials")]
    NoCredentials(String),

    // ---------------------------------------- `GET /v1/series/{cookie}` (engine/reader.rs)
    #[error("no socket with cookie {0} (bloatd sockets --json lists the cookies)")]
    UnknownSeries(u64),
    #[error("bloatd already keeps the series of {0} sockets for API clients (each for a minute after its last request): ask again later")]
    SeriesFull(usize),

    // ---------------------------------------- the API's client (client.rs)
    #[error("bloatd is not running (no API socket at {})", .0.display())]
    NotRunning(PathBuf),
    #[error("permission denied on {}: {}", .0.display(), crate::client::permission_hint(.0))]
    Permission(PathBuf),
    #[error("talking to bloatd at {}", .path.display())]
    ClientIo {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("bloatd answered {status}: {body}")]
    Status { status: u16, body: String },
    #[error("bloatd sent a malformed answer: {0}")]
    Malformed(String),
    /// The answer's bytes did not decode (UTF-8, JSON), or the request did
    /// not encode.
    #[error("bloatd sent a malformed answer")]
    MalformedBy(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The daemon's refusal (no such rule, DRWA not armed): its words.
    #[error("{0}")]
    Refused(String),

    // ---------------------------------------- the flight recorder (recorder/)
    #[error("{path} is in use by another bloatd{pid}")]
    JournalLocked { path: String, pid: String },
    #[error("the file system of {0} is full")]
    JournalFull(String),
    #[error("{0} is on a read-only file system")]
    JournalReadOnly(String),
    /// SQLite's error in the sentence (its chain would repeat its code).
    #[error("{path}: {err}")]
    JournalDb { path: String, err: rusqlite::Error },
    #[error("{path}: {what}")]
    JournalIo {
        path: String,
        what: &'static str,
        source: std::io::Error,
    },
    /// A file that is not a journal bloatd can use, and why.
    #[error("{}: {why}", .path.display())]
    NotAJournal { path: PathBuf, why: String },
    #[error("{} is not a regular file: bloatd does not read it", .0.display())]
    JournalNotFile(PathBuf),
    #[error("{} is not bloatd's journal", .0.display())]
    JournalNotOurs(PathBuf),
    #[error("no episode {0} (bloatd incidents lists them)")]
    NoSuchEpisode(u64),
    /// SQLite's error in the sentence, as the API has always answered it.
    #[error("journal: {0}")]
    JournalRead(rusqlite::Error),
    #[error("bloatd is not running and there is no journal at {} (`sudo bloatd start` records bloat episodes there)", .0.display())]
    NoJournal(PathBuf),
    #[error("bloatd is not running, and its journal cannot be read: {} (try sudo)", Chain(&**.0))]
    JournalUnreadable(Box<Error>),
    #[error("episode {0} has fewer than two seconds of series: nothing to replay")]
    TooShort(u64),

    // ---------------------------------------- the config (config.rs)
    #[error("cannot read config file {}", .path.display())]
    ConfigRead {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {}", .path.display())]
    ConfigParse { path: PathBuf, source: Box<Error> },
    #[error("config")]
    Config(#[source] Box<Error>),

    // ---------------------------------------- congestion controls (cc.rs)
    #[error("unknown congestion control '{0}'")]
    UnknownCc(String),
    #[error("congestion control '{name}' is not available (available: {available})")]
    CcUnavailable { name: String, available: String },
    #[error("{0} is registered only while bloatd runs: `sudo bloatd start` first")]
    CcNeedsDaemon(String),

    // ---------------------------------------- start, stop, top (cmd/, rundir.rs)
    #[error("bloatd is already running (pid {0}); `bloatd stop` first to restart it")]
    AlreadyRunning(String),
    #[error("bloatd is already running (pid {0})")]
    PidLocked(String),
    #[error("bloatd did not get ready within {secs}s; see {}", .log.display())]
    NotReady { secs: u64, log: PathBuf },
    #[error("port in use: {0} is already taken by another program (choose another with --listen)")]
    PortInUse(std::net::SocketAddr),
    #[error("pid file {} is locked but holds no pid", .0.display())]
    NoPid(PathBuf),
    #[error("pid file {} names pid {pid}, which no process can have: refusing to signal it", .file.display())]
    BadPid { file: PathBuf, pid: u32 },
    /// The errno sits inside the sentence: the refusal comes after it.
    #[error("pid {pid} named by {}: {err}: refusing to signal it", .file.display())]
    PidExe {
        pid: u32,
        file: PathBuf,
        err: std::io::Error,
    },
    #[error("pid {pid} named by {} is {exe}, not bloatd: refusing to signal it", .file.display())]
    NotBloatd {
        pid: u32,
        file: PathBuf,
        exe: String,
    },
    #[error("pid {pid} does not hold the lock on {}: refusing to signal it", .file.display())]
    NotHolder { pid: u32, file: PathBuf },
    #[error("bloatd is starting (the pid file {} is locked): try again", .0.display())]
    Starting(PathBuf),
    #[error("permission denied on {}: `bloatd stop` needs root (run it with sudo)", .0.display())]
    StopNeedsRoot(PathBuf),
    #[error("bloatd (pid {pid}) did not stop within 15 s. `kill -9 {pid}` ends it: {CRASH_LEAVES}; then `bloatd stop` or the next `bloatd start` gives them back")]
    DidNotStop { pid: i32 },
    #[error("bloatd is not running, and running the probes here (embedded mode) needs root: `sudo bloatd start` then `bloatd top`, or `sudo bloatd top`")]
    EmbeddedNeedsRoot,
}

impl Error {
    /// `what` failed because of `source`.
    pub fn context(what: impl Into<String>, source: impl Into<Error>) -> Error {
        Error::Context {
            what: what.into(),
            source: Box::new(source.into()),
        }
    }

    /// What is wrong with a config value, a flag or a rule.
    pub fn invalid(why: impl Into<String>) -> Error {
        Error::Invalid(why.into())
    }

    /// What is wrong with the config (or a flag over it): "config: …".
    pub fn config(why: Error) -> Error {
        Error::Config(Box::new(why))
    }

    /// The same, in bloatd's words.
    pub fn bad_config(why: impl Into<String>) -> Error {
        Error::config(Error::invalid(why))
    }

    /// The object lacks or mistypes something bloatd needs, or aya said so.
    pub(crate) fn object(cause: impl Into<Error>) -> Error {
        Error::Object(Box::new(cause.into()))
    }

    /// For `map_err`: reading or writing BPF map `map` failed.
    pub(crate) fn map<E: Into<Error>>(map: &'static str) -> impl Fn(E) -> Error {
        move |e| Error::BpfMap {
            map,
            source: Box::new(e.into()),
        }
    }

    /// Bad input: `main` exits 2 for it (a kernel below the core's minimum
    /// is bad input, not a crash).
    pub fn is_bad_input(&self) -> bool {
        matches!(self, Error::KernelTooOld { .. })
    }
}

impl From<String> for Error {
    fn from(s: String) -> Error {
        Error::Msg(s)
    }
}

impl From<&str> for Error {
    fn from(s: &str) -> Error {
        Error::Msg(s.to_string())
    }
}

/// An error and every source below it, joined by ": ", as a user reads
/// it (`main`, the API's error bodies, the log).
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

/// For tests: the text a user reads of an expected error (its chain).
#[cfg(test)]
pub trait ErrText {
    fn err_text(self) -> String;
}

#[cfg(test)]
impl<T: fmt::Debug> ErrText for Result<T> {
    fn err_text(self) -> String {
        Chain(&self.expect_err("an error")).to_string()
    }
}

#[cfg(test)]
mod tests;
