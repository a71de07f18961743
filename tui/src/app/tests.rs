//! The dashboard state, driven through its inputs.

use super::history::MAX_HISTORIES;
use super::*;
use bloatd_model::select::select_rows;
use bloatd_model::{CcDelay, Health, Role, Sample, Series};

use crate::tests::fixtures;

/// The shared fixture socket, with a name, a congestion control and a
/// queue of `queue_ms` over a 40 ms path.
fn sock(cookie: u64, comm: &str, cc: &str, queue_ms: u32) -> Socket {
    let mut s = fixtures::sending(fixtures::socket(cookie), 40_000, queue_ms * 1000);
    s.comm = Some(comm.into());
    s.cc = cc.into();
    s.inflight = 5;
    s.throughput_bps = cookie * 1000;
    s
}

fn snap(taken_ms: u64, sockets: Vec<Socket>) -> Snapshot {
    Snapshot {
        summary: None,
        matched: None,
        taken_ms,
        interval_ms: 250,
        bloat_threshold_us: 100_000,
        sockets,
        series: vec![],
        health: Health::default(),
        paths: vec![],
        policy: None,
        services: vec![],
        episodes: vec![],
    }
}

pub(super) fn sample(t_ms: u64) -> Sample {
    Sample {
        t_ms,
        srtt_us: 1,
        min_rtt_us: 1,
        floor_us: 1,
        queue_delay_us: 0,
        rcv_rtt_us: 0,
        rcv_queue_delay_us: 0,
        cwnd: 10,
        inflight: 1,
        pipe_segments: None,
        throughput_bps: 0,
        drwa_clamp_bytes: None,
        drwa_rcvd_rtt_bytes: None,
    }
}

fn visible_cookies(app: &mut App, rows: usize) -> Vec<u64> {
    app.set_page_rows(rows);
    app.visible().map(|s| s.cookie).collect()
}

#[test]
fn the_source_selects_sorted_filtered_rows_and_summarises_all() {
    let all: Vec<Socket> = (1..=50u64)
        .map(|c| {
            sock(
                c,
                if c % 2 == 0 { "curl" } else { "wget" },
                if c % 5 == 0 { "bbr" } else { "cubic" },
                c as u32 * 10,
            )
        })
        .collect();
    let req = SnapshotRequest {
        sort: Some("qdelay".into()),
        filter: Some("cc:cubic".into()),
        limit: Some(5),
        series: Some(5), // a bbr socket: filtered out, still sent for the detail pane
        since_ms: 0,
        paths: false,
        services: false,
    };
    let (rows, matched, summary) = select_rows(&all, &req, 100_000).unwrap();
    assert_eq!(matched, 40);
    let cookies: Vec<u64> = rows.iter().map(|s| s.cookie).collect();
    assert_eq!(
        cookies,
        vec![49, 48, 47, 46, 44, 5],
        "the worst cubic first, then the pinned socket"
    );
    // The summary covers every socket, filter or not.
    assert_eq!(summary, summarize(&all, 100_000));
    assert_eq!(summary.sockets, 50);
    assert_eq!(summary.bloated, 41, "10 ms steps: 100 ms and up bloated");
    // The same rows as the dashboard's own sort of the whole host.
    let mut app = App::new();
    app.set_filter(Filter::parse("cc:cubic").unwrap());
    app.apply_snapshot(snap(1_000, all), 1_000);
    assert_eq!(visible_cookies(&mut app, 5), vec![49, 48, 47, 46, 44]);
    // A socket beyond the limit that the dashboard watches comes along.
    let req = SnapshotRequest {
        series: Some(1),
        filter: None,
        ..req
    };
    let many: Vec<_> = (1..=50).map(|c| sock(c, "x", "cubic", c as u32)).collect();
    let (rows, _, _) = select_rows(&many, &req, 0).unwrap();
    assert_eq!(rows.last().unwrap().cookie, 1);
    assert_eq!(rows.len(), 6);
    // Bad input is an error the API returns, not a panic.
    let bad = SnapshotRequest {
        sort: Some("size".into()),
        ..Default::default()
    };
    assert!(select_rows(&[], &bad, 0)
        .unwrap_err()
        .to_string()
        .contains("qdelay"));
    let bad = SnapshotRequest {
        filter: Some("port:x".into()),
        ..Default::default()
    };
    assert!(select_rows(&[], &bad, 0).is_err());
}

