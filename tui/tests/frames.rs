//! Whole frames drawn on ratatui's TestBackend, compared with the committed
//! snapshots in tests/snapshots/ (insta). Review a change with
//! `INSTA_UPDATE=always cargo test -p bloatd-tui --test frames` and
//! `git diff tui/tests/snapshots`.
// A test, a bench or an example stops at what it cannot do: unwraps are its way.
#![allow(clippy::unwrap_used)]

use bloatd_model::fixtures as common;

use bloatd_model::Snapshot;
use bloatd_tui::app::{App, Key, View};
use bloatd_tui::{render_once, ui};
use common::*;
use ratatui::backend::TestBackend;
use ratatui::style::{Color, Modifier};
use ratatui::Terminal;

fn terminal(width: u16, height: u16) -> Terminal<TestBackend> {
    Terminal::new(TestBackend::new(width, height)).unwrap()
}

fn app_with(snapshot: Snapshot) -> App {
    let mut app = App::new();
    let now = snapshot.taken_ms;
    app.apply_snapshot(snapshot, now);
    app
}

fn draw(app: &mut App, width: u16, height: u16) -> Terminal<TestBackend> {
    let mut t = terminal(width, height);
    bloatd_tui::draw(&mut t, app).unwrap();
    t
}

#[test]
fn empty_host() {
    let mut app = app_with(common::empty_host());
    insta::assert_snapshot!(draw(&mut app, 80, 24).backend());
}

#[test]
fn bloated_cubic_download() {
    let mut snap = cubic_download_host();
    snap.series = vec![cubic_download_series()];
    let mut app = app_with(snap);
    let t = draw(&mut app, 120, 30);
    insta::assert_snapshot!(t.backend());

    // The bloated rows are marked in colour as well as with the marker.
    let buf = t.backend().buffer();
    // Table rows (not the notice line, which names the endpoint too).
    let row_of = |text: &str| {
        (0..buf.area.height)
            .find(|&y| {
                let line: String = (0..buf.area.width).map(|x| buf[(x, y)].symbol()).collect();
                line.contains(text) && line.contains(" send ") | line.contains(" recv ")
            })
            .unwrap()
    };
    let curl = row_of("93.184.215.14:443 ");
    assert_eq!(buf[(0, curl)].symbol(), ui::BLOAT_MARKER);
    assert_eq!(buf[(5, curl)].fg, Color::Red);
    // The top row is selected (reverse video); the unbloated ssh row is plain.
    assert!(buf[(5, curl)].modifier.contains(Modifier::REVERSED));
    let ssh = row_of("198.51.100.7:22");
    assert_eq!(buf[(0, ssh)].symbol(), " ");
    assert_eq!(buf[(5, ssh)].fg, Color::Reset);
}

#[test]
fn bloated_cubic_download_detail() {
    let mut snap = cubic_download_host();
    snap.series = vec![cubic_download_series()];
    let mut app = app_with(snap);
    app.handle_key(Key::Enter);
    assert_eq!(app.detail().unwrap().socket.cookie, 101);
    insta::assert_snapshot!(draw(&mut app, 120, 36).backend());
}

#[test]
fn cubic_state_in_detail() {
    let mut app = app_with(cubic_download_host());
    // Second row: the bloatd_cubic rsync upload.
    app.set_page_rows(10);
    app.handle_key(Key::Down);
    app.handle_key(Key::Enter);
    assert_eq!(app.detail().unwrap().socket.cc, "bloatd_cubic");
    let text = ui::buffer_text(draw(&mut app, 100, 30).backend().buffer());
    assert!(text.contains("W_max 702 seg"), "{text}");
    assert!(text.contains("K 4119ms"), "{text}");
    assert!(text.contains("─W_max"), "{text}");
}

