//! Rendering: draws an [`App`] into a ratatui buffer.
//!
//! The screen, top to bottom: a header with the host's bloat (sockets,
//! bloated count, worst queue, queueing-delay distribution per congestion
//! control, daemon health, the newest "bloat started" notices), then the
//! socket table, the detail view of one socket, the paths view (sockets
//! grouped by peer), the services view (grouped by service) or the history
//! view (the flight recorder's last hours, an episode), then a line
//! of key hints. Only the rows on screen are formatted. Nothing here reads a clock:
//! ages are measured against the app's `now_ms`, charts against the
//! snapshot's `taken_ms`.

mod charts;
mod detail;
mod grouped;
mod header;
mod help;
mod history;
mod paths;
mod services;
mod table;

pub use history::episode_text;

use crate::app::{App, Link, View};
use bloatd_model::format;
use bloatd_model::Socket;
use ratatui::buffer::Buffer;
use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, BorderType, Paragraph, Widget, Wrap};
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

/// Draws the whole interactive screen. The state's page must be the one
/// of this screen: `app.set_page_rows(page_rows(frame.area()))` first.
pub fn draw(frame: &mut Frame, app: &App) {
    let area = frame.area();
    render(app, area, frame.buffer_mut());
}

/// Renders the interactive screen into `buf`.
pub fn render(app: &App, area: Rect, buf: &mut Buffer) {
    render_screen(app, area, buf, true);
}

/// Table rows the interactive screen of `area` shows: the state's page
/// (`App::set_page_rows`) before it is drawn there. 0 when the terminal is
/// too small for the dashboard.
pub fn page_rows(area: Rect) -> usize {
    table_rows(area, true)
}

/// Table rows of the text frame of `render_text`.
pub fn text_page_rows(width: u16, height: u16) -> usize {
    table_rows(Rect::new(0, 0, width, height), false)
}

/// Header and table only, as plain text lines (no colours, no key hints):
/// the frame of `bloatd top --once` (its page: `text_page_rows`).
pub fn render_text(app: &App, width: u16, height: u16) -> String {
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

/// The screen's parts, top to bottom.
struct Screen {
    header: Rect,
    /// Of the header's lines, those for notices.
    notice_lines: u16,
    body: Rect,
    footer: Rect,
}

fn too_small_for(area: Rect) -> bool {
    area.width < MIN_WIDTH || area.height < MIN_HEIGHT
}

fn screen(area: Rect, interactive: bool) -> Screen {
    let notice_lines = if area.height >= TALL_HEIGHT { 3 } else { 1 };
    let footer_lines = if interactive { 1 } else { 0 };
    let [header, body, footer] = Layout::vertical([
        Constraint::Length(HEADER_LINES + notice_lines),
        Constraint::Fill(1),
        Constraint::Length(footer_lines),
    ])
    .areas(area);
    Screen {
        header,
        notice_lines,
        body,
        footer,
    }
}

/// The table fills the body: a line of column titles, then the rows.
fn table_rows(area: Rect, interactive: bool) -> usize {
    if too_small_for(area) {
        return 0;
    }
    screen(area, interactive).body.height.saturating_sub(1) as usize
}

fn render_screen(app: &App, area: Rect, buf: &mut Buffer, interactive: bool) {
    if too_small_for(area) {
        too_small(area, buf);
        return;
    }
    if interactive && app.help() {
        help::help(app, area, buf);
        return;
    }
    let Screen {
        header,
        notice_lines,
        body,
        footer,
    } = screen(area, interactive);
    header::render_header(app, header, notice_lines, buf);
    match (app.link().clone(), interactive) {
        (Link::Down { message, since_ms }, true) => {
            disconnected(app, &message, since_ms, body, buf)
        }
        (Link::Connecting, true) => {
            centered_message("waiting for the first snapshot…", Style::new(), body, buf)
        }
        _ if interactive && app.view() == View::Detail => detail::render_detail(app, body, buf),
        _ if interactive && app.view() == View::Paths => paths::render_paths(app, body, buf),
        _ if interactive && app.view() == View::Services => {
            services::render_services(app, body, buf)
        }
        _ if interactive && app.view() == View::History => history::render_history(app, body, buf),
        _ if interactive && app.view() == View::Episode => history::render_episode(app, body, buf),
        _ => table::render_table(app, body, buf),
    }
    if interactive {
        help::render_footer(app, footer, buf);
    }
}

/// RTT over the floor from the socket's side, as "9.9x" (or "12x"); None
/// without a floor.
fn rtt_ratio(s: &Socket) -> Option<String> {
    let min_us = s.view_min_rtt_us();
    (min_us > 0).then(|| format::ratio(s.view_rtt_us() as f64 / min_us as f64))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_the_body_less_its_title_line() {
        // 24 lines: header 3 + 1 notice, footer 1, column titles 1.
        assert_eq!(page_rows(Rect::new(0, 0, 80, 24)), 18);
        // From 40 lines three notices show.
        assert_eq!(page_rows(Rect::new(0, 0, 80, 40)), 32);
        // The text frame has no footer.
        assert_eq!(text_page_rows(80, 24), 19);
        assert_eq!(page_rows(Rect::new(0, 0, 40, 10)), 0, "too small: no table");
    }
}
