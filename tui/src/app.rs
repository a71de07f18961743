//! The dashboard's state: pure, no terminal and no I/O.
//!
//! The run loop feeds it snapshots (`apply_snapshot`), source failures
//! (`source_failed`), key presses (`handle_key`) and the time (`tick`); the
//! renderer reads it. Everything here is unit-tested without a terminal.
//!
//! Cost per snapshot is linear in the number of sockets: filtering, bloat
//! detection and the per-cc distribution are one pass each, and only the rows
//! the screen shows (plus the selected one) are ever sorted.

use crate::format;
pub use crate::model::{CcDelay, HostSummary, SnapshotRequest};
use crate::model::{Role, Sample, Snapshot, Socket};
use std::cmp::Ordering;
use std::collections::{HashMap, HashSet, VecDeque};

/// How far back the detail charts reach.
pub const HISTORY_WINDOW_MS: u64 = 60_000;
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
/// Daemon sampling intervals below this are treated as this when sizing
/// ring buffers, which bounds a history at 6000 samples.
const MIN_SAMPLE_INTERVAL_MS: u64 = 10;

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

/// Columns the table can be sorted by; `s` cycles through them in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    /// Queueing delay from the socket's side, largest first (the default:
    /// the worst queue is what the user came to see).
    QueueDelay,
    /// RTT from the socket's side, largest first.
    Rtt,
    /// Throughput, largest first.
    Throughput,
    /// Congestion window, largest first.
    Cwnd,
    /// Retransmitted segments, most first.
    Retrans,
    /// Process name, A to Z.
    Process,
}

impl SortKey {
    pub const ALL: [SortKey; 6] = [
        SortKey::QueueDelay,
        SortKey::Rtt,
        SortKey::Throughput,
        SortKey::Cwnd,
        SortKey::Retrans,
        SortKey::Process,
    ];

    pub fn next(self) -> SortKey {
        let i = Self::ALL.iter().position(|k| *k == self).unwrap_or(0);
        Self::ALL[(i + 1) % Self::ALL.len()]
    }

    pub fn label(self) -> &'static str {
        match self {
            SortKey::QueueDelay => "qdelay",
            SortKey::Rtt => "rtt",
            SortKey::Throughput => "throughput",
            SortKey::Cwnd => "cwnd",
            SortKey::Retrans => "retrans",
            SortKey::Process => "process",
        }
    }

    /// The key a label names (`qdelay`, `rtt`, ...: the API's `sort`).
    pub fn from_label(label: &str) -> Option<SortKey> {
        Self::ALL.into_iter().find(|k| k.label() == label)
    }

    /// Whether the key sorts largest first.
    pub fn descending(self) -> bool {
        self != SortKey::Process
    }

    /// Total order on sockets: the key, then the queueing delay, then the
    /// cookie, so that equal rows never swap places between frames.
    pub fn compare(self, a: &Socket, b: &Socket) -> Ordering {
        let by_key = match self {
            SortKey::QueueDelay => b.view_queue_delay_us().cmp(&a.view_queue_delay_us()),
            SortKey::Rtt => b.view_rtt_us().cmp(&a.view_rtt_us()),
            SortKey::Throughput => b.throughput_bps.cmp(&a.throughput_bps),
            SortKey::Cwnd => b.cwnd.cmp(&a.cwnd),
            SortKey::Retrans => b.retrans.cmp(&a.retrans),
            // Sockets without a known process go last.
            SortKey::Process => match (&a.comm, &b.comm) {
                (Some(x), Some(y)) => x.cmp(y),
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (None, None) => Ordering::Equal,
            },
        };
        by_key
            .then_with(|| b.view_queue_delay_us().cmp(&a.view_queue_delay_us()))
            .then_with(|| a.cookie.cmp(&b.cookie))
    }
}

/// One condition of a filter.
#[derive(Clone, Debug, PartialEq)]
enum Term {
    /// `cc:NAME`: congestion control name contains NAME.
    Cc(String),
    /// `comm:NAME`: process name contains NAME.
    Comm(String),
    /// `port:N`: local or remote port is N.
    Port(u16),
    /// `addr:TEXT`: local or remote address contains TEXT.
    Addr(String),
    /// Plain text: process or cc name contains it, or it is a port number.
    Any { text: String, port: Option<u16> },
}

/// A filter typed after `f`: whitespace-separated terms that must all match.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Filter {
    text: String,
    terms: Vec<Term>,
}

