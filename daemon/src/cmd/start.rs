//! `bloatd start`: load the probes, register the congestion controls,
//! serve /metrics and the API; in the background (the default: returns once
//! everything is up) or in the foreground (systemd).

use crate::caps;
use crate::client::Client;
use crate::engine::Engine;
use crate::error::{Chain, Error, Result};
use crate::rundir::{lock_state, take_lock, LockState, PidLock, RunDir, LOG, PID_FILE, SOCKET};
use crate::server;
use crate::settings::Config;
use clap::Args;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

const READY_ENV: &str = "BLOATD_READY_FD";
/// Fault injection for the tests (scripts/tests/test_policy.py): the
/// daemon panics at the first sampling tick after this file appears.
const TEST_PANIC_ENV: &str = "BLOATD_TEST_PANIC_FILE";
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Marks the daemon's readiness error that refuses the kernel (exit 2).
const TOO_OLD: &str = "kernel too old: ";

#[derive(Args)]
pub struct StartArgs {
    /// Stay in the foreground (for systemd and other service managers).
    #[arg(long)]
    pub foreground: bool,
    /// The settings' flags (settings.rs: one per row that has one).
    #[command(flatten)]
    pub settings: crate::settings::SettingFlags,
}

impl StartArgs {
    /// The flags given override the config file (a `--policy` that is not
    /// a rule is bad input).
    pub fn apply(&self, cfg: &mut Config) -> Result<()> {
        self.settings.apply(cfg).map_err(Error::config)
    }
}

/// `bloatd start [--foreground]`.
pub fn run(cfg: &Config, args: &StartArgs) -> Result<ExitCode> {
    if args.foreground {
        super::init_logging(&cfg.log, &cfg.run_dir);
        run_foreground(cfg)
    } else {
        let argv: Vec<String> = std::env::args().skip(1).collect();
        start_background(cfg, &argv)
    }
}

