//! Daemon lifecycle: `start` (background or foreground), `stop`, `status`.
//!
//! Liveness is an exclusive flock on the pid file, held for the daemon's
//! whole life: the kernel drops it when the process ends, even by kill -9,
//! so a pid file whose lock can be taken is stale, whatever pid it holds.
//! The probes' links and the congestion controls' struct_ops links are file
//! descriptors too, so nothing bloatd attached outlives the process.

use crate::api;
use crate::caps;
use crate::client::{Client, ClientError};
use crate::config::Config;
use crate::core::{Core, Status};
use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const EXIT_NOT_RUNNING: u8 = 3;
const READY_ENV: &str = "BLOATD_READY_FD";
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const PID_FILE: &str = "bloatd.pid";
const SOCKET: &str = "bloatd.sock";
const LOG: &str = "bloatd.log";
/// The kernel's largest pid_max (PID_MAX_LIMIT on 64-bit).
const PID_MAX_LIMIT: u32 = 4_194_304;

/// The gid of group `name`, if it exists.
pub fn group_id(name: &str) -> Option<libc::gid_t> {
    let c = CString::new(name).ok()?;
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16384];
    let mut out: *mut libc::group = std::ptr::null_mut();
    // SAFETY: getgrnam_r with valid buffers; the result points into them.
    let rc = unsafe { libc::getgrnam_r(c.as_ptr(), &mut grp, buf.as_mut_ptr(), buf.len(), &mut out) };
    (rc == 0 && !out.is_null()).then_some(grp.gr_gid)
}

/// The name of group `gid`, if it has one.
pub fn group_name(gid: libc::gid_t) -> Option<String> {
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16384];
    let mut out: *mut libc::group = std::ptr::null_mut();
    // SAFETY: as in group_id.
    let rc = unsafe { libc::getgrgid_r(gid, &mut grp, buf.as_mut_ptr(), buf.len(), &mut out) };
    if rc != 0 || out.is_null() {
        return None;
    }
    // SAFETY: gr_name is a NUL-terminated string inside buf.
    Some(unsafe { std::ffi::CStr::from_ptr(grp.gr_name) }.to_string_lossy().into_owned())
}

