//! `bloatd policy ...`: the rules and DRWA of the running daemon, over its
//! API (`/v1/policy`).

use crate::client::{Client, ClientError};
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

pub fn run(cfg: &Config, args: &PolicyArgs) -> anyhow::Result<ExitCode> {
    let client = Client::new(&cfg.socket_path());
    // The daemon's refusal (no such rule, DRWA not armed) is the message.
    let refused = |e: ClientError| match e {
        ClientError::Status { body, .. } => anyhow::anyhow!("{body}"),
        e => e.into(),
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
    let c = &info.counts;
    out += &format!(
        "since start: {} congestion controls set at handshakes, {} switched mid-flow, {} refused; {} DRWA rounds, {} cuts taken back, {} windows given back, {} given back that a bloatd which did not stop had left; {} unsent backlogs bounded (notsent_lowat), {} refused\n",
        c.cc_set_total,
        c.bulk_switched_total,
        c.cc_failed_total,
        c.drwa_rounds_total,
        c.drwa_held_total,
        c.drwa_restored_total,
        c.drwa_recovered_total,
        c.notsent_lowat_set_total,
        c.notsent_lowat_failed_total
    );
    out
}
