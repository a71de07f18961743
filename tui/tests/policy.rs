//! What the dashboard shows of bloatd's policy (issue 10): the ACT marks, the
//! header's DRWA state, a DRWA receiver's detail with its clamp drawn next
//! to the data received per RTT, and the D key that switches DRWA.
// A test, a bench or an example stops at what it cannot do: unwraps are its way.
#![allow(clippy::unwrap_used)]

use bloatd_model::fixtures as common;

use bloatd_model::{Drwa, PolicyState, Sample, Series, Snapshot, SocketPolicy};
use bloatd_tui::app::{App, Key};
use bloatd_tui::ui;
use common::*;
use ratatui::backend::TestBackend;
use ratatui::Terminal;

/// A download on a 16 Mbit/s, 80 ms path under DRWA: the clamp settled near
/// lambda (3) x the bandwidth-delay product (160 kB), the queue drained to
/// about twice the floor; and a server socket whose cc a rule chose.
fn drwa_host(drwa: &str) -> Snapshot {
    let mut rx = receiving(socket(301), 80_000, 150_000);
    rx.comm = Some("wget".into());
    rx.cc = "cubic".into();
    rx.remote_port = 8000;
    rx.bytes_received = 90_000_000;
    rx.throughput_bps = 15_800_000;
    rx.policy = Some(SocketPolicy {
        drwa: Some(Drwa {
            by: "switch".into(),
            clamp_bytes: 470_000,
            clamp_segments: 325,
            rcvd_per_rtt_bytes: 455_000,
            rtt_us: 232_000,
            min_rtt_us: 80_000,
            min_rtt_source: Some(bloatd_model::FloorSource::Peer),
            held_rounds_left: 0,
            rounds: 212,
            held: 0,
        }),
        ..Default::default()
    });
    let mut tx = sending(socket(302), 40_000, 2_000);
    tx.comm = Some("nginx".into());
    tx.cc = "bloatd_westwood".into();
    tx.local_port = 443;
    tx.policy = Some(SocketPolicy {
        cc_rule: Some("web".into()),
        ..Default::default()
    });
    let mut snap = host(vec![rx, tx]);
    snap.policy = Some(PolicyState {
        drwa: drwa.into(),
        rules: 1,
        cc_sockets: 1,
        bulk_sockets: 0,
        drwa_sockets: 1,
        refused: None,
    });
    snap
}

/// The last minute of the download: DRWA switched on 30 s ago; the clamp
/// falls from the buffer's worth to lambda x BDP and the data per RTT
/// follows it down, while the throughput stays.
fn drwa_series() -> Series {
    Series {
        cookie: 301,
        samples: (0..=240u64)
            .map(|i| {
                let on = i >= 120;
                let (clamp, rcvd, queue) = if on {
                    let k = (i - 120).min(20) as u32;
                    (
                        Some(1_150_000 - k * 34_000),
                        Some(1_120_000 - k * 33_250),
                        500_000 - k * 17_500,
                    )
                } else {
                    (None, None, 500_000)
                };
                Sample {
                    t_ms: T0_MS - 60_000 + i * 250,
                    srtt_us: 20_000,
                    min_rtt_us: 20_000,
                    floor_us: 80_000,
                    queue_delay_us: 0,
                    rcv_rtt_us: 80_000 + queue,
                    rcv_queue_delay_us: queue,
                    cwnd: 10,
                    inflight: 0,
                    pipe_segments: None,
                    throughput_bps: 15_800_000,
                    drwa_clamp_bytes: clamp,
                    drwa_rcvd_rtt_bytes: rcvd,
                }
            })
            .collect(),
    }
}

fn app_with(snapshot: Snapshot) -> App {
    let mut app = App::new();
    let now = snapshot.taken_ms;
    app.apply_snapshot(snapshot, now);
    app
}

fn text(app: &mut App, width: u16, height: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(width, height)).unwrap();
    bloatd_tui::draw(&mut t, app).unwrap();
    ui::buffer_text(t.backend().buffer())
}

