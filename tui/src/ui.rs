//! Rendering: draws an [`App`] into a ratatui buffer.
//!
//! The screen, top to bottom: a header with the host's bloat (sockets,
//! bloated count, worst queue, queueing-delay distribution per congestion
//! control, daemon health, the newest "bloat started" notices), then either
//! the socket table or the detail view of one socket, then a line of key
//! hints. Only the rows on screen are formatted. Nothing here reads a clock:
//! ages are measured against the app's `now_ms`, charts against the
//! snapshot's `taken_ms`.

use crate::app::{App, CcDelay, Link, SortKey, View};
use crate::format;
use crate::model::{CaState, CcState, Role, Sample, Socket};
use ratatui::buffer::Buffer;
use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Axis, Block, BorderType, Borders, Cell, Chart, Dataset, GraphType, Paragraph, Row,
    StatefulWidget, Table, TableState, Widget, Wrap,
};
use ratatui::Frame;

/// Smallest terminal the dashboard draws in; below it says so instead.
pub const MIN_WIDTH: u16 = 50;
pub const MIN_HEIGHT: u16 = 12;
/// First column of a bloated row, so the mark survives without colour
/// (`--once`, `tmux capture-pane`).
pub const BLOAT_MARKER: &str = "!";

const HEADER_LINES: u16 = 3;
/// Terminals at least this tall show up to three notices instead of one.
const TALL_HEIGHT: u16 = 40;

const BLOATED: Style = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
const DIM: Style = Style::new().fg(Color::DarkGray);
const TITLE: Style = Style::new().add_modifier(Modifier::BOLD);
const WARN: Style = Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD);
const GOOD: Style = Style::new().fg(Color::Green);

/// Draws the whole interactive screen.
pub fn draw(frame: &mut Frame, app: &mut App) {
    let area = frame.area();
    render(app, area, frame.buffer_mut());
}

/// Renders the interactive screen into `buf`.
pub fn render(app: &mut App, area: Rect, buf: &mut Buffer) {
    render_screen(app, area, buf, true);
}

/// Header and table only, as plain text lines (no colours, no key hints):
/// the frame of `bloatd top --once`.
pub fn render_text(app: &mut App, width: u16, height: u16) -> String {
    let area = Rect::new(0, 0, width, height);
    let mut buf = Buffer::empty(area);
    render_screen(app, area, &mut buf, false);
    buffer_text(&buf)
}

/// The buffer as text: one line per row, trailing blanks and blank trailing
/// lines removed, cells hidden behind wide characters skipped.
pub fn buffer_text(buf: &Buffer) -> String {
    let width = buf.area.width as usize;
    let mut lines: Vec<String> = Vec::new();
    if width > 0 {
        for row in buf.content.chunks(width) {
            let mut line = String::new();
            let mut hidden = 0usize;
            for cell in row {
                if hidden > 0 {
                    hidden -= 1;
                    continue;
                }
                let symbol = cell.symbol();
                line.push_str(symbol);
                hidden = Line::from(symbol).width().saturating_sub(1);
            }
            lines.push(line.trim_end().to_string());
        }
    }
    while lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

/// Height at which `render_text` shows every row of a snapshot with
/// `sockets` sockets (header, notices, column titles, rows).
pub fn text_height_for(sockets: usize) -> u16 {
    (HEADER_LINES as usize + 3 + 1 + sockets).clamp(MIN_HEIGHT as usize, u16::MAX as usize) as u16
}

fn render_screen(app: &mut App, area: Rect, buf: &mut Buffer, interactive: bool) {
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        too_small(area, buf);
        return;
    }
    if interactive && app.help() {
        help(app, area, buf);
        return;
    }
    let notice_lines = if area.height >= TALL_HEIGHT { 3 } else { 1 };
    let footer_lines = if interactive { 1 } else { 0 };
    let [header, body, footer] = Layout::vertical([
        Constraint::Length(HEADER_LINES + notice_lines),
        Constraint::Fill(1),
        Constraint::Length(footer_lines),
    ])
    .areas(area);
    render_header(app, header, notice_lines, buf);
    match (app.link().clone(), interactive) {
        (Link::Down { message, since_ms }, true) => {
            disconnected(app, &message, since_ms, body, buf)
        }
        (Link::Connecting, true) => {
            centered_message("waiting for the first snapshot…", Style::new(), body, buf)
        }
        _ if interactive && app.view() == View::Detail => render_detail(app, body, buf),
        _ => render_table(app, body, buf),
    }
    if interactive {
        render_footer(app, footer, buf);
    }
}

fn too_small(area: Rect, buf: &mut Buffer) {
    let text = format!(
        "terminal too small ({}x{}): bloatd top needs at least {MIN_WIDTH}x{MIN_HEIGHT}",
        area.width, area.height
    );
    Paragraph::new(text)
        .wrap(Wrap { trim: true })
        .render(area, buf);
}

// ----- header -----

