//! Registration, selection and unregistration against the running kernel
//! (root). The kernel's own views are the oracle: tcp_available_congestion_control,
//! getsockopt TCP_CONGESTION, `ss -ti`, TCP_INFO, bpf object ids.
// A test, a bench or an example stops at what it cannot do: unwraps are its way.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bloatd_cc::{
    kernel_default, set_kernel_default, Algo, AlgoState, Error, Options, RegisterBy, Registration,
};
use common::*;

fn listed(name: &str) -> bool {
    available().iter().any(|a| a == name)
}

/// Push `bytes` through a loopback pair and return the client socket's
/// exported state, once it shows up.
fn exchange_and_state(
    reg: &Registration,
    client: &mut std::net::TcpStream,
    server: &mut std::net::TcpStream,
    bytes: usize,
) -> AlgoState {
    let key = cookie(client);
    let payload = vec![0x5au8; bytes];
    let reader = {
        let mut server = server.try_clone().unwrap();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; bytes];
            server.read_exact(&mut buf).unwrap();
        })
    };
    client.write_all(&payload).unwrap();
    reader.join().unwrap();
    let mut found = None;
    assert!(
        wait_for(2.0, || {
            found = reg.states().unwrap().remove(&key);
            found.is_some()
        }),
        "no exported state for cookie {key:#x}"
    );
    found.unwrap()
}

#[test]
fn names_appear_select_and_disappear() {
    let _s = serial();
    let mut reg = register(&Algo::ALL, &Options::default());
    assert_eq!(reg.registered(), Algo::ALL.to_vec());
    for a in Algo::ALL {
        assert!(listed(a.name()), "{a} not in {:?}", available());
    }

    for a in Algo::ALL {
        let (mut client, mut server) = loopback_pair(a.name());
        assert_eq!(get_cc(&client), a.name());
        let port = client.local_addr().unwrap().port();
        let ss = ss_entry(port);
        assert!(
            ss.contains(&format!(" {} ", a.name())),
            "ss -ti does not show {a}:\n{ss}"
        );

        let st = exchange_and_state(&reg, &mut client, &mut server, 4 << 20);
        assert_eq!(st.algo(), a);
        // on loopback mss_cache moves with the GSO size between snapshots;
        // the lab test pins mss on a real path
        assert!((536..=65535).contains(&st.mss()), "{st:?}");
        assert!(st.cwnd() >= 2 && st.age_us() < 5_000_000, "{st:?}");
        match &st {
            AlgoState::Westwood(w) => {
                assert!(w.min_rtt_us > 0 && w.min_rtt_us < 1_000_000, "{w:?}")
            }
            AlgoState::Cubic(c) => assert!(c.min_rtt_us > 0 && c.hystart_round >= 1, "{c:?}"),
        }

        // release deletes the entry once the socket leaves the algorithm
        let key = cookie(&client);
        set_cc(&client, "reno").unwrap();
        assert!(
            wait_for(1.0, || !reg.states().unwrap().contains_key(&key)),
            "entry of {a} kept after release"
        );
    }
    // every snapshot found room in its map
    let failures = reg.export_failures().unwrap();
    assert_eq!(failures, vec![(Algo::Westwood, 0), (Algo::Cubic, 0)]);

    reg.unregister(Algo::Westwood).unwrap();
    assert!(!listed("bloatd_westwood") && listed("bloatd_cubic"));
    assert_eq!(reg.registered(), vec![Algo::Cubic]);
    assert!(matches!(
        reg.unregister(Algo::Westwood),
        Err(Error::NotRegistered { .. })
    ));
    drop(reg);
    assert!(
        !listed("bloatd_cubic"),
        "dropping the registration must unregister: {:?}",
        available()
    );
}

#[test]
fn second_registration_is_refused_clearly() {
    let _s = serial();
    let reg = register(&[Algo::Cubic], &Options::default());
    // bloatd_westwood registers first, then bloatd_cubic fails: the failed
    // attempt must not leave bloatd_westwood behind (unless someone else's)
    let westwood_elsewhere = listed("bloatd_westwood");
    let err = Registration::register(&[Algo::Westwood, Algo::Cubic], &Options::default())
        .err()
        .expect("must fail");
    if !westwood_elsewhere {
        assert!(
            matches!(
                err,
                Error::AlreadyRegistered {
                    name: "bloatd_cubic"
                }
            ),
            "{err}"
        );
        assert!(!listed("bloatd_westwood"));
    }
    assert!(err.to_string().contains("bpftool struct_ops list"), "{err}");
    assert!(listed("bloatd_cubic"));
    drop(reg);
    assert!(!listed("bloatd_cubic"));
}

