//! Daemon lifecycle: `start` (background or foreground), `stop`, `status`.
//!
//! Liveness is an exclusive flock on the pid file, held for the daemon's
//! whole life: the kernel drops it when the process ends, even by kill -9,
//! so a pid file whose lock can be taken is stale, whatever pid it holds.
//! The probes' links and the congestion controls' struct_ops links are file
//! descriptors too, so nothing bloatd attached outlives the process.

use crate::api;
use crate::client::{Client, ClientError};
use crate::config::Config;
use crate::core::{Core, Status};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const EXIT_NOT_RUNNING: u8 = 3;
const READY_ENV: &str = "BLOATD_READY_FD";
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The pid file, locked.
pub struct PidLock {
    _file: File,
}

enum LockState {
    Free,
    Held(Option<u32>),
}

fn flock(f: &File, op: libc::c_int) -> bool {
    // SAFETY: valid fd.
    unsafe { libc::flock(f.as_raw_fd(), op) == 0 }
}

/// Is a daemon holding the pid file's lock, and which pid does it name?
fn lock_state(pid_file: &Path) -> LockState {
    let Ok(f) = File::open(pid_file) else { return LockState::Free };
    if flock(&f, libc::LOCK_SH | libc::LOCK_NB) {
        return LockState::Free;
    }
    let mut s = String::new();
    let _ = (&f).read_to_string(&mut s);
    LockState::Held(s.trim().parse().ok())
}

fn take_lock(cfg: &Config) -> anyhow::Result<PidLock> {
    std::fs::create_dir_all(&cfg.run_dir)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", cfg.run_dir.display()))?;
    let path = cfg.pid_file();
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| anyhow::anyhow!("cannot open pid file {}: {e}", path.display()))?;
    if !flock(&f, libc::LOCK_EX | libc::LOCK_NB) {
        let mut s = String::new();
        let _ = f.read_to_string(&mut s);
        anyhow::bail!("bloatd is already running (pid {})", s.trim());
    }
    f.set_len(0)?;
    writeln!(f, "{}", std::process::id())?;
    Ok(PidLock { _file: f })
}

/// `bloatd start`: spawn the daemon in the background and wait until it has
/// attached its probes and opened its listeners, or report why it failed.
pub fn start_background(cfg: &Config, args: &[String]) -> anyhow::Result<ExitCode> {
    if let LockState::Held(pid) = lock_state(&cfg.pid_file()) {
        anyhow::bail!(
            "bloatd is already running (pid {}); `bloatd stop` first to restart it",
            pid.map(|p| p.to_string()).unwrap_or_else(|| "?".into())
        );
    }
    crate::probes::preflight()?;
    std::fs::create_dir_all(&cfg.run_dir)?;
    let log = OpenOptions::new().create(true).append(true).open(cfg.log_file())?;

    let mut fds: [RawFd; 2] = [0; 2];
    // SAFETY: valid array of two fds.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        anyhow::bail!("pipe: {}", std::io::Error::last_os_error());
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
    let msg = read_with_timeout(File::from(rd), READY_TIMEOUT);
    let msg = msg.trim();
    if let Some(rest) = msg.strip_prefix("ok") {
        let _ = rest;
        let status: Status = Client::new(&cfg.socket_path()).get("/v1/status")?;
        println!(
            "bloatd started (pid {}): probes {}; congestion controls: {}; metrics http://{}/metrics; API {}",
            status.pid,
            status.hooks.join(" "),
            if status.cc_registered.is_empty() { "none".into() } else { status.cc_registered.join(" ") },
            cfg.listen,
            cfg.socket_path().display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    if msg.is_empty() && child.try_wait()?.is_none() {
        let _ = child.kill();
        anyhow::bail!("bloatd did not get ready within {}s; see {}", READY_TIMEOUT.as_secs(), cfg.log_file().display());
    }
    let reason = msg.strip_prefix("err ").map(str::to_string).unwrap_or_else(|| {
        format!("bloatd exited during start; see {}", cfg.log_file().display())
    });
    let _ = child.wait();
    anyhow::bail!("{reason}")
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
        let mut pfd = libc::pollfd { fd: f.as_raw_fd(), events: libc::POLLIN, revents: 0 };
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

fn notify_ready(result: &Result<(), String>) {
    let Ok(fd) = std::env::var(READY_ENV) else { return };
    let Ok(fd) = fd.parse::<RawFd>() else { return };
    // SAFETY: our parent passed us this pipe's write end; we take it once.
    let mut f = unsafe { File::from_raw_fd(fd) };
    let line = match result {
        Ok(()) => "ok\n".to_string(),
        Err(e) => format!("err {}\n", e.replace('\n', " ")),
    };
    let _ = f.write_all(line.as_bytes());
    std::env::remove_var(READY_ENV);
}

/// `bloatd start --foreground`: run until SIGTERM/SIGINT.
pub fn run_foreground(cfg: &Config) -> anyhow::Result<ExitCode> {
    let setup = setup(cfg);
    let (lock, tcp, unix, core) = match setup {
        Ok(s) => s,
        Err(e) => {
            notify_ready(&Err(format!("{e:#}")));
            return Err(e);
        }
    };
    tracing::info!(
        "bloatd {} running: metrics on http://{}/metrics, API on {}",
        env!("CARGO_PKG_VERSION"),
        cfg.listen,
        cfg.socket_path().display()
    );
    let core = Arc::new(Mutex::new(core));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let interval = Duration::from_millis(cfg.interval_ms);
    let result = rt.block_on(async {
        let tcp = tokio::net::TcpListener::from_std(tcp)?;
        let unix = tokio::net::UnixListener::from_std(unix)?;
        let ticker = {
            let core = core.clone();
            async move {
                let mut t = tokio::time::interval(interval);
                t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    t.tick().await;
                    core.lock().unwrap().tick();
                }
            }
        };
        let metrics = axum::serve(tcp, api::metrics_router(core.clone()));
        let api_srv = axum::serve(unix, api::api_router(core.clone()));
        notify_ready(&Ok(()));
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = metrics => r.map_err(anyhow::Error::from),
            r = api_srv => r.map_err(anyhow::Error::from),
            _ = ticker => Ok(()),
            _ = term.recv() => { tracing::info!("SIGTERM: stopping"); Ok(()) }
            _ = tokio::signal::ctrl_c() => { tracing::info!("SIGINT: stopping"); Ok(()) }
        }
    });
    // Detach probes, restore the default cc, unregister our algorithms.
    drop(rt);
    match Arc::try_unwrap(core) {
        Ok(m) => drop(m.into_inner()),
        Err(_) => tracing::warn!("engine still referenced at exit; the kernel will detach it"),
    }
    let _ = std::fs::remove_file(cfg.socket_path());
    let _ = std::fs::remove_file(cfg.pid_file());
    drop(lock);
    tracing::info!("bloatd stopped");
    result.map(|_| ExitCode::SUCCESS)
}

type Setup = (PidLock, std::net::TcpListener, std::os::unix::net::UnixListener, Core);

fn setup(cfg: &Config) -> anyhow::Result<Setup> {
    crate::probes::preflight()?;
    let lock = take_lock(cfg)?;
    // Listeners first: a taken port fails fast, before anything is attached.
    let tcp = std::net::TcpListener::bind(cfg.listen).map_err(|e| match e.kind() {
        std::io::ErrorKind::AddrInUse => anyhow::anyhow!(
            "port in use: {} is already taken by another program (choose another with --listen)",
            cfg.listen
        ),
        _ => anyhow::anyhow!("cannot listen on {}: {e}", cfg.listen),
    })?;
    tcp.set_nonblocking(true)?;
    let sock = cfg.socket_path();
    // We hold the lock, so a socket file left here belongs to a dead daemon.
    let _ = std::fs::remove_file(&sock);
    let unix = std::os::unix::net::UnixListener::bind(&sock)
        .map_err(|e| anyhow::anyhow!("cannot create API socket {}: {e}", sock.display()))?;
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o660))?;
    unix.set_nonblocking(true)?;
    let core = Core::start(cfg, "daemon", true)?;
    Ok((lock, tcp, unix, core))
}