fn cstring(s: &str) -> CString {
    CString::new(s).expect("file names have no NUL")
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// The run directory, opened without following a symlink, and checked:
/// owned by root (or by whoever runs bloatd) and writable by nobody else,
/// so no other user can plant, swap or lock the files in it. Every file in
/// it is opened relative to this descriptor, with O_NOFOLLOW.
pub struct RunDir {
    fd: OwnedFd,
    path: PathBuf,
}

impl RunDir {
    /// Open an existing run directory (clients and the checks before start).
    pub fn open(path: &Path) -> std::io::Result<RunDir> {
        let c = CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
        // SAFETY: open(2) with a valid C string.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
        if fd < 0 {
            let e = errno();
            if e.raw_os_error() == Some(libc::ELOOP) || e.raw_os_error() == Some(libc::ENOTDIR) {
                return Err(std::io::Error::other(format!(
                    "run directory {} is a symlink or not a directory: bloatd refuses it (choose another --run-dir)",
                    path.display()
                )));
            }
            return Err(e);
        }
        // SAFETY: open returned a new descriptor that we own.
        let dir = RunDir { fd: unsafe { OwnedFd::from_raw_fd(fd) }, path: path.to_path_buf() };
        let m = File::from(dir.fd.try_clone()?).metadata()?;
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        if (m.uid() != 0 && m.uid() != euid) || m.mode() & 0o022 != 0 {
            return Err(std::io::Error::other(format!(
                "run directory {} is owned by uid {} with mode {:o}: bloatd keeps its pid file and API socket only in a directory that root owns and no one else may write (choose another --run-dir)",
                path.display(),
                m.uid(),
                m.mode() & 0o7777
            )));
        }
        Ok(dir)
    }

    /// The daemon's side: create the directory if it is missing, check it,
    /// and give it mode 0750 with the API group (0700 without one).
    fn prepare(cfg: &Config) -> anyhow::Result<RunDir> {
        let gid = cfg.api_gid().map(|(_, g)| g);
        let mode = if gid.is_some() { 0o750 } else { 0o700 };
        if let Some(parent) = cfg.run_dir.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", parent.display()))?;
        }
        let c = CString::new(cfg.run_dir.as_os_str().as_bytes())?;
        // SAFETY: mkdir(2) with a valid C string; the umask is 077 here.
        if unsafe { libc::mkdir(c.as_ptr(), mode) } != 0 && errno().kind() != std::io::ErrorKind::AlreadyExists {
            anyhow::bail!("cannot create run directory {}: {}", cfg.run_dir.display(), errno());
        }
        let dir = RunDir::open(&cfg.run_dir)?;
        // SAFETY: fchown/fchmod on our descriptor.
        unsafe {
            if let Some(g) = gid {
                if libc::fchown(dir.fd.as_raw_fd(), u32::MAX, g) != 0 {
                    anyhow::bail!("cannot give {} to the API group: {}", cfg.run_dir.display(), errno());
                }
            }
            if libc::fchmod(dir.fd.as_raw_fd(), mode) != 0 {
                anyhow::bail!("cannot set the mode of {}: {}", cfg.run_dir.display(), errno());
            }
        }
        Ok(dir)
    }

    /// openat(2) in this directory, never following a symlink.
    fn open_file(&self, name: &str, flags: libc::c_int, mode: libc::mode_t) -> std::io::Result<File> {
        let c = cstring(name);
        // SAFETY: openat(2) with our directory descriptor and a valid C string.
        let fd = unsafe {
            libc::openat(self.fd.as_raw_fd(), c.as_ptr(), flags | libc::O_NOFOLLOW | libc::O_CLOEXEC, mode as libc::c_uint)
        };
        if fd < 0 {
            return Err(errno());
        }
        // SAFETY: openat returned a new descriptor that we own.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    fn unlink(&self, name: &str) {
        let c = cstring(name);
        // SAFETY: unlinkat(2) in our directory.
        unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) };
    }

    /// A path to `name` through this descriptor (/proc/self/fd/N/name), for
    /// calls that take only a path (bind): it resolves to this directory
    /// even if the directory's own path is swapped meanwhile.
    fn fd_path(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}/{name}", self.fd.as_raw_fd()))
    }

    /// Create the API socket: bound with umask 177 (so it exists as 0600
    /// root:root), then given its group and mode 0660. It is never more
    /// open than intended, not even between bind and chmod.
    fn bind_socket(&self, gid: Option<libc::gid_t>) -> anyhow::Result<std::os::unix::net::UnixListener> {
        let sock = self.path.join(SOCKET);
        // We hold the lock, so a socket file left here belongs to a dead daemon.
        self.unlink(SOCKET);
        // SAFETY: umask(2) always succeeds.
        let old = unsafe { libc::umask(0o177) };
        let bound = std::os::unix::net::UnixListener::bind(self.fd_path(SOCKET));
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        let unix = bound.map_err(|e| anyhow::anyhow!("cannot create API socket {}: {e}", sock.display()))?;
        let c = cstring(SOCKET);
        // SAFETY: fchownat/fchmodat in our directory on the socket just made.
        unsafe {
            if let Some(g) = gid {
                if libc::fchownat(self.fd.as_raw_fd(), c.as_ptr(), u32::MAX, g, libc::AT_SYMLINK_NOFOLLOW) != 0 {
                    anyhow::bail!("cannot give {} to the API group: {}", sock.display(), errno());
                }
            }
            if libc::fchmodat(self.fd.as_raw_fd(), c.as_ptr(), 0o660, 0) != 0 {
                anyhow::bail!("cannot set the mode of {}: {}", sock.display(), errno());
            }
        }
        unix.set_nonblocking(true)?;
        Ok(unix)
    }
}

