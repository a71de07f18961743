//! The run directory (/run/bloatd): the pid file, the API socket and the
//! log, and who may enter it.
//!
//! Liveness is an exclusive flock on the pid file, held for the daemon's
//! whole life: the kernel drops it when the process ends, even by kill -9,
//! so a pid file whose lock can be taken is stale, whatever pid it holds.
//! The probes' links and the congestion controls' struct_ops links are file
//! descriptors too, so nothing bloatd attached outlives the process.

use crate::error::{Error, Result};
use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

pub const PID_FILE: &str = "bloatd.pid";
pub const SOCKET: &str = "bloatd.sock";
pub const LOG: &str = "bloatd.log";
/// The log before the current one (see [`RotatingLog`]).
pub const LOG_OLD: &str = "bloatd.log.1";
/// The log's size at which it rotates.
pub const LOG_MAX_BYTES: u64 = 1 << 20;

/// Where bloatd looks groups up. Read as a file, not through NSS
/// (getgrnam): the release binary is linked statically, and a static
/// glibc's NSS loads the running system's libnss modules, built for
/// another glibc. bloatd's groups (`api_group`, `admin_group`) are local
/// groups, made by `groupadd`/`addgroup` into this file (the package's
/// postinst, the chart's mounted /etc/group).
pub const GROUP_FILE: &str = "/etc/group";

/// The (name, gid) entries of a group file's text, in order: lines
/// `name:password:gid:members`; comments, blank lines, NIS `+`/`-` lines
/// and lines without a numeric gid are skipped, as glibc's files module
/// skips them.
fn group_entries(text: &str) -> impl Iterator<Item = (&str, libc::gid_t)> {
    text.lines().filter_map(|line| {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with(['#', '+', '-']) {
            return None;
        }
        let mut f = line.split(':');
        let name = f.next().filter(|n| !n.is_empty())?;
        let gid = f.nth(1)?.trim().parse().ok()?;
        Some((name, gid))
    })
}

