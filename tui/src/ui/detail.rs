//! The detail view of one socket: its numbers, its congestion control's
//! own state, what bloatd's policy did to it, and the charts of its last
//! minute.

use super::charts::render_charts;
use super::table::ca_short;
use super::{BLOATED, BLOAT_MARKER, DIM, GOOD, TITLE, WARN};
use crate::app::App;
use bloatd_model::format;
use bloatd_model::{BloatThreshold, CcValue, Role, Sample, Socket};
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget};

pub(super) fn render_detail(app: &App, area: Rect, buf: &mut Buffer) {
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
    let threshold = app.snapshot().bloat_threshold();
    let bloated = threshold.reached_by(s.view_queue_delay_us());
    let fields = number_fields(s, threshold, bloated, width >= 100);
    let mut lines = flow(identity(s, bloated, closed), fields, width);
    lines.extend(flow(Vec::new(), cc_state_fields(s), width));
    let policy = policy_fields(s);
    if !policy.is_empty() {
        lines.extend(flow(Vec::new(), policy, width));
    }
    lines
}

/// The first line's start: the bloat marker, the process and the endpoints.
fn identity(s: &Socket, bloated: bool, closed: bool) -> Vec<Span<'static>> {
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
    identity
}

/// A duration in microseconds, as the dashboard prints one.
fn ms(us: u32) -> String {
    format::ms(us as u64)
}

/// A field of plain text.
fn text(t: String) -> Vec<Span<'static>> {
    vec![Span::raw(t)]
}

/// The socket's TCP numbers, one field each; `wide` adds what a narrow
/// terminal leaves out.
fn number_fields(
    s: &Socket,
    threshold: BloatThreshold,
    bloated: bool,
    wide: bool,
) -> Vec<Vec<Span<'static>>> {
    let side = match s.role {
        Role::Sender => "sender (srtt)",
        Role::Receiver => "receiver (rcv_rtt)",
    };
    let mut fields: Vec<Vec<Span<'static>>> = vec![
        vec![Span::styled(s.cc.clone(), TITLE)],
        text(side.into()),
        text(s.state.clone()),
        text(format!("ca {}", ca_short(s.ca_state))),
    ];
    if wide {
        fields.push(text(format!("netns {}", s.netns)));
    }
    fields.push(queue_field(s, bloated));
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
    fields.extend(unsent_field(s, threshold));
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
    fields
}

/// The queueing delay, styled as bloat when it is, with the RTT's ratio to
/// its minimum.
fn queue_field(s: &Socket, bloated: bool) -> Vec<Span<'static>> {
    let queue_style = if bloated { BLOATED } else { Style::new() };
    let mut queue = vec![
        Span::raw("queue "),
        Span::styled(ms(s.view_queue_delay_us()), queue_style),
    ];
    if let Some(ratio) = super::rtt_ratio(s) {
        queue.push(Span::styled(format!(" (RTT {ratio} min)"), queue_style));
    }
    queue
}

/// A sender's unsent bytes, if any: the queue it keeps in its own socket.
/// An upload's bloat often sits there, where the RTT cannot see it.
fn unsent_field(s: &Socket, threshold: BloatThreshold) -> Option<Vec<Span<'static>>> {
    if s.role != Role::Sender || s.unsent_bytes == 0 {
        return None;
    }
    let mut unsent = format!("unsent {}", format::bytes(s.unsent_bytes as u64));
    if s.unsent_delay_us > 0 {
        unsent.push_str(&format!(" ({})", ms(s.unsent_delay_us)));
    }
    let style = if threshold.reached_by(s.unsent_delay_us) {
        BLOATED
    } else {
        Style::new()
    };
    Some(vec![Span::styled(unsent, style)])
}

/// What bloatd's policy did to the socket: the rule that chose its
/// congestion control, and DRWA's clamp with what it was computed from.
fn policy_fields(s: &Socket) -> Vec<Vec<Span<'static>>> {
    let Some(p) = &s.policy else {
        return Vec::new();
    };
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
                format!(
                    " clamp {} ({} seg)",
                    format::bytes(d.clamp_bytes as u64),
                    d.clamp_segments
                ),
                GOOD,
            ));
        } else {
            f.push(Span::styled(" no clamp now", DIM));
        }
        f.push(Span::styled(format!(" by {}", d.by), DIM));
        fields.push(f);
        if d.rounds > 0 {
            fields.push(vec![Span::raw(format!(
                "rcvd/RTT {}",
                format::bytes(d.rcvd_per_rtt_bytes as u64)
            ))]);
            fields.push(vec![Span::raw(format!(
                "RTT {} min {} ({}) · {} rounds{}",
                ms(d.rtt_us),
                ms(d.min_rtt_us),
                d.min_rtt_from(),
                d.rounds,
                if d.held > 0 {
                    format!(" · {} cuts taken back", d.held)
                } else {
                    String::new()
                }
            ))]);
        }
    }
    fields
}

/// The congestion control's own state (`CcState::parts`): Westwood+ BWE
/// and pipe (cwnd far above the pipe is the papers' "fat pipe"), CUBIC
/// W_max, K and HyStart.
fn cc_state_fields(s: &Socket) -> Vec<Vec<Span<'static>>> {
    let Some(state) = &s.cc_state else {
        return vec![vec![Span::styled(
            format!(
                "{}: no exported state (bloatd_westwood and bloatd_cubic export theirs)",
                s.cc
            ),
            DIM,
        )]];
    };
    let mut fields: Vec<Vec<Span<'static>>> = state
        .parts(Some(s.cwnd))
        .into_iter()
        .map(|p| {
            let text = match p.value {
                CcValue::Rate(bps) => format!("{} {}", p.label, format::rate(bps)),
                CcValue::Rtt(us) => format!("{} {}", p.label, ms(us)),
                CcValue::Millis(m) => format!("{} {}", p.label, format::ms(m as u64 * 1000)),
                CcValue::Segments(n) => format!("{} {n} seg", p.label),
                CcValue::PipeRatio(r) => format!("{} {} pipe", p.label, format::ratio(r)),
                CcValue::Round { n, found } => format!(
                    "{} round {n} {}",
                    p.label,
                    if found { "exit found" } else { "searching" }
                ),
                CcValue::Absent => format!("no {}", p.label),
            };
            match p.alarm {
                Some(why) => vec![
                    Span::styled(text, BLOATED),
                    Span::styled(format!(": {why}"), BLOATED),
                ],
                None => vec![Span::raw(text)],
            }
        })
        .collect();
    if let Some(first) = fields.first_mut() {
        if let Some(Span { content, .. }) = first.first_mut() {
            *content = format!(" {content}").into();
        }
        first.insert(0, Span::styled(state.title(), TITLE));
    }
    fields
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
