//! The dashboard's state: pure, no terminal and no I/O.
//!
//! The run loop feeds it snapshots (`apply_snapshot`), source failures
//! (`source_failed`), key presses (`handle_key`) and the time (`tick`); the
//! renderer reads it. Everything here is unit-tested without a terminal.
//!
//! Cost per snapshot is linear in the number of sockets: filtering, bloat
//! detection and the per-cc distribution are one pass each, and only the rows
//! the screen shows (plus the selected one) are ever sorted.

mod filter;
mod history;
mod rows;
mod sort;
#[cfg(test)]
mod tests;

pub use filter::{Filter, FilterPrompt};
pub use history::{History, HISTORY_WINDOW_MS};
pub use rows::{select_rows, summarize};
pub use sort::SortKey;

use crate::format;
pub use crate::model::{CcDelay, HostSummary, SnapshotRequest};
use crate::model::{Role, Snapshot, Socket};
use std::cmp::Ordering;
use std::collections::{HashMap, HashSet, VecDeque};

/// How long a "bloat started" notice stays on screen.
pub const NOTICE_TTL_MS: u64 = 5_000;
/// A socket that leaves and re-enters bloat within this time is not announced
/// again: a queue hovering around the threshold would otherwise flood the
/// notice line.
pub const NOTICE_COOLDOWN_MS: u64 = 30_000;
/// Notices kept at once; a snapshot in which more sockets start bloating adds
/// one summary notice for the rest.
pub const MAX_NOTICES: usize = 4;
/// Sockets whose history is kept (the selected one and recently selected ones,
/// so that going back to a socket does not start its charts from scratch).
const MAX_HISTORIES: usize = 16;
/// Rows asked of the source at least (a page and more to scroll into).
const MIN_ROWS: usize = 100;

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

