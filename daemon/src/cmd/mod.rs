//! One module per command of the CLI: its flags (clap) and its code. Each
//! has a `run(cfg, args)` that `main` dispatches to.

pub mod cc;
pub mod docs;
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

pub fn init_logging(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("BLOATD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter));
    // SAFETY: isatty has no preconditions.
    let tty = unsafe { libc::isatty(libc::STDERR_FILENO) } == 1;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(tty)
        .with_writer(std::io::stderr)
        .init();
}