fn render_header(app: &App, area: Rect, notice_lines: u16, buf: &mut Buffer) {
    let snap = app.snapshot();
    let summary = app.summary();
    let threshold_us = snap.bloat_threshold_us;
    let sep = || Span::styled(" · ", DIM);

    let mode = if snap.health.mode.is_empty() {
        "?"
    } else {
        snap.health.mode.as_str()
    };
    let mut status = vec![
        Span::styled(" bloatd ", TITLE.add_modifier(Modifier::REVERSED)),
        Span::raw(format!(" {mode}")),
        sep(),
        Span::raw(format!("{} sockets", summary.sockets)),
    ];
    if !app.filter().is_empty() {
        status.push(Span::raw(format!(" ({} shown)", app.matched())));
    }
    status.push(sep());
    let bloated_style = if summary.bloated > 0 { BLOATED } else { GOOD };
    status.push(Span::styled(
        format!("{} bloated", summary.bloated),
        bloated_style,
    ));
    if threshold_us > 0 {
        status.push(Span::styled(
            format!(" (≥{})", format::ms(threshold_us as u64)),
            DIM,
        ));
    }
    status.push(sep());
    let worst_style = if threshold_us > 0 && summary.worst_queue_delay_us >= threshold_us {
        BLOATED
    } else {
        Style::new()
    };
    status.push(Span::raw("worst "));
    status.push(Span::styled(
        format::ms(summary.worst_queue_delay_us as u64),
        worst_style,
    ));
    if let Some(p) = &snap.policy {
        status.push(sep());
        let on = p.drwa == "on";
        status.push(Span::styled(format!("DRWA {}", p.drwa), if on { GOOD } else { DIM }));
        if p.drwa_sockets > 0 {
            status.push(Span::raw(format!(" ({} clamped)", p.drwa_sockets)));
        }
        if p.rules > 0 {
            status.push(sep());
            status.push(Span::raw(format!(
                "{} rule{}: {} cc, {} bulk",
                p.rules,
                if p.rules == 1 { "" } else { "s" },
                p.cc_sockets,
                p.bulk_sockets
            )));
        }
    }
    if app.paused() {
        status.push(Span::raw("  "));
        status.push(Span::styled(
            " PAUSED ",
            WARN.add_modifier(Modifier::REVERSED),
        ));
    }
    if let Link::Down { .. } = app.link() {
        status.push(Span::raw("  "));
        status.push(Span::styled(
            " DISCONNECTED ",
            BLOATED.add_modifier(Modifier::REVERSED),
        ));
    }

    let mut dist = vec![Span::styled(" qdelay p50/p90/max", DIM)];
    if summary.per_cc.is_empty() {
        dist.push(Span::styled(": no RTT measurements yet", DIM));
    }
    for cc in &summary.per_cc {
        dist.push(Span::raw("  "));
        dist.extend(cc_distribution(cc, threshold_us));
    }

    let health = &snap.health;
    let dropped_style = if health.dropped_total > 0 {
        WARN
    } else {
        Style::new()
    };
    let mut health_line = vec![
        Span::raw(format!(" events {}", format::count(health.events_total))),
        sep(),
        Span::styled(
            format!("dropped {}", format::count(health.dropped_total)),
            dropped_style,
        ),
        sep(),
        Span::raw(format!(
            "map {}/{}",
            format::count(health.map_entries),
            format::count(health.map_capacity)
        )),
        sep(),
        Span::raw(format!("every {}ms", snap.interval_ms)),
        sep(),
        Span::raw(format!(
            "sort {}{}",
            app.sort().label(),
            sort_arrow(app.sort())
        )),
    ];
    if !app.filter().is_empty() {
        health_line.push(sep());
        health_line.push(Span::styled(
            format!("filter {}", app.filter().text()),
            WARN,
        ));
    }
    // Data older than two intervals is stale: say how stale.
    let age_ms = app.now_ms().saturating_sub(snap.taken_ms);
    if snap.taken_ms > 0 && age_ms > 2 * snap.interval_ms as u64 {
        health_line.push(sep());
        health_line.push(Span::styled(
            format!("data {} old", format::age(age_ms)),
            WARN,
        ));
    }

    let mut lines = vec![
        Line::from(status),
        Line::from(dist),
        Line::from(health_line),
    ];
    let notices = app.notices();
    for (i, notice) in notices.iter().take(notice_lines as usize).enumerate() {
        let mut spans = vec![
            Span::styled(" ▲ ", BLOATED),
            Span::styled(notice.text.clone(), BLOATED),
        ];
        let rest = notices.len() - i - 1;
        if i + 1 == notice_lines as usize && rest > 0 {
            spans.push(Span::styled(format!("  (+{rest} more)"), DIM));
        }
        lines.push(Line::from(spans));
    }
    Paragraph::new(lines).render(area, buf);
}

fn cc_distribution(cc: &CcDelay, threshold_us: u32) -> Vec<Span<'static>> {
    let max_style = if threshold_us > 0 && cc.max_us >= threshold_us {
        BLOATED
    } else {
        Style::new()
    };
    let [p50, p90, max] = [cc.p50_us, cc.p90_us, cc.max_us].map(|us| format::ms(us as u64));
    // "2.4/310/420ms": one unit for the three when they share it.
    let shared_unit = [&p50, &p90, &max].iter().all(|t| t.ends_with("ms"));
    let short = |t: &str| {
        if shared_unit {
            t.trim_end_matches("ms").to_string()
        } else {
            t.to_string()
        }
    };
    vec![
        Span::styled(format!("{}({})", cc.cc, cc.sockets), TITLE),
        Span::raw(format!(" {}/{}/", short(&p50), short(&p90))),
        Span::styled(max, max_style),
    ]
}

fn sort_arrow(key: SortKey) -> &'static str {
    if key.descending() {
        "▼"
    } else {
        "▲"
    }
}

// ----- table -----

