//! bloatd-tui: the dashboard of `bloatd top`.
//!
//! - `model`: the view model; the daemon fills it from its socket model and
//!   serves it as JSON on its API, this crate draws it.
//! - `app`: the dashboard's state (table, sort, filter, selection and
//!   paging, per-socket history, notices), pure and unit-tested.
//! - `ui`: rendering with ratatui: it reads the state and writes nothing
//!   back; the screen's size reaches the state as an input
//!   (`App::set_page_rows`, see [`draw`]).
//! - `terminal`: the guard that gives the terminal back on exit and panic.
//!
//! The crate does no network or BPF I/O: the daemon hands [`run`] a
//! [`Source`] (its Unix-socket API client, or the embedded probes).

pub mod app;
mod error;
mod terminal;
pub mod ui;

pub use error::{Error, Result};

use app::{App, Key};
use bloatd_model::journal::{Episode, EpisodeDetail, MinuteRow};
use bloatd_model::{Snapshot, SnapshotRequest};
use ratatui::backend::Backend;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::Rect;
use ratatui::Terminal;
use std::io;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where snapshots come from: the daemon's API, or probes in this process.
pub trait Source {
    /// The current snapshot as `req` asks: the time series of one socket
    /// (samples newer than `since_ms`, Unix milliseconds; 0 for all the
    /// daemon keeps) and, with a limit, only the rows to draw, sorted and
    /// filtered by the source (`bloatd_model::select::select_rows`). An `Err` is shown to the
    /// user as is, so it should name the cause and the fix, e.g. "bloatd
    /// daemon not reachable at /run/bloatd/bloatd.sock: retrying…".
    fn snapshot(&mut self, req: &SnapshotRequest) -> Result<Snapshot>;

    /// Switches the receiver's DRWA on or off (the dashboard's D key). An
    /// `Err` is shown to the user as is.
    fn set_drwa(&mut self, _on: bool) -> Result<()> {
        Err(Error::NoDrwa)
    }

    /// The flight recorder since `since_ms`: the worst path's row each
    /// minute, and the episodes, newest first (the history view, H).
    fn history(&mut self, _since_ms: u64) -> Result<(Vec<MinuteRow>, Vec<Episode>)> {
        Err(Error::NoRecorder)
    }

    /// One episode with its flows and series.
    fn incident(&mut self, _id: u64) -> Result<EpisodeDetail> {
        Err(Error::NoRecorder)
    }
}

/// What the history view says to a source without a flight recorder.
pub const NO_RECORDER: &str =
    "no flight recorder here: the daemon keeps the history (sudo bloatd start)";

/// The local time zone's offset from UTC now, seconds (clock times on
/// screen and in `bloatd incidents`).
pub fn local_utc_offset_s() -> i64 {
    // SAFETY: time(2) and localtime_r(3) into a zeroed tm.
    unsafe {
        let t = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return 0;
        }
        tm.tm_gmtoff
    }
}

#[derive(Clone, Debug)]
pub struct Options {
    /// Refresh period (`bloatd top --refresh`).
    pub refresh: Duration,
    /// Period of new attempts while the source fails.
    pub retry_interval: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            refresh: Duration::from_millis(250),
            retry_interval: Duration::from_secs(1),
        }
    }
}

/// Runs the full-screen dashboard until the user quits. Refreshes every
/// `opts.refresh`; while `source` fails its message fills the screen and
/// the dashboard retries every `opts.retry_interval`, picking up again when
/// the source answers. The terminal is restored on return, on error and on
/// panic.
pub fn run(source: &mut dyn Source, opts: &Options) -> io::Result<()> {
    let mut guard = terminal::TerminalGuard::enter()?;
    run_loop(
        &mut guard.terminal,
        &mut CrosstermInput,
        source,
        opts,
        &wall_clock_ms,
    )
}

/// One frame of header and table as plain text, `width` x `height` cells,
/// trailing blanks trimmed: the output of `bloatd top --once`. Queueing
/// delays print as "412ms" or "4.2ms", endpoints as "addr:port", bloated
/// rows start with "!". Use [`once_height`] for a height that fits every row.
pub fn render_once(snapshot: &Snapshot, width: u16, height: u16) -> String {
    let mut app = App::new();
    app.apply_snapshot(snapshot.clone(), snapshot.taken_ms);
    app.set_page_rows(ui::text_page_rows(width, height));
    ui::render_text(&app, width, height)
}

