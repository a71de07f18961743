//! `bloatd services`: the sockets grouped by the service they serve (a
//! systemd unit, a container, a cgroup), with how long its users wait for a
//! round trip and where: in the network's queue or in its own send buffers.

use crate::client::Client;
use crate::error::Result;
use crate::settings::Config;
use bloatd_model::format;
use bloatd_model::ServiceView;
use clap::Args;
use std::fmt::Write as _;
use std::process::ExitCode;

#[derive(Args)]
pub struct ServicesArgs {
    /// JSON output (an array of services; field names in the README).
    #[arg(long)]
    pub json: bool,
}

pub fn run(cfg: &Config, args: &ServicesArgs) -> Result<ExitCode> {
    let services = Client::new(&cfg.socket_path()).services()?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&services)?);
    } else {
        print!("{}", services_table(&services));
    }
    Ok(ExitCode::SUCCESS)
}

/// Width of the SERVICE column: the longest name, within bounds.
fn service_width(services: &[ServiceView]) -> usize {
    services
        .iter()
        .map(|s| s.service.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(7, 60)
}

/// `bloatd services`: one line per service, longest wait first.
pub fn services_table(services: &[ServiceView]) -> String {
    let w = service_width(services);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<w$} {:>5} {:>6} {:>9} {:>9} {:>9} {:<5} {:>9} {:>9} {:>9} {:>6} {:>12}  {:<12} PROCESSES",
        "SERVICE", "SOCKS", "ACTIVE", "QUEUE", "Q90", "QMAX", "GRADE", "UNSENT", "BACKLOG", "WAIT",
        "RPM", "THROUGHPUT", "CC"
    );
    for s in services {
        let [queue, q90, qmax, grade, backlog, wait, rpm] = s.measured_text();
        let _ = writeln!(
            out,
            "{:<w$} {:>5} {:>6} {:>9} {:>9} {:>9} {:<5} {:>9} {:>9} {:>9} {:>6} {:>12}  {:<12} {}",
            s.service,
            s.sockets,
            s.active,
            queue,
            q90,
            qmax,
            grade,
            format::bytes(s.unsent_bytes),
            backlog,
            wait,
            rpm,
            format::rate(s.throughput_bps),
            s.ccs.join(","),
            s.processes.join(",")
        );
    }
    if let Some(line) = bloatd_model::worst_service_sentence(services) {
        let _ = writeln!(out, "\n{line}");
    }
    out
}