/// Table columns, in display order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Col {
    Marker,
    Process,
    Pid,
    Remote,
    LocalPort,
    Cc,
    Act,
    Role,
    State,
    Cwnd,
    Inflight,
    Rtt,
    MinRtt,
    QueueDelay,
    Throughput,
    Retrans,
    Ca,
}

const DISPLAY_ORDER: [Col; 17] = [
    Col::Marker,
    Col::Process,
    Col::Pid,
    Col::Remote,
    Col::LocalPort,
    Col::Cc,
    Col::Act,
    Col::Role,
    Col::State,
    Col::Cwnd,
    Col::Inflight,
    Col::Rtt,
    Col::MinRtt,
    Col::QueueDelay,
    Col::Throughput,
    Col::Retrans,
    Col::Ca,
];

/// Which columns a narrow terminal keeps: the queue and whose it is first.
const PRIORITY: [Col; 17] = [
    Col::Marker,
    Col::QueueDelay,
    Col::Remote,
    Col::Process,
    Col::Cc,
    Col::Act,
    Col::Rtt,
    Col::MinRtt,
    Col::Throughput,
    Col::Cwnd,
    Col::Role,
    Col::Retrans,
    Col::Inflight,
    Col::Ca,
    Col::Pid,
    Col::LocalPort,
    Col::State,
];

impl Col {
    fn title(self) -> &'static str {
        match self {
            Col::Marker => "",
            Col::Process => "PROCESS",
            Col::Pid => "PID",
            Col::Remote => "REMOTE",
            Col::LocalPort => "LPORT",
            Col::Cc => "CC",
            Col::Act => "ACT",
            Col::Role => "ROLE",
            Col::State => "STATE",
            Col::Cwnd => "CWND",
            Col::Inflight => "INFL",
            Col::Rtt => "RTT",
            Col::MinRtt => "MINRTT",
            Col::QueueDelay => "QDELAY",
            Col::Throughput => "THRPUT",
            Col::Retrans => "RETR",
            Col::Ca => "CA",
        }
    }

    fn sort_key(self) -> Option<SortKey> {
        match self {
            Col::QueueDelay => Some(SortKey::QueueDelay),
            Col::Rtt => Some(SortKey::Rtt),
            Col::Throughput => Some(SortKey::Throughput),
            Col::Cwnd => Some(SortKey::Cwnd),
            Col::Retrans => Some(SortKey::Retrans),
            Col::Process => Some(SortKey::Process),
            _ => None,
        }
    }

    fn right_aligned(self) -> bool {
        matches!(
            self,
            Col::Pid
                | Col::LocalPort
                | Col::Cwnd
                | Col::Inflight
                | Col::Rtt
                | Col::MinRtt
                | Col::QueueDelay
                | Col::Throughput
                | Col::Retrans
        )
    }

    /// For columns that may be squeezed on a narrow terminal: the narrowest
    /// width and the widest they grow to (longer texts are cut). The other
    /// columns always get their widest text, numbers are never cut.
    fn squeeze(self) -> Option<(usize, usize)> {
        match self {
            Col::Process => Some((7, 16)),
            Col::Remote => Some((15, 47)),
            Col::Cc => Some((6, 16)),
            Col::State => Some((5, 11)),
            _ => None,
        }
    }

    fn text(self, s: &Socket, threshold_us: u32) -> String {
        let ms = |us: u32| format::ms(us as u64);
        match self {
            Col::Marker => {
                if s.is_bloated(threshold_us) {
                    BLOAT_MARKER.into()
                } else {
                    String::new()
                }
            }
            Col::Process => s.comm.clone().unwrap_or_else(|| "-".into()),
            Col::Pid => s.pid.map_or_else(|| "-".into(), |p| p.to_string()),
            Col::Remote => s.remote_endpoint().to_string(),
            Col::LocalPort => s.local_port.to_string(),
            Col::Cc => s.cc.clone(),
            Col::Act => s.policy.as_ref().map(|p| p.mark()).unwrap_or_default(),
            Col::Role => s.role.short().into(),
            Col::State => s.state.clone(),
            Col::Cwnd => s.cwnd.to_string(),
            Col::Inflight => s.inflight.to_string(),
            Col::Rtt => ms(s.view_rtt_us()),
            Col::MinRtt => ms(s.view_min_rtt_us()),
            Col::QueueDelay => ms(s.view_queue_delay_us()),
            Col::Throughput => format::rate(s.throughput_bps),
            Col::Retrans => s.retrans.to_string(),
            Col::Ca => ca_short(s.ca_state).into(),
        }
    }

    /// `text` cut to `width`: an endpoint keeps its port, a bloatd cc name
    /// drops its prefix first ("bloatd_westwood" -> "westwood*").
    fn fit(self, text: &str, width: usize) -> String {
        let text_width = text.chars().count();
        if self == Col::Cc && text_width > width {
            if let Some(name) = text.strip_prefix("bloatd_") {
                return format::fit(&format!("{name}*"), width, false);
            }
        }
        format::fit(text, width, self == Col::Remote)
    }
}


fn ca_short(ca: CaState) -> &'static str {
    match ca {
        CaState::Open => "open",
        CaState::Disorder => "disord",
        CaState::Cwr => "cwr",
        CaState::Recovery => "recov",
        CaState::Loss => "loss",
    }
}

