//! Frame cost with a large host: state update (`App::apply_snapshot`) plus
//! rendering a whole frame, per frame, with 10,000 sockets.
//!
//!     cargo bench -p bloatd-tui --bench frame [-- SOCKETS FRAMES]
//!
//! Every frame gets a fresh snapshot whose queueing delays have moved (so no
//! order carries over), as from a daemon at 4 Hz. Prints percentiles; it
//! gates nothing (wall-clock numbers depend on the machine).
// A test, a bench or an example stops at what it cannot do: unwraps are its way.
#![allow(clippy::unwrap_used)]

use bloatd_model::fixtures as common;

use bloatd_model::filter::Filter;
use bloatd_model::select::select_rows;
use bloatd_model::sort::SortKey;
use bloatd_model::Snapshot;
use bloatd_tui::app::{App, Key};
use ratatui::backend::TestBackend;
use ratatui::Terminal;
use std::time::{Duration, Instant};

/// Snapshots of one host over `frames` refreshes: the same sockets, their
/// queues drifting.
fn refreshes(sockets: usize, frames: usize) -> Vec<Snapshot> {
    let base = common::many_sockets(sockets, 42);
    (0..frames)
        .map(|f| {
            let mut snap = base.clone();
            snap.taken_ms += f as u64 * 250;
            for (i, s) in snap.sockets.iter_mut().enumerate() {
                let drift = ((i * 7 + f * 13) % 97) as u32 * 1_000;
                s.queue_delay_us = s.queue_delay_us.wrapping_add(drift) % 900_000;
                s.rcv_queue_delay_us = s.rcv_queue_delay_us.wrapping_add(drift) % 900_000;
                s.srtt_us = s.min_rtt_us + s.queue_delay_us;
                s.rcv_rtt_us = s.floor_us + s.rcv_queue_delay_us;
            }
            snap
        })
        .collect()
}

struct Timing {
    update: Vec<Duration>,
    render: Vec<Duration>,
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[((sorted.len() * p).div_ceil(100)).max(1) - 1]
}

fn report(name: &str, t: &Timing) {
    let total: Vec<Duration> = t
        .update
        .iter()
        .zip(&t.render)
        .map(|(u, r)| *u + *r)
        .collect();
    let line = |what: &str, v: &[Duration]| {
        let mut v = v.to_vec();
        v.sort();
        let mean = v.iter().sum::<Duration>() / v.len() as u32;
        println!(
            "  {what:<16} mean {:>7.3} ms  p50 {:>7.3}  p99 {:>7.3}  max {:>7.3}",
            mean.as_secs_f64() * 1e3,
            percentile(&v, 50).as_secs_f64() * 1e3,
            percentile(&v, 99).as_secs_f64() * 1e3,
            v[v.len() - 1].as_secs_f64() * 1e3,
        );
        mean
    };
    println!("{name}");
    line("update", &t.update);
    line("render", &t.render);
    let mean = line("update+render", &total);
    println!(
        "  CPU at 4 Hz     {:.2}% of one core",
        mean.as_secs_f64() * 4.0 * 100.0
    );
}

fn run(snapshots: &[Snapshot], width: u16, height: u16, setup: &dyn Fn(&mut App)) -> Timing {
    let mut app = App::new();
    app.apply_snapshot(snapshots[0].clone(), snapshots[0].taken_ms);
    setup(&mut app);
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    let mut t = Timing {
        update: Vec::new(),
        render: Vec::new(),
    };
    for snap in &snapshots[1..] {
        let snap = snap.clone();
        let now = snap.taken_ms;
        let start = Instant::now();
        app.apply_snapshot(snap, now);
        let updated = Instant::now();
        bloatd_tui::draw(&mut terminal, &mut app).unwrap();
        t.update.push(updated - start);
        t.render.push(updated.elapsed());
    }
    t
}