#[test]
fn the_table_marks_what_the_policy_acts_on() {
    let mut app = app_with(drwa_host("on"));
    let screen = text(&mut app, 140, 12);
    insta::assert_snapshot!(screen);
    assert!(screen.contains("DRWA on (1 clamped)"), "{screen}");
    assert!(screen.contains("1 rule: 1 cc, 0 bulk"), "{screen}");
    let row = |needle: &str| {
        screen
            .lines()
            .find(|l| l.contains(needle))
            .unwrap()
            .to_string()
    };
    assert!(row("1301").contains(" D "), "DRWA's mark: {}", row("1301"));
    assert!(
        row("nginx").contains(" R "),
        "the rule's mark: {}",
        row("nginx")
    );
}

#[test]
fn without_a_policy_there_is_no_act_column() {
    let mut app = app_with(cubic_download_host());
    let screen = text(&mut app, 140, 12);
    assert!(
        !screen.contains("ACT") && !screen.contains("DRWA"),
        "{screen}"
    );
}

#[test]
fn a_drwa_receivers_detail_draws_the_clamp_beside_the_data_per_rtt() {
    let mut snap = drwa_host("on");
    snap.series = vec![drwa_series()];
    let mut app = app_with(snap);
    app.handle_key(Key::Enter);
    assert_eq!(app.detail().unwrap().socket.cookie, 301);
    let screen = text(&mut app, 120, 36);
    insta::assert_snapshot!(screen);
    assert!(screen.contains("DRWA clamp 470"), "{screen}");
    assert!(screen.contains("325 seg"), "{screen}");
    assert!(screen.contains("DRWA window, kB"), "{screen}");
    assert!(
        screen.contains("─clamp") && screen.contains("─rcvd/RTT"),
        "{screen}"
    );
}

#[test]
fn the_d_key_asks_the_source_to_switch_drwa_after_a_yes() {
    let mut app = app_with(drwa_host("off"));
    app.handle_key(Key::Char('D'));
    assert_eq!(app.take_drwa_request(), None, "nothing before the yes");
    assert_eq!(app.drwa_confirm(), Some(true));
    let screen = text(&mut app, 120, 24);
    assert!(
        screen.contains("Switch DRWA on for every receiver of every namespace?"),
        "{screen}"
    );
    app.handle_key(Key::Char('y'));
    assert_eq!(app.take_drwa_request(), Some(true), "off -> on");
    assert_eq!(app.take_drwa_request(), None, "asked once");
    let mut app = app_with(drwa_host("on"));
    app.handle_key(Key::Char('D'));
    app.handle_key(Key::Char('Y'));
    assert_eq!(app.take_drwa_request(), Some(false), "on -> off");
    // Any other key says no, and does nothing else.
    let mut app = app_with(drwa_host("on"));
    app.handle_key(Key::Char('D'));
    app.handle_key(Key::Char('q'));
    assert_eq!(app.take_drwa_request(), None);
    assert!(!app.should_quit(), "the key only answered the question");
    assert_eq!(app.status(), Some("DRWA left as it was"));
    // A bloatd that did not arm DRWA: nothing asked, the user is told why.
    let mut app = app_with(cubic_download_host());
    app.handle_key(Key::Char('D'));
    assert_eq!((app.take_drwa_request(), app.drwa_confirm()), (None, None));
    assert!(app.status().unwrap().contains("--drwa=off"));
    let screen = text(&mut app, 120, 24);
    assert!(
        screen.contains("DRWA is disabled in this bloatd"),
        "{screen}"
    );
    // The answer goes after a while.
    app.tick(T0_MS + 10_000);
    assert!(app.status().is_none());
}

#[test]
fn a_reader_who_may_only_watch_is_told_why_the_d_key_does_nothing() {
    let mut snap = drwa_host("off");
    let why = "uid 1000 (groups bloatd) may watch but not switch DRWA (every receiver of every \
               namespace): that changes the kernel and needs root";
    snap.policy.as_mut().unwrap().refused = Some(why.into());
    let mut app = app_with(snap);
    app.handle_key(Key::Char('D'));
    assert_eq!((app.drwa_confirm(), app.take_drwa_request()), (None, None));
    assert_eq!(app.status(), Some(why));
    let screen = text(&mut app, 200, 24);
    assert!(screen.contains("may watch but not switch DRWA"), "{screen}");
}
