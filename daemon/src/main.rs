//! bloatd: watch TCP bufferbloat form, per socket, with eBPF.
//!
//! `main` parses the command line (cli.rs) and runs the command (cmd/).

mod authority;
mod bottleneck;
mod caps;
mod cc;
mod cli;
mod client;
mod clock;
mod cmd;
mod config;
mod engine;
mod error;
mod metrics;
mod paths;
mod policy;
mod probes;
mod recorder;
mod rundir;
mod server;
mod service;
mod settings;
mod stream;
mod text;
mod tracker;

use clap::{CommandFactory, Parser};
use cli::{Cli, Cmd};
use error::Chain;
use std::process::ExitCode;

fn main() -> ExitCode {
    // `bloatd generate-docs DIR`, for packaging, stays outside the CLI
    // definition so the pages and completions it writes show only commands.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.len() == 3 && args[1] == "generate-docs" {
        return cmd::docs::generate(Cli::command(), std::path::Path::new(&args[2])).unwrap_or_else(
            |e| {
                eprintln!("bloatd: generate-docs: {}", Chain(&e));
                ExitCode::FAILURE
            },
        );
    }
    let cli = Cli::parse();
    let cfg = match cli.config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("bloatd: {}", Chain(&e));
            return ExitCode::from(2);
        }
    };
    let result = match &cli.cmd {
        Cmd::Start(a) => cmd::start::run(&cfg, a),
        Cmd::Stop => cmd::stop::run(&cfg),
        Cmd::Status(a) => cmd::status::run(&cfg, a),
        Cmd::Sockets(a) => cmd::sockets::run(&cfg, a),
        Cmd::Paths(a) => cmd::paths::run(&cfg, a),
        Cmd::Services(a) => cmd::services::run(&cfg, a),
        Cmd::Top(a) => cmd::top::run(&cfg, a),
        Cmd::Cc(a) => cmd::cc::run(&cfg, a),
        Cmd::Policy(a) => cmd::policy::run(&cfg, a),
        Cmd::Incidents(a) => cmd::incidents::incidents(&cfg, a),
        Cmd::Incident(a) => cmd::incidents::incident(&cfg, a),
        Cmd::History(a) => cmd::incidents::history(&cfg, a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("bloatd: {}", Chain(&e));
            // A kernel below the core's minimum is bad input, not a crash.
            if e.is_bad_input() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
