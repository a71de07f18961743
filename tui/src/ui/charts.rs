//! The detail view's charts over the last minute: RTT against its floor,
//! queueing delay, the window (and Westwood+'s pipe, CUBIC's W_max),
//! throughput. [`chart`] and [`grid`] draw every chart of the dashboard
//! (an episode's too: history.rs).

use super::{centered_message, DIM, TITLE};
use crate::app::App;
use bloatd_model::format;
use bloatd_model::{CcState, Role, Sample, Socket};
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, Borders, Chart, Dataset, GraphType, Widget};

/// Formats a value of a chart's y axis.
pub(super) type AxisLabel<'a> = &'a dyn Fn(f64) -> String;

/// One chart line: name, colour, points (x seconds, y).
pub(super) struct Series {
    pub name: &'static str,
    pub color: Color,
    pub points: Vec<(f64, f64)>,
    /// Points only, not joined (marks such as episodes on a timeline).
    pub scatter: bool,
}

/// A chart's time axis: its bounds in seconds and the labels at its start,
/// middle and end.
pub(super) struct XAxis {
    pub bounds: [f64; 2],
    pub labels: [String; 3],
}

impl XAxis {
    /// The last `window_s` seconds, up to now.
    fn last(window_s: f64) -> XAxis {
        XAxis {
            bounds: [-window_s, 0.0],
            labels: [
                format!("-{window_s:.0}s"),
                format!("-{:.0}s", window_s / 2.0),
                "now".to_string(),
            ],
        }
    }
}

/// `n` cells for charts in `area`: two columns where it is wide enough.
/// None when it is too small for them.
pub(super) fn grid(n: u16, area: Rect) -> Option<Vec<Rect>> {
    let columns: u16 = if area.width >= 60 { 2 } else { 1 };
    let rows = n.div_ceil(columns);
    if area.height / rows < 5 {
        return None;
    }
    let row_areas = Layout::vertical(vec![Constraint::Fill(1); rows as usize]).split(area);
    Some(
        row_areas
            .iter()
            .flat_map(|r| {
                Layout::horizontal(vec![Constraint::Fill(1); columns as usize])
                    .spacing(1)
                    .split(*r)
                    .to_vec()
            })
            .collect(),
    )
}

pub(super) fn render_charts(
    app: &App,
    s: &Socket,
    samples: &[&Sample],
    area: Rect,
    buf: &mut Buffer,
) {
    let Some(cells) = grid(4, area) else {
        centered_message("enlarge the terminal for charts", DIM, area, buf);
        return;
    };
    let window_s = crate::app::HISTORY_WINDOW_MS as f64 / 1000.0;
    let recent = Recent::new(samples, app.snapshot().taken_ms, window_s);
    let no_samples = recent.samples.is_empty();
    let x = XAxis::last(window_s);
    for ((title, series, label), cell) in charts_of(app, s, &recent).into_iter().zip(cells) {
        chart(title, &series, label, no_samples, &x, cell, buf);
    }
}

/// The samples of the last minute, as points x seconds before the
/// snapshot.
struct Recent<'a> {
    samples: Vec<&'a Sample>,
    taken_ms: u64,
    window_s: f64,
}