#[test]
fn a_senders_own_unsent_queue_is_in_its_detail() {
    let mut app = app_with(cubic_download_host());
    app.set_page_rows(10);
    app.handle_key(Key::Down);
    app.handle_key(Key::Enter);
    let text = ui::buffer_text(draw(&mut app, 100, 30).backend().buffer());
    assert!(
        !text.contains("unsent"),
        "nothing unsent, nothing shown: {text}"
    );

    let mut snap = cubic_download_host();
    let upload = snap
        .sockets
        .iter_mut()
        .find(|s| s.cc == "bloatd_cubic")
        .unwrap();
    upload.unsent_bytes = 2_400_000;
    upload.unsent_delay_us = 1_200_000;
    let mut app = app_with(snap);
    app.set_page_rows(10);
    app.handle_key(Key::Down);
    app.handle_key(Key::Enter);
    let t = draw(&mut app, 100, 30);
    let text = ui::buffer_text(t.backend().buffer());
    assert!(text.contains("unsent 2.4MB (1200ms)"), "{text}");
}

#[test]
fn westwood_detail() {
    let mut snap = westwood_host();
    snap.series = vec![westwood_series()];
    let mut app = app_with(snap);
    app.handle_key(Key::Enter);
    assert_eq!(app.view(), View::Detail);
    insta::assert_snapshot!(draw(&mut app, 120, 40).backend());
}

#[test]
fn westwood_detail_80x24() {
    let mut snap = westwood_host();
    snap.series = vec![westwood_series()];
    let mut app = app_with(snap);
    app.handle_key(Key::Enter);
    insta::assert_snapshot!(draw(&mut app, 80, 24).backend());
}

#[test]
fn help_screen() {
    let mut app = app_with(cubic_download_host());
    app.handle_key(Key::Char('?'));
    insta::assert_snapshot!(draw(&mut app, 80, 24).backend());
}

#[test]
fn terminal_80x24() {
    let mut app = app_with(many_sockets(300, 7));
    insta::assert_snapshot!(draw(&mut app, 80, 24).backend());
}

#[test]
fn large_terminal() {
    let mut snap = many_sockets(300, 7);
    snap.sockets.extend(cubic_download_host().sockets);
    let mut app = app_with(snap);
    insta::assert_snapshot!(draw(&mut app, 200, 50).backend());
}

#[test]
fn filter_prompt() {
    let mut app = app_with(cubic_download_host());
    app.handle_key(Key::Char('f'));
    for c in "cc:cubic".chars() {
        app.handle_key(Key::Char(c));
    }
    insta::assert_snapshot!(draw(&mut app, 80, 24).backend());
}

#[test]
fn daemon_unreachable() {
    let mut app = app_with(cubic_download_host());
    app.source_failed(
        "bloatd daemon not reachable at /run/bloatd/bloatd.sock: retrying…".into(),
        T0_MS + 1_000,
    );
    app.tick(T0_MS + 4_000);
    insta::assert_snapshot!(draw(&mut app, 80, 24).backend());
}

#[test]
fn too_small() {
    let mut app = app_with(cubic_download_host());
    insta::assert_snapshot!(draw(&mut app, 40, 10).backend());
}

#[test]
fn never_panics_at_any_size() {
    let mut snap = westwood_host();
    snap.series = vec![westwood_series()];
    snap.sockets.extend(cubic_download_host().sockets);
    for setup in 0..4 {
        let mut app = app_with(snap.clone());
        match setup {
            1 => app.handle_key(Key::Enter),
            2 => app.handle_key(Key::Char('?')),
            3 => app.handle_key(Key::Char('f')),
            _ => {}
        }
        // Every 7th/5th size plus the edges of each layout decision.
        let widths = (0..=130)
            .step_by(7)
            .chain([49, 50, 51, 59, 60, 79, 80, 99, 100]);
        for width in widths {
            let heights = (0..=45).step_by(5).chain([11, 12, 13, 23, 24, 39, 40]);
            for height in heights {
                draw(&mut app, width, height);
            }
        }
    }
}

