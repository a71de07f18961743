//! The socket table: columns chosen and sized for the width, bloated rows
//! marked, only the rows on screen formatted.

use super::header::sort_arrow;
use super::{centered_message, BLOATED, BLOAT_MARKER, DIM, TITLE};
use crate::app::App;
use bloatd_model::format;
use bloatd_model::sort::SortKey;
use bloatd_model::{CaState, Socket};
use ratatui::buffer::Buffer;
use ratatui::layout::{Alignment, Constraint, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Cell, Row, StatefulWidget, Table, TableState};

/// Table columns, in display order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Col {
    Marker,
    Process,
    Service,
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

const DISPLAY_ORDER: [Col; 18] = [
    Col::Marker,
    Col::Process,
    Col::Service,
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
const PRIORITY: [Col; 18] = [
    Col::Marker,
    Col::QueueDelay,
    Col::Remote,
    Col::Process,
    Col::Service,
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
            Col::Service => "SERVICE",
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
            Col::MinRtt => "FLOOR",
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
            Col::Service => Some((7, 24)),
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
            Col::Service => {
                if s.service.is_empty() {
                    "-".into()
                } else {
                    s.service.clone()
                }
            }
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

pub(super) fn ca_short(ca: CaState) -> &'static str {
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

/// Draws the rows of the state's page (`app.visible()`), which the screen's
/// layout sized (`super::page_rows`).
pub(super) fn render_table(app: &App, area: Rect, buf: &mut Buffer) {
    if area.height == 0 {
        return;
    }
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