impl Filter {
    /// Parses filter text. Terms: `cc:NAME`, `comm:NAME`, `port:N`,
    /// `addr:TEXT`, or plain text (matches process, cc name or port).
    /// Matching ignores ASCII case.
    pub fn parse(text: &str) -> Result<Filter, String> {
        let mut terms = Vec::new();
        for word in text.split_whitespace() {
            let lower = word.to_ascii_lowercase();
            let term = if let Some(v) = lower.strip_prefix("cc:") {
                Term::Cc(v.to_string())
            } else if let Some(v) = lower.strip_prefix("comm:") {
                Term::Comm(v.to_string())
            } else if let Some(v) = lower.strip_prefix("addr:") {
                Term::Addr(v.to_string())
            } else if let Some(v) = lower.strip_prefix("port:") {
                let port = v
                    .parse()
                    .map_err(|_| format!("'{word}': a port is a number from 0 to 65535"))?;
                Term::Port(port)
            } else {
                Term::Any {
                    port: lower.parse().ok(),
                    text: lower,
                }
            };
            terms.push(term);
        }
        Ok(Filter {
            text: text.trim().to_string(),
            terms,
        })
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    pub fn matches(&self, s: &Socket) -> bool {
        self.terms.iter().all(|term| match term {
            Term::Cc(v) => contains_ignore_case(&s.cc, v),
            Term::Comm(v) => s
                .comm
                .as_deref()
                .is_some_and(|c| contains_ignore_case(c, v)),
            Term::Port(p) => s.local_port == *p || s.remote_port == *p,
            Term::Addr(v) => {
                contains_ignore_case(&s.remote_addr.to_string(), v)
                    || contains_ignore_case(&s.local_addr.to_string(), v)
            }
            Term::Any { text, port } => {
                s.comm
                    .as_deref()
                    .is_some_and(|c| contains_ignore_case(c, text))
                    || contains_ignore_case(&s.cc, text)
                    || port.is_some_and(|p| s.local_port == p || s.remote_port == p)
            }
        })
    }
}

/// `needle` must already be lower case.
fn contains_ignore_case(hay: &str, needle: &str) -> bool {
    let (hay, needle) = (hay.as_bytes(), needle.as_bytes());
    needle.is_empty()
        || hay
            .windows(needle.len())
            .any(|w| w.eq_ignore_ascii_case(needle))
}

/// The last minute of one socket's samples, a ring buffer sized from the
/// daemon's sampling interval.
#[derive(Clone, Debug, Default)]
pub struct History {
    samples: VecDeque<Sample>,
    /// When the history was last asked for or fed (for eviction), app ticks.
    last_used: u64,
}

impl History {
    /// Samples, oldest first.
    pub fn samples(&self) -> &VecDeque<Sample> {
        &self.samples
    }

    /// Time of the newest sample: the client asks the daemon for samples
    /// after it.
    pub fn last_t_ms(&self) -> Option<u64> {
        self.samples.back().map(|s| s.t_ms)
    }

    /// Appends samples newer than the newest one kept (older ones are
    /// repeats of what the daemon already sent), then drops what fell out of
    /// the window or exceeds the ring's capacity.
    fn extend(&mut self, samples: Vec<Sample>, interval_ms: u32) {
        for sample in samples {
            if self.last_t_ms().is_none_or(|t| sample.t_ms > t) {
                self.samples.push_back(sample);
            }
        }
        let capacity = Self::capacity(interval_ms);
        while self.samples.len() > capacity {
            self.samples.pop_front();
        }
        if let Some(newest) = self.last_t_ms() {
            while self
                .samples
                .front()
                .is_some_and(|s| s.t_ms + HISTORY_WINDOW_MS < newest)
            {
                self.samples.pop_front();
            }
        }
    }

