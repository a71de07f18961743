//! `bloatd status`: is the daemon running, and how healthy is it.

use super::EXIT_NOT_RUNNING;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::rundir::{lock_state, LockState};
use crate::settings::Config;
use bloatd_model::api::Status;
use clap::Args;
use std::process::ExitCode;

#[derive(Args)]
pub struct StatusArgs {
    /// JSON output.
    #[arg(long)]
    pub json: bool,
}

/// `bloatd status`: exit 0 when running, 3 when not.
pub fn run(cfg: &Config, args: &StatusArgs) -> Result<ExitCode> {
    let json = args.json;
    let (state, _) = lock_state(&cfg.run_dir)?;
    let pid = match state {
        LockState::Free => {
            let stale = cfg.pid_file().exists() || cfg.socket_path().exists();
            if json {
                println!(
                    "{}",
                    serde_json::json!({"running": false, "stale_files": stale})
                );
            } else if stale {
                println!("bloatd is not running (stale files in {} from an earlier run; the next start replaces them)", cfg.run_dir.display());
            } else {
                println!("bloatd is not running");
            }
            return Ok(ExitCode::from(EXIT_NOT_RUNNING));
        }
        LockState::Held(pid) => pid,
        // Not root: the API socket answers for the daemon, if we may use it.
        LockState::NoAccess => None,
    };
    let s = match Client::new(&cfg.socket_path()).status() {
        Ok(s) => s,
        Err(Error::NotRunning(_)) if pid.is_none() => {
            println!("bloatd is not running");
            return Ok(ExitCode::from(EXIT_NOT_RUNNING));
        }
        Err(Error::NotRunning(_)) => {
            println!(
                "bloatd (pid {}) is starting or stuck: its API socket is not up",
                pid.unwrap_or(0)
            );
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e),
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        print_status(&s);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_status(s: &Status) {
    let up_s = crate::clock::Clock::now()
        .unix_ms
        .saturating_sub(s.started_unix_ms)
        / 1000;
    println!(
        "bloatd {} running (pid {}, up {}s, {} mode)",
        s.version, s.pid, up_s, s.mode
    );
    println!("  probes:      {}", s.probes.join(" "));
    println!(
        "  cc:          {} (host default: {})",
        if s.cc_registered.is_empty() {
            "none registered".into()
        } else {
            s.cc_registered.join(" ")
        },
        s.default_cc.as_deref().unwrap_or("?")
    );
    if let Some(l) = &s.listen {
        println!("  metrics:     http://{l}/metrics");
    }
    if let Some(e) = &s.sockops_error {
        println!(
            "  sock_ops:    not attached ({e}): senders that closed their end are not sampled"
        );
    }
    println!("  kernel:      {}", s.kernel);
    for f in &s.health.features {
        println!("    {:<18} {:<9} {}", f.name, f.state.as_str(), f.detail);
    }
    println!(
        "  sockets:     {} tracked (interval {} ms, {} sampling)",
        s.sockets, s.interval_ms, s.sampling
    );
    let h = &s.health;
    println!(
        "  health:      {} events, {} dropped, socket map {}/{} ({:.1}%)",
        h.events_total,
        h.dropped_total,
        h.map_entries,
        h.map_capacity,
        h.map_entries as f64 * 100.0 / h.map_capacity.max(1) as f64
    );
}
