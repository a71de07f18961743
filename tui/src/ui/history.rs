//! The history view (H): the flight recorder's last hours as a timeline
//! (the worst path's median queue each minute, the episodes marked above
//! it) and the list of episodes; an episode's view (Enter): its summary,
//! its flows, and charts of its one-second series. `bloatd incident ID`
//! prints the episode's view as text ([`episode_text`]).

use super::charts::{chart, grid, ms_label, rate_label, seg_label, AxisLabel, Series, XAxis};
use super::{buffer_text, centered_message, BLOATED, DIM, GOOD, TITLE, WARN};
use crate::app::{App, TIMELINE_MS};
use bloatd_model::format;
use bloatd_model::journal::{Episode, EpisodeDetail, EpisodeFlow, MinuteRow};
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Table, Widget};

/// Lines of the timeline chart.
const TIMELINE_LINES: u16 = 12;
/// Flows' windows drawn in an episode's charts (the largest first).
const CHART_FLOWS: usize = 3;
const FLOW_COLORS: [Color; CHART_FLOWS] = [Color::Cyan, Color::Magenta, Color::Green];
/// Height of the charts of an episode printed as text.
const TEXT_CHARTS_LINES: u16 = 26;

pub(super) fn render_history(app: &App, area: Rect, buf: &mut Buffer) {
    let inc = app.incidents();
    if let Some(e) = inc.error() {
        centered_message(e, WARN, area, buf);
        return;
    }
    if !inc.fetched() {
        centered_message("reading the flight recorder's journal…", DIM, area, buf);
        return;
    }
    let now = app.now_ms();
    let offset = app.utc_offset_s();
    let threshold_us = app.snapshot().bloat_threshold_us;
    let [line, timeline, list] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(TIMELINE_LINES.min(area.height.saturating_sub(4))),
        Constraint::Fill(1),
    ])
    .areas(area);
    let (sentence, style) = history_sentence(inc.episodes(), inc.minutes(), offset);
    Paragraph::new(Line::styled(format!(" {sentence}"), style)).render(line, buf);
    timeline_chart(
        inc.minutes(),
        inc.episodes(),
        threshold_us,
        now,
        timeline,
        buf,
    );
    episode_list(inc.episodes(), inc.selected_index(), now, offset, list, buf);
}

/// One sentence on the span: how many episodes, the worst.
fn history_sentence(episodes: &[Episode], minutes: &[MinuteRow], offset: i64) -> (String, Style) {
    let span = format!("last {}h", TIMELINE_MS / 3_600_000);
    match episodes.iter().max_by_key(|e| e.queue_peak_us) {
        Some(w) => (
            format!(
                "{span}: {} bloat episode{}; the worst: {} of queue on the {} at {}",
                episodes.len(),
                if episodes.len() == 1 { "" } else { "s" },
                format::ms(w.queue_peak_us as u64),
                w.subject_text(),
                format::clock(w.start_ms, offset)
            ),
            BLOATED,
        ),
        None if minutes.is_empty() => (format!("{span}: no active path recorded"), DIM),
        None => (
            format!(
                "{span}: no bloat episode; the worst minute's median queue {}",
                format::ms(minutes.iter().map(|m| m.queue_p50_us).max().unwrap_or(0) as u64)
            ),
            GOOD,
        ),
    }
}

/// The timeline: the worst path's median queue a minute, the threshold,
/// and the episodes marked above.
fn timeline_chart(
    minutes: &[MinuteRow],
    episodes: &[Episode],
    threshold_us: u32,
    now_ms: u64,
    area: Rect,
    buf: &mut Buffer,
) {
    if area.height < 5 {
        return;
    }
    let span_s = TIMELINE_MS as f64 / 1000.0;
    let x_of = |t_ms: u64| (t_ms as f64 - now_ms as f64) / 1000.0;
    let ms_of = |us: u32| us as f64 / 1000.0;
    let queue: Vec<(f64, f64)> = minutes
        .iter()
        .map(|m| (x_of(m.t_ms + 30_000), ms_of(m.queue_p50_us)))
        .filter(|p| p.0 >= -span_s)
        .collect();
    let top = queue
        .iter()
        .map(|p| p.1)
        .fold(ms_of(threshold_us), f64::max);
    let mut marks = Vec::new();
    for e in episodes {
        let end = if e.open {
            now_ms
        } else {
            e.end_ms.max(e.start_ms)
        };
        let mut t = e.start_ms;
        while t <= end {
            let x = x_of(t);
            if x >= -span_s {
                marks.push((x, top * 1.05));
            }
            t += 30_000;
        }
        marks.push((x_of(end), top * 1.05));
    }
    let series = vec![
        Series {
            name: "worst path's queue",
            color: Color::Red,
            points: queue,
            scatter: false,
        },
        Series {
            name: "threshold",
            color: Color::DarkGray,
            points: vec![(-span_s, ms_of(threshold_us)), (0.0, ms_of(threshold_us))],
            scatter: false,
        },
        Series {
            name: "episodes",
            color: Color::Yellow,
            points: marks,
            scatter: true,
        },
    ];
    let hours = TIMELINE_MS / 3_600_000;
    let x = XAxis {
        bounds: [-span_s, 0.0],
        labels: [
            format!("-{hours}h"),
            format!("-{}h", hours / 2),
            "now".into(),
        ],
    };
    chart(
        "timeline",
        &series,
        &ms_label,
        minutes.is_empty(),
        &x,
        area,
        buf,
    );
}

