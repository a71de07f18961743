//! The terminal guard: raw mode and the alternate screen for as long as the
//! guard lives, and the user's terminal back on every way out: normal
//! return, an error (the guard drops), a panic (the hook restores before the
//! message prints, so the message is readable and not lost in the alternate
//! screen).

use ratatui::crossterm::cursor::{Hide, Show};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::prelude::CrosstermBackend;
use ratatui::Terminal;
use std::io::{self, IsTerminal, Stdout};
use std::panic::{self, PanicHookInfo};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Set by SIGTERM or SIGINT: the run loop sees it within one refresh and
/// returns, so the guard gives the terminal back as on `q`.
static TERMINATE: AtomicBool = AtomicBool::new(false);

extern "C" fn on_terminate(_sig: libc::c_int) {
    TERMINATE.store(true, Ordering::SeqCst);
}

/// The terminal hung up: there is nothing left to restore, and crossterm's
/// input poll spins on the end-of-file of a closed tty without ever
/// returning, so leave at once (async-signal-safe).
extern "C" fn on_hangup(_sig: libc::c_int) {
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(129) };
}

pub(crate) fn terminate_requested() -> bool {
    TERMINATE.load(Ordering::SeqCst)
}

fn set_handler(sig: libc::c_int, handler: extern "C" fn(libc::c_int)) {
    // SAFETY: the handlers only store to an atomic or call _exit.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(sig, &sa, std::ptr::null_mut());
    }
}

fn catch_terminate_signals() {
    set_handler(libc::SIGTERM, on_terminate);
    set_handler(libc::SIGINT, on_terminate);
    set_handler(libc::SIGHUP, on_hangup);
    // A terminal can also vanish without a SIGHUP reaching us (we are not
    // in its foreground group): watch for the hangup on stdin.
    std::thread::spawn(|| loop {
        std::thread::sleep(std::time::Duration::from_millis(500));
        let mut pfd = libc::pollfd {
            fd: libc::STDIN_FILENO,
            events: 0,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, 0) };
        if n > 0 && pfd.revents & (libc::POLLHUP | libc::POLLNVAL) != 0 {
            // SAFETY: _exit ends the process without unwinding.
            unsafe { libc::_exit(129) };
        }
    });
}

/// Whether the terminal is in raw mode on the alternate screen. Restoring
/// twice is not harmless: leaving the alternate screen again moves the
/// cursor back to where it was on entry, over the panic message just printed.
static ENTERED: AtomicBool = AtomicBool::new(false);

type Hook = Arc<dyn Fn(&PanicHookInfo<'_>) + Send + Sync + 'static>;

pub(crate) struct TerminalGuard {
    pub terminal: Terminal<CrosstermBackend<Stdout>>,
    /// The panic hook that was installed before ours, put back on drop.
    previous_hook: Hook,
}

impl TerminalGuard {
    pub fn enter() -> io::Result<TerminalGuard> {
        if !io::stdout().is_terminal() {
            return Err(io::Error::other(
                "bloatd top needs a terminal on stdout: use `bloatd top --once` for scripts and pipes",
            ));
        }
        let terminal = Terminal::new(CrosstermBackend::new(io::stdout()))?;
        let previous_hook: Hook = Arc::from(panic::take_hook());
        let chained = previous_hook.clone();
        panic::set_hook(Box::new(move |info| {
            restore();
            chained(info);
        }));
        // From here on a failure drops the guard, which restores.
        let guard = TerminalGuard {
            terminal,
            previous_hook,
        };
        ENTERED.store(true, Ordering::SeqCst);
        catch_terminate_signals();
        enable_raw_mode()?;
        execute!(io::stdout(), EnterAlternateScreen, Hide)?;
        Ok(guard)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore();
        // Swapping hooks while the thread panics aborts the process; the
        // hook only matters for later panics, and there are none then.
        if !std::thread::panicking() {
            let previous = self.previous_hook.clone();
            let _ = panic::take_hook();
            panic::set_hook(Box::new(move |info| previous(info)));
        }
    }
}

/// Puts the terminal back: cooked mode, main screen, visible cursor. Only
/// the first call after `enter` acts (the panic hook and then the guard's
/// drop both call it).
fn restore() {
    if !ENTERED.swap(false, Ordering::SeqCst) {
        return;
    }
    let _ = disable_raw_mode();
    let _ = execute!(io::stdout(), LeaveAlternateScreen, Show);
}