/// Picks the columns that fit `width` (by priority) and their widths: each
/// column as wide as its widest text on screen, flexible columns squeezed to
/// their minimum first and given back space in priority order.
fn layout_columns(titles: &[String], cells: &[Vec<String>], width: usize) -> Vec<(usize, usize)> {
    let desired: Vec<usize> = (0..DISPLAY_ORDER.len())
        .map(|c| {
            let widest = cells
                .iter()
                .map(|row| row[c].chars().count())
                .chain([titles[c].chars().count()])
                .max()
                .unwrap_or(0);
            let max = DISPLAY_ORDER[c]
                .squeeze()
                .map_or(usize::MAX, |(_, max)| max);
            widest.min(max).max(1)
        })
        .collect();
    let min_of = |c: usize| match DISPLAY_ORDER[c].squeeze() {
        Some((min, _)) => desired[c].min(min.max(titles[c].chars().count())),
        None => desired[c],
    };
    let mut chosen: Vec<(usize, usize)> = Vec::new();
    let mut used = 0;
    for col in PRIORITY {
        let c = DISPLAY_ORDER.iter().position(|d| *d == col).unwrap_or(0);
        // The policy's marks show only where a policy acts on a row.
        if col == Col::Act && cells.iter().all(|row| row[c].is_empty()) {
            continue;
        }
        let gap = usize::from(!chosen.is_empty());
        // The endpoint is the row's identity (and what scripts match on):
        // it keeps its full width while there is room for it.
        let preferred = if col == Col::Remote {
            desired[c]
        } else {
            min_of(c)
        };
        for w in [preferred, min_of(c)] {
            if used + gap + w <= width {
                used += gap + w;
                chosen.push((c, w));
                break;
            }
        }
    }
    for (c, w) in chosen.iter_mut() {
        let grow = (desired[*c] - *w).min(width - used);
        *w += grow;
        used += grow;
    }
    chosen.sort_by_key(|(c, _)| *c);
    chosen
}

fn render_table(app: &mut App, area: Rect, buf: &mut Buffer) {
    if area.height == 0 {
        return;
    }
    app.set_page_rows(area.height.saturating_sub(1) as usize);
    let threshold_us = app.snapshot().bloat_threshold_us;
    let sort = app.sort();
    let titles: Vec<String> = DISPLAY_ORDER
        .iter()
        .map(|c| match c.sort_key() {
            Some(key) if key == sort => format!("{}{}", c.title(), sort_arrow(key)),
            _ => c.title().to_string(),
        })
        .collect();
    let rows: Vec<(bool, Vec<String>)> = app
        .visible()
        .map(|s| {
            let cells = DISPLAY_ORDER
                .iter()
                .map(|c| c.text(s, threshold_us))
                .collect();
            (s.is_bloated(threshold_us), cells)
        })
        .collect();
    let cell_texts: Vec<Vec<String>> = rows.iter().map(|(_, c)| c.clone()).collect();
    let columns = layout_columns(&titles, &cell_texts, area.width as usize);

    let cell = |c: usize, text: &str, width: usize| {
        let line = Line::from(DISPLAY_ORDER[c].fit(text, width));
        Cell::from(if DISPLAY_ORDER[c].right_aligned() {
            line.alignment(Alignment::Right)
        } else {
            line
        })
    };
    let header = Row::new(columns.iter().map(|&(c, w)| cell(c, &titles[c], w)))
        .style(TITLE.add_modifier(Modifier::UNDERLINED));
    let table_rows: Vec<Row> = rows
        .iter()
        .map(|(bloated, cells)| {
            let row = Row::new(columns.iter().map(|&(c, w)| cell(c, &cells[c], w)));
            if *bloated {
                row.style(BLOATED)
            } else {
                row
            }
        })
        .collect();
    let widths: Vec<Constraint> = columns
        .iter()
        .map(|&(_, w)| Constraint::Length(w as u16))
        .collect();
    let mut state = TableState::default().with_selected(app.selected().map(|i| i - app.offset()));
    StatefulWidget::render(
        Table::new(table_rows, widths)
            .header(header)
            .column_spacing(1)
            .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED)),
        area,
        buf,
        &mut state,
    );

    if app.row_count() == 0 {
        let text = if app.filter().is_empty() {
            "no TCP sockets".to_string()
        } else {
            format!("no sockets match the filter '{}'", app.filter().text())
        };
        let rest = Rect {
            y: area.y + 1,
            height: area.height - 1,
            ..area
        };
        centered_message(&text, DIM, rest, buf);
    }
}

// ----- detail -----

fn render_detail(app: &App, area: Rect, buf: &mut Buffer) {
    let Some(detail) = app.detail() else {
        return;
    };
    let s = &detail.socket;
    let info = detail_lines(app, s, detail.closed, area.width as usize);
    let info_height = (info.len() as u16).min(area.height);
    let [info_area, charts_area] =
        Layout::vertical([Constraint::Length(info_height), Constraint::Fill(1)]).areas(area);
    Paragraph::new(info).render(info_area, buf);

    let samples: Vec<&Sample> = app
        .history(s.cookie)
        .map(|h| h.samples().iter().collect())
        .unwrap_or_default();
    render_charts(app, s, &samples, charts_area, buf);
}