/// `bloatd start`: spawn the daemon in the background and wait until it has
/// attached its probes and opened its listeners, or report why it failed.
fn start_background(cfg: &Config, args: &[String]) -> Result<ExitCode> {
    crate::probes::preflight()?;
    crate::probes::kernel::check()?;
    // SAFETY: umask(2) always succeeds. Nothing bloatd creates is for others.
    unsafe { libc::umask(0o077) };
    if let (LockState::Held(pid), _) = lock_state(&cfg.run_dir)? {
        return Err(Error::AlreadyRunning(
            pid.map(|p| p.to_string()).unwrap_or_else(|| "?".into()),
        ));
    }
    let dir = RunDir::prepare(&cfg.run_dir, cfg.api_gid().map(|(_, g)| g))?;
    let log = dir
        .open_file(LOG, libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT, 0o600)
        .map_err(|e| Error::context(format!("cannot open log {}", cfg.log_file().display()), e))?;

    let mut fds: [RawFd; 2] = [0; 2];
    // SAFETY: valid array of two fds.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::context("pipe", std::io::Error::last_os_error()));
    }
    // SAFETY: pipe2 just returned these fds; we own them.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let wr_fd = wr.as_raw_fd();

    let exe = std::env::current_exe()?;
    let mut cmd = Command::new(exe);
    cmd.args(args).arg("--foreground");
    cmd.env(READY_ENV, wr_fd.to_string())
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // Keep the readiness pipe across exec, leave our session.
            libc::fcntl(wr_fd, libc::F_SETFD, 0);
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    drop(wr);

    // The child writes one line, "ok" or "err <why>", and closes the pipe;
    // EOF without a line means it died before it could say.
    // The kernel tier's guests (an emulated CPU: 5.15's verifier takes
    // minutes there) wait longer.
    let ready_timeout = std::env::var("BLOATD_READY_TIMEOUT_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(READY_TIMEOUT, Duration::from_secs);
    let msg = read_with_timeout(File::from(rd), ready_timeout);
    let msg = msg.trim();
    if let Some(rest) = msg.strip_prefix("ok") {
        let _ = rest;
        let status = Client::new(&cfg.socket_path()).status()?;
        println!(
            "bloatd started (pid {}): probes {}; congestion controls: {}; metrics http://{}/metrics; API {}",
            status.pid,
            status.probes.join(" "),
            if status.cc_registered.is_empty() { "none".into() } else { status.cc_registered.join(" ") },
            cfg.listen,
            cfg.socket_path().display()
        );
        for line in crate::probes::kernel::notes(&status.health.features) {
            println!("  {line}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if msg.is_empty() && child.try_wait()?.is_none() {
        let _ = child.kill();
        return Err(Error::NotReady {
            secs: ready_timeout.as_secs(),
            log: cfg.log_file(),
        });
    }
    if let Some(why) = msg
        .strip_prefix("err ")
        .and_then(|m| m.strip_prefix(TOO_OLD))
    {
        let _ = child.wait();
        eprintln!("bloatd: {why}");
        return Ok(ExitCode::from(2));
    }
    let reason = msg
        .strip_prefix("err ")
        .map(str::to_string)
        .unwrap_or_else(|| {
            format!(
                "bloatd exited during start; see {}",
                cfg.log_file().display()
            )
        });
    let _ = child.wait();
    Err(Error::Msg(reason))
}

/// Read until EOF or until `timeout` passes.
fn read_with_timeout(mut f: File, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let mut pfd = libc::pollfd {
            fd: f.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(i32::MAX as u128) as i32) };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if n <= 0 {
            break;
        }
        match f.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(k) => out.extend_from_slice(&buf[..k]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Tell whoever waits that the daemon is up (or why not): `bloatd start`
/// through the readiness pipe, systemd (Type=notify) through $NOTIFY_SOCKET.
/// `failed`: why not (None: it is up).
fn notify_ready(failed: Option<&str>) {
    if let (None, Some(path)) = (failed, std::env::var_os("NOTIFY_SOCKET")) {
        sd_notify(&path, "READY=1\n");
    }
    let Ok(fd) = std::env::var(READY_ENV) else {
        return;
    };
    let Ok(fd) = fd.parse::<RawFd>() else { return };
    // SAFETY: our parent passed us this pipe's write end; we take it once.
    let mut f = unsafe { File::from_raw_fd(fd) };
    let line = match failed {
        None => "ok\n".to_string(),
        Some(e) => format!("err {}\n", e.replace('\n', " ")),
    };
    let _ = f.write_all(line.as_bytes());
    std::env::remove_var(READY_ENV);
}

fn sd_notify(path: &std::ffi::OsStr, msg: &str) {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let bytes = path.as_bytes();
    let addr = match bytes.strip_prefix(b"@") {
        Some(name) => SocketAddr::from_abstract_name(name),
        None => SocketAddr::from_pathname(Path::new(path)),
    };
    let sent = addr.and_then(|a| UnixDatagram::unbound()?.send_to_addr(msg.as_bytes(), &a));
    if let Err(e) = sent {
        tracing::warn!("cannot notify the service manager: {e}");
    }
}

/// The signals that stop the daemon. SIGHUP ends it like SIGTERM (there
/// is no reload: a new config takes a restart), so a hung-up terminal that
/// started `bloatd start --foreground` restores the default cc on its way.
struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Take the signals in from now on (in `rt`'s context): one that comes
    /// while bloatd sets up waits until the setup is done, then stops it
    /// with the cleanup, instead of killing it half attached.
    fn install(rt: &tokio::runtime::Runtime) -> std::io::Result<StopSignals> {
        use tokio::signal::unix::{signal, SignalKind};
        let _in_rt = rt.enter();
        Ok(StopSignals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// The next stop signal's name.
    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
            _ = self.hup.recv() => "SIGHUP",
        }
    }

    /// A stop signal that came during the setup, if one did. The kernel
    /// handed it to tokio's handler, which only wrote to a pipe: one turn
    /// of the runtime's driver (a yield) delivers it to `recv` first.
    async fn pending(&mut self) -> Option<&'static str> {
        tokio::task::yield_now().await;
        tokio::select! {
            biased;
            s = self.recv() => Some(s),
            _ = std::future::ready(()) => None,
        }
    }
}

/// The log's first line of a running daemon: where it listens, who may
/// watch and who may act.
fn log_running(cfg: &Config) {
    let who = |group: Option<(String, u32)>| match group {
        Some((name, _)) => format!("root and group {name}"),
        None => "root only".into(),
    };
    tracing::info!(
        "bloatd {} running: metrics on http://{}/metrics, API on {} (watch: {}; act: {})",
        env!("CARGO_PKG_VERSION"),
        cfg.listen,
        cfg.socket_path().display(),
        who(cfg.api_gid()),
        who(cfg.authority().admin),
    );
}

/// The sampler: the engine's tick every interval (late ticks delayed, not
/// bunched), on the engine's worker so a tick that waits for a read holds
/// no request. `panic_file`: the tests' way to make the daemon panic
/// here.
async fn sample_every(engine: Engine, interval: Duration, panic_file: Option<std::path::PathBuf>) {
    let mut t = tokio::time::interval(interval);
    t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        t.tick().await;
        if panic_file.as_deref().is_some_and(Path::exists) {
            panic!("{TEST_PANIC_ENV}: panicking as asked");
        }
        let e = engine.clone();
        crate::engine::worker::run(move || e.tick()).await;
    }
}

/// `bloatd start --foreground`: run until SIGTERM, SIGINT or SIGHUP.
fn run_foreground(cfg: &Config) -> Result<ExitCode> {
    // SAFETY: umask(2) always succeeds. Nothing bloatd creates is for others.
    unsafe { libc::umask(0o077) };
    // The signal handlers before anything is attached.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut signals = StopSignals::install(&rt)?;
    let (dir, lock, tcp, unix, engine, recorder) = match setup(cfg) {
        Ok(s) => s,
        Err(e) => {
            // A kernel the core cannot run on (the verifier gave up on a
            // probe) is bad input for `bloatd start` too: exit 2.
            let mark = if e.is_bad_input() { TOO_OLD } else { "" };
            notify_ready(Some(&format!("{mark}{}", Chain(&e))));
            return Err(e);
        }
    };
    log_running(cfg);
    engine.control.arm_panic_give_back();
    install_panic_hook();
    let panic_file = std::env::var_os(TEST_PANIC_ENV).map(std::path::PathBuf::from);
    // The flight recorder's thread, now that the capabilities are gone.
    let recorder = match recorder {
        Some(dir_error) => {
            crate::recorder::Recorder::start(crate::recorder::Settings::of(cfg), dir_error)
                .inspect_err(|e| tracing::warn!("flight recorder not started: {e}"))
                .ok()
        }
        None => None,
    };
    if let Some(r) = &recorder {
        engine.record_to(r.seam());
    }
    let interval = cfg.interval();
    let result = rt.block_on(async {
        let tcp = tokio::net::TcpListener::from_std(tcp)?;
        let unix = tokio::net::UnixListener::from_std(unix)?;
        let ticker = sample_every(engine.clone(), interval, panic_file);
        let metrics = server::serve(
            tcp,
            server::metrics_router(engine.scrape.clone()),
            server::Limits::DEFAULT,
        );
        let api_srv = server::serve(
            unix,
            server::api_router(
                engine.clone(),
                cfg.authority(),
                recorder.as_ref().map(|r| r.reader()),
            ),
            server::Limits::DEFAULT,
        );
        if let Some(s) = signals.pending().await {
            tracing::info!("{s} during start: stopping");
            notify_ready(Some(&format!("bloatd got {s} while starting and stopped")));
            return Ok(());
        }
        notify_ready(None);
        tokio::select! {
            r = metrics => r.map_err(Error::from),
            r = api_srv => r.map_err(Error::from),
            _ = ticker => Ok(()),
            s = signals.recv() => { tracing::info!("{s}: stopping"); Ok(()) }
        }
    });
    // Detach probes, restore the default cc, unregister our algorithms:
    // moving other namespaces' defaults needs the capabilities kept for it.
    drop(rt);
    caps::raise_for_stop();
    if !engine.stop() {
        tracing::warn!("engine still referenced at exit; the kernel will detach it");
    }
    if let Some(r) = recorder {
        r.stop();
    }
    dir.unlink(SOCKET);
    dir.unlink(PID_FILE);
    drop(lock);
    tracing::info!("bloatd stopped");
    result.map(|_| ExitCode::SUCCESS)
}

/// A panic in the daemon gives DRWA's windows back before the process goes:
/// the message first (into the log), then, with the kept capabilities
/// raised (entering other namespaces needs CAP_SYS_ADMIN), every clamp
/// back and the pin removed, then the process exits (101, as an uncaught
/// panic does), wherever the panic happened: a daemon in an unknown state
/// does not go on acting on the kernel. `Restart=on-failure` starts a new
/// one.
fn install_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        previous(info);
        if let Some(g) = crate::probes::policy::GiveBack::for_panic() {
            caps::raise_for_stop();
            let n = g.all();
            eprintln!("bloatd: after the panic, gave back {n} receive windows DRWA had clamped");
        }
        std::process::exit(101);
    }));
}