    /// Samples in one window at the daemon's interval, plus the one at the
    /// window's start.
    fn capacity(interval_ms: u32) -> usize {
        let interval_ms = (interval_ms as u64).max(MIN_SAMPLE_INTERVAL_MS);
        (HISTORY_WINDOW_MS / interval_ms) as usize + 1
    }
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

/// The filter prompt while it is open.
#[derive(Clone, Debug, PartialEq)]
pub struct FilterPrompt {
    pub text: String,
    /// Why the text is not a valid filter yet, if it is not.
    pub error: Option<String>,
    /// The filter to go back to on Esc.
    previous: Filter,
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

/// The host's bloat over `sockets` (all of them: the filter does not apply).
pub fn summarize(sockets: &[Socket], threshold_us: u32) -> HostSummary {
    let mut per_cc: HashMap<&str, Vec<u32>> = HashMap::new();
    let mut summary = HostSummary {
        sockets: sockets.len(),
        ..Default::default()
    };
    for s in sockets {
        let delay_us = s.view_queue_delay_us();
        if s.view_rtt_us() > 0 && s.view_min_rtt_us() > 0 {
            per_cc.entry(s.cc.as_str()).or_default().push(delay_us);
            summary.worst_queue_delay_us = summary.worst_queue_delay_us.max(delay_us);
        }
        if s.is_bloated(threshold_us) {
            summary.bloated += 1;
        }
    }
    summary.per_cc = per_cc
        .into_iter()
        .map(|(cc, mut delays)| distribution(cc, &mut delays))
        .collect();
    summary.per_cc.sort_by(|a, b| a.cc.cmp(&b.cc));
    summary
}

/// What a dashboard asking `req` draws, from every socket: the sockets
/// passing its filter, the first `limit` of them in its sort order (plus
/// the socket whose series it asks for, wherever it ranks), how many
/// passed, and the host's summary over all. Done once by the daemon for
/// the API and in process for embedded mode, so the client decodes and
/// draws a page, not the host. An unknown sort key or a bad filter is an
/// error the caller returns to the client.
pub fn select_rows(
    sockets: Vec<Socket>,
    req: &SnapshotRequest,
    threshold_us: u32,
) -> Result<(Vec<Socket>, usize, HostSummary), String> {
    let summary = summarize(&sockets, threshold_us);
    let sort = match req.sort.as_deref() {
        None => SortKey::QueueDelay,
        Some(l) => SortKey::from_label(l).ok_or_else(|| {
            let keys: Vec<&str> = SortKey::ALL.iter().map(|k| k.label()).collect();
            format!("unknown sort key {l:?} (one of {})", keys.join(", "))
        })?,
    };
    let filter = Filter::parse(req.filter.as_deref().unwrap_or(""))?;
    let mut rows: Vec<Socket> = Vec::new();
    let mut pinned = None;
    for s in sockets {
        if filter.matches(&s) {
            rows.push(s);
        } else if Some(s.cookie) == req.series {
            pinned = Some(s);
        }
    }
    let matched = rows.len();
    let limit = req.limit.unwrap_or(usize::MAX).max(1);
    let cmp = |a: &Socket, b: &Socket| sort.compare(a, b);
    if limit < rows.len() {
        rows.select_nth_unstable_by(limit - 1, cmp);
        let beyond = rows.split_off(limit);
        pinned = pinned.or_else(|| beyond.into_iter().find(|s| Some(s.cookie) == req.series));
    }
    rows.sort_unstable_by(cmp);
    rows.extend(pinned);
    Ok((rows, matched, summary))
}

/// p50, p90 (nearest rank) and max of `delays`, which must not be empty.
/// Linear: `select_nth_unstable` instead of a sort.
fn distribution(cc: &str, delays: &mut [u32]) -> CcDelay {
    let n = delays.len();
    let nearest_rank = |p: usize| (n * p).div_ceil(100).max(1) - 1;
    let p50_us = *delays.select_nth_unstable(nearest_rank(50)).1;
    let p90_us = *delays.select_nth_unstable(nearest_rank(90)).1;
    let max_us = *delays.select_nth_unstable(n - 1).1;
    CcDelay {
        cc: cc.to_string(),
        sockets: n,
        p50_us,
        p90_us,
        max_us,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Health, Series};

    use crate::tests::fixtures;

    /// The shared fixture socket, with a name, a congestion control and a
    /// queue of `queue_ms` over a 40 ms path.
    fn sock(cookie: u64, comm: &str, cc: &str, queue_ms: u32) -> Socket {
        let mut s = fixtures::sending(fixtures::socket(cookie), 40_000, queue_ms * 1000);
        s.comm = Some(comm.into());
        s.cc = cc.into();
        s.inflight = 5;
        s.throughput_bps = cookie * 1000;
        s
    }

    fn snap(taken_ms: u64, sockets: Vec<Socket>) -> Snapshot {
        Snapshot {
            summary: None,
            matched: None,
            taken_ms,
            interval_ms: 250,
            bloat_threshold_us: 100_000,
            sockets,
            series: vec![],
            health: Health::default(),
        }
    }

    fn sample(t_ms: u64) -> Sample {
        Sample {
            t_ms,
            srtt_us: 1,
            min_rtt_us: 1,
            floor_us: 1,
            queue_delay_us: 0,
            rcv_rtt_us: 0,
            rcv_queue_delay_us: 0,
            cwnd: 10,
            inflight: 1,
            pipe_segments: None,
            throughput_bps: 0,
        }
    }

    fn visible_cookies(app: &mut App, rows: usize) -> Vec<u64> {
        app.set_page_rows(rows);
        app.visible().map(|s| s.cookie).collect()
    }

    #[test]
    fn the_source_selects_sorted_filtered_rows_and_summarises_all() {
        let all: Vec<Socket> = (1..=50u64)
            .map(|c| sock(c, if c % 2 == 0 { "curl" } else { "wget" }, if c % 5 == 0 { "bbr" } else { "cubic" }, c as u32 * 10))
            .collect();
        let req = SnapshotRequest {
            sort: Some("qdelay".into()),
            filter: Some("cc:cubic".into()),
            limit: Some(5),
            series: Some(5), // a bbr socket: filtered out, still sent for the detail pane
            since_ms: 0,
        };
        let (rows, matched, summary) = select_rows(all.clone(), &req, 100_000).unwrap();
        assert_eq!(matched, 40);
        let cookies: Vec<u64> = rows.iter().map(|s| s.cookie).collect();
        assert_eq!(cookies, vec![49, 48, 47, 46, 44, 5], "the worst cubic first, then the pinned socket");
        // The summary covers every socket, filter or not.
        assert_eq!(summary, summarize(&all, 100_000));
        assert_eq!(summary.sockets, 50);
        assert_eq!(summary.bloated, 41, "10 ms steps: 100 ms and up bloated");
        // The same rows as the dashboard's own sort of the whole host.
        let mut app = App::new();
        app.set_filter(Filter::parse("cc:cubic").unwrap());
        app.apply_snapshot(snap(1_000, all), 1_000);
        assert_eq!(visible_cookies(&mut app, 5), vec![49, 48, 47, 46, 44]);
        // A socket beyond the limit that the dashboard watches comes along.
        let req = SnapshotRequest { series: Some(1), filter: None, ..req };
        let (rows, _, _) = select_rows((1..=50).map(|c| sock(c, "x", "cubic", c as u32)).collect(), &req, 0).unwrap();
        assert_eq!(rows.last().unwrap().cookie, 1);
        assert_eq!(rows.len(), 6);
        // Bad input is an error the API returns, not a panic.
        let bad = SnapshotRequest { sort: Some("size".into()), ..Default::default() };
        assert!(select_rows(Vec::new(), &bad, 0).unwrap_err().contains("qdelay"));
        let bad = SnapshotRequest { filter: Some("port:x".into()), ..Default::default() };
        assert!(select_rows(Vec::new(), &bad, 0).is_err());
    }

    #[test]
    fn the_request_asks_for_a_page_beyond_the_selection() {
        let mut app = App::new();
        app.set_page_rows(20);
        let req = app.snapshot_request();
        assert_eq!(req.limit, Some(MIN_ROWS));
        assert_eq!(req.sort.as_deref(), Some("qdelay"));
        assert_eq!(req.filter, None);
        app.set_filter(Filter::parse("port:443").unwrap());
        assert_eq!(app.snapshot_request().filter.as_deref(), Some("port:443"));
    }

    #[test]
    fn default_sort_is_queueing_delay_descending() {
        let mut app = App::new();
        app.apply_snapshot(
            snap(
                1,
                vec![
                    sock(1, "a", "cubic", 5),
                    sock(2, "b", "cubic", 300),
                    sock(3, "c", "bbr", 40),
                ],
            ),
            1,
        );
        assert_eq!(visible_cookies(&mut app, 10), vec![2, 3, 1]);
        assert_eq!(app.selected_socket().unwrap().cookie, 2);
    }

    #[test]
    fn receivers_sort_by_their_receiver_queue() {
        let mut rx = sock(9, "curl", "cubic", 0);
        rx.role = Role::Receiver;
        rx.rcv_rtt_us = 460_000;
        rx.floor_us = 40_000;
        rx.rcv_queue_delay_us = 420_000;
        let mut app = App::new();
        app.apply_snapshot(snap(1, vec![sock(1, "a", "cubic", 50), rx]), 1);
        assert_eq!(visible_cookies(&mut app, 10), vec![9, 1]);
    }

    #[test]
    fn s_cycles_sort_keys_and_back() {
        let mut app = App::new();
        app.apply_snapshot(
            snap(
                1,
                vec![
                    sock(1, "zsh", "cubic", 5),
                    sock(2, "curl", "cubic", 300),
                    sock(3, "apt", "bbr", 40),
                ],
            ),
            1,
        );
        let mut seen = vec![app.sort()];
        for _ in 0..SortKey::ALL.len() {
            app.handle_key(Key::Char('s'));
            seen.push(app.sort());
        }
        assert_eq!(&seen[..6], &SortKey::ALL);
        assert_eq!(seen[6], SortKey::QueueDelay);
        app.set_sort(SortKey::Process);
        assert_eq!(visible_cookies(&mut app, 10), vec![3, 2, 1]);
        app.set_sort(SortKey::Throughput);
        assert_eq!(visible_cookies(&mut app, 10), vec![3, 2, 1]);
    }

    #[test]
    fn partial_sort_matches_a_full_sort_on_every_page() {
        // Pseudo-random delays with many ties: paging through the table must
        // show exactly the fully sorted order.
        let sockets: Vec<Socket> = (0..500u64)
            .map(|i| sock(i, "x", "cubic", ((i * 7919) % 37) as u32))
            .collect();
        let mut expected = sockets.clone();
        expected.sort_by(|a, b| SortKey::QueueDelay.compare(a, b));
        let mut app = App::new();
        app.apply_snapshot(snap(1, sockets), 1);
        let mut shown = Vec::new();
        app.set_page_rows(23);
        while shown.len() < 500 {
            let before = app.selected().unwrap();
            shown.extend(
                app.visible()
                    .map(|s| s.cookie)
                    .skip(shown.len() - app.offset()),
            );
            app.handle_key(Key::PageDown);
            app.set_page_rows(23);
            if app.selected().unwrap() == before {
                break;
            }
        }
        shown.extend(
            app.visible()
                .map(|s| s.cookie)
                .skip(shown.len() - app.offset()),
        );
        let expected: Vec<u64> = expected.iter().map(|s| s.cookie).collect();
        assert_eq!(shown, expected);
    }

    #[test]
    fn selection_follows_its_socket_when_the_order_changes() {
        let mut app = App::new();
        app.apply_snapshot(
            snap(
                1,
                vec![
                    sock(1, "a", "cubic", 300),
                    sock(2, "b", "cubic", 200),
                    sock(3, "c", "cubic", 100),
                ],
            ),
            1,
        );
        app.set_page_rows(10);
        app.handle_key(Key::Down);
        assert_eq!(app.selected_socket().unwrap().cookie, 2);
        // Socket 2's queue grows past the others: it moves to the top and the
        // selection moves with it.
        app.apply_snapshot(
            snap(
                2,
                vec![
                    sock(1, "a", "cubic", 300),
                    sock(2, "b", "cubic", 900),
                    sock(3, "c", "cubic", 100),
                ],
            ),
            2,
        );
        assert_eq!(app.selected(), Some(0));
        assert_eq!(app.selected_socket().unwrap().cookie, 2);
        // Socket 2 closes: the selection stays on row 0, now socket 1.
        app.apply_snapshot(
            snap(
                3,
                vec![sock(1, "a", "cubic", 300), sock(3, "c", "cubic", 100)],
            ),
            3,
        );
        assert_eq!(app.selected_socket().unwrap().cookie, 1);
    }

    #[test]
    fn the_top_row_stays_on_top_until_the_user_moves() {
        let mut app = App::new();
        app.apply_snapshot(
            snap(
                1,
                vec![sock(1, "a", "cubic", 300), sock(2, "b", "cubic", 200)],
            ),
            1,
        );
        assert_eq!(app.selected_socket().unwrap().cookie, 1);
        // Socket 2 overtakes: the top row now shows it.
        app.apply_snapshot(
            snap(
                2,
                vec![sock(1, "a", "cubic", 100), sock(2, "b", "cubic", 200)],
            ),
            2,
        );
        assert_eq!(app.selected(), Some(0));
        assert_eq!(app.selected_socket().unwrap().cookie, 2);
        // Back to the top after moving: the top row is sticky again.
        app.handle_key(Key::Down);
        app.handle_key(Key::Up);
        app.apply_snapshot(
            snap(
                3,
                vec![sock(1, "a", "cubic", 300), sock(2, "b", "cubic", 200)],
            ),
            3,
        );
        assert_eq!(app.selected_socket().unwrap().cookie, 1);
    }

    #[test]
    fn navigation_clamps_and_scrolls() {
        let mut app = App::new();
        app.apply_snapshot(
            snap(
                1,
                (0..10)
                    .map(|i| sock(i, "x", "cubic", 100 - i as u32))
                    .collect(),
            ),
            1,
        );
        app.set_page_rows(4);
        app.handle_key(Key::Up);
        assert_eq!(app.selected(), Some(0));
        for _ in 0..5 {
            app.handle_key(Key::Char('j'));
        }
        app.set_page_rows(4);
        assert_eq!(app.selected(), Some(5));
        assert_eq!(app.offset(), 2);
        assert_eq!(visible_cookies(&mut app, 4), vec![2, 3, 4, 5]);
        app.handle_key(Key::End);
        assert_eq!(app.selected(), Some(9));
        assert_eq!(visible_cookies(&mut app, 4), vec![6, 7, 8, 9]);
        app.handle_key(Key::Home);
        assert_eq!(visible_cookies(&mut app, 4), vec![0, 1, 2, 3]);
        app.handle_key(Key::PageDown);
        assert_eq!(app.selected(), Some(4));
        app.handle_key(Key::Char('k'));
        assert_eq!(app.selected(), Some(3));
    }

    #[test]
    fn empty_table_has_no_selection_and_keys_do_not_panic() {
        let mut app = App::new();
        app.apply_snapshot(snap(1, vec![]), 1);
        for key in [
            Key::Up,
            Key::Down,
            Key::End,
            Key::PageDown,
            Key::Enter,
            Key::Esc,
        ] {
            app.handle_key(key);
        }
        app.set_page_rows(0);
        assert_eq!(app.selected(), None);
        assert_eq!(app.view(), View::Table);
        assert_eq!(app.series_request(), (None, 0));
    }

    #[test]
    fn filter_terms() {
        let mut a = sock(1, "curl", "cubic", 0);
        a.remote_port = 443;
        let mut b = sock(2, "iperf3", "bloatd_westwood", 0);
        b.remote_port = 5201;
        b.remote_addr = "fd00::2".parse().unwrap();
        let matching = |text: &str| -> Vec<u64> {
            let f = Filter::parse(text).unwrap();
            [&a, &b]
                .iter()
                .filter(|s| f.matches(s))
                .map(|s| s.cookie)
                .collect()
        };
        assert_eq!(matching(""), vec![1, 2]);
        assert_eq!(matching("cc:cubic"), vec![1]);
        assert_eq!(matching("cc:WESTWOOD"), vec![2]);
        assert_eq!(matching("port:443"), vec![1]);
        assert_eq!(matching("port:40002"), vec![2]); // local port
        assert_eq!(matching("comm:curl"), vec![1]);
        assert_eq!(matching("addr:fd00"), vec![2]);
        assert_eq!(matching("curl"), vec![1]);
        assert_eq!(matching("westwood"), vec![2]);
        assert_eq!(matching("5201"), vec![2]);
        assert_eq!(matching("iperf cc:westwood"), vec![2]);
        assert_eq!(matching("iperf cc:cubic"), Vec::<u64>::new());
        assert!(Filter::parse("port:https").unwrap_err().contains("port"));
        assert!(Filter::parse("port:70000").is_err());
    }

    #[test]
    fn filter_prompt_applies_live_and_esc_restores() {
        let mut app = App::new();
        app.apply_snapshot(
            snap(
                1,
                vec![sock(1, "curl", "cubic", 0), sock(2, "ssh", "bbr", 0)],
            ),
            1,
        );
        app.handle_key(Key::Char('f'));
        for c in "cc:bbr".chars() {
            app.handle_key(Key::Char(c));
        }
        assert_eq!(app.row_count(), 1);
        // 'q' and 'p' are text while the prompt is open.
        app.handle_key(Key::Char('q'));
        assert!(!app.should_quit());
        app.handle_key(Key::Backspace);
        app.handle_key(Key::Enter);
        assert!(app.prompt().is_none());
        assert_eq!(app.filter().text(), "cc:bbr");
        assert_eq!(visible_cookies(&mut app, 5), vec![2]);

        app.handle_key(Key::Char('f'));
        for _ in 0..6 {
            app.handle_key(Key::Backspace);
        }
        for c in "port:x".chars() {
            app.handle_key(Key::Char(c));
        }
        assert!(app.prompt().unwrap().error.is_some());
        app.handle_key(Key::Enter); // invalid: the prompt stays open
        assert!(app.prompt().is_some());
        app.handle_key(Key::Esc);
        assert_eq!(app.filter().text(), "cc:bbr");
        assert_eq!(app.row_count(), 1);
    }

    #[test]
    fn pause_help_detail_and_quit_keys() {
        let mut app = App::new();
        app.apply_snapshot(snap(1, vec![sock(1, "curl", "cubic", 0)]), 1);
        app.handle_key(Key::Char('p'));
        assert!(app.paused());
        app.handle_key(Key::Char('p'));
        assert!(!app.paused());
        app.handle_key(Key::Char('?'));
        assert!(app.help());
        app.handle_key(Key::Char('j')); // ignored under help
        app.handle_key(Key::Esc);
        assert!(!app.help());
        app.handle_key(Key::Enter);
        assert_eq!(app.view(), View::Detail);
        assert_eq!(app.detail().unwrap().socket.cookie, 1);
        app.handle_key(Key::Esc);
        assert_eq!(app.view(), View::Table);
        app.handle_key(Key::Enter);
        app.handle_key(Key::Enter);
        assert_eq!(app.view(), View::Table);
        app.handle_key(Key::Char('q'));
        assert!(app.should_quit());
        let mut app = App::new();
        app.handle_key(Key::Char('f'));
        app.handle_key(Key::Interrupt);
        assert!(app.should_quit());
    }

    #[test]
    fn detail_pins_a_socket_that_closes() {
        let mut app = App::new();
        app.apply_snapshot(
            snap(
                1,
                vec![sock(1, "a", "cubic", 300), sock(2, "b", "cubic", 100)],
            ),
            1,
        );
        app.handle_key(Key::Enter);
        app.apply_snapshot(snap(2, vec![sock(2, "b", "cubic", 100)]), 2);
        let detail = app.detail().unwrap();
        assert_eq!(detail.socket.cookie, 1);
        assert!(detail.closed);
        assert_eq!(app.series_request().0, Some(1));
        // Moving in the detail view switches to the selected row.
        app.handle_key(Key::Down);
        assert_eq!(app.detail().unwrap().socket.cookie, 2);
        assert!(!app.detail().unwrap().closed);
    }

    #[test]
    fn history_is_fed_incrementally_and_keeps_one_minute() {
        let mut app = App::new();
        let mut s = snap(1_000, vec![sock(7, "curl", "cubic", 0)]);
        assert_eq!(app.series_request(), (None, 0));
        app.apply_snapshot(s.clone(), 1_000);
        assert_eq!(app.series_request(), (Some(7), 0));

        // The daemon answers with samples; the next request asks for newer ones.
        s.series = vec![Series {
            cookie: 7,
            samples: (0..4).map(|i| sample(1_000 + i * 250)).collect(),
        }];
        app.apply_snapshot(s.clone(), 2_000);
        assert_eq!(app.series_request(), (Some(7), 1_750));
        // Repeats are ignored, newer samples appended.
        s.series[0].samples = (3..8).map(|i| sample(1_000 + i * 250)).collect();
        app.apply_snapshot(s.clone(), 3_000);
        let h = app.history(7).unwrap();
        let times: Vec<u64> = h.samples().iter().map(|x| x.t_ms).collect();
        assert_eq!(
            times,
            vec![1_000, 1_250, 1_500, 1_750, 2_000, 2_250, 2_500, 2_750]
        );

        // Two minutes of samples at 250 ms: one minute is kept.
        s.series[0].samples = (8..488).map(|i| sample(1_000 + i * 250)).collect();
        app.apply_snapshot(s.clone(), 4_000);
        let h = app.history(7).unwrap();
        let newest = h.last_t_ms().unwrap();
        assert_eq!(newest, 1_000 + 487 * 250);
        assert_eq!(
            h.samples().front().unwrap().t_ms,
            newest - HISTORY_WINDOW_MS
        );
        assert_eq!(h.samples().len(), 241);

        // The socket closes: its history goes with it.
        app.apply_snapshot(snap(5_000, vec![]), 5_000);
        assert!(app.history(7).is_none());
    }

    #[test]
    fn ring_capacity_follows_the_daemon_interval() {
        assert_eq!(History::capacity(250), 241);
        assert_eq!(History::capacity(1000), 61);
        assert_eq!(History::capacity(0), 6001);
        let mut h = History::default();
        // Samples every 100 ms but the daemon says 1 s: the ring holds 61.
        h.extend((0..200).map(|i| sample(i * 100)).collect(), 1000);
        assert_eq!(h.samples().len(), 61);
        assert_eq!(h.last_t_ms(), Some(19_900));
    }

    #[test]
    fn histories_are_bounded() {
        let sockets: Vec<Socket> = (0..40).map(|i| sock(i, "x", "cubic", i as u32)).collect();
        let mut app = App::new();
        for i in 0..40u64 {
            let mut s = snap(i, sockets.clone());
            s.series = vec![Series {
                cookie: i,
                samples: vec![sample(i)],
            }];
            app.apply_snapshot(s, i);
        }
        assert_eq!(app.histories.len(), MAX_HISTORIES);
        assert!(app.history(39).is_some());
        assert!(app.history(0).is_none());
    }

    #[test]
    fn bloat_start_raises_one_notice_that_expires() {
        let mut app = App::new();
        let mut rx = sock(5, "curl", "cubic", 0);
        rx.role = Role::Receiver;
        rx.remote_port = 443;
        rx.floor_us = 47_000;
        rx.rcv_rtt_us = 20_000 + 47_000;
        rx.rcv_queue_delay_us = 20_000;
        app.apply_snapshot(snap(0, vec![rx.clone()]), 0);
        assert!(app.notices().is_empty());
        assert_eq!(app.summary().bloated, 0);

        rx.rcv_rtt_us = 420_000 + 47_000;
        rx.rcv_queue_delay_us = 420_000;
        app.apply_snapshot(snap(1_000, vec![rx.clone()]), 1_000);
        assert_eq!(app.summary().bloated, 1);
        assert_eq!(app.notices().len(), 1);
        assert_eq!(
            app.notices()[0].text,
            "receiver queue 420ms on 10.0.0.2:443 (curl): 9.9x its minimum RTT"
        );
        // Still bloated: no new notice.
        app.apply_snapshot(snap(2_000, vec![rx.clone()]), 2_000);
        assert_eq!(app.notices().len(), 1);
        app.tick(1_000 + NOTICE_TTL_MS - 1);
        assert_eq!(app.notices().len(), 1);
        app.tick(1_000 + NOTICE_TTL_MS);
        assert!(app.notices().is_empty());

        // Leaves and re-enters bloat within the cooldown: quiet.
        let calm = Socket {
            rcv_queue_delay_us: 1_000,
            ..rx.clone()
        };
        app.apply_snapshot(snap(7_000, vec![calm.clone()]), 7_000);
        app.apply_snapshot(snap(8_000, vec![rx.clone()]), 8_000);
        assert!(app.notices().is_empty());
        // After the cooldown it is announced again.
        let later = 1_000 + NOTICE_COOLDOWN_MS + 1;
        app.apply_snapshot(snap(later, vec![calm]), later);
        app.apply_snapshot(snap(later + 250, vec![rx]), later + 250);
        assert_eq!(app.notices().len(), 1);
    }

    #[test]
    fn threshold_is_inclusive_and_zero_disables() {
        let s = sock(1, "a", "cubic", 100);
        assert!(s.is_bloated(100_000));
        assert!(!s.is_bloated(100_001));
        assert!(!s.is_bloated(0));
    }

    #[test]
    fn a_burst_of_bloat_gives_the_worst_and_a_summary() {
        let mut app = App::new();
        let sockets: Vec<Socket> = (0..10)
            .map(|i| sock(i, "x", "cubic", 100 + i as u32))
            .collect();
        app.apply_snapshot(snap(0, sockets), 0);
        let texts: Vec<&str> = app.notices().iter().map(|n| n.text.as_str()).collect();
        assert_eq!(texts.len(), MAX_NOTICES + 1);
        assert!(
            texts[0].starts_with("sender queue 109ms on 10.0.0.2:443 (x)"),
            "{texts:?}"
        );
        assert_eq!(texts[MAX_NOTICES], "…and 6 more sockets started bloating");
        assert_eq!(app.notices()[0].cookie, Some(9));
    }

    #[test]
    fn summary_per_cc_distribution() {
        let mut sockets: Vec<Socket> = (1..=10)
            .map(|i| sock(i, "x", "cubic", i as u32 * 10))
            .collect();
        sockets.extend((11..=13).map(|i| sock(i, "y", "bloatd_westwood", i as u32 - 10)));
        // A socket without an RTT sample (e.g. just opened): not in the
        // distribution.
        let mut fresh = sock(99, "z", "cubic", 0);
        fresh.min_rtt_us = 0;
        fresh.srtt_us = 0;
        sockets.push(fresh);
        let mut app = App::new();
        app.apply_snapshot(snap(0, sockets), 0);
        let s = app.summary();
        assert_eq!(s.sockets, 14);
        assert_eq!(s.bloated, 1);
        assert_eq!(s.worst_queue_delay_us, 100_000);
        assert_eq!(
            s.per_cc,
            vec![
                CcDelay {
                    cc: "bloatd_westwood".into(),
                    sockets: 3,
                    p50_us: 2_000,
                    p90_us: 3_000,
                    max_us: 3_000
                },
                CcDelay {
                    cc: "cubic".into(),
                    sockets: 10,
                    p50_us: 50_000,
                    p90_us: 90_000,
                    max_us: 100_000
                },
            ]
        );
    }

    #[test]
    fn source_failure_keeps_the_first_failure_time_and_recovers() {
        let mut app = App::new();
        assert_eq!(app.link(), &Link::Connecting);
        app.source_failed("gone".into(), 10);
        app.source_failed("still gone".into(), 20);
        assert_eq!(
            app.link(),
            &Link::Down {
                message: "still gone".into(),
                since_ms: 10
            }
        );
        app.apply_snapshot(snap(30, vec![]), 30);
        assert_eq!(app.link(), &Link::Up);
    }
}