fn group_file() -> String {
    // Bytes that are not UTF-8 cannot be a name bloatd was given (its
    // config is UTF-8): lossily read, such a line just matches nothing.
    std::fs::read(GROUP_FILE)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// The gid of group `name`, if /etc/group has it (the first entry, as
/// getgrnam would give).
pub fn group_id(name: &str) -> Option<libc::gid_t> {
    group_id_in(&group_file(), name)
}

fn group_id_in(text: &str, name: &str) -> Option<libc::gid_t> {
    group_entries(text)
        .find(|&(n, _)| n == name)
        .map(|(_, g)| g)
}

/// The name of group `gid`, if /etc/group names it.
pub fn group_name(gid: libc::gid_t) -> Option<String> {
    group_name_in(&group_file(), gid)
}

fn group_name_in(text: &str, gid: libc::gid_t) -> Option<String> {
    group_entries(text)
        .find(|&(_, g)| g == gid)
        .map(|(n, _)| n.to_string())
}

fn cstring(s: &str) -> CString {
    CString::new(s).expect("file names have no NUL")
}

pub fn errno() -> std::io::Error {
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

/// Which of bloatd's directories a [`RunDir`] is, for its messages and
/// its mode.
pub struct DirKind {
    /// "run directory".
    pub what: &'static str,
    /// What bloatd keeps in it, for the refusal.
    pub holds: &'static str,
    /// The option that chooses another.
    pub option: &'static str,
    /// Set-group-ID on the directory, so the files bloatd creates in it
    /// take its group (the API group) without a chown.
    pub setgid: bool,
}

/// /run/bloatd: the pid file, the API socket, the log.
pub const RUN: DirKind = DirKind {
    what: "run directory",
    holds: "its pid file and API socket",
    option: "--run-dir",
    setgid: false,
};

impl RunDir {
    /// Open an existing run directory (clients and the checks before start).
    pub fn open(path: &Path) -> std::io::Result<RunDir> {
        RunDir::open_kind(path, &RUN)
    }

    /// Open an existing directory of `kind`, checked.
    pub fn open_kind(path: &Path, kind: &DirKind) -> std::io::Result<RunDir> {
        let c = CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
        // SAFETY: open(2) with a valid C string.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = errno();
            if e.raw_os_error() == Some(libc::ELOOP) || e.raw_os_error() == Some(libc::ENOTDIR) {
                return Err(std::io::Error::other(format!(
                    "{} {} is a symlink or not a directory: bloatd refuses it (choose another {})",
                    kind.what,
                    path.display(),
                    kind.option
                )));
            }
            return Err(e);
        }
        // SAFETY: open returned a new descriptor that we own.
        let dir = RunDir {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            path: path.to_path_buf(),
        };
        let m = File::from(dir.fd.try_clone()?).metadata()?;
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        if (m.uid() != 0 && m.uid() != euid) || m.mode() & 0o022 != 0 {
            return Err(std::io::Error::other(format!(
                "{} {} is owned by uid {} with mode {:o}: bloatd keeps {} only in a directory that root owns and no one else may write (choose another {})",
                kind.what,
                path.display(),
                m.uid(),
                m.mode() & 0o7777,
                kind.holds,
                kind.option
            )));
        }
        Ok(dir)
    }

    /// The daemon's side: create the directory if it is missing, check it,
    /// and give it mode 0750 with the API group (0700 without one).
    pub fn prepare(path: &Path, gid: Option<libc::gid_t>) -> Result<RunDir> {
        RunDir::prepare_kind(path, gid, &RUN)
    }

    /// The same for a directory of `kind`.
    pub fn prepare_kind(path: &Path, gid: Option<libc::gid_t>, kind: &DirKind) -> Result<RunDir> {
        let mode = match (gid.is_some(), kind.setgid) {
            (true, true) => 0o2750,
            (true, false) => 0o750,
            (false, _) => 0o700,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| Error::context(format!("cannot create {}", parent.display()), e))?;
        }
        let c = CString::new(path.as_os_str().as_bytes())?;
        // SAFETY: mkdir(2) with a valid C string; the umask is 077 here.
        if unsafe { libc::mkdir(c.as_ptr(), mode) } != 0
            && errno().kind() != std::io::ErrorKind::AlreadyExists
        {
            return Err(Error::context(
                format!("cannot create {} {}", kind.what, path.display()),
                errno(),
            ));
        }
        let dir = RunDir::open_kind(path, kind)?;
        // SAFETY: fchown/fchmod on our descriptor.
        unsafe {
            if let Some(g) = gid {
                if libc::fchown(dir.fd.as_raw_fd(), u32::MAX, g) != 0 {
                    return Err(Error::context(
                        format!("cannot give {} to the API group", path.display()),
                        errno(),
                    ));
                }
            }
            if libc::fchmod(dir.fd.as_raw_fd(), mode) != 0 {
                return Err(Error::context(
                    format!("cannot set the mode of {}", path.display()),
                    errno(),
                ));
            }
        }
        Ok(dir)
    }

    /// openat(2) in this directory, never following a symlink.
    pub fn open_file(
        &self,
        name: &str,
        flags: libc::c_int,
        mode: libc::mode_t,
    ) -> std::io::Result<File> {
        let c = cstring(name);
        // SAFETY: openat(2) with our directory descriptor and a valid C string.
        let fd = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(errno());
        }
        // SAFETY: openat returned a new descriptor that we own.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// renameat(2) within this directory.
    pub fn rename(&self, from: &str, to: &str) -> std::io::Result<()> {
        let (a, b) = (cstring(from), cstring(to));
        // SAFETY: renameat(2) in our directory with valid C strings.
        if unsafe {
            libc::renameat(
                self.fd.as_raw_fd(),
                a.as_ptr(),
                self.fd.as_raw_fd(),
                b.as_ptr(),
            )
        } != 0
        {
            return Err(errno());
        }
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// fstatat(2) of `name` in this directory, not following a symlink.
    pub fn lstat(&self, name: &str) -> std::io::Result<libc::stat> {
        let c = cstring(name);
        // SAFETY: fstatat(2) into a zeroed stat, our descriptor, a valid C string.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        } != 0
        {
            return Err(errno());
        }
        Ok(st)
    }

    pub fn unlink(&self, name: &str) {
        let c = cstring(name);
        // SAFETY: unlinkat(2) in our directory.
        unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) };
    }

    /// A path to `name` through this descriptor (/proc/self/fd/N/name), for
    /// calls that take only a path (bind): it resolves to this directory
    /// even if the directory's own path is swapped meanwhile.
    pub fn fd_path(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}/{name}", self.fd.as_raw_fd()))
    }

    /// Create the API socket: bound with umask 177 (so it exists as 0600
    /// root:root), then given its group and mode 0660. It is never more
    /// open than intended, not even between bind and chmod.
    pub fn bind_socket(
        &self,
        gid: Option<libc::gid_t>,
    ) -> Result<std::os::unix::net::UnixListener> {
        let sock = self.path.join(SOCKET);
        // We hold the lock, so a socket file left here belongs to a dead daemon.
        self.unlink(SOCKET);
        // SAFETY: umask(2) always succeeds.
        let old = unsafe { libc::umask(0o177) };
        let bound = std::os::unix::net::UnixListener::bind(self.fd_path(SOCKET));
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        let unix = bound.map_err(|e| {
            Error::context(format!("cannot create API socket {}", sock.display()), e)
        })?;
        let c = cstring(SOCKET);
        // SAFETY: fchownat/fchmodat in our directory on the socket just made.
        unsafe {
            if let Some(g) = gid {
                if libc::fchownat(
                    self.fd.as_raw_fd(),
                    c.as_ptr(),
                    u32::MAX,
                    g,
                    libc::AT_SYMLINK_NOFOLLOW,
                ) != 0
                {
                    return Err(Error::context(
                        format!("cannot give {} to the API group", sock.display()),
                        errno(),
                    ));
                }
            }
            if libc::fchmodat(self.fd.as_raw_fd(), c.as_ptr(), 0o660, 0) != 0 {
                return Err(Error::context(
                    format!("cannot set the mode of {}", sock.display()),
                    errno(),
                ));
            }
        }
        unix.set_nonblocking(true)?;
        Ok(unix)
    }
}

