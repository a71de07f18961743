//! The run loop driven end to end: a TestBackend that records every frame,
//! scripted keys, a fake clock that advances by each wait.

pub(crate) use bloatd_model::fixtures;

use super::*;
use ratatui::backend::{ClearType, TestBackend, WindowSize};
use ratatui::buffer::Cell;
use ratatui::layout::{Position, Size};
use std::cell::{Cell as StdCell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::result::Result;

/// A TestBackend that keeps the text of every flushed frame.
struct Recorder {
    inner: TestBackend,
    frames: Rc<RefCell<Vec<String>>>,
}

impl Backend for Recorder {
    type Error = core::convert::Infallible;

    fn draw<'a, I>(&mut self, content: I) -> Result<(), Self::Error>
    where
        I: Iterator<Item = (u16, u16, &'a Cell)>,
    {
        self.inner.draw(content)
    }
    fn hide_cursor(&mut self) -> Result<(), Self::Error> {
        self.inner.hide_cursor()
    }
    fn show_cursor(&mut self) -> Result<(), Self::Error> {
        self.inner.show_cursor()
    }
    fn get_cursor_position(&mut self) -> Result<Position, Self::Error> {
        self.inner.get_cursor_position()
    }
    fn set_cursor_position<P: Into<Position>>(&mut self, p: P) -> Result<(), Self::Error> {
        self.inner.set_cursor_position(p)
    }
    fn clear(&mut self) -> Result<(), Self::Error> {
        self.inner.clear()
    }
    fn clear_region(&mut self, clear_type: ClearType) -> Result<(), Self::Error> {
        self.inner.clear_region(clear_type)
    }
    fn size(&self) -> Result<Size, Self::Error> {
        self.inner.size()
    }
    fn window_size(&mut self) -> Result<WindowSize, Self::Error> {
        self.inner.window_size()
    }
    fn flush(&mut self) -> Result<(), Self::Error> {
        self.frames
            .borrow_mut()
            .push(ui::buffer_text(self.inner.buffer()));
        Ok(())
    }
}

/// Keys to press, one per wait (None: let the wait time out); the clock
/// advances by the whole timeout either way.
struct Script {
    keys: VecDeque<Option<Key>>,
    clock: Rc<StdCell<u64>>,
    waits: Rc<RefCell<Vec<Duration>>>,
}

impl Input for Script {
    fn next_key(&mut self, timeout: Duration) -> io::Result<Option<Key>> {
        self.waits.borrow_mut().push(timeout);
        self.clock
            .set(self.clock.get() + timeout.as_millis() as u64);
        Ok(self.keys.pop_front().unwrap_or(Some(Key::Char('q'))))
    }
}

/// Answers from a script of results and records what it was asked, and when.
struct Scripted {
    answers: VecDeque<crate::Result<Snapshot>>,
    asked: Vec<(Option<u64>, u64)>,
    asked_at_ms: Vec<u64>,
    clock: Rc<StdCell<u64>>,
}

impl Source for Scripted {
    fn snapshot(&mut self, req: &SnapshotRequest) -> crate::Result<Snapshot> {
        self.asked.push((req.series, req.since_ms));
        self.asked_at_ms.push(self.clock.get() - fixtures::T0_MS);
        self.answers
            .pop_front()
            .unwrap_or_else(|| Err(crate::Error::Source("script ended".into())))
    }
}

struct Run {
    frames: Vec<String>,
    waits: Vec<Duration>,
    asked: Vec<(Option<u64>, u64)>,
    /// Milliseconds after T0 of each request.
    asked_at_ms: Vec<u64>,
}

fn drive(answers: Vec<crate::Result<Snapshot>>, keys: Vec<Option<Key>>) -> Run {
    let frames = Rc::new(RefCell::new(Vec::new()));
    let clock = Rc::new(StdCell::new(fixtures::T0_MS));
    let waits = Rc::new(RefCell::new(Vec::new()));
    let mut terminal = Terminal::new(Recorder {
        inner: TestBackend::new(100, 30),
        frames: frames.clone(),
    })
    .unwrap();
    let mut source = Scripted {
        answers: answers.into(),
        asked: Vec::new(),
        asked_at_ms: Vec::new(),
        clock: clock.clone(),
    };
    let mut input = Script {
        keys: keys.into(),
        clock: clock.clone(),
        waits: waits.clone(),
    };
    let clock_fn = {
        let clock = clock.clone();
        move || clock.get()
    };
    run_loop(
        &mut terminal,
        &mut input,
        &mut source,
        &Options::default(),
        &clock_fn,
    )
    .unwrap();
    let frames = frames.borrow().clone();
    let waits = waits.borrow().clone();
    Run {
        frames,
        waits,
        asked: source.asked,
        asked_at_ms: source.asked_at_ms,
    }
}

const DOWN: &str = "bloatd daemon not reachable at /run/bloatd/bloatd.sock: retrying…";

#[test]
fn shows_the_daemon_going_away_and_recovers() {
    let up = fixtures::cubic_download_host();
    let run = drive(
        vec![
            Ok(up.clone()),
            Err(crate::Error::Source(DOWN.into())),
            Err(crate::Error::Source(DOWN.into())),
            Ok(up),
        ],
        vec![None; 10],
    );
    // Refresh every 250 ms; while down, retry every second.
    assert_eq!(run.asked_at_ms, vec![0, 250, 1250, 2250, 2500]);
    // The screen still wakes every 250 ms while down, to age the message.
    assert!(run.waits.iter().all(|w| *w == Duration::from_millis(250)));
    // The table (its column titles) is replaced by the message.
    let row = "QDELAY";
    assert!(run.frames[0].contains(row), "{}", run.frames[0]);
    assert!(!run.frames[0].contains(DOWN));
    for frame in &run.frames[1..9] {
        assert!(frame.contains(DOWN), "{frame}");
        assert!(frame.contains("DISCONNECTED"));
        assert!(!frame.contains(row));
    }
    assert!(
        run.frames[5].contains("unreachable for 1.0s"),
        "{}",
        run.frames[5]
    );
    let back = &run.frames[9];
    assert!(back.contains(row) && !back.contains(DOWN), "{back}");
}

#[test]
fn asks_for_samples_newer_than_the_last_one_held() {
    let mut first = fixtures::cubic_download_host();
    first.series = vec![fixtures::cubic_download_series()];
    let second = fixtures::cubic_download_host();
    let run = drive(
        vec![Ok(first), Ok(second.clone()), Ok(second)],
        vec![None, None],
    );
    // Nothing selected before the first snapshot; then the top row (curl,
    // cookie 101), first from the start, then after the newest sample.
    assert_eq!(run.asked[0], (None, 0));
    assert_eq!(run.asked[1], (Some(101), fixtures::T0_MS));
    assert_eq!(run.asked.len(), 3);
}

#[test]
fn keys_reach_the_app_and_pause_stops_fetching() {
    let up = fixtures::cubic_download_host();
    let run = drive(
        vec![Ok(up.clone()), Ok(up.clone()), Ok(up.clone()), Ok(up)],
        vec![
            Some(Key::Char('p')),
            None,
            None,
            Some(Key::Char('p')),
            Some(Key::Enter),
            None,
            Some(Key::Char('q')),
        ],
    );
    // Paused from 250 ms to 1000 ms: no fetch in between, one on resume.
    assert_eq!(run.asked_at_ms, vec![0, 1000, 1250, 1500]);
    assert!(run.frames[1].contains("PAUSED"));
    assert!(!run.frames[4].contains("PAUSED"));
    assert!(run.waits[1..3]
        .iter()
        .all(|w| *w == Duration::from_millis(250)));
    let detail = run.frames.last().unwrap();
    assert!(detail.contains("RTT (gap = queue)"), "{detail}");
}

#[test]
fn ctrl_c_quits_from_the_filter_prompt() {
    let up = fixtures::cubic_download_host();
    let run = drive(
        vec![Ok(up)],
        vec![
            Some(Key::Char('f')),
            Some(Key::Char('x')),
            Some(Key::Interrupt),
        ],
    );
    assert_eq!(run.frames.len(), 3);
    assert!(run.frames[2].contains("filter> x"), "{}", run.frames[2]);
}

#[test]
fn decodes_terminal_keys() {
    let key = |code, modifiers| decode_key(KeyEvent::new(code, modifiers));
    assert_eq!(
        key(KeyCode::Char('c'), KeyModifiers::CONTROL),
        Some(Key::Interrupt)
    );
    assert_eq!(
        key(KeyCode::Char('c'), KeyModifiers::NONE),
        Some(Key::Char('c'))
    );
    assert_eq!(key(KeyCode::Up, KeyModifiers::NONE), Some(Key::Up));
    assert_eq!(key(KeyCode::F(1), KeyModifiers::NONE), None);
}