fn episode_list(
    episodes: &[Episode],
    selected: usize,
    now_ms: u64,
    offset: i64,
    area: Rect,
    buf: &mut Buffer,
) {
    if area.height < 2 {
        return;
    }
    const COLUMNS: [(&str, u16, bool); 9] = [
        ("ID", 5, true),
        ("START", 8, false),
        ("DURATION", 8, true),
        ("PATH / SERVICE", 34, false),
        ("PEAK", 7, true),
        ("P50", 7, true),
        ("GRADE", 5, false),
        ("FLOWS", 5, true),
        ("PROCESSES", 24, false),
    ];
    let cell = |text: String, (_, w, right): (&str, u16, bool)| {
        let text = format::fit(&text, w as usize, false);
        let line = Line::from(text);
        Cell::from(if right {
            line.alignment(ratatui::layout::Alignment::Right)
        } else {
            line
        })
    };
    let header = Row::new(COLUMNS.iter().map(|c| cell(c.0.to_string(), *c)))
        .style(TITLE.add_modifier(Modifier::UNDERLINED));
    let rows_room = area.height.saturating_sub(1) as usize;
    let first = selected.saturating_sub(rows_room.saturating_sub(1));
    let rows: Vec<Row> = episodes
        .iter()
        .enumerate()
        .skip(first)
        .take(rows_room)
        .map(|(i, e)| {
            let cells = [
                e.id.to_string(),
                format::clock(e.start_ms, offset),
                e.duration_text(now_ms),
                e.subject_text(),
                format::ms(e.queue_peak_us as u64),
                format::ms(e.queue_p50_us as u64),
                e.grade().to_string(),
                e.flows.to_string(),
                e.processes.join(","),
            ];
            let row = Row::new(cells.into_iter().zip(COLUMNS).map(|(t, c)| cell(t, c)));
            let style = if e.open { BLOATED } else { Style::new() };
            if i == selected {
                row.style(style.add_modifier(Modifier::REVERSED))
            } else {
                row.style(style)
            }
        })
        .collect();
    let widths: Vec<Constraint> = COLUMNS.iter().map(|c| Constraint::Length(c.1)).collect();
    let empty = episodes.is_empty();
    Widget::render(
        Table::new(rows, widths).header(header).column_spacing(1),
        area,
        buf,
    );
    if empty {
        let below = Rect {
            y: area.y + 1,
            height: area.height - 1,
            ..area
        };
        centered_message("no bloat episode in the last hours", DIM, below, buf);
    }
}

pub(super) fn render_episode(app: &App, area: Rect, buf: &mut Buffer) {
    let inc = app.incidents();
    match inc.detail() {
        Some(d) => render_episode_body(d, app.now_ms(), app.utc_offset_s(), area, buf),
        None => {
            let text = inc
                .detail_error()
                .map_or("reading the episode…".to_string(), str::to_string);
            centered_message(&text, DIM, area, buf);
        }
    }
}

/// An episode's summary, flows and charts in `area`.
fn render_episode_body(d: &EpisodeDetail, now_ms: u64, offset: i64, area: Rect, buf: &mut Buffer) {
    let info = episode_lines(d, now_ms, offset);
    let info_height = (info.len() as u16).min(area.height);
    let [info_area, charts_area] =
        Layout::vertical([Constraint::Length(info_height), Constraint::Fill(1)]).areas(area);
    Paragraph::new(info).render(info_area, buf);
    episode_charts(d, charts_area, buf);
}

/// `bloatd incident ID`: the episode's view as text, `width` columns.
pub fn episode_text(d: &EpisodeDetail, now_ms: u64, offset: i64, width: u16) -> String {
    let height = episode_lines(d, now_ms, offset).len() as u16 + TEXT_CHARTS_LINES;
    let area = Rect::new(0, 0, width, height);
    let mut buf = Buffer::empty(area);
    render_episode_body(d, now_ms, offset, area, &mut buf);
    buffer_text(&buf)
}