/// One frame: the terminal's size goes into the state (how many rows a
/// page holds, as the screen's layout says), then the state is drawn.
pub fn draw<B: Backend>(terminal: &mut Terminal<B>, app: &mut App) -> io::Result<()> {
    let size = terminal
        .size()
        .map_err(|e| io::Error::other(e.to_string()))?;
    app.set_page_rows(ui::page_rows(Rect::new(0, 0, size.width, size.height)));
    terminal
        .draw(|frame| ui::draw(frame, app))
        .map(|_| ())
        .map_err(|e| io::Error::other(e.to_string()))
}

/// The height at which [`render_once`] shows every socket of `snapshot`.
pub fn once_height(snapshot: &Snapshot) -> u16 {
    ui::text_height_for(snapshot.sockets.len())
}

/// Key presses, waiting at most `timeout`; `Ok(None)` on timeout or on
/// events that only need a redraw (resize).
pub(crate) trait Input {
    fn next_key(&mut self, timeout: Duration) -> io::Result<Option<Key>>;
}

struct CrosstermInput;

impl Input for CrosstermInput {
    fn next_key(&mut self, timeout: Duration) -> io::Result<Option<Key>> {
        if !event::poll(timeout)? {
            return Ok(None);
        }
        match event::read()? {
            Event::Key(key) if key.kind != KeyEventKind::Release => Ok(decode_key(key)),
            _ => Ok(None),
        }
    }
}

fn decode_key(key: KeyEvent) -> Option<Key> {
    // Raw mode turns Ctrl-C into a key instead of SIGINT.
    if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
        return Some(Key::Interrupt);
    }
    Some(match key.code {
        KeyCode::Up => Key::Up,
        KeyCode::Down => Key::Down,
        KeyCode::PageUp => Key::PageUp,
        KeyCode::PageDown => Key::PageDown,
        KeyCode::Home => Key::Home,
        KeyCode::End => Key::End,
        KeyCode::Enter => Key::Enter,
        KeyCode::Esc => Key::Esc,
        KeyCode::Backspace => Key::Backspace,
        KeyCode::Char(c) => Key::Char(c),
        _ => return None,
    })
}

fn wall_clock_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The dashboard loop, on any backend, input and clock (tests drive it with
/// a TestBackend, scripted keys and a fake clock).
pub(crate) fn run_loop<B: Backend>(
    terminal: &mut Terminal<B>,
    input: &mut dyn Input,
    source: &mut dyn Source,
    opts: &Options,
    clock: &dyn Fn() -> u64,
) -> io::Result<()> {
    let interval_ms = (opts.refresh.as_millis() as u64).max(1);
    let retry_ms = (opts.retry_interval.as_millis() as u64).max(1);
    let mut app = App::new();
    app.set_utc_offset(local_utc_offset_s());
    let mut next_fetch_ms = 0;
    while !app.should_quit() && !terminal::terminate_requested() {
        let now = clock();
        // A wall clock set back would otherwise stall refreshes until it
        // catches up.
        if next_fetch_ms > now + interval_ms.max(retry_ms) {
            next_fetch_ms = now;
        }
        if !app.paused() && now >= next_fetch_ms {
            let result = source.snapshot(&app.snapshot_request());
            let now = clock();
            next_fetch_ms = match result {
                Ok(snapshot) => {
                    app.apply_snapshot(snapshot, now);
                    now + interval_ms
                }
                Err(e) => {
                    app.source_failed(e.to_string(), now);
                    now + retry_ms
                }
            };
        }
        app.tick(clock());
        if let Some(since) = app.history_request() {
            let answer = source.history(since);
            app.apply_history(answer, clock());
        }
        if let Some(id) = app.episode_request() {
            let answer = source.incident(id);
            app.apply_episode(answer, clock());
        }
        draw(terminal, &mut app)?;
        // Wake for the next fetch, and at least once an interval so that
        // notices expire and ages advance while paused.
        let timeout_ms = if app.paused() {
            interval_ms
        } else {
            next_fetch_ms.saturating_sub(clock()).min(interval_ms)
        };
        if let Some(key) = input.next_key(Duration::from_millis(timeout_ms))? {
            app.handle_key(key);
        }
        if let Some(on) = app.take_drwa_request() {
            let message = match source.set_drwa(on) {
                Ok(()) => format!("DRWA switched {}", if on { "on" } else { "off" }),
                Err(e) => e.to_string(),
            };
            app.set_status(message, clock());
            next_fetch_ms = 0; // show what it did at once
        }
    }
    Ok(())
}

// The shared test fixtures name the crate by its external name.
#[cfg(test)]
extern crate self as bloatd_tui;
#[cfg(test)]
mod tests;
