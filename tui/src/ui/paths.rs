//! The paths view: the sockets grouped by peer, worst queue first, with the
//! path's floor (and where it came from), its queue, the bufferbloat grade
//! and the passive loaded responsiveness, under one sentence on the worst
//! path ("the link to X holds 450 ms of queue, 3 flows wait behind it").

use super::{centered_message, BLOATED, DIM, GOOD, TITLE};
use crate::app::App;
use bloatd_model::format;
use bloatd_model::{worst_path_sentence, NetPath};
use ratatui::buffer::Buffer;
use ratatui::layout::{Alignment, Constraint, Rect};
use ratatui::style::Modifier;
use ratatui::text::Line;
use ratatui::widgets::{Cell, Paragraph, Row, Table, Widget};

/// Columns: title, width, right-aligned, the smallest terminal width that
/// shows it (narrow terminals keep the path, its queue and grade).
const COLUMNS: [(&str, u16, bool, u16); 12] = [
    ("PEER", 24, false, 0),
    ("IFACE", 8, false, 100),
    ("NETNS", 10, false, 120),
    ("FLOOR", 8, true, 0),
    ("SOURCE", 8, false, 90),
    ("QUEUE", 8, true, 0),
    ("QMAX", 8, true, 110),
    ("GRADE", 5, false, 0),
    ("RPM", 6, true, 0),
    ("SOCKS", 5, true, 0),
    ("THRPUT", 11, true, 0),
    ("CC", 20, false, 130),
];

fn cells(p: &NetPath) -> [String; 12] {
    let [floor, queue, qmax, grade, rpm] = p.measured_text();
    [
        p.peer_text(),
        if p.interface.is_empty() {
            "-".into()
        } else {
            p.interface.clone()
        },
        p.netns.to_string(),
        floor,
        p.floor_source.as_str().to_string(),
        queue,
        qmax,
        grade,
        rpm,
        p.sockets.to_string(),
        format::rate(p.throughput_bps),
        p.ccs.join(","),
    ]
}

pub(super) fn render_paths(app: &App, area: Rect, buf: &mut Buffer) {
    if area.height < 2 {
        return;
    }
    let paths = &app.snapshot().paths;
    let threshold_us = app.snapshot().bloat_threshold_us;
    let sentence = worst_path_sentence(paths);
    let (line, style) = match &sentence {
        Some(s) => (s.clone(), BLOATED),
        None if paths.is_empty() => (String::new(), DIM),
        None => ("no path holds a queue of 60 ms or more".to_string(), GOOD),
    };
    Paragraph::new(Line::styled(format!(" {line}"), style)).render(Rect { height: 1, ..area }, buf);
    let rest = Rect {
        y: area.y + 1,
        height: area.height - 1,
        ..area
    };

    let shown: Vec<usize> = (0..COLUMNS.len())
        .filter(|&c| area.width >= COLUMNS[c].3)
        .collect();
    let cell = |c: usize, text: String| {
        let text: String = text.chars().take(COLUMNS[c].1 as usize).collect();
        let line = Line::from(text);
        Cell::from(if COLUMNS[c].2 {
            line.alignment(Alignment::Right)
        } else {
            line
        })
    };
    let header = Row::new(shown.iter().map(|&c| cell(c, COLUMNS[c].0.to_string())))
        .style(TITLE.add_modifier(Modifier::UNDERLINED));
    let rows: Vec<Row> = paths
        .iter()
        .take(rest.height.saturating_sub(1) as usize)
        .map(|p| {
            let all = cells(p);
            let row = Row::new(shown.iter().map(|&c| cell(c, all[c].clone())));
            if threshold_us > 0 && p.queue_delay_p50_us >= threshold_us {
                row.style(BLOATED)
            } else {
                row
            }
        })
        .collect();
    let widths: Vec<Constraint> = shown
        .iter()
        .map(|&c| Constraint::Length(COLUMNS[c].1))
        .collect();
    Widget::render(
        Table::new(rows, widths).header(header).column_spacing(1),
        rest,
        buf,
    );
    if paths.is_empty() {
        let below = Rect {
            y: rest.y + 1,
            height: rest.height.saturating_sub(1),
            ..rest
        };
        // The first snapshot with paths comes at the next refresh.
        let text = if app.snapshot().sockets.is_empty() {
            "no TCP paths"
        } else {
            "waiting for the paths…"
        };
        centered_message(text, DIM, below, buf);
    }
}
