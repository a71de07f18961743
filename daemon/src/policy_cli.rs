//! `bloatd policy ...`: the rules and DRWA of the running daemon, over its
//! API (`/v1/policy`).

use crate::client::{Client, ClientError};
use crate::config::Config;
use crate::policy::{DrwaReq, PolicyInfo, RuleReq};
use clap::Subcommand;
use std::process::ExitCode;

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

pub fn run(cfg: &Config, cmd: PolicyCmd) -> anyhow::Result<ExitCode> {
    let client = Client::new(&cfg.socket_path());
    let post = |target: &str, body: String| -> anyhow::Result<()> {
        match client.request("POST", target, Some(&body)) {
            Ok(_) => Ok(()),
            Err(ClientError::Status { body, .. }) => anyhow::bail!("{body}"),
            Err(e) => Err(e.into()),
        }
    };
    match cmd {
        PolicyCmd::List { json } => {
            let info: PolicyInfo = client.get("/v1/policy")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&info)?);
            } else {
                print!("{}", list_text(&info));
            }
        }
        PolicyCmd::Drwa { state } => {
            post("/v1/policy/drwa", serde_json::to_string(&DrwaReq { on: state == "on" })?)?;
            println!("DRWA {state}");
        }
        PolicyCmd::Enable { name } | PolicyCmd::Disable { name } if name.is_empty() => {
            anyhow::bail!("a rule name is needed (see `bloatd policy list`)")
        }
        PolicyCmd::Enable { name } => {
            post(&format!("/v1/policy/rules/{name}"), serde_json::to_string(&RuleReq { enabled: true })?)?;
            println!("rule {name} enabled");
        }
        PolicyCmd::Disable { name } => {
            post(&format!("/v1/policy/rules/{name}"), serde_json::to_string(&RuleReq { enabled: false })?)?;
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
        crate::policy::fmt_bytes(d.min_bytes),
        info.counts.drwa_sockets
    );
    if info.rules.is_empty() {
        out += "no congestion control rules ([[policy]] in the config, or start --policy)\n";
    } else {
        out += &format!("{:<3} {:<16} {:<8} {:<34} {:<24} {:>7} {:>7}\n", "#", "RULE", "STATE", "SELECTS", "DOES", "SOCKETS", "WAITING");
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
        "since start: {} congestion controls set at handshakes, {} switched mid-flow, {} refused; {} DRWA rounds, {} windows given back\n",
        c.cc_set_total, c.bulk_switched_total, c.cc_failed_total, c.drwa_rounds_total, c.drwa_restored_total
    );
    out
}