#[test]
fn the_request_asks_for_a_page_beyond_the_selection() {
    let mut app = App::new();
    app.set_page_rows(20);
    let req = app.snapshot_request();
    assert_eq!(req.limit, Some(MIN_ROWS));
    assert_eq!(req.sort.as_deref(), Some("qdelay"));
    assert_eq!(req.filter, None);
    app.set_filter(Filter::parse("port:443").unwrap());
    assert_eq!(app.snapshot_request().filter.as_deref(), Some("port:443"));
}

#[test]
fn default_sort_is_queueing_delay_descending() {
    let mut app = App::new();
    app.apply_snapshot(
        snap(
            1,
            vec![
                sock(1, "a", "cubic", 5),
                sock(2, "b", "cubic", 300),
                sock(3, "c", "bbr", 40),
            ],
        ),
        1,
    );
    assert_eq!(visible_cookies(&mut app, 10), vec![2, 3, 1]);
    assert_eq!(app.selected_socket().unwrap().cookie, 2);
}

#[test]
fn receivers_sort_by_their_receiver_queue() {
    let mut rx = sock(9, "curl", "cubic", 0);
    rx.role = Role::Receiver;
    rx.rcv_rtt_us = 460_000;
    rx.floor_us = 40_000;
    rx.rcv_queue_delay_us = 420_000;
    let mut app = App::new();
    app.apply_snapshot(snap(1, vec![sock(1, "a", "cubic", 50), rx]), 1);
    assert_eq!(visible_cookies(&mut app, 10), vec![9, 1]);
}

#[test]
fn s_cycles_sort_keys_and_back() {
    let mut app = App::new();
    app.apply_snapshot(
        snap(
            1,
            vec![
                sock(1, "zsh", "cubic", 5),
                sock(2, "curl", "cubic", 300),
                sock(3, "apt", "bbr", 40),
            ],
        ),
        1,
    );
    let mut seen = vec![app.sort()];
    for _ in 0..SortKey::ALL.len() {
        app.handle_key(Key::Char('s'));
        seen.push(app.sort());
    }
    assert_eq!(&seen[..6], &SortKey::ALL);
    assert_eq!(seen[6], SortKey::QueueDelay);
    app.set_sort(SortKey::Process);
    assert_eq!(visible_cookies(&mut app, 10), vec![3, 2, 1]);
    app.set_sort(SortKey::Throughput);
    assert_eq!(visible_cookies(&mut app, 10), vec![3, 2, 1]);
}

#[test]
fn partial_sort_matches_a_full_sort_on_every_page() {
    // Pseudo-random delays with many ties: paging through the table must
    // show exactly the fully sorted order.
    let sockets: Vec<Socket> = (0..500u64)
        .map(|i| sock(i, "x", "cubic", ((i * 7919) % 37) as u32))
        .collect();
    let mut expected = sockets.clone();
    expected.sort_by(|a, b| SortKey::QueueDelay.compare(a, b));
    let mut app = App::new();
    app.apply_snapshot(snap(1, sockets), 1);
    let mut shown = Vec::new();
    app.set_page_rows(23);
    while shown.len() < 500 {
        let before = app.selected().unwrap();
        shown.extend(
            app.visible()
                .map(|s| s.cookie)
                .skip(shown.len() - app.offset()),
        );
        app.handle_key(Key::PageDown);
        app.set_page_rows(23);
        if app.selected().unwrap() == before {
            break;
        }
    }
    shown.extend(
        app.visible()
            .map(|s| s.cookie)
            .skip(shown.len() - app.offset()),
    );
    let expected: Vec<u64> = expected.iter().map(|s| s.cookie).collect();
    assert_eq!(shown, expected);
}

