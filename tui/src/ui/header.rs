//! The header: the host's bloat (sockets, bloated count, worst queue),
//! what bloatd's policy is doing (DRWA, rules),
//! the queueing-delay distribution per congestion control, the daemon's
//! health, and the newest notices.

use super::{BLOATED, DIM, GOOD, TITLE, WARN};
use crate::app::{App, Event, Link, Notice};
use bloatd_model::format;
use bloatd_model::sort::SortKey;
use bloatd_model::CcDelay;
use bloatd_model::{BloatThreshold, FeatureState};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget};

pub(super) fn render_header(app: &App, area: Rect, notice_lines: u16, buf: &mut Buffer) {
    let mut lines = vec![
        Line::from(status_line(app)),
        Line::from(distribution_line(app)),
        Line::from(health_line(app)),
    ];
    lines.extend(notice_lines_of(app, notice_lines as usize));
    Paragraph::new(lines).render(area, buf);
}

fn sep() -> Span<'static> {
    Span::styled(" · ", DIM)
}

/// Line 1: sockets, bloated, worst queue, what the policy does, and
/// whether the view is paused or the daemon gone.
fn status_line(app: &App) -> Vec<Span<'static>> {
    let snap = app.snapshot();
    let summary = app.summary();
    let threshold = snap.bloat_threshold();
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
    if threshold.0 > 0 {
        status.push(Span::styled(
            format!(" (≥{})", format::ms(threshold.0 as u64)),
            DIM,
        ));
    }
    status.push(sep());
    let worst_style = if threshold.reached_by(summary.worst_queue_delay_us) {
        BLOATED
    } else {
        Style::new()
    };
    status.push(Span::raw("worst "));
    status.push(Span::styled(
        format::ms(summary.worst_queue_delay_us as u64),
        worst_style,
    ));
    status.extend(policy_spans(app));
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
    status
}

/// What bloatd's policy is doing: DRWA, and the rules' sockets.
fn policy_spans(app: &App) -> Vec<Span<'static>> {
    let Some(p) = &app.snapshot().policy else {
        return Vec::new();
    };
    let on = p.drwa == "on";
    let mut spans = vec![
        sep(),
        Span::styled(format!("DRWA {}", p.drwa), if on { GOOD } else { DIM }),
    ];
    if p.drwa_sockets > 0 {
        spans.push(Span::raw(format!(" ({} clamped)", p.drwa_sockets)));
    }
    if p.rules > 0 {
        spans.push(sep());
        spans.push(Span::raw(format!(
            "{} rule{}: {} cc, {} bulk",
            p.rules,
            if p.rules == 1 { "" } else { "s" },
            p.cc_sockets,
            p.bulk_sockets
        )));
    }
    spans
}

/// Line 2: the queueing-delay distribution per congestion control.
fn distribution_line(app: &App) -> Vec<Span<'static>> {
    let summary = app.summary();
    let threshold = app.snapshot().bloat_threshold();
    let mut dist = vec![Span::styled(" qdelay p50/p90/max", DIM)];
    if summary.per_cc.is_empty() {
        dist.push(Span::styled(": no RTT measurements yet", DIM));
    }
    for cc in &summary.per_cc {
        dist.push(Span::raw("  "));
        dist.extend(cc_distribution(cc, threshold));
    }
    dist
}

/// Line 3: the daemon's health, the view's sort and filter, the parts of
/// bloatd this kernel does not run as designed, and stale data.
fn health_line(app: &App) -> Vec<Span<'static>> {
    let snap = app.snapshot();
    let health = &snap.health;
    let dropped_style = if health.dropped_total > 0 {
        WARN
    } else {
        Style::new()
    };
    let mut line = vec![
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
        line.push(sep());
        line.push(Span::styled(
            format!("filter {}", app.filter().text()),
            WARN,
        ));
    }
    // The parts this kernel does not run as designed (`bloatd status`
    // says why): declined ones stand out, fallbacks are only named.
    for (state, label, style) in [
        (FeatureState::Off, "off", WARN),
        (FeatureState::Fallback, "fallback", DIM),
    ] {
        let names: Vec<&str> = health
            .features
            .iter()
            .filter(|f| f.state == state)
            .map(|f| f.name.as_str())
            .collect();
        if !names.is_empty() {
            line.push(sep());
            line.push(Span::styled(format!("{label}: {}", names.join(",")), style));
        }
    }
    // Data older than two intervals is stale: say how stale.
    let age_ms = app.now_ms().saturating_sub(snap.taken_ms);
    if snap.taken_ms > 0 && age_ms > 2 * snap.interval_ms as u64 {
        line.push(sep());
        line.push(Span::styled(
            format!("data {} old", format::age(age_ms)),
            WARN,
        ));
    }
    line
}

