//! The dashboard's state: pure, no terminal and no I/O.
//!
//! The run loop feeds it snapshots (`apply_snapshot`), source failures
//! (`source_failed`), key presses (`handle_key`), the time (`tick`) and the
//! size of the screen (`set_page_rows`); the renderer reads it (`&App`)
//! and writes nothing back. Everything here is unit-tested without a
//! terminal.
//!
//! - `table`: the rows passing the filter, their order, the selection and
//!   the page on screen (`sort`, `filter`: the keys and the filter);
//! - `history`: the last minute of samples of the sockets looked at;
//! - `notices`: bloat starting on a socket, announced for a few seconds;
//! - `incidents`: the history view: the flight recorder's last hours and
//!   the episode opened;
//! - `rows`: what a source sends (the first rows in order, the summary).
//!
//! Cost per snapshot is linear in the number of sockets: filtering, bloat
//! detection and the per-cc distribution are one pass each, and only the rows
//! the screen shows (plus the selected one) are ever sorted.

mod filter;
mod history;
mod incidents;
mod notices;
mod table;
#[cfg(test)]
mod tests;

pub use filter::FilterPrompt;
pub use history::{History, HISTORY_WINDOW_MS};
pub use incidents::{Incidents, REFRESH_MS as HISTORY_REFRESH_MS, TIMELINE_MS};
pub use notices::{Event, Notice, MAX_NOTICES, NOTICE_COOLDOWN_MS, NOTICE_TTL_MS};

use bloatd_model::filter::Filter;
use bloatd_model::journal::{Episode, EpisodeDetail, MinuteRow};
use bloatd_model::select::summarize;
use bloatd_model::sort::SortKey;
use bloatd_model::{HostSummary, SnapshotRequest};
use bloatd_model::{Snapshot, Socket};
use history::Histories;
use notices::Notices;
use std::collections::VecDeque;
use table::Table;

/// Rows asked of the source at least (a page and more to scroll into).
const MIN_ROWS: usize = 100;
/// How long the answer to a user's action (the D key) stays in the footer.
pub const STATUS_TTL_MS: u64 = 5_000;

/// A key press, already decoded from the terminal's events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Up,
    Down,
    PageUp,
    PageDown,
    Home,
    End,
    Enter,
    Esc,
    Backspace,
    /// Ctrl-C: quits from anywhere, also from the filter prompt.
    Interrupt,
    Char(char),
}

/// Whether the dashboard has data from its source.
#[derive(Clone, Debug, PartialEq)]
pub enum Link {
    /// No snapshot and no error yet.
    Connecting,
    Up,
    /// The last attempt failed; `message` is the source's own explanation.
    Down {
        message: String,
        since_ms: u64,
    },
}

/// What fills the body of the screen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    Table,
    Detail,
    /// The sockets grouped by path (peer): floor, queue, grade, RPM.
    Paths,
    /// The sockets grouped by service: the network's queue and the
    /// service's own backlog side by side, grade, RPM.
    Services,
    /// The flight recorder's last hours: a timeline with the episodes.
    History,
    /// One episode of the history: its flows and charts.
    Episode,
}

/// The detail view's socket. It stays pinned when the socket closes, so its
/// last minute can still be read.
#[derive(Clone, Debug, PartialEq)]
pub struct Detail {
    pub socket: Socket,
    pub closed: bool,
}

#[derive(Debug)]
pub struct App {
    snapshot: Snapshot,
    now_ms: u64,
    link: Link,
    table: Table,
    prompt: Option<FilterPrompt>,
    view: View,
    detail: Option<Detail>,
    help: bool,
    paused: bool,
    quit: bool,
    histories: Histories,
    notices: Notices,
    summary: HostSummary,
    /// DRWA on (true) or off asked for with the D key, awaiting the
    /// user's yes: it acts on every receiver of every namespace.
    drwa_confirm: Option<bool>,
    /// DRWA on (true) or off, confirmed, for the run loop.
    drwa_request: Option<bool>,
    /// A one-line answer to the user's last action, and when it was given.
    status: Option<(String, u64)>,
    incidents: Incidents,
    /// The local time's offset from UTC (clock times on screen).
    utc_offset_s: i64,
}

impl Default for App {
    fn default() -> Self {
        Self::new()
    }
}