type Setup = (
    RunDir,
    PidLock,
    std::net::TcpListener,
    std::os::unix::net::UnixListener,
    Engine,
    // The flight recorder to start (None: off), with why its directory
    // was refused, if it was.
    Option<Option<Error>>,
);

fn setup(cfg: &Config) -> Result<Setup> {
    crate::probes::preflight()?;
    let dir = RunDir::prepare(&cfg.run_dir, cfg.api_gid().map(|(_, g)| g))?;
    let lock = take_lock(&dir)?;
    // A default congestion control a daemon that did not stop left: back
    // to the host's, whatever this start's flags.
    if let Some(line) = crate::cc::restore_left(&dir) {
        tracing::warn!("{line}");
    }
    // Listeners first: a taken port fails fast, before anything is attached.
    let tcp = std::net::TcpListener::bind(cfg.listen).map_err(|e| match e.kind() {
        std::io::ErrorKind::AddrInUse => Error::PortInUse(cfg.listen),
        _ => Error::context(format!("cannot listen on {}", cfg.listen), e),
    })?;
    tcp.set_nonblocking(true)?;
    let unix = dir.bind_socket(cfg.api_gid().map(|(_, g)| g))?;
    let engine = Engine::start(cfg, "daemon", true)?;
    // The journal's directory takes a group: before the capabilities go.
    let recorder = (cfg.journal_max_mb > 0).then(|| crate::recorder::prepare(cfg).err());
    // Everything is loaded and attached: from here on bloatd works on the
    // descriptors it holds (see caps.rs for what it keeps, and why).
    caps::drop_after_start()
        .map_err(|e| Error::context("cannot drop capabilities after start", e))?;
    Ok((dir, lock, tcp, unix, engine, recorder))
}