#[test]
fn once_text_is_parseable() {
    let snap = cubic_download_host();
    let text = render_once(&snap, 160, bloatd_tui::once_height(&snap));
    insta::assert_snapshot!(text);
    // Every socket has a row; the curl row carries the marker, its
    // endpoint as addr:port and its queueing delay with a unit.
    let curl = text
        .lines()
        .find(|l| l.contains("93.184.215.14:443") && l.contains(" recv "))
        .unwrap();
    assert!(curl.starts_with(ui::BLOAT_MARKER), "{curl}");
    assert!(curl.split_whitespace().any(|w| w == "420ms"), "{curl}");
    for s in &snap.sockets {
        assert!(
            text.contains(&s.remote_endpoint().to_string()),
            "{}",
            s.remote_endpoint()
        );
    }
    // No key hints or screen furniture in the text frame.
    assert!(!text.contains("quit"));
}

#[test]
fn once_text_lists_every_socket_of_a_large_host() {
    let snap = many_sockets(2_000, 3);
    let text = render_once(&snap, 160, bloatd_tui::once_height(&snap));
    let rows = text
        .lines()
        .filter(|l| l.contains(" send ") || l.contains(" recv "))
        .count();
    assert_eq!(rows, 2_000);
}

#[test]
fn paths_view() {
    let mut app = app_with(cubic_download_host());
    app.handle_key(Key::Char('v'));
    assert_eq!(app.view(), View::Paths);
    assert!(
        app.snapshot_request().paths,
        "the paths view asks the source for paths"
    );
    let mut snap = cubic_download_host();
    snap.paths = cubic_download_paths();
    app.apply_snapshot(snap.clone(), snap.taken_ms);
    let t = draw(&mut app, 120, 24);
    insta::assert_snapshot!(t.backend());
    let text = ui::buffer_text(t.backend().buffer());
    assert!(
        text.contains(
            "the link to 93.184.215.14 (wlan0) holds 420ms of queue in a drop-tail buffer, 2 flows wait behind it: grade F"
        ),
        "{text}"
    );
    // 80 columns keep the path, its floor, queue, grade, RPM and kind
    let narrow = ui::buffer_text(draw(&mut app, 80, 24).backend().buffer());
    let head = narrow.lines().find(|l| l.contains("PEER")).unwrap();
    for col in ["PEER", "FLOOR", "QUEUE", "GRADE", "RPM", "KIND"] {
        assert!(head.contains(col), "{head}");
    }
    app.handle_key(Key::Char('v'));
    assert_eq!(app.view(), View::Table);
    assert!(!app.snapshot_request().paths);
}

#[test]
fn header_names_parts_the_kernel_declined_or_runs_by_a_fallback() {
    use bloatd_model::{Feature, FeatureState};
    let feature = |name: &str, state| Feature {
        name: name.into(),
        state,
        detail: "the kernel feature and its version".into(),
    };
    let mut snap = cubic_download_host();
    snap.health.features = vec![
        feature("ca_state_events", FeatureState::On),
        feature("cc_link", FeatureState::Fallback),
        feature("rcv_rtt_usec", FeatureState::Fallback),
        feature("sock_ops", FeatureState::Off),
    ];
    let text = render_once(&snap, 200, bloatd_tui::once_height(&snap));
    let line = text
        .lines()
        .find(|l| l.contains("events "))
        .expect("the health line");
    assert!(line.contains("off: sock_ops"), "{line}");
    assert!(line.contains("fallback: cc_link,rcv_rtt_usec"), "{line}");
    assert!(!line.contains("ca_state_events"), "{line}");
    // A kernel that runs everything as designed adds nothing.
    let plain = render_once(&cubic_download_host(), 200, bloatd_tui::once_height(&snap));
    assert!(!plain.contains("fallback:") && !plain.contains("off:"));
}