fn field(label: &str, value: String) -> Vec<Span<'static>> {
    vec![Span::styled(format!("{label} "), DIM), Span::raw(value)]
}

fn joined(parts: Vec<Vec<Span<'static>>>) -> Line<'static> {
    let mut spans = vec![Span::raw(" ")];
    for (i, p) in parts.into_iter().enumerate() {
        if i > 0 {
            spans.push(Span::styled(" · ", DIM));
        }
        spans.extend(p);
    }
    Line::from(spans)
}

/// The summary lines and the flows' table.
fn episode_lines(d: &EpisodeDetail, now_ms: u64, offset: i64) -> Vec<Line<'static>> {
    let e = &d.episode;
    let mut head = vec![vec![Span::styled(
        format!("episode {} · {}", e.id, e.subject_text()),
        TITLE,
    )]];
    if let Some(p) = &e.path {
        head.push(field("netns", p.netns.to_string()));
        if let Some(gw) = p.gateway {
            head.push(field("via", gw.to_string()));
        }
    }
    if let Some(c) = e.bottleneck {
        head.push(field("bottleneck", c.as_str().to_string()));
    }
    if let Some(o) = e.owner {
        head.push(field("whose", o.as_str().to_string()));
    }
    let (end, state) = match (e.open, &e.cut) {
        (true, _) => (now_ms, Span::styled("still going", BLOATED)),
        (false, Some(c)) => (e.end_ms, Span::styled(format!("cut: bloatd {c}"), WARN)),
        (false, None) => (e.end_ms, Span::styled("drained", GOOD)),
    };
    let when = vec![
        Span::raw(format!(
            "{} → {} ({}) ",
            format::date_time(e.start_ms, offset),
            format::clock(end, offset),
            format::age(end.saturating_sub(e.start_ms))
        )),
        state,
    ];
    let floor = match e.floor_source {
        Some(s) => format!("{} ({})", format::ms(e.floor_us as u64), s.as_str()),
        None => format::ms(e.floor_us as u64),
    };
    let queue = vec![
        vec![Span::styled(
            format!("queue peak {}", format::ms(e.queue_peak_us as u64)),
            BLOATED,
        )],
        field("p50", format::ms(e.queue_p50_us as u64)),
        field("p90", format::ms(e.queue_p90_us as u64)),
        field("grade", e.grade().to_string()),
        field("RPM", e.rpm().to_string()),
        field("floor", floor),
        field("threshold", format::ms(e.threshold_us as u64)),
    ];
    let load = vec![
        field(
            "delivered",
            format!(
                "{} at {}",
                format::bytes(e.bytes),
                format::rate(e.throughput_bps)
            ),
        ),
        field(
            "flows",
            format!("{} ({} sockets at most)", e.flows, e.sockets_max),
        ),
    ];
    let mut who = Vec::new();
    if !e.processes.is_empty() {
        who.push(field("processes", e.processes.join(",")));
    }
    if !e.services.is_empty() {
        who.push(field("services", e.services.join(",")));
    }
    if !e.ccs.is_empty() {
        who.push(field("cc", e.ccs.join(",")));
    }
    let mut lines = vec![
        joined(head),
        joined(vec![when]),
        joined(queue),
        joined(load),
    ];
    if !who.is_empty() {
        lines.push(joined(who));
    }
    let a = &e.actions;
    let mut policy = Vec::new();
    if let Some(drwa) = &a.drwa {
        let end = a.drwa_at_end.as_deref().unwrap_or(drwa);
        policy.push(field(
            "DRWA",
            if end == drwa {
                drwa.clone()
            } else {
                format!("{drwa}→{end}")
            },
        ));
    }
    if !a.rules.is_empty() {
        policy.push(field("rules", a.rules.join(",")));
    }
    if a.flows_acted_on > 0 || a.drwa_rounds > 0 || a.bulk_switched > 0 {
        policy.push(field(
            "acted on",
            format!("{} flows ({} clamped)", a.flows_acted_on, a.flows_clamped),
        ));
        policy.push(field(
            "host-wide",
            format!(
                "{} bulk switches, {} DRWA rounds, {} cuts taken back",
                a.bulk_switched, a.drwa_rounds, a.drwa_held
            ),
        ));
    }
    if !policy.is_empty() {
        policy.insert(0, vec![Span::styled("policy", TITLE)]);
        lines.push(joined(policy));
    }
    lines.push(Line::styled(
        format!(
            " {:>2} {:<15} {:>7} {:<20} {:<15} {:<4} {:<22} {:>8} {:>5} {:>8} {:>7} {:<3}",
            "#",
            "PROCESS",
            "PID",
            "SERVICE",
            "CC",
            "ROLE",
            "REMOTE",
            "BYTES",
            "RETR",
            "UNSENT",
            "QUEUE",
            "ACT"
        ),
        TITLE.add_modifier(Modifier::UNDERLINED),
    ));
    for (i, f) in d.flows.iter().enumerate() {
        lines.push(flow_line(i, f));
    }
    lines
}