/// `bloatd start` refuses an unsafe run directory as bad input (exit 2).
pub fn check_run_dir(dir: &Path) -> Result<(), String> {
    match RunDir::open(dir) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::Other => Err(e.to_string()),
        Err(_) => Ok(()), // not ours to judge here (e.g. no permission): start says why
    }
}

/// The pid file, locked.
pub struct PidLock {
    _file: File,
}

enum LockState {
    Free,
    Held(Option<u32>),
    /// The pid file exists but we may not read it (not root).
    NoAccess,
}

fn flock(f: &File, op: libc::c_int) -> bool {
    // SAFETY: valid fd.
    unsafe { libc::flock(f.as_raw_fd(), op) == 0 }
}

/// Is a daemon holding the pid file's lock, and which pid does it name?
/// The pid file is 0600 in a directory only root may write: no other user
/// can open it, so no other user can hold its lock.
fn lock_state(cfg: &Config) -> anyhow::Result<(LockState, Option<RunDir>)> {
    let dir = match RunDir::open(&cfg.run_dir) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((LockState::Free, None)),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return Ok((LockState::NoAccess, None)),
        Err(e) => return Err(e.into()),
    };
    let f = match dir.open_file(PID_FILE, libc::O_RDONLY, 0) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((LockState::Free, Some(dir))),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return Ok((LockState::NoAccess, Some(dir))),
        Err(e) => anyhow::bail!("cannot open pid file {}: {e}", cfg.pid_file().display()),
    };
    if flock(&f, libc::LOCK_SH | libc::LOCK_NB) {
        return Ok((LockState::Free, Some(dir)));
    }
    let mut s = String::new();
    let _ = (&f).read_to_string(&mut s);
    Ok((LockState::Held(s.trim().parse().ok()), Some(dir)))
}

fn take_lock(dir: &RunDir, cfg: &Config) -> anyhow::Result<PidLock> {
    let path = cfg.pid_file();
    let mut f = dir
        .open_file(PID_FILE, libc::O_RDWR | libc::O_CREAT, 0o600)
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

/// The pid a `stop` may signal: the one the pid file names, if that process
/// is a bloatd (/proc/PID/exe) holding the pid file's lock (/proc/locks).
/// 0 would signal our own process group and values beyond pid_max become
/// kill(-1): both refused, as is any process that is not the daemon.
fn daemon_pid(dir: &RunDir, cfg: &Config, pid: Option<u32>) -> anyhow::Result<i32> {
    let file = cfg.pid_file();
    let pid = pid.ok_or_else(|| anyhow::anyhow!("pid file {} is locked but holds no pid", file.display()))?;
    if pid == 0 || pid > PID_MAX_LIMIT {
        anyhow::bail!("pid file {} names pid {pid}, which no process can have: refusing to signal it", file.display());
    }
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .map_err(|e| anyhow::anyhow!("pid {pid} named by {}: {e}: refusing to signal it", file.display()))?;
    let name = exe.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if name.trim_end_matches(" (deleted)") != "bloatd" {
        anyhow::bail!(
            "pid {pid} named by {} is {}, not bloatd: refusing to signal it",
            file.display(),
            crate::text::printable(&exe.display().to_string())
        );
    }
    let m = dir.open_file(PID_FILE, libc::O_RDONLY, 0)?.metadata()?;
    if !holds_flock(pid, m.dev(), m.ino()) {
        anyhow::bail!("pid {pid} does not hold the lock on {}: refusing to signal it", file.display());
    }
    Ok(pid as i32)
}

/// Does `pid` hold a flock write lock on the file (dev, ino)? /proc/locks:
/// "1: FLOCK  ADVISORY  WRITE 1234 00:19:5678 0 EOF".
fn holds_flock(pid: u32, dev: u64, ino: u64) -> bool {
    let want = format!("{:02x}:{:02x}:{ino}", libc::major(dev), libc::minor(dev));
    let Ok(locks) = std::fs::read_to_string("/proc/locks") else { return false };
    locks.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() >= 6 && f[1] == "FLOCK" && f[3] == "WRITE" && f[4] == pid.to_string() && f[5] == want
    })
}