/// `bloatd stop`.
pub fn stop(cfg: &Config) -> anyhow::Result<ExitCode> {
    let LockState::Held(pid) = lock_state(&cfg.pid_file()) else {
        println!("bloatd is not running");
        return Ok(ExitCode::from(EXIT_NOT_RUNNING));
    };
    let pid = pid.ok_or_else(|| anyhow::anyhow!("pid file {} is locked but holds no pid", cfg.pid_file().display()))?;
    // SAFETY: plain kill(2).
    if unsafe { libc::kill(pid as i32, libc::SIGTERM) } != 0 {
        anyhow::bail!("cannot signal bloatd (pid {pid}): {}", std::io::Error::last_os_error());
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if matches!(lock_state(&cfg.pid_file()), LockState::Free) {
            println!("bloatd stopped (pid {pid}): probes detached, congestion controls unregistered");
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    anyhow::bail!("bloatd (pid {pid}) did not stop within 15 s; `kill -9 {pid}` is safe: the kernel detaches everything it attached")
}

/// `bloatd status`: exit 0 when running, 3 when not.
pub fn status(cfg: &Config, json: bool) -> anyhow::Result<ExitCode> {
    match lock_state(&cfg.pid_file()) {
        LockState::Free => {
            let stale = cfg.pid_file().exists() || cfg.socket_path().exists();
            if json {
                println!("{}", serde_json::json!({"running": false, "stale_files": stale}));
            } else if stale {
                println!("bloatd is not running (stale files in {} from an earlier run; the next start replaces them)", cfg.run_dir.display());
            } else {
                println!("bloatd is not running");
            }
            Ok(ExitCode::from(EXIT_NOT_RUNNING))
        }
        LockState::Held(pid) => {
            let s: Status = match Client::new(&cfg.socket_path()).get("/v1/status") {
                Ok(s) => s,
                Err(ClientError::NotRunning(_)) => {
                    println!("bloatd (pid {}) is starting or stuck: its API socket is not up", pid.unwrap_or(0));
                    return Ok(ExitCode::from(1));
                }
                Err(e) => return Err(e.into()),
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                print_status(&s);
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn print_status(s: &Status) {
    let up_s = crate::model::Clock::now().unix_ms.saturating_sub(s.started_unix_ms) / 1000;
    println!("bloatd {} running (pid {}, up {}s, {} mode)", s.version, s.pid, up_s, s.mode);
    println!("  probes:      {}", s.hooks.join(" "));
    println!(
        "  cc:          {} (host default: {})",
        if s.cc_registered.is_empty() { "none registered".into() } else { s.cc_registered.join(" ") },
        s.default_cc.as_deref().unwrap_or("?")
    );
    if let Some(l) = &s.listen {
        println!("  metrics:     http://{l}/metrics");
    }
    if let Some(e) = &s.sockops_error {
        println!("  sock_ops:    not attached ({e}): senders that closed their end are not sampled");
    }
    println!("  sockets:     {} tracked (interval {} ms)", s.sockets, s.interval_ms);
    let h = &s.health;
    println!(
        "  health:      {} events, {} dropped, socket map {}/{} ({:.1}%)",
        h.events_total,
        h.dropped_total,
        h.map_entries,
        h.map_capacity,
        h.map_entries as f64 * 100.0 / h.map_capacity.max(1) as f64
    );
}