#[test]
fn selection_follows_its_socket_when_the_order_changes() {
    let mut app = App::new();
    app.apply_snapshot(
        snap(
            1,
            vec![
                sock(1, "a", "cubic", 300),
                sock(2, "b", "cubic", 200),
                sock(3, "c", "cubic", 100),
            ],
        ),
        1,
    );
    app.set_page_rows(10);
    app.handle_key(Key::Down);
    assert_eq!(app.selected_socket().unwrap().cookie, 2);
    // Socket 2's queue grows past the others: it moves to the top and the
    // selection moves with it.
    app.apply_snapshot(
        snap(
            2,
            vec![
                sock(1, "a", "cubic", 300),
                sock(2, "b", "cubic", 900),
                sock(3, "c", "cubic", 100),
            ],
        ),
        2,
    );
    assert_eq!(app.selected(), Some(0));
    assert_eq!(app.selected_socket().unwrap().cookie, 2);
    // Socket 2 closes: the selection stays on row 0, now socket 1.
    app.apply_snapshot(
        snap(
            3,
            vec![sock(1, "a", "cubic", 300), sock(3, "c", "cubic", 100)],
        ),
        3,
    );
    assert_eq!(app.selected_socket().unwrap().cookie, 1);
}

#[test]
fn the_top_row_stays_on_top_until_the_user_moves() {
    let mut app = App::new();
    app.apply_snapshot(
        snap(
            1,
            vec![sock(1, "a", "cubic", 300), sock(2, "b", "cubic", 200)],
        ),
        1,
    );
    assert_eq!(app.selected_socket().unwrap().cookie, 1);
    // Socket 2 overtakes: the top row now shows it.
    app.apply_snapshot(
        snap(
            2,
            vec![sock(1, "a", "cubic", 100), sock(2, "b", "cubic", 200)],
        ),
        2,
    );
    assert_eq!(app.selected(), Some(0));
    assert_eq!(app.selected_socket().unwrap().cookie, 2);
    // Back to the top after moving: the top row is sticky again.
    app.handle_key(Key::Down);
    app.handle_key(Key::Up);
    app.apply_snapshot(
        snap(
            3,
            vec![sock(1, "a", "cubic", 300), sock(2, "b", "cubic", 200)],
        ),
        3,
    );
    assert_eq!(app.selected_socket().unwrap().cookie, 1);
}

#[test]
fn navigation_clamps_and_scrolls() {
    let mut app = App::new();
    app.apply_snapshot(
        snap(
            1,
            (0..10)
                .map(|i| sock(i, "x", "cubic", 100 - i as u32))
                .collect(),
        ),
        1,
    );
    app.set_page_rows(4);
    app.handle_key(Key::Up);
    assert_eq!(app.selected(), Some(0));
    for _ in 0..5 {
        app.handle_key(Key::Char('j'));
    }
    app.set_page_rows(4);
    assert_eq!(app.selected(), Some(5));
    assert_eq!(app.offset(), 2);
    assert_eq!(visible_cookies(&mut app, 4), vec![2, 3, 4, 5]);
    app.handle_key(Key::End);
    assert_eq!(app.selected(), Some(9));
    assert_eq!(visible_cookies(&mut app, 4), vec![6, 7, 8, 9]);
    app.handle_key(Key::Home);
    assert_eq!(visible_cookies(&mut app, 4), vec![0, 1, 2, 3]);
    app.handle_key(Key::PageDown);
    assert_eq!(app.selected(), Some(4));
    app.handle_key(Key::Char('k'));
    assert_eq!(app.selected(), Some(3));
}

#[test]
fn empty_table_has_no_selection_and_keys_do_not_panic() {
    let mut app = App::new();
    app.apply_snapshot(snap(1, vec![]), 1);
    for key in [
        Key::Up,
        Key::Down,
        Key::End,
        Key::PageDown,
        Key::Enter,
        Key::Esc,
    ] {
        app.handle_key(key);
    }
    app.set_page_rows(0);
    assert_eq!(app.selected(), None);
    assert_eq!(app.view(), View::Table);
    assert_eq!(app.series_request(), (None, 0));
}

