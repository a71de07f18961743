//! `bloatd stop`: SIGTERM to the daemon, and wait until it has let go of
//! everything it attached. With no daemon running, it gives back the DRWA
//! window clamps a daemon that did not stop left behind (probes/policy.rs)
//! and the host's default congestion control it changed (cc.rs), holding
//! the pid file's lock meanwhile.

use super::EXIT_NOT_RUNNING;
use crate::error::{Error, Result};
use crate::rundir::{errno, lock_state, LockState, RunDir, PID_FILE};
use crate::settings::Config;
use std::os::unix::fs::MetadataExt;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The kernel's largest pid_max (PID_MAX_LIMIT on 64-bit).
const PID_MAX_LIMIT: u32 = 4_194_304;

/// The pid a `stop` may signal: the one the pid file names, if that process
/// is a bloatd (/proc/PID/exe) holding the pid file's lock (/proc/locks).
/// 0 would signal our own process group and values beyond pid_max become
/// kill(-1): both refused, as is any process that is not the daemon.
fn daemon_pid(dir: &RunDir, cfg: &Config, pid: Option<u32>) -> Result<i32> {
    let file = cfg.pid_file();
    let pid = pid.ok_or_else(|| Error::NoPid(file.clone()))?;
    if pid == 0 || pid > PID_MAX_LIMIT {
        return Err(Error::BadPid { file, pid });
    }
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).map_err(|err| Error::PidExe {
        pid,
        file: file.clone(),
        err,
    })?;
    let name = exe
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name.trim_end_matches(" (deleted)") != "bloatd" {
        return Err(Error::NotBloatd {
            pid,
            file,
            exe: crate::text::printable(&exe.display().to_string()),
        });
    }
    let m = dir.open_file(PID_FILE, libc::O_RDONLY, 0)?.metadata()?;
    if !holds_flock(pid, m.dev(), m.ino()) {
        return Err(Error::NotHolder { pid, file });
    }
    Ok(pid as i32)
}

/// Does `pid` hold a flock write lock on the file (dev, ino)? /proc/locks:
/// "1: FLOCK  ADVISORY  WRITE 1234 00:19:5678 0 EOF".
fn holds_flock(pid: u32, dev: u64, ino: u64) -> bool {
    let want = format!("{:02x}:{:02x}:{ino}", libc::major(dev), libc::minor(dev));
    let Ok(locks) = std::fs::read_to_string("/proc/locks") else {
        return false;
    };
    locks.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() >= 6
            && f[1] == "FLOCK"
            && f[3] == "WRITE"
            && f[4] == pid.to_string()
            && f[5] == want
    })
}

/// `bloatd stop`.
pub fn run(cfg: &Config) -> Result<ExitCode> {
    let pid = match lock_state(&cfg.run_dir)? {
        (LockState::Free, dir) => {
            // Held while giving back: a start beside this stop would
            // otherwise adopt the pin and the default this stop then takes
            // away (the lock makes the start wait its turn or fail).
            let held = match &dir {
                Some(d) => match crate::rundir::hold_free(d)? {
                    Some(l) => Some(l),
                    None => return Err(Error::Starting(cfg.pid_file())),
                },
                None => None,
            };
            println!("bloatd is not running");
            give_back_left(cfg);
            if let Some(line) = dir.as_ref().and_then(crate::cc::restore_left) {
                println!("{line}");
            }
            drop(held);
            return Ok(ExitCode::from(EXIT_NOT_RUNNING));
        }
        (LockState::NoAccess, _) => return Err(Error::StopNeedsRoot(cfg.run_dir.clone())),
        (LockState::Held(pid), Some(dir)) => daemon_pid(&dir, cfg, pid)?,
        (LockState::Held(_), None) => unreachable!("a held lock is read through the run directory"),
    };
    // SAFETY: plain kill(2) of a pid checked above to be the daemon.
    if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
        return Err(Error::context(
            format!("cannot signal bloatd (pid {pid})"),
            errno(),
        ));
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if matches!(lock_state(&cfg.run_dir), Ok((LockState::Free, _))) {
            println!(
                "bloatd stopped (pid {pid}): probes detached, congestion controls unregistered"
            );
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(Error::DidNotStop { pid })
}

/// What a daemon that dies without stopping (kill -9, the OOM killer,
/// systemd's stop timeout) leaves in the kernel: everything it attached is
/// a link or a registration its descriptors held, which the kernel undoes,
/// except these (README, "Operating bloatd").
pub const CRASH_LEAVES: &str = "the kernel detaches its probes and sock_ops program and unregisters its congestion controls, but the receivers DRWA clamped keep their clamped window (what to give back stays pinned under /sys/fs/bpf/bloatd), connections keep the congestion control a rule gave them, a namespace whose default is bloatd's algorithm keeps the killed one's until the next start adopts it, and the host's default that `cc default` changed stays until the next start or stop puts back the one it had";

/// No daemon runs: give back what one that did not stop left clamped.
fn give_back_left(cfg: &Config) {
    let pin = crate::probes::policy::saved_pin(&cfg.run_dir);
    match crate::probes::Probes::give_back_left(&pin) {
        Ok(None) => {}
        Ok(Some(n)) => println!(
            "gave back {n} receive windows DRWA had clamped for a bloatd that did not stop (removed {})",
            pin.display()
        ),
        Err(e) => eprintln!(
            "bloatd: cannot give back the DRWA window clamps pinned at {}: {}",
            pin.display(),
            crate::error::Chain(&e)
        ),
    }
}
