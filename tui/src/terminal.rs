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

/// Set by SIGTERM, SIGHUP or SIGINT: the run loop sees it within one
/// refresh and returns, so the guard gives the terminal back as on `q`.
static TERMINATE: AtomicBool = AtomicBool::new(false);

extern "C" fn on_terminate(_sig: libc::c_int) {
    TERMINATE.store(true, Ordering::SeqCst);
}

pub(crate) fn terminate_requested() -> bool {
    TERMINATE.load(Ordering::SeqCst)
}

fn catch_terminate_signals() {
    for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_terminate as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
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