impl App {
    pub fn new() -> App {
        App {
            snapshot: Snapshot {
                summary: None,
                matched: None,
                taken_ms: 0,
                interval_ms: 0,
                bloat_threshold_us: 0,
                sockets: Vec::new(),
                series: Vec::new(),
                health: Default::default(),
                paths: Vec::new(),
                policy: None,
                services: vec![],
                episodes: vec![],
            },
            now_ms: 0,
            link: Link::Connecting,
            table: Table::new(),
            prompt: None,
            view: View::Table,
            detail: None,
            help: false,
            paused: false,
            quit: false,
            histories: Histories::default(),
            notices: Notices::default(),
            summary: HostSummary::default(),
            drwa_confirm: None,
            drwa_request: None,
            status: None,
            incidents: Incidents::default(),
            utc_offset_s: 0,
        }
    }

    // Inputs.

    /// Takes a new snapshot from the source. `now_ms` is the app's clock
    /// (Unix milliseconds in the run loop), used for notice expiry.
    pub fn apply_snapshot(&mut self, mut snapshot: Snapshot, now_ms: u64) {
        self.now_ms = now_ms;
        self.link = Link::Up;
        self.histories
            .feed(std::mem::take(&mut snapshot.series), snapshot.interval_ms);
        self.snapshot = snapshot;
        let (sockets, threshold_us) = (&self.snapshot.sockets, self.snapshot.bloat_threshold_us);
        self.notices.scan(sockets, threshold_us, now_ms);
        // A daemon that selected the rows summarised the whole host.
        self.summary = match &self.snapshot.summary {
            Some(summary) => summary.clone(),
            None => summarize(sockets, threshold_us),
        };
        self.histories
            .prune(sockets, self.detail.as_ref().map(|d| d.socket.cookie));
        self.table.rebuild(sockets);
        self.refresh_detail();
        self.tick(now_ms);
    }

    /// Records that the source failed; the last data stays for when it comes
    /// back, the screen shows `message`.
    pub fn source_failed(&mut self, message: String, now_ms: u64) {
        self.now_ms = now_ms;
        let since_ms = match &self.link {
            Link::Down { since_ms, .. } => *since_ms,
            _ => now_ms,
        };
        self.link = Link::Down { message, since_ms };
    }

    /// Advances the clock: expires notices and notice cooldowns.
    pub fn tick(&mut self, now_ms: u64) {
        self.now_ms = now_ms;
        self.notices.expire(now_ms);
    }

    /// How many table rows the screen holds (the view's layout says, from
    /// the terminal's size: `ui::page_rows`); scrolls so the selected row
    /// is visible and sorts just the rows that will be drawn.
    pub fn set_page_rows(&mut self, rows: usize) {
        self.table.set_page_rows(&self.snapshot.sockets, rows);
    }

    pub fn handle_key(&mut self, key: Key) {
        if key == Key::Interrupt {
            self.quit = true;
            return;
        }
        if self.prompt.is_some() {
            self.prompt_key(key);
            return;
        }
        if let Some(on) = self.drwa_confirm.take() {
            if key == Key::Char('y') || key == Key::Char('Y') {
                self.drwa_request = Some(on);
            } else {
                self.status = Some(("DRWA left as it was".into(), self.now_ms));
            }
            return;
        }
        if self.help {
            match key {
                Key::Esc | Key::Char('?') => self.help = false,
                Key::Char('q') => self.quit = true,
                _ => {}
            }
            return;
        }
        let page = self.table.page_rows().max(1) as isize;
        match key {
            Key::Char('q') => self.quit = true,
            Key::Char('?') => self.help = true,
            Key::Char('p') => self.paused = !self.paused,
            Key::Char('s') => self.set_sort(self.table.sort().next()),
            Key::Char('f') => {
                let filter = self.table.filter();
                self.prompt = Some(FilterPrompt {
                    text: filter.text().to_string(),
                    error: None,
                    previous: filter.clone(),
                })
            }
            Key::Up | Key::Char('k') => self.move_selection(-1),
            Key::Down | Key::Char('j') => self.move_selection(1),
            Key::PageUp => self.move_selection(-page),
            Key::PageDown => self.move_selection(page),
            Key::Home | Key::Char('g') => self.move_selection(isize::MIN),
            Key::End | Key::Char('G') => self.move_selection(isize::MAX),
            Key::Char('v') => self.toggle_view(View::Paths),
            Key::Char('S') => self.toggle_view(View::Services),
            Key::Char('H') => self.toggle_view(View::History),
            Key::Enter => match self.view {
                View::Table => self.open_detail(),
                View::History => {
                    if self.incidents.open_selected() {
                        self.view = View::Episode;
                    }
                }
                View::Episode => self.close_episode(),
                View::Detail | View::Paths | View::Services => self.close_detail(),
            },
            Key::Esc if self.view == View::Episode => self.close_episode(),
            Key::Esc => self.close_detail(),
            Key::Char('D') => self.toggle_drwa(),
            _ => {}
        }
    }