/// The socket's numbers, flowed into as many lines as the width needs. A
/// narrow terminal leaves out what the charts or the table already show
/// elsewhere (netns, mss, delivery rate, byte counts).
fn detail_lines(app: &App, s: &Socket, closed: bool, width: usize) -> Vec<Line<'static>> {
    let threshold_us = app.snapshot().bloat_threshold_us;
    let wide = width >= 100;
    let ms = |us: u32| format::ms(us as u64);
    let bloated = s.is_bloated(threshold_us);
    let who = match (&s.comm, s.pid) {
        (Some(c), Some(p)) => format!("{c}[{p}]"),
        (Some(c), None) => c.clone(),
        (None, Some(p)) => format!("pid {p}"),
        (None, None) => "unknown process".into(),
    };
    let mut identity = vec![
        Span::styled(if bloated { BLOAT_MARKER } else { " " }, BLOATED),
        Span::raw(" "),
        Span::styled(who, TITLE),
        Span::raw(format!(" {} → {}", s.local_endpoint(), s.remote_endpoint())),
    ];
    if closed {
        identity.push(Span::styled("  CLOSED", WARN));
    }
    let side = match s.role {
        Role::Sender => "sender (srtt)",
        Role::Receiver => "receiver (rcv_rtt)",
    };
    let queue_style = if bloated { BLOATED } else { Style::new() };
    let mut queue = vec![
        Span::raw("queue "),
        Span::styled(ms(s.view_queue_delay_us()), queue_style),
    ];
    if let Some(ratio) = crate::app::rtt_ratio(s) {
        queue.push(Span::styled(format!(" (RTT {ratio} min)"), queue_style));
    }
    let text = |t: String| vec![Span::raw(t)];
    let mut fields: Vec<Vec<Span<'static>>> = vec![
        vec![Span::styled(s.cc.clone(), TITLE)],
        text(side.into()),
        text(s.state.clone()),
        text(format!("ca {}", ca_short(s.ca_state))),
    ];
    if wide {
        fields.push(text(format!("netns {}", s.netns)));
    }
    fields.push(queue);
    fields.push(text(format!(
        "rtt {} min {}",
        ms(s.view_rtt_us()),
        ms(s.view_min_rtt_us())
    )));
    if wide && s.role == Role::Receiver {
        // The receiver's own srtt (of its ACK-only traffic): what a
        // sender-side view would have used.
        fields.push(vec![Span::styled(
            format!("srtt {} min {}", ms(s.srtt_us), ms(s.min_rtt_us)),
            DIM,
        )]);
    }
    fields.push(text(format!("cwnd {}", s.cwnd)));
    fields.push(text(format!(
        "ssthresh {}",
        s.ssthresh.map_or_else(|| "∞".into(), |v| v.to_string())
    )));
    fields.push(text(format!("inflight {}", s.inflight)));
    if wide {
        fields.push(text(format!("mss {}", s.mss)));
    }
    fields.push(text(format!("thr {}", format::rate(s.throughput_bps))));
    if wide {
        fields.push(text(format!(
            "delivery {}",
            format::rate(s.delivery_rate_bps)
        )));
    }
    fields.push(text(format!("retrans {} lost {}", s.retrans, s.lost)));
    if wide {
        fields.push(text(format!(
            "acked {} rcvd {}",
            format::bytes(s.bytes_acked),
            format::bytes(s.bytes_received)
        )));
    }
    let mut lines = flow(identity, fields, width);
    lines.extend(flow(Vec::new(), cc_state_fields(s), width));
    let policy = policy_fields(s);
    if !policy.is_empty() {
        lines.extend(flow(Vec::new(), policy, width));
    }
    lines
}

/// What bloatd's policy did to the socket: the rule that chose its
/// congestion control, and DRWA's clamp with what it was computed from.
fn policy_fields(s: &Socket) -> Vec<Vec<Span<'static>>> {
    let Some(p) = &s.policy else {
        return Vec::new();
    };
    let ms = |us: u32| format::ms(us as u64);
    let mut fields = Vec::new();
    let mut head = vec![Span::styled("policy", TITLE)];
    match (&p.bulk_rule, p.bulk_waiting, p.cc_failed) {
        (Some(r), false, false) => head.push(Span::raw(format!(" {} by bulk rule {r}", s.cc))),
        _ => {
            if let Some(r) = &p.cc_rule {
                head.push(Span::raw(format!(" {} by rule {r}", s.cc)));
            }
            if let (Some(r), true) = (&p.bulk_rule, p.bulk_waiting) {
                head.push(Span::raw(format!(" (bulk rule {r} waits for its bytes)")));
            }
        }
    }
    fields.push(head);
    if p.cc_failed {
        fields.push(vec![Span::styled("the kernel refused the rule's cc", WARN)]);
    }
    if let Some(d) = &p.drwa {
        let mut f = vec![Span::styled("DRWA", TITLE)];
        if d.clamp_bytes > 0 {
            f.push(Span::styled(
                format!(" clamp {} ({} seg)", format::bytes(d.clamp_bytes as u64), d.clamp_segments),
                GOOD,
            ));
        } else {
            f.push(Span::styled(" no clamp now", DIM));
        }
        f.push(Span::styled(format!(" by {}", d.by), DIM));
        fields.push(f);
        if d.rounds > 0 {
            fields.push(vec![Span::raw(format!(
                "rcvd/RTT {} (est {})",
                format::bytes(d.rcvd_per_rtt_bytes as u64),
                format::bytes(d.cwnd_est_bytes as u64)
            ))]);
            fields.push(vec![Span::raw(format!(
                "RTT {} floor {} · {} rounds",
                ms(d.rtt_us),
                ms(d.floor_us),
                d.rounds
            ))]);
        }
    }
    fields
}