#[test]
fn flow_survives_unregister() {
    let _s = serial();
    let mut reg = register(&[Algo::Cubic], &Options::default());
    let (client, mut server) = loopback_pair("bloatd_cubic");
    const TOTAL: usize = 48 << 20;
    // ~2 s of traffic: 64 KiB every 2.5 ms
    let sender = {
        let mut client = client.try_clone().unwrap();
        std::thread::spawn(move || {
            let chunk: Vec<u8> = (0..65536u32).map(|i| (i % 251) as u8).collect();
            for _ in 0..TOTAL / chunk.len() {
                client.write_all(&chunk).unwrap();
                std::thread::sleep(Duration::from_micros(2500));
            }
            client.shutdown(std::net::Shutdown::Write).unwrap();
        })
    };
    let receiver = std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 16];
        let (mut n, mut sum) = (0usize, 0u64);
        loop {
            let r = server.read(&mut buf).unwrap();
            if r == 0 {
                return (n, sum);
            }
            for (i, b) in buf[..r].iter().enumerate() {
                sum += u64::from(*b) * (((n + i) % 7) as u64 + 1);
            }
            n += r;
        }
    });
    std::thread::sleep(Duration::from_millis(400));
    let before = tcp_info(client.as_raw_fd()).bytes_acked;
    reg.unregister(Algo::Cubic).unwrap();
    assert!(!listed("bloatd_cubic"));
    assert!(
        before > 0 && before < TOTAL as u64,
        "unregister must happen mid-flow ({before} bytes acked)"
    );
    // the socket keeps the algorithm it had
    assert_eq!(get_cc(&client), "bloatd_cubic");

    sender.join().unwrap();
    let (n, sum) = receiver.join().unwrap();
    let expect: u64 = (0..TOTAL)
        .map(|i| ((i % 65536) as u64 % 251) * ((i % 7) as u64 + 1))
        .sum();
    assert_eq!(n, TOTAL);
    assert_eq!(sum, expect, "payload corrupted");
    // SYN and FIN count in bytes_acked; the FIN's ACK may still be in flight
    assert!(
        wait_for(2.0, || tcp_info(client.as_raw_fd()).bytes_acked
            >= TOTAL as u64),
        "sender never saw all data acknowledged"
    );
}

/// What the kernel does when the default's BPF algorithm is unregistered,
/// and that bloatd moves the namespace to a fallback first.
#[test]
fn netns_default_is_moved_before_unregister() {
    let _s = serial();
    let ns = Netns::new("bc-def");
    let before = struct_ops_ids("bloatd_cubic");
    let mut reg = register(&[Algo::Cubic], &Options::default());
    let ours = new_ids(&before, &struct_ops_ids("bloatd_cubic"));
    assert_eq!(ours.len(), 1);
    // a namespace other than the initial one may only default to an allowed one
    let refused = ns.run(|| set_kernel_default("bloatd_cubic"));
    assert!(
        matches!(refused, Err(Error::Restricted { .. })),
        "{refused:?}"
    );
    let allowed = AllowedGuard::allow("bloatd_cubic");
    ns.run(|| set_kernel_default("bloatd_cubic")).unwrap();
    drop(allowed);
    let cc = ns.run(|| {
        let (c, _s) = loopback_pair_default();
        get_cc(&c)
    });
    assert_eq!(cc, "bloatd_cubic", "new sockets take the namespace default");

    reg.unregister(Algo::Cubic).unwrap();
    let moved: Vec<_> = reg
        .netns_default_changes()
        .iter()
        .filter(|c| c.netns == ns.path())
        .collect();
    assert_eq!(moved.len(), 1, "{:?}", reg.netns_default_changes());
    assert_eq!(
        (moved[0].from.as_str(), moved[0].to.as_str()),
        ("bloatd_cubic", "reno")
    );
    assert_eq!(ns.run(|| kernel_default().unwrap()), "reno");
    assert_eq!(ns.run(|| get_cc(&loopback_pair_default().0)), "reno");
    // nothing holds the struct_ops any more: the kernel frees it
    drop(reg);
    assert!(
        wait_for(5.0, || !struct_ops_ids("bloatd_cubic").contains(&ours[0])),
        "our struct_ops map {ours:?} is still alive"
    );
}

/// Ids in `now` that were not in `before` (struct_ops leaked by earlier
/// runs or other tools are not ours to judge).
fn new_ids(before: &[u32], now: &[u32]) -> Vec<u32> {
    now.iter()
        .copied()
        .filter(|id| !before.contains(id))
        .collect()
}

/// A loopback pair using the namespace default (no TCP_CONGESTION).
fn loopback_pair_default() -> (std::net::TcpStream, std::net::TcpStream) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    (c, s)
}