#[test]
fn filter_terms() {
    let mut a = sock(1, "curl", "cubic", 0);
    a.remote_port = 443;
    let mut b = sock(2, "iperf3", "bloatd_westwood", 0);
    b.remote_port = 5201;
    b.remote_addr = "fd00::2".parse().unwrap();
    let matching = |text: &str| -> Vec<u64> {
        let f = Filter::parse(text).unwrap();
        [&a, &b]
            .iter()
            .filter(|s| f.matches(s))
            .map(|s| s.cookie)
            .collect()
    };
    assert_eq!(matching(""), vec![1, 2]);
    assert_eq!(matching("cc:cubic"), vec![1]);
    assert_eq!(matching("cc:WESTWOOD"), vec![2]);
    assert_eq!(matching("port:443"), vec![1]);
    assert_eq!(matching("port:40002"), vec![2]); // local port
    assert_eq!(matching("comm:curl"), vec![1]);
    assert_eq!(matching("addr:fd00"), vec![2]);
    assert_eq!(matching("curl"), vec![1]);
    assert_eq!(matching("westwood"), vec![2]);
    assert_eq!(matching("5201"), vec![2]);
    assert_eq!(matching("iperf cc:westwood"), vec![2]);
    assert_eq!(matching("iperf cc:cubic"), Vec::<u64>::new());
    assert!(Filter::parse("port:https")
        .unwrap_err()
        .to_string()
        .contains("port"));
    assert!(Filter::parse("port:70000").is_err());
}

#[test]
fn filter_prompt_applies_live_and_esc_restores() {
    let mut app = App::new();
    app.apply_snapshot(
        snap(
            1,
            vec![sock(1, "curl", "cubic", 0), sock(2, "ssh", "bbr", 0)],
        ),
        1,
    );
    app.handle_key(Key::Char('f'));
    for c in "cc:bbr".chars() {
        app.handle_key(Key::Char(c));
    }
    assert_eq!(app.row_count(), 1);
    // 'q' and 'p' are text while the prompt is open.
    app.handle_key(Key::Char('q'));
    assert!(!app.should_quit());
    app.handle_key(Key::Backspace);
    app.handle_key(Key::Enter);
    assert!(app.prompt().is_none());
    assert_eq!(app.filter().text(), "cc:bbr");
    assert_eq!(visible_cookies(&mut app, 5), vec![2]);

    app.handle_key(Key::Char('f'));
    for _ in 0..6 {
        app.handle_key(Key::Backspace);
    }
    for c in "port:x".chars() {
        app.handle_key(Key::Char(c));
    }
    assert!(app.prompt().unwrap().error.is_some());
    app.handle_key(Key::Enter); // invalid: the prompt stays open
    assert!(app.prompt().is_some());
    app.handle_key(Key::Esc);
    assert_eq!(app.filter().text(), "cc:bbr");
    assert_eq!(app.row_count(), 1);
}

#[test]
fn pause_help_detail_and_quit_keys() {
    let mut app = App::new();
    app.apply_snapshot(snap(1, vec![sock(1, "curl", "cubic", 0)]), 1);
    app.handle_key(Key::Char('p'));
    assert!(app.paused());
    app.handle_key(Key::Char('p'));
    assert!(!app.paused());
    app.handle_key(Key::Char('?'));
    assert!(app.help());
    app.handle_key(Key::Char('j')); // ignored under help
    app.handle_key(Key::Esc);
    assert!(!app.help());
    app.handle_key(Key::Enter);
    assert_eq!(app.view(), View::Detail);
    assert_eq!(app.detail().unwrap().socket.cookie, 1);
    app.handle_key(Key::Esc);
    assert_eq!(app.view(), View::Table);
    app.handle_key(Key::Enter);
    app.handle_key(Key::Enter);
    assert_eq!(app.view(), View::Table);
    app.handle_key(Key::Char('q'));
    assert!(app.should_quit());
    let mut app = App::new();
    app.handle_key(Key::Char('f'));
    app.handle_key(Key::Interrupt);
    assert!(app.should_quit());
}