/// The congestion control's own state: Westwood+ BWE and pipe (cwnd far
/// above the pipe is the papers' "fat pipe"), CUBIC W_max, K and HyStart.
fn cc_state_fields(s: &Socket) -> Vec<Vec<Span<'static>>> {
    let ms = |us: u32| format::ms(us as u64);
    match &s.cc_state {
        Some(CcState::Westwood {
            bwe_bytes_per_s,
            min_rtt_us,
            pipe_segments,
            ..
        }) => {
            let mut fields = vec![
                vec![
                    Span::styled("Westwood+", TITLE),
                    Span::raw(format!(
                        " BWE {}",
                        format::rate(bwe_bytes_per_s.saturating_mul(8))
                    )),
                ],
                vec![Span::raw(format!("RTTmin {}", ms(*min_rtt_us)))],
                vec![Span::raw(format!("pipe {pipe_segments} seg"))],
            ];
            if *pipe_segments > 0 {
                let ratio = s.cwnd as f64 / *pipe_segments as f64;
                // More than twice the pipe in the window: the surplus can
                // only sit in a queue.
                let fat = ratio >= 2.0;
                let mut field = vec![Span::styled(
                    format!("cwnd {} pipe", crate::app::ratio_text(ratio)),
                    if fat { BLOATED } else { Style::new() },
                )];
                if fat {
                    field.push(Span::styled(": fat pipe", BLOATED));
                }
                fields.push(field);
            }
            fields
        }
        Some(CcState::Cubic {
            w_max_segments,
            k_ms,
            epoch_age_ms,
            min_rtt_us,
            hystart_round,
            hystart_found,
            ..
        }) => vec![
            vec![
                Span::styled("CUBIC", TITLE),
                Span::raw(format!(" W_max {w_max_segments} seg")),
            ],
            vec![Span::raw(format!("K {}", format::ms(*k_ms as u64 * 1000)))],
            vec![Span::raw(match epoch_age_ms {
                Some(age) => format!("epoch {}", format::ms(*age as u64 * 1000)),
                None => "no epoch".into(),
            })],
            vec![Span::raw(format!("delay_min {}", ms(*min_rtt_us)))],
            vec![Span::raw(format!(
                "HyStart round {hystart_round} {}",
                if *hystart_found {
                    "exit found"
                } else {
                    "searching"
                }
            ))],
        ],
        None => vec![vec![Span::styled(
            format!(
                "{}: no exported state (bloatd_westwood and bloatd_cubic export theirs)",
                s.cc
            ),
            DIM,
        )]],
    }
}

/// Lays `fields` out after `first` in lines of at most `width` columns,
/// separated by " · "; a field never splits across lines.
fn flow(
    first: Vec<Span<'static>>,
    fields: Vec<Vec<Span<'static>>>,
    width: usize,
) -> Vec<Line<'static>> {
    let span_width = |spans: &[Span]| spans.iter().map(Span::width).sum::<usize>();
    let mut lines = Vec::new();
    let mut current = first;
    let mut used = span_width(&current);
    let indent = 1;
    if current.is_empty() {
        current.push(Span::raw(" "));
        used = indent;
    }
    let mut line_has_field = used > indent;
    for field in fields {
        let w = span_width(&field);
        let sep = if line_has_field { 3 } else { 0 };
        if line_has_field && used + sep + w > width {
            lines.push(Line::from(std::mem::take(&mut current)));
            current.push(Span::raw(" "));
            used = indent;
            line_has_field = false;
        }
        if line_has_field {
            current.push(Span::styled(" · ", DIM));
            used += 3;
        }
        used += w;
        current.extend(field);
        line_has_field = true;
    }
    if line_has_field {
        lines.push(Line::from(current));
    }
    lines
}

/// Formats a value of a chart's y axis.
type AxisLabel<'a> = &'a dyn Fn(f64) -> String;

/// One chart line: name, colour, points (x seconds before the snapshot, y).
struct Series {
    name: &'static str,
    color: Color,
    points: Vec<(f64, f64)>,
}

