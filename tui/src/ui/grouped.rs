//! A table of groups of sockets under one sentence on the worst group: the
//! paths view and the services view draw with it.

use super::{centered_message, BLOATED, DIM, GOOD, TITLE};
use ratatui::buffer::Buffer;
use ratatui::layout::{Alignment, Constraint, Rect};
use ratatui::style::Modifier;
use ratatui::text::Line;
use ratatui::widgets::{Cell, Paragraph, Row, Table, Widget};

/// One column: title, width, right-aligned, the smallest terminal width
/// that shows it (narrow terminals keep the group, its queue and grade).
pub(super) type Column = (&'static str, u16, bool, u16);

/// What a grouped view draws.
pub(super) struct Grouped<'a> {
    pub columns: &'a [Column],
    /// Each group's cells (one per column) and whether it is bloated.
    pub rows: Vec<(Vec<String>, bool)>,
    /// The sentence on the worst group, or what to say when none is bad.
    pub sentence: Option<String>,
    pub calm: &'a str,
    /// Shown under the titles when there is no group.
    pub empty: &'a str,
}

pub(super) fn render_grouped(g: Grouped, area: Rect, buf: &mut Buffer) {
    if area.height < 2 {
        return;
    }
    let (line, style) = match &g.sentence {
        Some(s) => (s.clone(), BLOATED),
        None if g.rows.is_empty() => (String::new(), DIM),
        None => (g.calm.to_string(), GOOD),
    };
    Paragraph::new(Line::styled(format!(" {line}"), style)).render(Rect { height: 1, ..area }, buf);
    let rest = Rect {
        y: area.y + 1,
        height: area.height - 1,
        ..area
    };
    let columns = g.columns;
    let shown: Vec<usize> = (0..columns.len())
        .filter(|&c| area.width >= columns[c].3)
        .collect();
    let cell = |c: usize, text: &str| {
        let text: String = text.chars().take(columns[c].1 as usize).collect();
        let line = Line::from(text);
        Cell::from(if columns[c].2 {
            line.alignment(Alignment::Right)
        } else {
            line
        })
    };
    let header = Row::new(shown.iter().map(|&c| cell(c, columns[c].0)))
        .style(TITLE.add_modifier(Modifier::UNDERLINED));
    let rows: Vec<Row> = g
        .rows
        .iter()
        .take(rest.height.saturating_sub(1) as usize)
        .map(|(cells, bloated)| {
            let row = Row::new(shown.iter().map(|&c| cell(c, &cells[c])));
            if *bloated {
                row.style(BLOATED)
            } else {
                row
            }
        })
        .collect();
    let widths: Vec<Constraint> = shown
        .iter()
        .map(|&c| Constraint::Length(columns[c].1))
        .collect();
    let empty = g.rows.is_empty();
    Widget::render(
        Table::new(rows, widths).header(header).column_spacing(1),
        rest,
        buf,
    );
    if empty {
        let below = Rect {
            y: rest.y + 1,
            height: rest.height.saturating_sub(1),
            ..rest
        };
        centered_message(g.empty, DIM, below, buf);
    }
}