#[test]
fn detail_pins_a_socket_that_closes() {
    let mut app = App::new();
    app.apply_snapshot(
        snap(
            1,
            vec![sock(1, "a", "cubic", 300), sock(2, "b", "cubic", 100)],
        ),
        1,
    );
    app.handle_key(Key::Enter);
    app.apply_snapshot(snap(2, vec![sock(2, "b", "cubic", 100)]), 2);
    let detail = app.detail().unwrap();
    assert_eq!(detail.socket.cookie, 1);
    assert!(detail.closed);
    assert_eq!(app.series_request().0, Some(1));
    // Moving in the detail view switches to the selected row.
    app.handle_key(Key::Down);
    assert_eq!(app.detail().unwrap().socket.cookie, 2);
    assert!(!app.detail().unwrap().closed);
}

#[test]
fn history_is_fed_incrementally_and_keeps_one_minute() {
    let mut app = App::new();
    let mut s = snap(1_000, vec![sock(7, "curl", "cubic", 0)]);
    assert_eq!(app.series_request(), (None, 0));
    app.apply_snapshot(s.clone(), 1_000);
    assert_eq!(app.series_request(), (Some(7), 0));

    // The daemon answers with samples; the next request asks for newer ones.
    s.series = vec![Series {
        cookie: 7,
        samples: (0..4).map(|i| sample(1_000 + i * 250)).collect(),
    }];
    app.apply_snapshot(s.clone(), 2_000);
    assert_eq!(app.series_request(), (Some(7), 1_750));
    // Repeats are ignored, newer samples appended.
    s.series[0].samples = (3..8).map(|i| sample(1_000 + i * 250)).collect();
    app.apply_snapshot(s.clone(), 3_000);
    let h = app.history(7).unwrap();
    let times: Vec<u64> = h.samples().iter().map(|x| x.t_ms).collect();
    assert_eq!(
        times,
        vec![1_000, 1_250, 1_500, 1_750, 2_000, 2_250, 2_500, 2_750]
    );

    // Two minutes of samples at 250 ms: one minute is kept.
    s.series[0].samples = (8..488).map(|i| sample(1_000 + i * 250)).collect();
    app.apply_snapshot(s.clone(), 4_000);
    let h = app.history(7).unwrap();
    let newest = h.last_t_ms().unwrap();
    assert_eq!(newest, 1_000 + 487 * 250);
    assert_eq!(
        h.samples().front().unwrap().t_ms,
        newest - HISTORY_WINDOW_MS
    );
    assert_eq!(h.samples().len(), 241);

    // The socket closes: its history goes with it.
    app.apply_snapshot(snap(5_000, vec![]), 5_000);
    assert!(app.history(7).is_none());
}

#[test]
fn histories_are_bounded() {
    let sockets: Vec<Socket> = (0..40).map(|i| sock(i, "x", "cubic", i as u32)).collect();
    let mut app = App::new();
    for i in 0..40u64 {
        let mut s = snap(i, sockets.clone());
        s.series = vec![Series {
            cookie: i,
            samples: vec![sample(i)],
        }];
        app.apply_snapshot(s, i);
    }
    assert_eq!(app.histories.len(), MAX_HISTORIES);
    assert!(app.history(39).is_some());
    assert!(app.history(0).is_none());
}