/// `bloatd start`: spawn the daemon in the background and wait until it has
/// attached its probes and opened its listeners, or report why it failed.
pub fn start_background(cfg: &Config, args: &[String]) -> anyhow::Result<ExitCode> {
    crate::probes::preflight()?;
    // SAFETY: umask(2) always succeeds. Nothing bloatd creates is for others.
    unsafe { libc::umask(0o077) };
    if let (LockState::Held(pid), _) = lock_state(cfg)? {
        anyhow::bail!(
            "bloatd is already running (pid {}); `bloatd stop` first to restart it",
            pid.map(|p| p.to_string()).unwrap_or_else(|| "?".into())
        );
    }
    let dir = RunDir::prepare(cfg)?;
    let log = dir
        .open_file(LOG, libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT, 0o600)
        .map_err(|e| anyhow::anyhow!("cannot open log {}: {e}", cfg.log_file().display()))?;

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
            status.probes.join(" "),
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

/// Tell whoever waits that the daemon is up (or why not): `bloatd start`
/// through the readiness pipe, systemd (Type=notify) through $NOTIFY_SOCKET.
fn notify_ready(result: &Result<(), String>) {
    if let (Ok(()), Some(path)) = (result, std::env::var_os("NOTIFY_SOCKET")) {
        sd_notify(&path, "READY=1\n");
    }
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

/// `bloatd start --foreground`: run until SIGTERM, SIGINT or SIGHUP.
pub fn run_foreground(cfg: &Config) -> anyhow::Result<ExitCode> {
    // SAFETY: umask(2) always succeeds. Nothing bloatd creates is for others.
    unsafe { libc::umask(0o077) };
    let (dir, lock, tcp, unix, core) = match setup(cfg) {
        Ok(s) => s,
        Err(e) => {
            notify_ready(&Err(format!("{e:#}")));
            return Err(e);
        }
    };
    tracing::info!(
        "bloatd {} running: metrics on http://{}/metrics, API on {} ({})",
        env!("CARGO_PKG_VERSION"),
        cfg.listen,
        cfg.socket_path().display(),
        match cfg.api_gid() {
            Some((name, _)) => format!("root and group {name}"),
            None => "root only".into(),
        }
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
        let metrics = api::serve(tcp, api::metrics_router(core.clone()), api::Limits::DEFAULT);
        let api_srv = api::serve(unix, api::api_router(core.clone()), api::Limits::DEFAULT);
        notify_ready(&Ok(()));
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        // SIGHUP ends the daemon like SIGTERM (there is no reload: a new
        // config takes a restart), so a hung-up terminal that started
        // `bloatd start --foreground` restores the default cc on its way.
        let mut hup = signal(SignalKind::hangup())?;
        tokio::select! {
            r = metrics => r.map_err(anyhow::Error::from),
            r = api_srv => r.map_err(anyhow::Error::from),
            _ = ticker => Ok(()),
            _ = term.recv() => { tracing::info!("SIGTERM: stopping"); Ok(()) }
            _ = int.recv() => { tracing::info!("SIGINT: stopping"); Ok(()) }
            _ = hup.recv() => { tracing::info!("SIGHUP: stopping"); Ok(()) }
        }
    });
    // Detach probes, restore the default cc, unregister our algorithms:
    // moving other namespaces' defaults needs the capabilities kept for it.
    drop(rt);
    caps::raise_for_stop();
    match Arc::try_unwrap(core) {
        Ok(m) => drop(m.into_inner()),
        Err(_) => tracing::warn!("engine still referenced at exit; the kernel will detach it"),
    }
    dir.unlink(SOCKET);
    dir.unlink(PID_FILE);
    drop(lock);
    tracing::info!("bloatd stopped");
    result.map(|_| ExitCode::SUCCESS)
}

type Setup = (RunDir, PidLock, std::net::TcpListener, std::os::unix::net::UnixListener, Core);

fn setup(cfg: &Config) -> anyhow::Result<Setup> {
    crate::probes::preflight()?;
    let dir = RunDir::prepare(cfg)?;
    let lock = take_lock(&dir, cfg)?;
    // Listeners first: a taken port fails fast, before anything is attached.
    let tcp = std::net::TcpListener::bind(cfg.listen).map_err(|e| match e.kind() {
        std::io::ErrorKind::AddrInUse => anyhow::anyhow!(
            "port in use: {} is already taken by another program (choose another with --listen)",
            cfg.listen
        ),
        _ => anyhow::anyhow!("cannot listen on {}: {e}", cfg.listen),
    })?;
    tcp.set_nonblocking(true)?;
    let unix = dir.bind_socket(cfg.api_gid().map(|(_, g)| g))?;
    let core = Core::start(cfg, "daemon", true)?;
    // Everything is loaded and attached: from here on bloatd works on the
    // descriptors it holds (see caps.rs for what it keeps, and why).
    caps::drop_after_start().map_err(|e| anyhow::anyhow!("cannot drop capabilities after start: {e}"))?;
    Ok((dir, lock, tcp, unix, core))
}

/// `bloatd stop`.
pub fn stop(cfg: &Config) -> anyhow::Result<ExitCode> {
    let pid = match lock_state(cfg)? {
        (LockState::Free, _) => {
            println!("bloatd is not running");
            return Ok(ExitCode::from(EXIT_NOT_RUNNING));
        }
        (LockState::NoAccess, _) => {
            anyhow::bail!("permission denied on {}: `bloatd stop` needs root (run it with sudo)", cfg.run_dir.display())
        }
        (LockState::Held(pid), Some(dir)) => daemon_pid(&dir, cfg, pid)?,
        (LockState::Held(_), None) => unreachable!("a held lock is read through the run directory"),
    };
    // SAFETY: plain kill(2) of a pid checked above to be the daemon.
    if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
        anyhow::bail!("cannot signal bloatd (pid {pid}): {}", errno());
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if matches!(lock_state(cfg), Ok((LockState::Free, _))) {
            println!("bloatd stopped (pid {pid}): probes detached, congestion controls unregistered");
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    anyhow::bail!("bloatd (pid {pid}) did not stop within 15 s; `kill -9 {pid}` is safe: the kernel detaches everything it attached")
}

/// `bloatd status`: exit 0 when running, 3 when not.
pub fn status(cfg: &Config, json: bool) -> anyhow::Result<ExitCode> {
    let (state, _) = lock_state(cfg)?;
    let pid = match state {
        LockState::Free => {
            let stale = cfg.pid_file().exists() || cfg.socket_path().exists();
            if json {
                println!("{}", serde_json::json!({"running": false, "stale_files": stale}));
            } else if stale {
                println!("bloatd is not running (stale files in {} from an earlier run; the next start replaces them)", cfg.run_dir.display());
            } else {
                println!("bloatd is not running");
            }
            return Ok(ExitCode::from(EXIT_NOT_RUNNING));
        }
        LockState::Held(pid) => pid,
        // Not root: the API socket answers for the daemon, if we may use it.
        LockState::NoAccess => None,
    };
    let s: Status = match Client::new(&cfg.socket_path()).get("/v1/status") {
        Ok(s) => s,
        Err(ClientError::NotRunning(_)) if pid.is_none() => {
            println!("bloatd is not running");
            return Ok(ExitCode::from(EXIT_NOT_RUNNING));
        }
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

fn print_status(s: &Status) {
    let up_s = crate::model::Clock::now().unix_ms.saturating_sub(s.started_unix_ms) / 1000;
    println!("bloatd {} running (pid {}, up {}s, {} mode)", s.version, s.pid, up_s, s.mode);
    println!("  probes:      {}", s.probes.join(" "));
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
