//! `bloatd cc list|default NAME`: bloatd's congestion controls and the
//! host's default.

use crate::cc;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::settings::Config;
use clap::{Args, Subcommand};
use std::process::ExitCode;

#[derive(Args)]
pub struct CcArgs {
    #[command(subcommand)]
    pub cmd: CcCmd,
}

#[derive(Subcommand)]
pub enum CcCmd {
    /// bloatd's algorithms and the kernel's available ones.
    List,
    /// Set the host's default congestion control (net.ipv4.tcp_congestion_control).
    /// Through a running daemon, `bloatd stop` restores the previous default.
    Default {
        /// Algorithm name, e.g. bloatd_westwood, cubic, bbr.
        name: String,
    },
}

pub fn run(cfg: &Config, args: &CcArgs) -> Result<ExitCode> {
    match &args.cmd {
        CcCmd::List => list(cfg),
        CcCmd::Default { name } => default(cfg, name),
    }
}

fn list(cfg: &Config) -> Result<ExitCode> {
    let available = bloatd_cc::kernel_available()?;
    let default = bloatd_cc::kernel_default()?;
    let registered: Vec<String> = match Client::new(&cfg.socket_path()).cc() {
        Ok(info) => info.registered,
        Err(Error::NotRunning(_)) => Vec::new(),
        Err(e) => return Err(e),
    };
    println!("bloatd algorithms:");
    for a in bloatd_cc::Algo::ALL {
        let state = if registered.iter().any(|r| r == a.name()) {
            "registered by this bloatd"
        } else if available.iter().any(|r| r == a.name()) {
            "registered by someone else"
        } else {
            "not registered (bloatd start registers it)"
        };
        println!("  {:<16} {state}", a.name());
    }
    println!("kernel available: {}", available.join(" "));
    println!("default:          {default}");
    Ok(ExitCode::SUCCESS)
}

fn default(cfg: &Config, name: &str) -> Result<ExitCode> {
    let client = Client::new(&cfg.socket_path());
    match client.set_default_cc(name) {
        Ok(r) => {
            println!(
                "default congestion control: {} (was {}; `bloatd stop` restores the original)",
                r.default, r.previous
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(Error::NotRunning(_)) => {
            if bloatd_cc::Algo::from_name(name).is_some() {
                return Err(Error::CcNeedsDaemon(name.to_string()));
            }
            let prev = cc::set_default(name)?;
            println!("default congestion control: {name} (was {prev}; bloatd is not running, so nothing will restore it)");
            Ok(ExitCode::SUCCESS)
        }
        Err(Error::Status { body, .. }) => Err(Error::Refused(body)),
        Err(e) => Err(e),
    }
}
