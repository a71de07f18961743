//! The services view: the sockets grouped by the service they serve (a
//! systemd unit, a container, a cgroup), longest wait first: the network's
//! queue (p50, p90, max) and the service's own unsent backlog side by side,
//! the round trip its users wait, the grade and the passive RPM, under one
//! sentence on the worst service ("nginx.service's users wait 480ms a
//! round trip: 400ms network queue, 40ms own send buffers; grade D, 125
//! RPM").

use super::grouped::{render_grouped, Column, Grouped};
use crate::app::App;
use bloatd_model::format;
use bloatd_model::{worst_service_sentence, ServiceView};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;

const COLUMNS: [Column; 13] = [
    ("SERVICE", 28, false, 0),
    ("SOCKS", 5, true, 0),
    ("QUEUE", 8, true, 0),
    ("Q90", 8, true, 110),
    ("QMAX", 8, true, 120),
    ("GRADE", 5, false, 0),
    ("BACKLOG", 8, true, 0),
    ("UNSENT", 8, true, 100),
    ("WAIT", 8, true, 90),
    ("RPM", 6, true, 0),
    ("THRPUT", 11, true, 80),
    ("CC", 16, false, 140),
    ("PROCESS", 16, false, 150),
];

fn cells(s: &ServiceView) -> Vec<String> {
    let [queue, q90, qmax, grade, backlog, wait, rpm] = s.measured_text();
    vec![
        s.service.clone(),
        s.sockets.to_string(),
        queue,
        q90,
        qmax,
        grade,
        backlog,
        format::bytes(s.unsent_bytes),
        wait,
        rpm,
        format::rate(s.throughput_bps),
        s.ccs.join(","),
        s.processes.join(","),
    ]
}

pub(super) fn render_services(app: &App, area: Rect, buf: &mut Buffer) {
    let services = &app.snapshot().services;
    let threshold = app.snapshot().bloat_threshold();
    let empty = if app.snapshot().sockets.is_empty() {
        "no TCP sockets"
    } else {
        "waiting for the services…"
    };
    render_grouped(
        Grouped {
            columns: &COLUMNS,
            rows: services
                .iter()
                .map(|s| {
                    let worst = s.queue_delay_p50_us.max(s.unsent_delay_p50_us);
                    (cells(s), threshold.reached_by(worst))
                })
                .collect(),
            sentence: worst_service_sentence(services),
            calm: "no service's users wait in a queue of 60 ms or more",
            empty,
        },
        area,
        buf,
    );
}
