//! Keys: the hints of the last line (or the filter prompt) and the help
//! screen.

use super::{BLOATED, BLOAT_MARKER, DIM, TITLE, WARN};
use crate::app::{App, View};
use bloatd_model::format;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Paragraph, Widget};

pub(super) fn render_footer(app: &App, area: Rect, buf: &mut Buffer) {
    let line = if let Some(on) = app.drwa_confirm() {
        Line::from(vec![
            Span::styled(
                format!(
                    " Switch DRWA {} for every receiver of every namespace? ",
                    if on { "on" } else { "off" }
                ),
                WARN,
            ),
            Span::styled("y", TITLE),
            Span::styled(" yes · any other key: no", DIM),
        ])
    } else if let Some(status) = app.status() {
        // The answer to the user's last action (the D key).
        Line::from(vec![Span::styled(format!(" {status}"), WARN)])
    } else if let Some(prompt) = app.prompt() {
        let mut spans = vec![
            Span::styled(" filter> ", TITLE),
            Span::raw(prompt.text.clone()),
            Span::styled("█", Style::new().add_modifier(Modifier::SLOW_BLINK)),
            Span::styled(
                "  Enter apply · Esc cancel · cc: comm: svc: port: addr:",
                DIM,
            ),
        ];
        if let Some(error) = &prompt.error {
            spans.insert(3, Span::styled(format!("  {error}"), BLOATED));
        }
        Line::from(spans)
    } else {
        let keys: &[(&str, &str)] = match app.view() {
            View::Table => &[
                ("q", "quit"),
                ("?", "help"),
                ("↑↓", "select"),
                ("⏎", "detail"),
                ("v", "paths"),
                ("S", "services"),
                ("H", "history"),
                ("s", "sort"),
                ("f", "filter"),
                ("p", "pause"),
            ],
            View::Detail => &[
                ("Esc", "back"),
                ("↑↓", "other socket"),
                ("v", "paths"),
                ("p", "pause"),
                ("?", "help"),
                ("q", "quit"),
            ],
            View::Paths => &[
                ("v", "sockets"),
                ("S", "services"),
                ("p", "pause"),
                ("?", "help"),
                ("q", "quit"),
            ],
            View::Services => &[
                ("S", "sockets"),
                ("v", "paths"),
                ("p", "pause"),
                ("?", "help"),
                ("q", "quit"),
            ],
            View::History => &[
                ("H", "sockets"),
                ("↑↓", "select"),
                ("⏎", "episode"),
                ("?", "help"),
                ("q", "quit"),
            ],
            View::Episode => &[
                ("Esc", "back"),
                ("H", "sockets"),
                ("?", "help"),
                ("q", "quit"),
            ],
        };
        let mut spans = Vec::new();
        let drwa = app
            .snapshot()
            .policy
            .as_ref()
            .is_some_and(|p| p.drwa != "disabled");
        let drwa_key: &[(&str, &str)] = if drwa { &[("D", "DRWA on/off")] } else { &[] };
        for (key, what) in keys.iter().chain(drwa_key) {
            spans.push(Span::styled(format!(" {key}"), TITLE));
            spans.push(Span::styled(format!(" {what} "), DIM));
        }
        Line::from(spans)
    };
    Paragraph::new(line).render(area, buf);
}

pub(super) fn help(app: &App, area: Rect, buf: &mut Buffer) {
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
        key(
            "v",
            "paths: sockets grouped by peer, floor, queue, grade, RPM",
        ),
        key(
            "S",
            "services: queue and own backlog per service, grade, RPM",
        ),
        key(
            "H",
            "history: the last hours' bloat episodes; Enter opens one",
        ),
        key("s", "next sort: qdelay rtt throughput cwnd retrans process"),
        key(
            "f",
            "filter: cc:cubic comm:curl svc:nginx port:443 addr:10.0.0.2",
        ),
        key(
            "",
            "or plain text (process, service, cc or port); Esc cancels",
        ),
        key(
            "p D",
            "pause / resume · DRWA on/off, asks first (root, admin_group)",
        ),
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
        text("  QDELAY      RTT - FLOOR: time spent in queues on the path".into()),
        text("  FLOOR       the path's lowest RTT (any socket to the peer, 30 min)".into()),
        text("  RTT         srtt for senders, the receiver's RTT for receivers".into()),
        text("  GRADE RPM   paths: A+ <5 A <30 B <60 C <200 D <400 ms, else F;".into()),
        text("              round trips per minute at the loaded RTT".into()),
        text("  BACKLOG     services: time its unsent bytes take to leave;".into()),
        text("              WAIT = RTT + backlog (trimmed mean), RPM from it".into()),
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
