//! One module per command of the CLI: its flags (clap) and its code. Each
//! has a `run(cfg, args)` that `main` dispatches to.

pub mod cc;
pub mod docs;
pub mod incidents;
pub mod paths;
pub mod policy;
pub mod services;
pub mod sockets;
pub mod start;
pub mod status;
pub mod stop;
pub mod top;

/// `bloatd status` and `bloatd stop`: the daemon is not running.
pub const EXIT_NOT_RUNNING: u8 = 3;

/// Log to standard error; into the run directory's log, bounded
/// (rundir::RotatingLog), when that is where standard error goes.
pub fn init_logging(filter: &str, run_dir: &std::path::Path) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("BLOATD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter));
    // SAFETY: isatty has no preconditions.
    let tty = unsafe { libc::isatty(libc::STDERR_FILENO) } == 1;
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(tty);
    match crate::rundir::RotatingLog::of_stderr(run_dir) {
        Some(log) => fmt.with_writer(std::sync::Mutex::new(log)).init(),
        None => fmt.with_writer(std::io::stderr).init(),
    }
}