#[test]
fn services_view() {
    let mut app = app_with(cubic_download_host());
    app.handle_key(Key::Char('S'));
    assert_eq!(app.view(), View::Services);
    let req = app.snapshot_request();
    assert!(
        req.services && !req.paths,
        "the services view asks the source for services"
    );
    let mut snap = cubic_download_host();
    snap.services = two_services();
    app.apply_snapshot(snap.clone(), snap.taken_ms);
    let t = draw(&mut app, 120, 24);
    insta::assert_snapshot!(t.backend());
    let text = ui::buffer_text(t.backend().buffer());
    assert!(
        text.contains("backup.service's users wait 3520ms a round trip: 380ms network queue, 3100ms own send buffers; grade D, 17 RPM"),
        "{text}"
    );
    // 80 columns keep the service, its queue, grade, backlog and RPM
    let narrow = ui::buffer_text(draw(&mut app, 80, 24).backend().buffer());
    let head = narrow.lines().find(|l| l.contains("SERVICE")).unwrap();
    for col in ["SERVICE", "QUEUE", "GRADE", "BACKLOG", "RPM"] {
        assert!(head.contains(col), "{head}");
    }
    // v from here goes to the paths, S again back to the sockets.
    app.handle_key(Key::Char('v'));
    assert_eq!(app.view(), View::Paths);
    app.handle_key(Key::Char('S'));
    app.handle_key(Key::Char('S'));
    assert_eq!(app.view(), View::Table);
    assert!(!app.snapshot_request().services);
}

/// H: the flight recorder's last six hours, the episodes marked on the
/// timeline and listed, the newest selected.
#[test]
fn history_view() {
    let mut app = app_with(cubic_download_host());
    app.handle_key(Key::Char('H'));
    assert_eq!(app.view(), View::History);
    assert_eq!(app.history_request(), Some(common::T0_MS - 6 * 3_600_000));
    app.apply_history(Ok(recorder_history()), common::T0_MS);
    assert_eq!(
        app.history_request(),
        None,
        "asked again only after a while"
    );
    let t = draw(&mut app, 120, 36);
    insta::assert_snapshot!(t.backend());
    // Enter opens the selected episode; the source is asked for it.
    app.handle_key(Key::Down);
    app.handle_key(Key::Enter);
    assert_eq!(
        (app.view(), app.episode_request()),
        (View::Episode, Some(12))
    );
}

/// Enter on an episode: its summary, flows and the charts of its span.
#[test]
fn episode_view() {
    let mut app = app_with(cubic_download_host());
    app.handle_key(Key::Char('H'));
    app.apply_history(Ok(recorder_history()), common::T0_MS);
    app.handle_key(Key::Down);
    app.handle_key(Key::Enter);
    app.apply_episode(Ok(cubic_download_episode()), common::T0_MS);
    assert_eq!(
        app.episode_request(),
        None,
        "a closed episode is asked once"
    );
    insta::assert_snapshot!(draw(&mut app, 120, 40).backend());
    app.handle_key(Key::Esc);
    assert_eq!(app.view(), View::History);
    app.handle_key(Key::Char('H'));
    assert_eq!(app.view(), View::Table);
}

/// An episode in progress is named in the header, with how long it has
/// lasted.
#[test]
fn header_names_the_episode_in_progress() {
    let mut snap = cubic_download_host();
    snap.episodes = vec![recorder_history().1[0].clone()];
    let mut app = app_with(snap);
    let text = ui::buffer_text(draw(&mut app, 120, 30).backend().buffer());
    assert!(
        text.contains("bloat since 23:58:25, 1m35s, service backup.service, 1 flow"),
        "{text}"
    );
}

/// `bloatd incident ID`: the episode's view as text.
#[test]
fn episode_as_text() {
    let text = ui::episode_text(&cubic_download_episode(), common::T0_MS, 0, 130);
    insta::assert_snapshot!(text);
}