/// The dashboard over the API: per frame the daemon selects the rows the
/// dashboard asked for (`select_rows`) and encodes them; the dashboard
/// decodes, updates and renders. Returns (daemon, client) timings and the
/// mean snapshot size.
fn run_api(
    snapshots: &[Snapshot],
    width: u16,
    height: u16,
    setup: &dyn Fn(&mut App),
) -> (Timing, Timing, usize) {
    let mut app = App::new();
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    bloatd_tui::draw(&mut terminal, &mut app).unwrap();
    let (mut daemon, mut client) = (
        Timing {
            update: Vec::new(),
            render: Vec::new(),
        },
        Timing {
            update: Vec::new(),
            render: Vec::new(),
        },
    );
    let mut bytes = 0;
    for (i, snap) in snapshots.iter().enumerate() {
        let req = app.snapshot_request();
        let start = Instant::now();
        let (rows, matched, summary) =
            select_rows(&snap.sockets, &req, snap.bloat_threshold_us).unwrap();
        let selected = Instant::now();
        let page = Snapshot {
            taken_ms: snap.taken_ms,
            interval_ms: snap.interval_ms,
            bloat_threshold_us: snap.bloat_threshold_us,
            health: snap.health.clone(),
            sockets: rows,
            matched: Some(matched),
            summary: Some(summary),
            series: Vec::new(),
            paths: Vec::new(),
            policy: None,
            services: vec![],
            episodes: vec![],
        };
        let json = serde_json::to_string(&page).unwrap();
        let encoded = Instant::now();
        let got: Snapshot = serde_json::from_str(&json).unwrap();
        app.apply_snapshot(got, snap.taken_ms);
        let updated = Instant::now();
        bloatd_tui::draw(&mut terminal, &mut app).unwrap();
        if i == 0 {
            setup(&mut app);
            continue;
        }
        daemon.update.push(selected - start);
        daemon.render.push(encoded - selected);
        client.update.push(updated - encoded);
        client.render.push(updated.elapsed());
        bytes += json.len();
    }
    let frames = snapshots.len() - 1;
    (daemon, client, bytes / frames)
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sockets = args.first().copied().unwrap_or(10_000);
    let frames = args.get(1).copied().unwrap_or(200);
    println!("{sockets} sockets, {frames} frames each\n");
    let snapshots = refreshes(sockets, frames + 1);

    report(
        "table, 80x24, sort by queueing delay",
        &run(&snapshots, 80, 24, &|_| {}),
    );
    report(
        "table, 200x60, sort by queueing delay",
        &run(&snapshots, 200, 60, &|_| {}),
    );
    report(
        "table, 200x60, sort by process name, filter cc:cubic",
        &run(&snapshots, 200, 60, &|app| {
            app.set_sort(SortKey::Process);
            app.set_filter(Filter::parse("cc:cubic").unwrap());
        }),
    );
    report(
        "table, 200x60, selection at the last row (whole table sorted)",
        &run(&snapshots, 200, 60, &|app| app.handle_key(Key::End)),
    );
    report(
        "detail view, 200x60",
        &run(&snapshots, 200, 60, &|app| app.handle_key(Key::Enter)),
    );

    println!("\nover the API: the daemon selects the rows, the dashboard decodes them");
    for (name, w, h, setup) in [
        (
            "table, 80x24, sort by queueing delay",
            80u16,
            24u16,
            &(|_: &mut App| {}) as &dyn Fn(&mut App),
        ),
        (
            "table, 200x60, sort by process name, filter cc:cubic",
            200,
            60,
            &|app: &mut App| {
                app.set_sort(SortKey::Process);
                app.set_filter(Filter::parse("cc:cubic").unwrap());
            },
        ),
        ("detail view, 200x60", 200, 60, &|app: &mut App| {
            app.handle_key(Key::Enter)
        }),
    ] {
        let (daemon, client, bytes) = run_api(&snapshots, w, h, setup);
        println!("{name}: snapshot {} kB", bytes / 1000);
        report("  daemon: select (update) + JSON encode (render)", &daemon);
        report(
            "  dashboard: JSON decode + update (update) + render",
            &client,
        );
    }

    // What a daemon client pays before the dashboard sees the snapshot.
    let json = serde_json::to_string(&snapshots[0]).unwrap();
    let start = Instant::now();
    let rounds = 20;
    for _ in 0..rounds {
        let snap: Snapshot = serde_json::from_str(&json).unwrap();
        std::hint::black_box(snap);
    }
    println!(
        "\nJSON decode of the whole snapshot ({} kB, before the daemon selected rows): {:.3} ms",
        json.len() / 1000,
        start.elapsed().as_secs_f64() * 1e3 / rounds as f64
    );
}