#[test]
fn bloat_start_raises_one_notice_that_expires() {
    let mut app = App::new();
    let mut rx = sock(5, "curl", "cubic", 0);
    rx.role = Role::Receiver;
    rx.remote_port = 443;
    rx.floor_us = 47_000;
    rx.rcv_rtt_us = 20_000 + 47_000;
    rx.rcv_queue_delay_us = 20_000;
    app.apply_snapshot(snap(0, vec![rx.clone()]), 0);
    assert!(app.notices().is_empty());
    assert_eq!(app.summary().bloated, 0);

    rx.rcv_rtt_us = 420_000 + 47_000;
    rx.rcv_queue_delay_us = 420_000;
    app.apply_snapshot(snap(1_000, vec![rx.clone()]), 1_000);
    assert_eq!(app.summary().bloated, 1);
    assert_eq!(app.notices().len(), 1);
    match &app.notices()[0].event {
        Event::BloatStarted(s) => assert_eq!((s.cookie, s.rcv_queue_delay_us), (5, 420_000)),
        e => panic!("{e:?}"),
    }
    assert_eq!(app.notices()[0].at_ms, 1_000);
    // Still bloated: no new notice.
    app.apply_snapshot(snap(2_000, vec![rx.clone()]), 2_000);
    assert_eq!(app.notices().len(), 1);
    app.tick(1_000 + NOTICE_TTL_MS - 1);
    assert_eq!(app.notices().len(), 1);
    app.tick(1_000 + NOTICE_TTL_MS);
    assert!(app.notices().is_empty());

    // Leaves and re-enters bloat within the cooldown: quiet.
    let calm = Socket {
        rcv_queue_delay_us: 1_000,
        ..rx.clone()
    };
    app.apply_snapshot(snap(7_000, vec![calm.clone()]), 7_000);
    app.apply_snapshot(snap(8_000, vec![rx.clone()]), 8_000);
    assert!(app.notices().is_empty());
    // After the cooldown it is announced again.
    let later = 1_000 + NOTICE_COOLDOWN_MS + 1;
    app.apply_snapshot(snap(later, vec![calm]), later);
    app.apply_snapshot(snap(later + 250, vec![rx]), later + 250);
    assert_eq!(app.notices().len(), 1);
}

#[test]
fn threshold_is_inclusive_and_zero_disables() {
    let s = sock(1, "a", "cubic", 100);
    assert!(s.is_bloated(100_000));
    assert!(!s.is_bloated(100_001));
    assert!(!s.is_bloated(0));
}

#[test]
fn a_burst_of_bloat_gives_the_worst_and_a_summary() {
    let mut app = App::new();
    let sockets: Vec<Socket> = (0..10)
        .map(|i| sock(i, "x", "cubic", 100 + i as u32))
        .collect();
    app.apply_snapshot(snap(0, sockets), 0);
    let cookies: Vec<Option<u64>> = app.notices().iter().map(Notice::cookie).collect();
    assert_eq!(
        cookies,
        vec![Some(9), Some(8), Some(7), Some(6), None],
        "the worst first"
    );
    assert_eq!(app.notices()[MAX_NOTICES].event, Event::MoreBloatStarted(6));
}

#[test]
fn summary_per_cc_distribution() {
    let mut sockets: Vec<Socket> = (1..=10)
        .map(|i| sock(i, "x", "cubic", i as u32 * 10))
        .collect();
    sockets.extend((11..=13).map(|i| sock(i, "y", "bloatd_westwood", i as u32 - 10)));
    // A socket without an RTT sample (e.g. just opened): not in the
    // distribution.
    let mut fresh = sock(99, "z", "cubic", 0);
    fresh.min_rtt_us = 0;
    fresh.srtt_us = 0;
    sockets.push(fresh);
    // Two receivers, each on its namespace's default: one group, no cc
    // (the remote senders' congestion controls drive them).
    for (cookie, cc, ms) in [(20, "bbr", 300), (21, "cubic", 500)] {
        sockets.push(fixtures::receiving(
            sock(cookie, "dl", cc, 0),
            40_000,
            ms * 1000,
        ));
    }
    let mut app = App::new();
    app.apply_snapshot(snap(0, sockets), 0);
    let s = app.summary();
    assert_eq!(s.sockets, 16);
    assert_eq!(s.bloated, 3);
    assert_eq!(s.worst_queue_delay_us, 500_000);
    assert_eq!(
        s.per_cc,
        vec![
            CcDelay {
                cc: "bloatd_westwood".into(),
                role: Role::Sender,
                sockets: 3,
                p50_us: 2_000,
                p90_us: 3_000,
                max_us: 3_000
            },
            CcDelay {
                cc: "cubic".into(),
                role: Role::Sender,
                sockets: 10,
                p50_us: 50_000,
                p90_us: 90_000,
                max_us: 100_000
            },
            CcDelay {
                cc: "".into(),
                role: Role::Receiver,
                sockets: 2,
                p50_us: 300_000,
                p90_us: 500_000,
                max_us: 500_000
            },
        ]
    );
    assert_eq!(s.per_cc[2].label(), "recv");
}