fn render_charts(app: &App, s: &Socket, samples: &[&Sample], area: Rect, buf: &mut Buffer) {
    let columns: u16 = if area.width >= 60 { 2 } else { 1 };
    let rows = 4 / columns;
    if area.height / rows < 5 {
        centered_message("enlarge the terminal for charts", DIM, area, buf);
        return;
    }
    let snap = app.snapshot();
    let taken_ms = snap.taken_ms;
    let window_s = crate::app::HISTORY_WINDOW_MS as f64 / 1000.0;
    let x_of = |t_ms: u64| (t_ms as f64 - taken_ms as f64) / 1000.0;
    let recent: Vec<&Sample> = samples
        .iter()
        .copied()
        .filter(|x| x_of(x.t_ms) >= -window_s)
        .collect();
    let points = |f: &dyn Fn(&Sample) -> Option<f64>| -> Vec<(f64, f64)> {
        recent
            .iter()
            .filter_map(|x| f(x).map(|y| (x_of(x.t_ms), y)))
            .collect()
    };
    let flat = |y: f64| vec![(-window_s, y), (0.0, y)];
    let ms_of = |us: u32| us as f64 / 1000.0;
    let role = s.role;

    let rtt_name = match role {
        Role::Sender => "srtt",
        Role::Receiver => "rcv_rtt",
    };
    let rtt = vec![
        Series {
            name: rtt_name,
            color: Color::Yellow,
            points: points(&|x| Some(ms_of(x.view_rtt_us(role)))),
        },
        Series {
            name: "min",
            color: Color::Green,
            points: points(&|x| Some(ms_of(x.view_min_rtt_us(role)))),
        },
    ];
    let mut queue = vec![Series {
        name: "queue",
        color: Color::Red,
        points: points(&|x| Some(ms_of(x.view_queue_delay_us(role)))),
    }];
    if snap.bloat_threshold_us > 0 {
        queue.push(Series {
            name: "threshold",
            color: Color::DarkGray,
            points: flat(ms_of(snap.bloat_threshold_us)),
        });
    }
    let mut window = vec![Series {
        name: "cwnd",
        color: Color::Cyan,
        points: points(&|x| Some(x.cwnd as f64)),
    }];
    let pipe = points(&|x| x.pipe_segments.map(|p| p as f64));
    if !pipe.is_empty() {
        window.push(Series {
            name: "pipe",
            color: Color::Green,
            points: pipe,
        });
    }
    if let Some(CcState::Cubic { w_max_segments, .. }) = &s.cc_state {
        window.push(Series {
            name: "W_max",
            color: Color::Magenta,
            points: flat(*w_max_segments as f64),
        });
    }
    let throughput = vec![Series {
        name: "throughput",
        color: Color::Blue,
        points: points(&|x| Some(x.throughput_bps as f64)),
    }];
    // A receiver DRWA clamps: its window is the clamp, drawn beside the
    // data that arrived per RTT (the clamp is lambda x floor/RTT x that).
    let clamp = points(&|x| x.drwa_clamp_bytes.map(|b| b as f64 / 1000.0));
    let drwa = !clamp.is_empty();
    if drwa {
        window = vec![
            Series {
                name: "clamp",
                color: Color::Green,
                points: clamp,
            },
            Series {
                name: "rcvd/RTT",
                color: Color::Cyan,
                points: points(&|x| x.drwa_rcvd_rtt_bytes.map(|b| b as f64 / 1000.0)),
            },
        ];
    }

    let ms_label = |v: f64| format::ms((v * 1000.0).round() as u64);
    let seg_label = |v: f64| format!("{v:.0}");
    let kb_label = |v: f64| format!("{v:.0}k");
    let rate_label = |v: f64| format::rate(v.round() as u64);
    let no_samples = recent.is_empty();
    let charts: [(&str, Vec<Series>, AxisLabel); 4] = [
        ("RTT (gap = queue)", rtt, &ms_label),
        ("queueing delay", queue, &ms_label),
        if drwa {
            ("DRWA window, kB", window, &kb_label)
        } else {
            ("window, segments", window, &seg_label)
        },
        ("throughput", throughput, &rate_label),
    ];
    let row_areas = Layout::vertical(vec![Constraint::Fill(1); rows as usize]).split(area);
    let cells: Vec<Rect> = row_areas
        .iter()
        .flat_map(|r| {
            Layout::horizontal(vec![Constraint::Fill(1); columns as usize])
                .spacing(1)
                .split(*r)
                .to_vec()
        })
        .collect();
    for ((title, series, label), cell) in charts.into_iter().zip(cells) {
        chart(title, &series, label, no_samples, window_s, cell, buf);
    }
}

fn chart(
    title: &str,
    series: &[Series],
    label: &dyn Fn(f64) -> String,
    no_samples: bool,
    window_s: f64,
    area: Rect,
    buf: &mut Buffer,
) {
    let y_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);
    // Headroom above the highest point; a flat zero line still gets an axis.
    let y_top = if y_max > 0.0 { y_max * 1.15 } else { 1.0 };
    let mut title_spans = vec![Span::styled(format!("{title} "), TITLE)];
    // A legend in the title: one line per series needs no legend box.
    if series.len() > 1 {
        for s in series {
            title_spans.push(Span::styled(
                format!("─{} ", s.name),
                Style::new().fg(s.color),
            ));
        }
    }
    if no_samples {
        title_spans.push(Span::styled(" (no samples yet)", DIM));
    }
    let datasets: Vec<Dataset> = series
        .iter()
        .map(|s| {
            Dataset::default()
                .marker(Marker::Braille)
                .graph_type(GraphType::Line)
                .style(Style::new().fg(s.color))
                .data(&s.points)
        })
        .collect();
    // The time axis costs two rows: only charts with room for it get it;
    // the others span the same last minute, ending now.
    let x_labels: Vec<String> = if area.height >= 10 {
        vec![
            format!("-{window_s:.0}s"),
            format!("-{:.0}s", window_s / 2.0),
            "now".to_string(),
        ]
    } else {
        Vec::new()
    };
    Chart::new(datasets)
        .block(
            Block::new()
                .borders(Borders::TOP)
                .border_style(DIM)
                .title(Line::from(title_spans)),
        )
        .legend_position(None)
        .x_axis(
            Axis::default()
                .bounds([-window_s, 0.0])
                .labels(x_labels)
                .style(DIM),
        )
        .y_axis(
            Axis::default()
                .bounds([0.0, y_top])
                .labels(["0".to_string(), label(y_top / 2.0), label(y_top)])
                .style(DIM),
        )
        .render(area, buf);
}

// ----- footer, help, messages -----

