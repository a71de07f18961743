//! `bloatd policy ...`: the rules and DRWA of the running daemon, over its
//! API (`/v1/policy`).

use crate::client::Client;
use crate::error::{Error, Result};
use crate::settings::Config;
use bloatd_model::api::PolicyInfo;
use clap::{Args, Subcommand};
use std::process::ExitCode;

#[derive(Args)]
pub struct PolicyArgs {
    #[command(subcommand)]
    pub cmd: PolicyCmd,
}

#[derive(Subcommand)]
pub enum PolicyCmd {
    /// The rules in order, what each selects and does, the sockets it acts
    /// on now; DRWA's state; what the policy did since start.
    List {
        /// JSON output (the API's /v1/policy).
        #[arg(long)]
        json: bool,
    },
    /// Switch DRWA on or off for every armed receiver, live (the daemon
    /// must have started with drwa "on" or "off", not "disabled"). Off
    /// gives every clamped receiver its window back at its next ACK.
    Drwa {
        #[arg(value_parser = ["on", "off"])]
        state: String,
    },
    /// Switch a rule on, live (for connections that open from now on).
    Enable { name: String },
    /// Switch a rule off, live: connections that open from now on skip it;
    /// a bulk rule's waiting connections stay as they are.
    Disable { name: String },
}

pub fn run(cfg: &Config, args: &PolicyArgs) -> Result<ExitCode> {
    let client = Client::new(&cfg.socket_path());
    // The daemon's refusal (no such rule, DRWA not armed) is the message.
    let refused = |e: Error| match e {
        Error::Status { body, .. } => Error::Refused(body),
        e => e,
    };
    match &args.cmd {
        PolicyCmd::List { json } => {
            let info = client.policy()?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&info)?);
            } else {
                print!("{}", list_text(&info));
            }
        }
        PolicyCmd::Drwa { state } => {
            client.set_drwa(state == "on").map_err(refused)?;
            println!("DRWA {state}");
        }
        PolicyCmd::Enable { name } => {
            client.set_rule_enabled(name, true).map_err(refused)?;
            println!("rule {name} enabled");
        }
        PolicyCmd::Disable { name } => {
            client.set_rule_enabled(name, false).map_err(refused)?;
            println!("rule {name} disabled");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `bloatd policy list` as text.
pub fn list_text(info: &PolicyInfo) -> String {
    let mut out = String::new();
    let d = &info.drwa;
    out += &format!(
        "DRWA: {} (lambda {}, from {} received); clamping {} receivers now\n",
        d.mode,
        d.lambda,
        bloatd_model::format::bytes(d.min_bytes),
        info.counts.drwa_sockets
    );
    if d.mode != "disabled" {
        out += &match &d.saved_pin {
            Some(p) => format!("  crash-safe: what DRWA must give back is pinned at {p}\n"),
            None => "  not crash-safe: nothing pinned (no BPF file system), a crash leaves DRWA's clamps on the sockets\n".into(),
        };
    }
    if info.rules.is_empty() {
        out += "no congestion control rules ([[policy]] in the config, or start --policy)\n";
    } else {
        out += &format!(
            "{:<3} {:<16} {:<8} {:<34} {:<24} {:>7} {:>7}\n",
            "#", "RULE", "STATE", "SELECTS", "DOES", "SOCKETS", "WAITING"
        );
        for (i, r) in info.rules.iter().enumerate() {
            out += &format!(
                "{:<3} {:<16} {:<8} {:<34} {:<24} {:>7} {:>7}\n",
                i + 1,
                r.name,
                if r.enabled { "enabled" } else { "disabled" },
                r.selects,
                r.does,
                r.sockets,
                r.waiting
            );
        }
    }
    if !info.drwa_connections.is_empty() {
        out += &format!(
            "{:<22} {:<22} {:>10} {:>9} {:>9}  {:<34} {:>5}\n",
            "DRWA ON", "PEER", "CLAMP", "RTT", "RTT_MIN", "RTT_MIN FROM", "TAKEN"
        );
        for c in &info.drwa_connections {
            let d = &c.drwa;
            let ms = |us: u32| format!("{:.0} ms", us as f64 / 1000.0);
            out += &format!(
                "{:<22} {:<22} {:>10} {:>9} {:>9}  {:<34} {:>5}\n",
                c.local.to_string(),
                c.remote.to_string(),
                if d.clamp_bytes > 0 {
                    bloatd_model::format::bytes(d.clamp_bytes as u64)
                } else {
                    "none".into()
                },
                ms(d.rtt_us),
                ms(d.min_rtt_us),
                d.min_rtt_from(),
                d.held
            );
        }
    }
    let c = &info.counts;
    out += &format!(
        "since start: {} congestion controls set at handshakes, {} switched mid-flow, {} refused; {} DRWA rounds, {} cuts taken back, {} windows given back, {} given back that a bloatd which did not stop had left; {} unsent backlogs bounded (notsent_lowat), {} refused; withheld on AQM paths: {} bulk switches, {} DRWA rounds\n",
        c.cc_set_total,
        c.bulk_switched_total,
        c.cc_failed_total,
        c.drwa_rounds_total,
        c.drwa_held_total,
        c.drwa_restored_total,
        c.drwa_recovered_total,
        c.notsent_lowat_set_total,
        c.notsent_lowat_failed_total,
        c.bulk_gated_total,
        c.drwa_gated_total
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bloatd_model::api::DrwaConnection;
    use bloatd_model::{Drwa, FloorSource};

    #[test]
    fn the_list_shows_each_drwa_connections_rtt_min_and_where_it_came_from() {
        let conn = |port: u16, source, held_rounds_left, held| DrwaConnection {
            netns: 1,
            local: format!("10.9.2.2:{port}").parse().unwrap(),
            remote: "10.9.1.1:8000".parse().unwrap(),
            drwa: Drwa {
                by: "switch".into(),
                clamp_bytes: 8_400,
                clamp_segments: 6,
                rtt_us: 452_000,
                min_rtt_us: 150_000,
                min_rtt_source: source,
                held_rounds_left,
                rounds: 40,
                held,
                ..Default::default()
            },
        };
        let info = PolicyInfo {
            drwa: bloatd_model::api::DrwaInfo {
                mode: "on".into(),
                lambda: 3.0,
                min_bytes: 65_536,
                saved_pin: None,
            },
            drwa_connections: vec![
                conn(40001, Some(FloorSource::Peer), 0, 0),
                conn(40002, None, 12, 1),
            ],
            ..Default::default()
        };
        let text = list_text(&info);
        let row = |port: &str| text.lines().find(|l| l.contains(port)).unwrap().to_string();
        assert!(text.contains("RTT_MIN FROM"), "{text}");
        let r = row(":40001");
        assert!(
            r.contains("150 ms") && r.contains("path floor") && r.ends_with(" 0"),
            "{r}"
        );
        let r = row(":40002");
        assert!(
            r.contains("held: a cut taken back, 12 rounds left") && r.ends_with(" 1"),
            "{r}"
        );
    }
}
