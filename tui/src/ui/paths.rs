//! The paths view: the sockets grouped by peer, worst queue first, with the
//! path's floor (and where it came from), its queue, the bufferbloat grade,
//! the passive loaded responsiveness, the kind of queue it waits in (the
//! daemon's classifier: drop-tail, AQM...) and whose traffic fills it, under one sentence on the worst
//! path ("the link to X holds 450 ms of queue, 3 flows wait behind it").

use super::grouped::{render_grouped, Column, Grouped};
use crate::app::App;
use bloatd_model::format;
use bloatd_model::{worst_path_sentence, NetPath};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;

const COLUMNS: [Column; 15] = [
    ("PEER", 24, false, 0),
    ("IFACE", 8, false, 100),
    ("NETNS", 10, false, 130),
    ("FLOOR", 8, true, 0),
    ("SOURCE", 8, false, 90),
    ("QUEUE", 8, true, 0),
    ("QMAX", 8, true, 110),
    ("GRADE", 5, false, 0),
    ("RPM", 6, true, 0),
    ("KIND", 8, false, 0),
    ("WHOSE", 9, false, 120),
    ("SOCKS", 5, true, 0),
    ("THRPUT", 11, true, 0),
    ("CC", 20, false, 130),
    ("SERVICES", 30, false, 160),
];

fn cells(p: &NetPath) -> Vec<String> {
    let [floor, queue, qmax, grade, rpm] = p.measured_text();
    vec![
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
        p.bottleneck_text().to_string(),
        p.owner_text().to_string(),
        p.sockets.to_string(),
        format::rate(p.throughput_bps),
        p.ccs.join(","),
        p.services.join(","),
    ]
}

pub(super) fn render_paths(app: &App, area: Rect, buf: &mut Buffer) {
    let paths = &app.snapshot().paths;
    let threshold = app.snapshot().bloat_threshold();
    // The first snapshot with paths comes at the next refresh.
    let empty = if app.snapshot().sockets.is_empty() {
        "no TCP paths"
    } else {
        "waiting for the paths…"
    };
    render_grouped(
        Grouped {
            columns: &COLUMNS,
            rows: paths
                .iter()
                .map(|p| (cells(p), threshold.reached_by(p.queue_delay_p50_us)))
                .collect(),
            sentence: worst_path_sentence(paths),
            calm: "no path holds a queue of 60 ms or more",
            empty,
        },
        area,
        buf,
    );
}