fn render_footer(app: &App, area: Rect, buf: &mut Buffer) {
    let line = if let Some(status) = app.status() {
        Line::from(vec![Span::styled(format!(" {status}"), WARN)])
    } else if let Some(prompt) = app.prompt() {
        let mut spans = vec![
            Span::styled(" filter> ", TITLE),
            Span::raw(prompt.text.clone()),
            Span::styled("█", Style::new().add_modifier(Modifier::SLOW_BLINK)),
            Span::styled("  Enter apply · Esc cancel · cc: comm: port: addr:", DIM),
        ];
        if let Some(error) = &prompt.error {
            spans.insert(3, Span::styled(format!("  {error}"), BLOATED));
        }
        Line::from(spans)
    } else {
        let keys: &[(&str, &str)] = match app.view() {
            View::Table => &[
                ("q", "quit"),
                ("↑↓", "select"),
                ("⏎", "detail"),
                ("s", "sort"),
                ("f", "filter"),
                ("p", "pause"),
                ("?", "help"),
            ],
            View::Detail => &[
                ("Esc", "back"),
                ("↑↓", "other socket"),
                ("p", "pause"),
                ("?", "help"),
                ("q", "quit"),
            ],
        };
        let mut spans = Vec::new();
        let drwa = app.snapshot().policy.as_ref().is_some_and(|p| p.drwa != "disabled");
        let drwa_key: &[(&str, &str)] = if drwa { &[("D", "DRWA on/off")] } else { &[] };
        for (key, what) in keys.iter().chain(drwa_key) {
            spans.push(Span::styled(format!(" {key}"), TITLE));
            spans.push(Span::styled(format!(" {what} "), DIM));
        }
        Line::from(spans)
    };
    Paragraph::new(line).render(area, buf);
}

fn help(app: &App, area: Rect, buf: &mut Buffer) {
    let threshold = format::ms(app.snapshot().bloat_threshold_us as u64);
    let key = |k: &'static str, what: &'static str| {
        Line::from(vec![
            Span::styled(format!("  {k:<11}"), TITLE),
            Span::raw(what),
        ])
    };
    let text = |t: String| Line::from(t);
    let lines = vec![
        Line::styled("Keys", TITLE.add_modifier(Modifier::UNDERLINED)),
        key("↑↓ j k", "select a socket (PgUp PgDn Home End jump)"),
        key(
            "Enter",
            "detail: last minute of RTT, queue, cwnd, throughput",
        ),
        key("s", "next sort: qdelay rtt throughput cwnd retrans process"),
        key("f", "filter: cc:cubic comm:curl port:443 addr:10.0.0.2"),
        key("", "or plain text (process, cc or port); Esc cancels"),
        key("p D", "pause / resume · DRWA on / off, live (bloatd --drwa[=off])"),
        key("Esc ?", "back / this help"),
        key("q", "quit"),
        Line::raw(""),
        Line::styled(
            "Reading the table",
            TITLE.add_modifier(Modifier::UNDERLINED),
        ),
        text(format!(
            "  {BLOAT_MARKER:<11} bloated row (red): queueing delay ≥ {threshold}"
        )),
        text("  QDELAY      RTT - MINRTT: time spent in queues on the path".into()),
        text("  RTT MINRTT  srtt for senders, rcv_rtt for receivers (ROLE)".into()),
        text("  CA          open, disord(er), cwr, recov(ery), loss".into()),
        text("  name*       bloatd_name: bloatd's own Westwood+ / CUBIC".into()),
        text("  ACT         R rule chose the cc, B bulk rule switched it, D DRWA clamps".into()),
        text("  header      qdelay p50/p90/max per congestion control".into()),
        Line::raw(""),
        Line::styled(
            "Detail charts (last minute)",
            TITLE.add_modifier(Modifier::UNDERLINED),
        ),
        text("  pipe        Westwood+ BWE×RTTmin: the window that needs no queue".into()),
        text("  W_max K     CUBIC: window at the last loss, time to grow back to it".into()),
    ];
    Paragraph::new(lines)
        .block(
            Block::bordered()
                .border_type(BorderType::Rounded)
                .title(Line::styled(" bloatd top: help ", TITLE))
                .title_bottom(Line::styled(" Esc or ? to close ", DIM)),
        )
        .render(area, buf);
}

fn disconnected(app: &App, message: &str, since_ms: u64, area: Rect, buf: &mut Buffer) {
    let down_for_ms = app.now_ms().saturating_sub(since_ms);
    let lines = vec![
        Line::styled(message.to_string(), BLOATED),
        Line::raw(""),
        Line::styled(
            format!(
                "unreachable for {}; the table comes back when it answers",
                format::age(down_for_ms)
            ),
            DIM,
        ),
    ];
    let width = area.width.min(76);
    let box_area = centered(area, width, 7);
    Paragraph::new(lines)
        .wrap(Wrap { trim: true })
        .block(
            Block::bordered()
                .border_type(BorderType::Rounded)
                .border_style(BLOATED)
                .title(Line::styled(" no data ", BLOATED)),
        )
        .render(box_area, buf);
}

fn centered_message(text: &str, style: Style, area: Rect, buf: &mut Buffer) {
    let target = centered(area, area.width, 1);
    Paragraph::new(Line::styled(text.to_string(), style))
        .alignment(Alignment::Center)
        .render(target, buf);
}

fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let width = width.min(area.width);
    let height = height.min(area.height);
    Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    }
}