/// Child process side of `killed_registration_is_adopted`: registers
/// bloatd_cubic and waits to be killed.
#[test]
#[ignore = "helper, run in a child process by killed_registration_is_adopted"]
fn hold_cubic_until_killed() {
    let Some(how) = std::env::var_os("BLOATD_CC_TEST_HOLD") else {
        return;
    };
    let opts = Options {
        register_by: (how == "map").then_some(RegisterBy::MapUpdate),
        ..Options::default()
    };
    let _reg = register(&[Algo::Cubic], &opts);
    println!("HELD");
    std::io::stdout().flush().unwrap();
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// A child process (`hold_cubic_until_killed`) holding bloatd_cubic,
/// registered `how` ("link": what the kernel offers, "map": by map
/// update), once it has registered it. Dropping it kills it (SIGKILL).
fn holder(how: &str) -> KillOnDrop {
    let mut child = KillOnDrop(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "hold_cubic_until_killed",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("BLOATD_CC_TEST_HOLD", how)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
    let deadline = Instant::now() + Duration::from_secs(150);
    while !lines
        .next()
        .map(|l| l.unwrap().contains("HELD"))
        .unwrap_or(false)
    {
        assert!(Instant::now() < deadline, "helper did not register");
    }
    child
}

/// Before Linux 6.4 (no struct_ops links) an algorithm is registered by a
/// map update, which outlives its holder: a bloatd killed with SIGKILL
/// leaves it registered, and the next registration must remove it, but
/// never one a living process holds. Forced here on a kernel with links.
#[test]
fn killed_map_update_registration_is_removed() {
    let _s = serial();
    let opts = Options {
        register_by: Some(RegisterBy::MapUpdate),
        ..Options::default()
    };
    let child = holder("map");
    assert!(listed("bloatd_cubic"));
    match Registration::register(&[Algo::Cubic], &opts) {
        Err(Error::AlreadyRegistered { name }) => assert_eq!(name, "bloatd_cubic"),
        Err(e) => panic!("a held registration: {e}"),
        Ok(_) => panic!("a registration a living process holds was taken over"),
    }
    drop(child); // SIGKILL: no destructor runs in the holder
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        listed("bloatd_cubic"),
        "a map-update registration should outlive its killed holder"
    );
    let reg = register(&[Algo::Cubic], &opts);
    assert_eq!(reg.stale_removed(), &[Algo::Cubic]);
    assert_eq!(reg.registered_by(), RegisterBy::MapUpdate);
    assert!(listed("bloatd_cubic"));
    drop(reg);
    assert!(
        wait_for(2.0, || !listed("bloatd_cubic")),
        "unregistered at drop"
    );
}

/// A bloatd killed with SIGKILL cannot move namespace defaults away: the
/// kernel unregisters the name (the link fd closes) but the namespace keeps
/// using the retired programs. The next registration repairs that.
#[test]
fn killed_registration_is_adopted() {
    let _s = serial();
    let ns = Netns::new("bc-adopt");
    let before = struct_ops_ids("bloatd_cubic");
    let child = holder("link");
    let ghost = new_ids(&before, &struct_ops_ids("bloatd_cubic"));
    assert_eq!(ghost.len(), 1, "{before:?}");
    {
        let _allowed = AllowedGuard::allow("bloatd_cubic");
        ns.run(|| set_kernel_default("bloatd_cubic")).unwrap();
    }
    drop(child); // SIGKILL: no destructor runs in the holder
    assert!(
        wait_for(2.0, || !listed("bloatd_cubic")),
        "killed holder still registered"
    );

    // the kernel's behaviour: a ghost default nobody can see in the list
    assert_eq!(ns.run(|| kernel_default().unwrap()), "bloatd_cubic");
    assert_eq!(
        ns.run(|| get_cc(&loopback_pair_default().0)),
        "bloatd_cubic"
    );
    assert!(
        struct_ops_ids("bloatd_cubic").contains(&ghost[0]),
        "the ghost stays alive"
    );

    let reg = register(&[Algo::Cubic], &Options::default());
    let changes: Vec<_> = reg
        .netns_default_changes()
        .iter()
        .filter(|c| c.netns == ns.path())
        .collect();
    assert_eq!(changes.len(), 1, "{:?}", reg.netns_default_changes());
    // bc-adopt does not allow the new bloatd_cubic (allowed flags belong to
    // an instance), so it gets the fallback; the initial namespace would be
    // pointed at the new instance
    assert_eq!(changes[0].to, "reno");
    assert_eq!(ns.run(|| kernel_default().unwrap()), "reno");
    assert!(
        wait_for(5.0, || !struct_ops_ids("bloatd_cubic").contains(&ghost[0])),
        "ghost {ghost:?} not freed"
    );
    drop(reg);
}