    /// `v` (paths) and `S` (services): to the view, or back to the table
    /// from it.
    fn toggle_view(&mut self, view: View) {
        if self.view == view || (view == View::History && self.view == View::Episode) {
            self.view = View::Table;
        } else {
            self.detail = None;
            self.view = view;
            if view == View::History {
                self.incidents.refresh();
            }
        }
    }

    fn close_episode(&mut self) {
        self.incidents.close();
        self.view = View::History;
    }

    /// The D key: DRWA on if it is off, off if it is on, once the user
    /// says yes (it acts on every receiver of every namespace). A bloatd
    /// that did not arm DRWA cannot switch it, and a reader the daemon lets
    /// watch but not act may not: the user is told why.
    fn toggle_drwa(&mut self) {
        let policy = self.snapshot.policy.as_ref();
        let on = match policy.map(|p| p.drwa.as_str()) {
            Some("on") => false,
            Some("off") => true,
            _ => {
                self.status = Some((
                    "DRWA is disabled in this bloatd: start it with --drwa=off (or --drwa) to switch it here"
                        .into(),
                    self.now_ms,
                ));
                return;
            }
        };
        if let Some(why) = policy.and_then(|p| p.refused.clone()) {
            self.status = Some((why, self.now_ms));
            return;
        }
        self.status = None;
        self.drwa_confirm = Some(on);
    }

    /// The switch the D key waits to confirm: DRWA on (true) or off.
    pub fn drwa_confirm(&self) -> Option<bool> {
        self.drwa_confirm
    }

    /// What the D key asked for, once (the run loop asks the source).
    pub fn take_drwa_request(&mut self) -> Option<bool> {
        self.drwa_request.take()
    }

    /// A one-line answer to the user's action, shown for a few seconds.
    pub fn set_status(&mut self, message: String, now_ms: u64) {
        self.status = Some((message, now_ms));
    }

    fn prompt_key(&mut self, key: Key) {
        let Some(prompt) = self.prompt.as_mut() else {
            return;
        };
        match key {
            Key::Esc => {
                let previous = prompt.previous.clone();
                self.prompt = None;
                self.set_filter(previous);
            }
            // An invalid filter keeps the prompt open with its error.
            Key::Enter if prompt.error.is_none() => self.prompt = None,
            Key::Backspace | Key::Char(_) => {
                match key {
                    Key::Char(c) => prompt.text.push(c),
                    _ => {
                        prompt.text.pop();
                    }
                }
                // The table follows the text as it is typed.
                match Filter::parse(&prompt.text) {
                    Ok(filter) => {
                        prompt.error = None;
                        self.set_filter(filter);
                    }
                    Err(e) => prompt.error = Some(e.to_string()),
                }
            }
            _ => {}
        }
    }

    pub fn set_sort(&mut self, sort: SortKey) {
        self.table.set_sort(&self.snapshot.sockets, sort);
    }

    pub fn set_filter(&mut self, filter: Filter) {
        self.table.set_filter(&self.snapshot.sockets, filter);
    }
}

/// What the rendering reads: the view's state, never changed by a read.
impl App {
    /// What the run loop should ask the source for: the time series of the
    /// socket on screen, samples after the newest one already held.
    pub fn series_request(&self) -> (Option<u64>, u64) {
        let cookie = match (&self.view, &self.detail) {
            (View::Detail, Some(d)) => Some(d.socket.cookie),
            _ => self.table.selected_cookie(),
        };
        let since_ms = cookie
            .and_then(|c| self.histories.get(c))
            .and_then(History::last_t_ms)
            .unwrap_or(0);
        (cookie, since_ms)
    }

    /// The whole request for the next snapshot: the series above, and
    /// the rows to draw, sorted and filtered by the source: a page beyond
    /// the selection and the screen, at least MIN_ROWS.
    pub fn snapshot_request(&self) -> SnapshotRequest {
        let (series, since_ms) = self.series_request();
        let page = self.table.page_rows().max(1);
        let selected = self.table.selected().unwrap_or(0);
        let limit = (self.table.offset().max(selected) + 2 * page).max(MIN_ROWS);
        let filter = self.table.filter();
        SnapshotRequest {
            series,
            since_ms,
            sort: Some(self.table.sort().label().to_string()),
            filter: (!filter.is_empty()).then(|| filter.text().to_string()),
            limit: Some(limit),
            paths: self.view == View::Paths,
            services: self.view == View::Services,
        }
    }

    pub fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    pub fn link(&self) -> &Link {
        &self.link
    }

    pub fn sort(&self) -> SortKey {
        self.table.sort()
    }

    pub fn filter(&self) -> &Filter {
        self.table.filter()
    }