/// "Bloat started" on a socket (or a summary of several).
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    /// The socket, or None for the "and N more" summary.
    pub cookie: Option<u64>,
    pub text: String,
    /// When the notice was raised (the app's clock), for expiry.
    pub at_ms: u64,
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
    sort: SortKey,
    filter: Filter,
    prompt: Option<FilterPrompt>,
    /// Indices into `snapshot.sockets` of the rows that pass the filter;
    /// `order[..sorted_prefix]` is in sort order and every row there sorts
    /// before every row after it.
    order: Vec<u32>,
    sorted_prefix: usize,
    /// Selected row (index into `order`) and its socket.
    selected: usize,
    selected_cookie: Option<u64>,
    /// Whether the selection follows its socket when the order changes. The
    /// top row stays on top (it always shows the worst queue, which moves
    /// between sockets every refresh); a row the user moved to follows its
    /// socket, so it does not slide away under the cursor.
    follow: bool,
    /// First row on screen and the number of rows that fit.
    offset: usize,
    page_rows: usize,
    view: View,
    detail: Option<Detail>,
    help: bool,
    paused: bool,
    quit: bool,
    histories: HashMap<u64, History>,
    use_clock: u64,
    /// Sockets bloated in the last snapshot: bloat "starts" on a socket
    /// that is bloated now and was not then.
    bloated: HashSet<u64>,
    last_notice_ms: HashMap<u64, u64>,
    /// Newest first.
    notices: VecDeque<Notice>,
    summary: HostSummary,
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
            },
            now_ms: 0,
            link: Link::Connecting,
            sort: SortKey::QueueDelay,
            filter: Filter::default(),
            prompt: None,
            order: Vec::new(),
            sorted_prefix: 0,
            selected: 0,
            selected_cookie: None,
            follow: false,
            offset: 0,
            page_rows: 0,
            view: View::Table,
            detail: None,
            help: false,
            paused: false,
            quit: false,
            histories: HashMap::new(),
            use_clock: 0,
            bloated: HashSet::new(),
            last_notice_ms: HashMap::new(),
            notices: VecDeque::new(),
            summary: HostSummary::default(),
        }
    }

    // ----- inputs -----

    /// Takes a new snapshot from the source. `now_ms` is the app's clock
    /// (Unix milliseconds in the run loop), used for notice expiry.
    pub fn apply_snapshot(&mut self, mut snapshot: Snapshot, now_ms: u64) {
        self.now_ms = now_ms;
        self.link = Link::Up;
        self.use_clock += 1;
        for series in std::mem::take(&mut snapshot.series) {
            let history = self.histories.entry(series.cookie).or_default();
            history.last_used = self.use_clock;
            history.extend(series.samples, snapshot.interval_ms);
        }
        self.snapshot = snapshot;
        self.scan_sockets(now_ms);
        self.rebuild_order();
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
        self.notices
            .retain(|n| now_ms.saturating_sub(n.at_ms) < NOTICE_TTL_MS);
        self.last_notice_ms
            .retain(|_, at| now_ms.saturating_sub(*at) < NOTICE_COOLDOWN_MS);
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
        if self.help {
            match key {
                Key::Esc | Key::Char('?') => self.help = false,
                Key::Char('q') => self.quit = true,
                _ => {}
            }
            return;
        }
        match key {
            Key::Char('q') => self.quit = true,
            Key::Char('?') => self.help = true,
            Key::Char('p') => self.paused = !self.paused,
            Key::Char('s') => self.set_sort(self.sort.next()),
            Key::Char('f') => {
                self.prompt = Some(FilterPrompt {
                    text: self.filter.text().to_string(),
                    error: None,
                    previous: self.filter.clone(),
                })
            }
            Key::Up | Key::Char('k') => self.move_selection(-1),
            Key::Down | Key::Char('j') => self.move_selection(1),
            Key::PageUp => self.move_selection(-(self.page_rows.max(1) as isize)),
            Key::PageDown => self.move_selection(self.page_rows.max(1) as isize),
            Key::Home | Key::Char('g') => self.move_selection(isize::MIN),
            Key::End | Key::Char('G') => self.move_selection(isize::MAX),
            Key::Enter => match self.view {
                View::Table => self.open_detail(),
                View::Detail => self.close_detail(),
            },
            Key::Esc => self.close_detail(),
            _ => {}
        }
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
                    Err(e) => prompt.error = Some(e),
                }
            }
            _ => {}
        }
    }

    /// Tells the state how many table rows fit on screen; scrolls so the
    /// selected row is visible and sorts just the rows that will be drawn.
    pub fn set_page_rows(&mut self, rows: usize) {
        self.page_rows = rows;
        if self.selected < self.offset {
            self.offset = self.selected;
        } else if rows > 0 && self.selected >= self.offset + rows {
            self.offset = self.selected + 1 - rows;
        }
        self.offset = self.offset.min(self.order.len().saturating_sub(rows));
        self.ensure_sorted(self.offset + rows);
    }

    pub fn set_sort(&mut self, sort: SortKey) {
        self.sort = sort;
        self.rebuild_order();
    }

    pub fn set_filter(&mut self, filter: Filter) {
        self.filter = filter;
        self.rebuild_order();
    }

    // ----- reads -----

    /// What the run loop should ask the source for: the time series of the
    /// socket on screen, samples after the newest one already held.
    pub fn series_request(&self) -> (Option<u64>, u64) {
        let cookie = match (&self.view, &self.detail) {
            (View::Detail, Some(d)) => Some(d.socket.cookie),
            _ => self.selected_cookie,
        };
        let since_ms = cookie
            .and_then(|c| self.histories.get(&c))
            .and_then(History::last_t_ms)
            .unwrap_or(0);
        (cookie, since_ms)
    }

    /// The whole request for the next snapshot: the series above, and
    /// the rows to draw, sorted and filtered by the source: a page beyond
    /// the selection and the screen, at least MIN_ROWS.
    pub fn snapshot_request(&self) -> SnapshotRequest {
        let (series, since_ms) = self.series_request();
        let page = self.page_rows.max(1);
        let limit = (self.offset.max(self.selected) + 2 * page).max(MIN_ROWS);
        SnapshotRequest {
            series,
            since_ms,
            sort: Some(self.sort.label().to_string()),
            filter: (!self.filter.is_empty()).then(|| self.filter.text().to_string()),
            limit: Some(limit),
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
        self.sort
    }

    pub fn filter(&self) -> &Filter {
        &self.filter
    }

    pub fn prompt(&self) -> Option<&FilterPrompt> {
        self.prompt.as_ref()
    }

    pub fn view(&self) -> View {
        self.view
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

    /// Active notices, newest first.
    pub fn notices(&self) -> &VecDeque<Notice> {
        &self.notices
    }

    pub fn history(&self, cookie: u64) -> Option<&History> {
        self.histories.get(&cookie)
    }

    /// Rows passing the filter that the dashboard holds (with a source
    /// that selects rows: the first of them, see `snapshot_request`).
    pub fn row_count(&self) -> usize {
        self.order.len()
    }

    /// Sockets passing the filter on the whole host.
    pub fn matched(&self) -> usize {
        self.snapshot.matched.unwrap_or(self.order.len())
    }

    pub fn is_bloated(&self, socket: &Socket) -> bool {
        socket.is_bloated(self.snapshot.bloat_threshold_us)
    }

    /// Index of the first row on screen.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Index of the selected row, if there are rows.
    pub fn selected(&self) -> Option<usize> {
        (!self.order.is_empty()).then_some(self.selected)
    }

    pub fn selected_socket(&self) -> Option<&Socket> {
        self.selected()
            .map(|i| &self.snapshot.sockets[self.order[i] as usize])
    }

    /// The rows on screen, in order (call `set_page_rows` first).
    pub fn visible(&self) -> impl Iterator<Item = &Socket> + '_ {
        let end = (self.offset + self.page_rows).min(self.sorted_prefix);
        let start = self.offset.min(end);
        self.order[start..end]
            .iter()
            .map(|&i| &self.snapshot.sockets[i as usize])
    }

    // ----- internals -----

    /// One pass over all sockets: host summary, bloat transitions, notices,
    /// and which kept histories still have a socket.
    fn scan_sockets(&mut self, now_ms: u64) {
        let threshold_us = self.snapshot.bloat_threshold_us;
        let mut bloated_now = HashSet::with_capacity(self.bloated.len());
        let mut started: Vec<&Socket> = Vec::new();
        let mut alive_histories = Vec::new();
        for s in &self.snapshot.sockets {
            if s.is_bloated(threshold_us) {
                bloated_now.insert(s.cookie);
                let cooling = self
                    .last_notice_ms
                    .get(&s.cookie)
                    .is_some_and(|at| now_ms.saturating_sub(*at) < NOTICE_COOLDOWN_MS);
                if !self.bloated.contains(&s.cookie) && !cooling {
                    started.push(s);
                }
            }
            if self.histories.contains_key(&s.cookie) {
                alive_histories.push(s.cookie);
            }
        }
        // A daemon that selected the rows summarised the whole host.
        let summary = match self.snapshot.summary.clone() {
            Some(summary) => summary,
            None => summarize(&self.snapshot.sockets, threshold_us),
        };

        // Announce the worst first; the rest of a burst becomes one line.
        started.sort_unstable_by(|a, b| SortKey::QueueDelay.compare(a, b));
        let mut fresh: Vec<Notice> = started
            .iter()
            .take(MAX_NOTICES)
            .map(|s| Notice {
                cookie: Some(s.cookie),
                text: bloat_notice_text(s),
                at_ms: now_ms,
            })
            .collect();
        if started.len() > MAX_NOTICES {
            fresh.push(Notice {
                cookie: None,
                text: format!(
                    "…and {} more sockets started bloating",
                    started.len() - MAX_NOTICES
                ),
                at_ms: now_ms,
            });
        }
        for s in &started {
            self.last_notice_ms.insert(s.cookie, now_ms);
        }
        for notice in fresh.into_iter().rev() {
            self.notices.push_front(notice);
        }
        self.notices.truncate(MAX_NOTICES + 1);

        self.bloated = bloated_now;
        self.summary = summary;
        self.prune_histories(alive_histories);
    }

    /// Keeps histories of live sockets (and of the pinned detail socket), at
    /// most MAX_HISTORIES, evicting the least recently used.
    fn prune_histories(&mut self, alive: Vec<u64>) {
        let pinned = self.detail.as_ref().map(|d| d.socket.cookie);
        let alive: HashSet<u64> = alive.into_iter().chain(pinned).collect();
        self.histories.retain(|cookie, _| alive.contains(cookie));
        while self.histories.len() > MAX_HISTORIES {
            let oldest = self
                .histories
                .iter()
                .filter(|(c, _)| Some(**c) != pinned)
                .min_by_key(|(_, h)| h.last_used)
                .map(|(c, _)| *c);
            match oldest {
                Some(c) => self.histories.remove(&c),
                None => break,
            };
        }
    }

    /// Filters the rows and finds the selected socket again.
    fn rebuild_order(&mut self) {
        let sockets = &self.snapshot.sockets;
        self.order.clear();
        self.order.extend(
            sockets
                .iter()
                .enumerate()
                .filter(|(_, s)| self.filter.matches(s))
                .map(|(i, _)| i as u32),
        );
        self.sorted_prefix = 0;
        let followed = self.selected_cookie.filter(|_| self.follow);
        let rank = followed.and_then(|cookie| {
            let target = self
                .order
                .iter()
                .map(|&i| &sockets[i as usize])
                .find(|s| s.cookie == cookie)?;
            // Its row is the number of rows that sort before it: found in
            // one pass, without sorting the whole table.
            Some(
                self.order
                    .iter()
                    .filter(|&&i| self.sort.compare(&sockets[i as usize], target) == Ordering::Less)
                    .count(),
            )
        });
        // A socket that went away leaves the selection on the same row.
        self.selected = rank
            .unwrap_or(self.selected)
            .min(self.order.len().saturating_sub(1));
        self.ensure_sorted(self.selected + 1);
        self.selected_cookie = self.selected_socket().map(|s| s.cookie);
        let page_rows = self.page_rows;
        self.set_page_rows(page_rows);
    }

    /// Puts the first `rows` rows in sort order: select the smallest ones
    /// (linear), then sort just those.
    fn ensure_sorted(&mut self, rows: usize) {
        let rows = rows.min(self.order.len());
        if rows <= self.sorted_prefix {
            return;
        }
        let (sockets, sort) = (&self.snapshot.sockets, self.sort);
        let cmp = |a: &u32, b: &u32| sort.compare(&sockets[*a as usize], &sockets[*b as usize]);
        let rest = &mut self.order[self.sorted_prefix..];
        let need = rows - self.sorted_prefix;
        if need < rest.len() {
            rest.select_nth_unstable_by(need - 1, cmp);
        }
        rest[..need].sort_unstable_by(cmp);
        self.sorted_prefix = rows;
    }

    fn move_selection(&mut self, delta: isize) {
        if self.order.is_empty() {
            return;
        }
        let last = self.order.len() - 1;
        self.selected = self.selected.saturating_add_signed(delta).min(last);
        self.follow = self.selected != 0;
        self.ensure_sorted(self.selected + 1);
        self.selected_cookie = self.selected_socket().map(|s| s.cookie);
        if self.view == View::Detail {
            self.open_detail();
        }
        let page_rows = self.page_rows;
        self.set_page_rows(page_rows);
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

/// "receiver queue 420ms on 10.0.0.2:443 (curl): 9.9x its minimum RTT".
pub fn bloat_notice_text(s: &Socket) -> String {
    let side = match s.role {
        Role::Sender => "sender",
        Role::Receiver => "receiver",
    };
    // The local port names an accepted connection whose process is not
    // known (only connect() runs in its owner's context).
    let who = match &s.comm {
        Some(c) => c.clone(),
        None => format!("port {}", s.local_port),
    };
    let mut text = format!(
        "{side} queue {} on {} ({who})",
        format::ms(s.view_queue_delay_us() as u64),
        s.remote_endpoint()
    );
    if let Some(ratio) = rtt_ratio(s) {
        text.push_str(&format!(": {ratio} its minimum RTT"));
    }
    text
}

/// RTT over minimum RTT from the socket's side, as "9.9x" (or "12x"); None
/// without a minimum.
pub fn rtt_ratio(s: &Socket) -> Option<String> {
    let min_us = s.view_min_rtt_us();
    (min_us > 0).then(|| ratio_text(s.view_rtt_us() as f64 / min_us as f64))
}

/// A ratio as "9.9x" below 10 and "12x" above.
pub fn ratio_text(ratio: f64) -> String {
    if ratio < 9.95 {
        format!("{ratio:.1}x")
    } else {
        format!("{ratio:.0}x")
    }
}