/// The log of a daemon started in the background: its standard output
/// and error are bloatd.log of the run directory, on tmpfs (memory), which
/// a client making the daemon log a line per request could otherwise fill.
/// Bounded by size, not by rate: past LOG_MAX_BYTES the file becomes
/// bloatd.log.1 (replacing the one before) and a new bloatd.log starts, so
/// the two never hold more than 2 x LOG_MAX_BYTES however fast lines come,
/// and the newest lines, the ones someone debugging reads, are always
/// kept. (A rate limit alone would still grow without end, only slower.)
/// Standard output and error move to the new file too (dup2), so what is
/// not a tracing line (a panic's message) lands in the current log.
pub struct RotatingLog {
    dir: RunDir,
    written: u64,
}

impl RotatingLog {
    /// The log, if standard error is the run directory's bloatd.log (the
    /// daemon `bloatd start` spawned); None in the foreground, where the
    /// service manager keeps the log.
    pub fn of_stderr(run_dir: &Path) -> Option<RotatingLog> {
        let dir = RunDir::open(run_dir).ok()?;
        let log = dir
            .open_file(LOG, libc::O_RDONLY, 0)
            .ok()?
            .metadata()
            .ok()?;
        // SAFETY: fstat on fd 2 into a zeroed stat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(libc::STDERR_FILENO, &mut st) } != 0
            || (st.st_dev, st.st_ino) != (log.dev(), log.ino())
        {
            return None;
        }
        Some(RotatingLog {
            dir,
            written: st.st_size as u64,
        })
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        let (old, new) = (cstring(LOG), cstring(LOG_OLD));
        let fd = self.dir.fd.as_raw_fd();
        // SAFETY: renameat(2) within our directory.
        if unsafe { libc::renameat(fd, old.as_ptr(), fd, new.as_ptr()) } != 0 {
            return Err(errno());
        }
        let f = self.dir.open_file(
            LOG,
            libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_TRUNC,
            0o600,
        )?;
        for target in [libc::STDOUT_FILENO, libc::STDERR_FILENO] {
            // SAFETY: dup2(2) of a descriptor we own onto a standard one.
            if unsafe { libc::dup2(f.as_raw_fd(), target) } < 0 {
                return Err(errno());
            }
        }
        self.written = 0;
        Ok(())
    }
}

impl std::io::Write for RotatingLog {
    /// One formatted line at a time (tracing writes each event whole).
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.written > 0 && self.written + buf.len() as u64 > LOG_MAX_BYTES {
            // Not rotated: the line still goes where the log is now.
            let _ = self.rotate();
        }
        // SAFETY: fd 2 stays open for the process's life; borrowed here.
        let mut err =
            std::mem::ManuallyDrop::new(unsafe { File::from_raw_fd(libc::STDERR_FILENO) });
        err.write_all(buf)?;
        self.written += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `bloatd start` refuses an unsafe run directory as bad input (exit 2).
pub fn check_run_dir(dir: &Path) -> Result<()> {
    match RunDir::open(dir) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::Other => Err(Error::Io(e)),
        Err(_) => Ok(()), // not ours to judge here (e.g. no permission): start says why
    }
}

/// The pid file, locked.
pub struct PidLock {
    _file: File,
}

pub enum LockState {
    Free,
    Held(Option<u32>),
    /// The pid file exists but we may not read it (not root).
    NoAccess,
}

pub fn flock(f: &File, op: libc::c_int) -> bool {
    // SAFETY: valid fd.
    unsafe { libc::flock(f.as_raw_fd(), op) == 0 }
}