    pub fn prompt(&self) -> Option<&FilterPrompt> {
        self.prompt.as_ref()
    }

    pub fn view(&self) -> View {
        self.view
    }

    /// The history view's state.
    pub fn incidents(&self) -> &Incidents {
        &self.incidents
    }

    pub fn utc_offset_s(&self) -> i64 {
        self.utc_offset_s
    }

    pub fn detail(&self) -> Option<&Detail> {
        self.detail.as_ref()
    }

    pub fn help(&self) -> bool {
        self.help
    }

    pub fn paused(&self) -> bool {
        self.paused
    }

    pub fn should_quit(&self) -> bool {
        self.quit
    }

    pub fn summary(&self) -> &HostSummary {
        &self.summary
    }

    /// The answer to the user's last action while it is recent.
    pub fn status(&self) -> Option<&str> {
        self.status
            .as_ref()
            .filter(|(_, at)| self.now_ms.saturating_sub(*at) < STATUS_TTL_MS)
            .map(|(m, _)| m.as_str())
    }

    /// Active notices, newest first.
    pub fn notices(&self) -> &VecDeque<Notice> {
        self.notices.active()
    }

    pub fn history(&self, cookie: u64) -> Option<&History> {
        self.histories.get(cookie)
    }

    /// Rows passing the filter that the dashboard holds (with a source
    /// that selects rows: the first of them, see `snapshot_request`).
    pub fn row_count(&self) -> usize {
        self.table.row_count()
    }

    /// Sockets passing the filter on the whole host.
    pub fn matched(&self) -> usize {
        self.snapshot.matched.unwrap_or(self.table.row_count())
    }

    /// Index of the first row on screen.
    pub fn offset(&self) -> usize {
        self.table.offset()
    }

    /// Index of the selected row, if there are rows.
    pub fn selected(&self) -> Option<usize> {
        self.table.selected()
    }

    pub fn selected_socket(&self) -> Option<&Socket> {
        self.table.selected_socket(&self.snapshot.sockets)
    }

    /// The rows on screen, in order (as many as `set_page_rows` said).
    pub fn visible(&self) -> impl Iterator<Item = &Socket> + '_ {
        self.table.visible(&self.snapshot.sockets)
    }
}

/// The selection and the detail socket, kept consistent with the rows.
impl App {
    fn move_selection(&mut self, delta: isize) {
        if self.view == View::History {
            self.incidents.select(delta);
            return;
        }
        self.table.move_selection(&self.snapshot.sockets, delta);
        if self.view == View::Detail {
            self.open_detail();
        }
    }

    fn open_detail(&mut self) {
        if let Some(socket) = self.selected_socket().cloned() {
            self.detail = Some(Detail {
                socket,
                closed: false,
            });
            self.view = View::Detail;
        }
    }

    fn close_detail(&mut self) {
        self.view = View::Table;
        self.detail = None;
    }

    /// Updates the pinned detail socket from the new snapshot.
    fn refresh_detail(&mut self) {
        let Some(detail) = self.detail.as_mut() else {
            return;
        };
        match self
            .snapshot
            .sockets
            .iter()
            .find(|s| s.cookie == detail.socket.cookie)
        {
            Some(s) => {
                detail.socket = s.clone();
                detail.closed = false;
            }
            None => detail.closed = true,
        }
    }
}

/// The flight recorder's history view: what it asks the source, what
/// it takes from it.
impl App {
    /// Clock times on screen in the zone `offset_s` from UTC (the run loop
    /// finds the local one).
    pub fn set_utc_offset(&mut self, offset_s: i64) {
        self.utc_offset_s = offset_s;
    }

    /// The flight recorder's last hours, since when, if they are due (the
    /// history view is on screen).
    pub fn history_request(&self) -> Option<u64> {
        matches!(self.view, View::History | View::Episode)
            .then(|| self.incidents.request(self.now_ms))
            .flatten()
    }

    pub fn apply_history(
        &mut self,
        answer: crate::Result<(Vec<MinuteRow>, Vec<Episode>)>,
        now_ms: u64,
    ) {
        self.now_ms = self.now_ms.max(now_ms);
        self.incidents.apply(answer, now_ms);
    }

    /// The episode opened, if it is due.
    pub fn episode_request(&self) -> Option<u64> {
        (self.view == View::Episode)
            .then(|| self.incidents.detail_request(self.now_ms))
            .flatten()
    }

    pub fn apply_episode(&mut self, answer: crate::Result<EpisodeDetail>, now_ms: u64) {
        self.now_ms = self.now_ms.max(now_ms);
        self.incidents.apply_detail(answer, now_ms);
    }
}
