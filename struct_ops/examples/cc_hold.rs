//! Register bloatd congestion controls and hold them until SIGINT/SIGTERM.
//!
//! usage: cc_hold [ALGO...]   (default: all; ALGO = bloatd_westwood | bloatd_cubic)
//!
//! Prints "registered NAME prog PROG=ID ..." per algorithm, then "ready".
//! With BLOATD_CC_STATES=1, prints every socket's exported state each second.
//! Used by scripts/bench/cc.sh and for experiments; the daemon does this for
//! real.
// A test, a bench or an example stops at what it cannot do: unwraps are its way.
#![allow(clippy::unwrap_used)]

use std::io::Write;

use bloatd_cc::{Algo, Registration};

fn main() {
    let algos: Vec<Algo> = match std::env::args().skip(1).map(|a| a.parse()).collect() {
        Ok(v) if !Vec::<Algo>::is_empty(&v) => v,
        Ok(_) => Algo::ALL.to_vec(),
        Err(e) => {
            eprintln!("cc_hold: {e}");
            std::process::exit(2);
        }
    };
    // Block the signals before any thread exists, then wait for one: the
    // Registration is dropped normally and unregisters.
    // SAFETY: plain sigset manipulation on the main thread.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    let reg = match Registration::register(&algos, &bloatd_cc::Options::default()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cc_hold: {e}");
            std::process::exit(1);
        }
    };
    for a in reg.registered() {
        let progs: Vec<String> = reg
            .prog_ids(a)
            .iter()
            .map(|(n, id)| format!("{n}={id}"))
            .collect();
        println!("registered {a} prog {}", progs.join(" "));
    }
    println!("ready");
    std::io::stdout().flush().ok();
    let mut sig = 0;
    let print_states = std::env::var_os("BLOATD_CC_STATES").is_some();
    loop {
        if print_states {
            let ts = libc::timespec {
                tv_sec: 1,
                tv_nsec: 0,
            };
            // SAFETY: valid set and timeout.
            let r = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &ts) };
            if r > 0 {
                break;
            }
            match reg.states() {
                Ok(s) => {
                    for (cookie, st) in s {
                        println!("{cookie:#x} {st:?}");
                    }
                }
                Err(e) => eprintln!("cc_hold: {e}"),
            }
            std::io::stdout().flush().ok();
        } else {
            // SAFETY: valid set and out pointer.
            unsafe { libc::sigwait(&set, &mut sig) };
            break;
        }
    }
    drop(reg);
}