/// Is a daemon holding the pid file's lock, and which pid does it name?
/// The pid file is 0600 in a directory only root may write: no other user
/// can open it, so no other user can hold its lock.
pub fn lock_state(run_dir: &Path) -> Result<(LockState, Option<RunDir>)> {
    let dir = match RunDir::open(run_dir) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((LockState::Free, None)),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Ok((LockState::NoAccess, None))
        }
        Err(e) => return Err(e.into()),
    };
    let f = match dir.open_file(PID_FILE, libc::O_RDONLY, 0) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok((LockState::Free, Some(dir)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Ok((LockState::NoAccess, Some(dir)))
        }
        Err(e) => {
            return Err(Error::context(
                format!("cannot open pid file {}", run_dir.join(PID_FILE).display()),
                e,
            ))
        }
    };
    if flock(&f, libc::LOCK_SH | libc::LOCK_NB) {
        return Ok((LockState::Free, Some(dir)));
    }
    let mut s = String::new();
    let _ = (&f).read_to_string(&mut s);
    Ok((LockState::Held(s.trim().parse().ok()), Some(dir)))
}

/// The pid file's lock for a command that acts for no running daemon
/// (`stop` giving back what one that died left): held while it does, so a
/// `start` meanwhile does not find its crash state taken away. Nothing
/// written: the file's pid stays the last daemon's. None: a daemon (or a
/// start) holds it.
pub fn hold_free(dir: &RunDir) -> Result<Option<PidLock>> {
    let f = dir
        .open_file(PID_FILE, libc::O_RDWR | libc::O_CREAT, 0o600)
        .map_err(|e| {
            Error::context(
                format!("cannot open pid file {}", dir.path.join(PID_FILE).display()),
                e,
            )
        })?;
    Ok(flock(&f, libc::LOCK_EX | libc::LOCK_NB).then_some(PidLock { _file: f }))
}

pub fn take_lock(dir: &RunDir) -> Result<PidLock> {
    let path = dir.path.join(PID_FILE);
    let mut f = dir
        .open_file(PID_FILE, libc::O_RDWR | libc::O_CREAT, 0o600)
        .map_err(|e| Error::context(format!("cannot open pid file {}", path.display()), e))?;
    if !flock(&f, libc::LOCK_EX | libc::LOCK_NB) {
        let mut s = String::new();
        let _ = f.read_to_string(&mut s);
        return Err(Error::PidLocked(s.trim().to_string()));
    }
    f.set_len(0)?;
    writeln!(f, "{}", std::process::id())?;
    Ok(PidLock { _file: f })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GROUP: &str = "root:x:0:\n\
        # a comment:x:5:\n\
        \n\
        +nisgroup:x:7:\n\
        adm:x:4:syslog,alice\n\
        broken:x:notanumber:\n\
        :x:9:\n\
        bloatd:x:998:\n\
        bloatd:x:1999:\n\
        \x20 indented:x:1000:bob\n\
        nogid:x\n";

    #[test]
    fn group_file_lookups() {
        assert_eq!(group_id_in(GROUP, "root"), Some(0));
        assert_eq!(group_id_in(GROUP, "adm"), Some(4));
        // the first entry wins, as with getgrnam
        assert_eq!(group_id_in(GROUP, "bloatd"), Some(998));
        assert_eq!(group_id_in(GROUP, "indented"), Some(1000));
        for missing in [
            "",
            "nisgroup",
            "+nisgroup",
            "broken",
            "nogid",
            "# a comment",
            "bloat",
        ] {
            assert_eq!(group_id_in(GROUP, missing), None, "{missing:?}");
        }
        assert_eq!(group_name_in(GROUP, 998).as_deref(), Some("bloatd"));
        assert_eq!(group_name_in(GROUP, 1999).as_deref(), Some("bloatd"));
        assert_eq!(group_name_in(GROUP, 0).as_deref(), Some("root"));
        assert_eq!(group_name_in(GROUP, 5), None);
        assert_eq!(group_name_in(GROUP, 9), None);
        assert_eq!(group_id_in("", "root"), None);
    }

    /// This machine's own groups: each name found as glibc's files module
    /// (getent -s files) finds it.
    #[test]
    fn agrees_with_getent() {
        let text = group_file();
        for (name, gid) in group_entries(&text) {
            let Ok(out) = std::process::Command::new("getent")
                .args(["-s", "files", "group", name])
                .output()
            else {
                return; // no getent here
            };
            let line = String::from_utf8_lossy(&out.stdout);
            let theirs = line.split(':').nth(2).and_then(|g| g.trim().parse().ok());
            assert_eq!(group_id(name), theirs, "{name}");
            assert!(theirs.is_some(), "{name} ({gid}) is in {GROUP_FILE}");
        }
    }
}