impl<'a> Recent<'a> {
    fn new(samples: &[&'a Sample], taken_ms: u64, window_s: f64) -> Self {
        let mut recent = Recent {
            samples: Vec::new(),
            taken_ms,
            window_s,
        };
        recent.samples = samples
            .iter()
            .copied()
            .filter(|x| recent.x_of(x.t_ms) >= -window_s)
            .collect();
        recent
    }

    fn x_of(&self, t_ms: u64) -> f64 {
        (t_ms as f64 - self.taken_ms as f64) / 1000.0
    }

    /// The points of one quantity, where a sample has it.
    fn points(&self, f: &dyn Fn(&Sample) -> Option<f64>) -> Vec<(f64, f64)> {
        self.samples
            .iter()
            .filter_map(|x| f(x).map(|y| (self.x_of(x.t_ms), y)))
            .collect()
    }

    /// A constant across the whole window (a threshold, W_max).
    fn flat(&self, y: f64) -> Vec<(f64, f64)> {
        vec![(-self.window_s, y), (0.0, y)]
    }
}

fn ms_of(us: u32) -> f64 {
    us as f64 / 1000.0
}

pub(super) fn ms_label(v: f64) -> String {
    format::ms((v * 1000.0).round() as u64)
}

pub(super) fn seg_label(v: f64) -> String {
    format!("{v:.0}")
}

fn kb_label(v: f64) -> String {
    format!("{v:.0}k")
}

pub(super) fn rate_label(v: f64) -> String {
    format::rate(v.round() as u64)
}

/// The four charts: RTT against its floor, queueing delay, the window,
/// throughput.
fn charts_of(
    app: &App,
    s: &Socket,
    recent: &Recent,
) -> [(&'static str, Vec<Series>, AxisLabel<'static>); 4] {
    let role = s.role;
    let rtt_name = match role {
        Role::Sender => "srtt",
        Role::Receiver => "rcv_rtt",
    };
    let rtt = vec![
        Series {
            name: rtt_name,
            color: Color::Yellow,
            points: recent.points(&|x| Some(ms_of(x.view_rtt_us(role)))),
            scatter: false,
        },
        Series {
            name: "min",
            color: Color::Green,
            points: recent.points(&|x| Some(ms_of(x.view_min_rtt_us(role)))),
            scatter: false,
        },
    ];
    let mut queue = vec![Series {
        name: "queue",
        color: Color::Red,
        points: recent.points(&|x| Some(ms_of(x.view_queue_delay_us(role)))),
        scatter: false,
    }];
    let threshold_us = app.snapshot().bloat_threshold_us;
    if threshold_us > 0 {
        queue.push(Series {
            name: "threshold",
            color: Color::DarkGray,
            points: recent.flat(ms_of(threshold_us)),
            scatter: false,
        });
    }
    let throughput = vec![Series {
        name: "throughput",
        color: Color::Blue,
        points: recent.points(&|x| Some(x.throughput_bps as f64)),
        scatter: false,
    }];
    [
        ("RTT (gap = queue)", rtt, &ms_label),
        ("queueing delay", queue, &ms_label),
        window_chart(s, recent),
        ("throughput", throughput, &rate_label),
    ]
}

/// The window chart: cwnd (and Westwood+'s pipe, CUBIC's W_max), or for a
/// receiver DRWA clamps, the clamp drawn beside the data that arrived per
/// RTT (the clamp is lambda x floor/RTT x that).
fn window_chart(s: &Socket, recent: &Recent) -> (&'static str, Vec<Series>, AxisLabel<'static>) {
    let clamp = recent.points(&|x| x.drwa_clamp_bytes.map(|b| b as f64 / 1000.0));
    if !clamp.is_empty() {
        let rcvd = recent.points(&|x| x.drwa_rcvd_rtt_bytes.map(|b| b as f64 / 1000.0));
        let window = vec![
            Series {
                name: "clamp",
                color: Color::Green,
                points: clamp,
                scatter: false,
            },
            Series {
                name: "rcvd/RTT",
                color: Color::Cyan,
                points: rcvd,
                scatter: false,
            },
        ];
        return ("DRWA window, kB", window, &kb_label);
    }
    let mut window = vec![Series {
        name: "cwnd",
        color: Color::Cyan,
        points: recent.points(&|x| Some(x.cwnd as f64)),
        scatter: false,
    }];
    let pipe = recent.points(&|x| x.pipe_segments.map(|p| p as f64));
    if !pipe.is_empty() {
        window.push(Series {
            name: "pipe",
            color: Color::Green,
            points: pipe,
            scatter: false,
        });
    }
    if let Some(CcState::Cubic { w_max_segments, .. }) = &s.cc_state {
        window.push(Series {
            name: "W_max",
            color: Color::Magenta,
            points: recent.flat(*w_max_segments as f64),
            scatter: false,
        });
    }
    ("window, segments", window, &seg_label)
}

pub(super) fn chart(
    title: &str,
    series: &[Series],
    label: &dyn Fn(f64) -> String,
    no_samples: bool,
    x: &XAxis,
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
                .graph_type(if s.scatter {
                    GraphType::Scatter
                } else {
                    GraphType::Line
                })
                .style(Style::new().fg(s.color))
                .data(&s.points)
        })
        .collect();
    // The time axis costs two rows: only charts with room for it get it;
    // the others span the same time.
    let x_labels: Vec<String> = if area.height >= 10 {
        x.labels.to_vec()
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
        .x_axis(Axis::default().bounds(x.bounds).labels(x_labels).style(DIM))
        .y_axis(
            Axis::default()
                .bounds([0.0, y_top])
                .labels(["0".to_string(), label(y_top / 2.0), label(y_top)])
                .style(DIM),
        )
        .render(area, buf);
}