#[test]
fn source_failure_keeps_the_first_failure_time_and_recovers() {
    let mut app = App::new();
    assert_eq!(app.link(), &Link::Connecting);
    app.source_failed("gone".into(), 10);
    app.source_failed("still gone".into(), 20);
    assert_eq!(
        app.link(),
        &Link::Down {
            message: "still gone".into(),
            since_ms: 10
        }
    );
    app.apply_snapshot(snap(30, vec![]), 30);
    assert_eq!(app.link(), &Link::Up);
}

#[test]
fn v_switches_to_the_paths_and_back() {
    let mut app = App::new();
    app.apply_snapshot(snap(1_000, vec![sock(1, "curl", "cubic", 400)]), 1_000);
    assert!(!app.snapshot_request().paths, "the table asks for no paths");
    app.handle_key(Key::Enter);
    assert_eq!(app.view(), View::Detail);
    app.handle_key(Key::Char('v'));
    assert_eq!(app.view(), View::Paths, "from the detail too");
    assert!(app.detail().is_none());
    assert!(app.snapshot_request().paths);
    app.handle_key(Key::Esc);
    assert_eq!(app.view(), View::Table, "Esc goes back to the table");
    app.handle_key(Key::Char('v'));
    app.handle_key(Key::Char('v'));
    assert_eq!(app.view(), View::Table);
}

#[test]
fn the_source_sorts_and_filters_as_the_dashboard_would_for_every_key() {
    // A host with ties, several processes, ports and congestion controls:
    // every sort key and filter kind, server-side (`select_rows`, what the
    // daemon runs) against the dashboard sorting the whole host itself.
    let all: Vec<Socket> = (1..=200u64)
        .map(|c| {
            let comm = ["curl", "wget", "sshd", "firefox"][(c % 4) as usize];
            let cc = ["cubic", "bbr", "bloatd_westwood"][(c % 3) as usize];
            let mut s = sock(c, comm, cc, ((c * 37) % 500) as u32 * 1000);
            s.srtt_us = ((c * 53) % 700) as u32 * 1000;
            s.throughput_bps = (c * 7919) % 10_000;
            s.cwnd = ((c * 13) % 90) as u32;
            s.retrans = (c % 7) as u32;
            s.remote_port = [443, 80, 22][(c % 3) as usize];
            s
        })
        .collect();
    for sort in SortKey::ALL {
        for filter in [
            "",
            "cc:cubic",
            "comm:curl",
            "port:443",
            "wget",
            "cc:bloatd_westwood port:22",
        ] {
            let Ok(parsed) = Filter::parse(filter) else {
                continue;
            };
            let req = SnapshotRequest {
                sort: Some(sort.label().into()),
                filter: (!filter.is_empty()).then(|| filter.to_string()),
                limit: Some(25),
                ..Default::default()
            };
            let (rows, matched, _) = select_rows(&all, &req, 100_000).unwrap();
            let mut app = App::new();
            app.set_sort(sort);
            app.set_filter(parsed);
            app.apply_snapshot(snap(1_000, all.clone()), 1_000);
            assert_eq!(
                matched,
                app.row_count(),
                "{sort:?} {filter:?}: rows matched"
            );
            let server: Vec<u64> = rows.iter().map(|s| s.cookie).collect();
            assert_eq!(
                server,
                visible_cookies(&mut app, 25),
                "{sort:?} {filter:?}: the same page"
            );
        }
    }
}