fn flow_line(i: usize, f: &EpisodeFlow) -> Line<'static> {
    let color = FLOW_COLORS.get(i).copied();
    let text = format!(
        " {:>2} {:<15} {:>7} {:<20} {:<15} {:<4} {:<22} {:>8} {:>5} {:>8} {:>7} {:<3}",
        i + 1,
        format::fit(f.process.as_deref().unwrap_or("?"), 15, false),
        f.pid.map_or("-".into(), |p| p.to_string()),
        format::fit(&f.service, 20, true),
        format::fit(&f.cc, 15, false),
        f.role.short(),
        format::fit(&f.remote.to_string(), 22, true),
        format::bytes(f.bytes),
        f.retrans,
        format::bytes(f.unsent_bytes_max as u64),
        format::ms(f.queue_p50_us as u64),
        f.policy
    );
    match color {
        Some(c) => Line::from(vec![Span::styled(text, Style::new().fg(c))]),
        None => Line::raw(text),
    }
}

/// Four charts over the episode's span: the queue against the threshold,
/// the RTT against the floor, the delivery rate, the largest flows'
/// windows.
fn episode_charts(d: &EpisodeDetail, area: Rect, buf: &mut Buffer) {
    let Some(cells) = grid(4, area) else {
        if area.height > 0 {
            centered_message("enlarge the terminal for charts", DIM, area, buf);
        }
        return;
    };
    let e = &d.episode;
    let t0 = e.start_ms;
    let last = d
        .series
        .last()
        .map_or(e.end_ms, |p| p.t_ms)
        .max(e.end_ms)
        .max(t0 + 1000);
    let span_s = (last - t0) as f64 / 1000.0;
    let x_of = |t: u64| (t as f64 - t0 as f64) / 1000.0;
    let ms = |us: u32| us as f64 / 1000.0;
    let path = |f: &dyn Fn(&bloatd_model::journal::PathPoint) -> f64| -> Vec<(f64, f64)> {
        d.series.iter().map(|p| (x_of(p.t_ms), f(p))).collect()
    };
    let line = |name, color, points| Series {
        name,
        color,
        points,
        scatter: false,
    };
    let queue = vec![
        line("median", Color::Red, path(&|p| ms(p.queue_us))),
        line("max", Color::Magenta, path(&|p| ms(p.queue_max_us))),
        line(
            "threshold",
            Color::DarkGray,
            vec![(0.0, ms(e.threshold_us)), (span_s, ms(e.threshold_us))],
        ),
    ];
    let rtt = vec![
        line("RTT", Color::Yellow, path(&|p| ms(p.rtt_us))),
        line("floor", Color::Green, path(&|p| ms(p.floor_us))),
    ];
    let rate = vec![line("delivered", Color::Blue, path(&|p| p.rate_bps as f64))];
    const NAMES: [&str; CHART_FLOWS] = ["#1", "#2", "#3"];
    let windows: Vec<Series> = d
        .flow_series
        .iter()
        .take(CHART_FLOWS)
        .enumerate()
        .map(|(i, s)| {
            line(
                NAMES[i],
                FLOW_COLORS[i],
                s.points
                    .iter()
                    .map(|p| (x_of(p.t_ms), p.cwnd as f64))
                    .collect(),
            )
        })
        .collect();
    let x = XAxis {
        bounds: [0.0, span_s],
        labels: [
            "0s".into(),
            format!("+{}", format::age((span_s * 500.0) as u64)),
            format!("+{}", format::age((span_s * 1000.0) as u64)),
        ],
    };
    let none = d.series.is_empty();
    let charts: [(&str, &[Series], AxisLabel); 4] = [
        ("queue (median, max)", &queue, &ms_label),
        ("RTT against its floor", &rtt, &ms_label),
        ("delivery rate", &rate, &rate_label),
        ("largest flows' cwnd, segments", &windows, &seg_label),
    ];
    for ((title, series, label), cell) in charts.into_iter().zip(cells) {
        chart(title, series, label, none, &x, cell, buf);
    }
}
