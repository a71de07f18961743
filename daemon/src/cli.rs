//! The command line: global options and the commands (their flags live
//! with their code in cmd/), and the config they run with.

use crate::cmd;
use crate::error::Error;
use crate::settings::Config;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

const ABOUT: &str = "Watch TCP bufferbloat form, per socket, with eBPF.

bloatd attaches tracepoint probes to the kernel's TCP stack and keeps, for
every TCP socket of every network namespace, its congestion window, smoothed
RTT, minimum RTT and queueing delay: the RTT above its path's floor, the
lowest RTT any socket toward the same peer saw over 30 minutes (a new flow
behind a standing queue would otherwise count that queue as its minimum).
For downloads it measures the receiver's RTT from the timestamps the data
echoes. It serves Prometheus metrics, a JSON API on a Unix socket, and
`bloatd top`, a live dashboard; it registers Westwood+ and CUBIC as
in-kernel BPF congestion controls (bloatd_westwood, bloatd_cubic) and can
act on bloat: congestion control rules per connection and DRWA, the
receiver's window clamp (`bloatd policy`).";

#[derive(Parser)]
#[command(name = "bloatd", version, about = "Watch TCP bufferbloat form, per socket, with eBPF", long_about = ABOUT)]
pub struct Cli {
    /// Config file (TOML). Default: /etc/bloatd/bloatd.toml if it exists.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Directory of the pid file, API socket and log [default: /run/bloatd]
    #[arg(long, global = true, value_name = "DIR", env = "BLOATD_RUN_DIR")]
    pub run_dir: Option<PathBuf>,
    /// Directory of the flight recorder's journal [default: /var/lib/bloatd]
    #[arg(long, global = true, value_name = "DIR", env = "BLOATD_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Load the probes, register the congestion controls and serve metrics
    /// and the API. Returns once everything is up (runs in the background).
    Start(cmd::start::StartArgs),
    /// Stop the daemon: detach every probe, unregister bloatd's congestion
    /// controls, restore the default congestion control.
    Stop,
    /// Is the daemon running, and how healthy? Exit 0 running, 3 not running.
    Status(cmd::status::StatusArgs),
    /// Established TCP sockets of every network namespace with their live
    /// numbers, read from the kernel now.
    Sockets(cmd::sockets::SocketsArgs),
    /// Paths: the sockets of each network namespace grouped by peer and
    /// interface, with the path's floor (lowest RTT), the queue its sockets
    /// wait in now, the bufferbloat grade and the loaded responsiveness.
    Paths(cmd::paths::PathsArgs),
    /// Services: the sockets grouped by the service they serve (systemd
    /// unit, container or cgroup), with the queue its users wait in, split
    /// between the network's queue and its own unsent backlog, the grade and
    /// the passive responsiveness (RPM).
    Services(cmd::services::ServicesArgs),
    /// Live dashboard. Uses the running daemon; without one, and as root,
    /// runs the probes itself (embedded mode).
    Top(cmd::top::TopArgs),
    /// bloatd's congestion controls and the host's default.
    Cc(cmd::cc::CcArgs),
    /// Acting on bloat: the congestion control rules, and the receiver's
    /// Dynamic Receive Window Adjustment (DRWA), through the running daemon.
    Policy(cmd::policy::PolicyArgs),
    /// The flight recorder's bloat episodes: when a path or a service held
    /// a queue at or above the bloat threshold, for how long, how much, and
    /// which flows, newest first. From the running daemon, else from the
    /// journal (state_dir) directly.
    Incidents(cmd::incidents::IncidentsArgs),
    /// One bloat episode: its summary, its flows (process, service,
    /// congestion control, bytes, retransmissions, backlog), what the
    /// policy did, and charts of its one-second series; --export writes
    /// it as a bundle the lab replays (scripts/lab/lab.py --replay DIR).
    Incident(cmd::incidents::IncidentArgs),
    /// The flight recorder's history: one row a minute per active path
    /// (queue median, 90th percentile and max, rate, sockets), quiet hours
    /// too.
    History(cmd::incidents::HistoryArgs),
}

impl Cli {
    /// The config file, the global options and the command's flags over it,
    /// checked.
    pub fn config(&self) -> crate::error::Result<Config> {
        let mut cfg = Config::load(self.config.as_deref())?;
        if let Some(d) = &self.run_dir {
            cfg.run_dir = d.clone();
        }
        if let Some(d) = &self.state_dir {
            cfg.state_dir = d.clone();
        }
        if let Cmd::Start(a) = &self.cmd {
            a.apply(&mut cfg)?;
        }
        cfg.validate()?;
        if let Cmd::Start(_) = &self.cmd {
            crate::rundir::check_run_dir(&cfg.run_dir).map_err(Error::config)?;
            // Algorithms and cgroups the rules name must exist: checked
            // before anything is attached, as bad input.
            crate::policy::resolve(&cfg.policy, &cfg.cc).map_err(Error::config)?;
        }
        Ok(cfg)
    }
}