/// The newest notices, `room` lines at most, the last saying how many
/// did not fit.
fn notice_lines_of(app: &App, room: usize) -> Vec<Line<'static>> {
    let notices = app.notices();
    let mut lines = Vec::new();
    // An episode in progress comes first: it says how long it has lasted.
    let open = &app.snapshot().episodes;
    if let Some(text) =
        bloatd_model::journal::open_episode_line(open, app.now_ms(), app.utc_offset_s())
    {
        if room == 0 {
            return lines;
        }
        lines.push(Line::from(vec![
            Span::styled(" ● ", BLOATED),
            Span::styled(text, BLOATED),
        ]));
        if room == 1 {
            return lines;
        }
    }
    let room = room - lines.len();
    for (i, notice) in notices.iter().take(room).enumerate() {
        let mut spans = vec![
            Span::styled(" ▲ ", BLOATED),
            Span::styled(notice_text(notice), BLOATED),
        ];
        let rest = notices.len() - i - 1;
        if i + 1 == room && rest > 0 {
            spans.push(Span::styled(format!("  (+{rest} more)"), DIM));
        }
        lines.push(Line::from(spans));
    }
    lines
}

fn cc_distribution(cc: &CcDelay, threshold: BloatThreshold) -> Vec<Span<'static>> {
    let max_style = if threshold.reached_by(cc.max_us) {
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
        Span::styled(format!("{}({})", cc.label(), cc.sockets), TITLE),
        Span::raw(format!(" {}/{}/", short(&p50), short(&p90))),
        Span::styled(max, max_style),
    ]
}

pub(super) fn sort_arrow(key: SortKey) -> &'static str {
    if key.descending() {
        "▼"
    } else {
        "▲"
    }
}

/// A notice in words: "receiver queue 420ms on 10.0.0.2:443 (curl): 9.9x
/// its minimum RTT", "…and 6 more sockets started bloating".
pub(super) fn notice_text(notice: &Notice) -> String {
    let s = match &notice.event {
        Event::BloatStarted(s) => s,
        Event::MoreBloatStarted(n) => return format!("…and {n} more sockets started bloating"),
    };
    let side = s.role.name();
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
    if let Some(ratio) = super::rtt_ratio(s) {
        text.push_str(&format!(": {ratio} its minimum RTT"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::fixtures;

    #[test]
    fn notices_in_words() {
        let mut rx = fixtures::receiving(fixtures::socket(5), 47_000, 420_000);
        rx.comm = Some("curl".into());
        let bloat = |s: &bloatd_model::Socket| Notice {
            event: Event::BloatStarted(Box::new(s.clone())),
            at_ms: 0,
        };
        assert_eq!(
            notice_text(&bloat(&rx)),
            "receiver queue 420ms on 10.0.0.2:443 (curl): 9.9x its minimum RTT"
        );
        // An accepted connection: no process known, its local port instead.
        let mut tx = fixtures::sending(fixtures::socket(6), 40_000, 109_000);
        tx.comm = None;
        assert_eq!(
            notice_text(&bloat(&tx)),
            format!(
                "sender queue 109ms on 10.0.0.2:443 (port {}): 3.7x its minimum RTT",
                tx.local_port
            )
        );
        let more = Notice {
            event: Event::MoreBloatStarted(6),
            at_ms: 0,
        };
        assert_eq!(notice_text(&more), "…and 6 more sockets started bloating");
    }
}
