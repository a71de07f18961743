//! bloatd: watch TCP bufferbloat form, per socket, with eBPF.

mod api;
mod caps;
mod cc;
mod client;
mod config;
mod core;
mod daemon;
mod metrics;
mod model;
mod paths;
mod policy;
mod policy_cli;
mod probes;
mod text;
mod top;

use std::io::IsTerminal;
use clap::{Args, Parser, Subcommand};
use client::Client;
use config::Config;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

const ABOUT: &str = "Watch TCP bufferbloat form, per socket, with eBPF.

bloatd attaches tracepoint probes to the kernel's TCP stack and keeps, for
every TCP socket of every network namespace, its congestion window, smoothed
RTT, minimum RTT and queueing delay (srtt - min RTT), and for downloads the
receiver's RTT estimate. It serves Prometheus metrics, a JSON API on a Unix
socket, and `bloatd top`, a live dashboard. It also registers Westwood+ and
CUBIC as in-kernel BPF congestion controls (bloatd_westwood, bloatd_cubic).";

#[derive(Parser)]
#[command(name = "bloatd", version, about = "Watch TCP bufferbloat form, per socket, with eBPF", long_about = ABOUT)]
struct Cli {
    /// Config file (TOML). Default: /etc/bloatd/bloatd.toml if it exists.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Directory of the pid file, API socket and log [default: /run/bloatd]
    #[arg(long, global = true, value_name = "DIR", env = "BLOATD_RUN_DIR")]
    run_dir: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Load the probes, register the congestion controls and serve metrics
    /// and the API. Returns once everything is up (runs in the background).
    Start(StartArgs),
    /// Stop the daemon: detach every probe, unregister bloatd's congestion
    /// controls, restore the default congestion control.
    Stop,
    /// Is the daemon running, and how healthy? Exit 0 running, 3 not running.
    Status {
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Established TCP sockets of every network namespace with their live
    /// numbers, read from the kernel now.
    Sockets {
        /// JSON output (an array of sockets; field names in the README).
        #[arg(long)]
        json: bool,
        /// Include sockets in other states than ESTABLISHED.
        #[arg(long)]
        all: bool,
    },
    /// Paths: the sockets of each network namespace grouped by peer and
    /// interface, with the path's floor (lowest RTT), the queue its sockets
    /// wait in now, the bufferbloat grade and the loaded responsiveness.
    Paths {
        /// JSON output (an array of paths; field names in the README).
        #[arg(long)]
        json: bool,
        /// Group by prefix (floor_prefix_v4 / floor_prefix_v6) instead of by peer.
        #[arg(long, conflicts_with = "floors")]
        prefix: bool,
        /// List the floors the kernel keeps instead (peers and prefixes,
        /// alive or closed, with where each came from).
        #[arg(long)]
        floors: bool,
    },
    /// Live dashboard. Uses the running daemon; without one, and as root,
    /// runs the probes itself (embedded mode).
    Top(TopArgs),
    /// bloatd's congestion controls and the host's default.
    Cc {
        #[command(subcommand)]
        cmd: CcCmd,
    },
    /// Acting on bloat: the congestion control rules, and the receiver's
    /// Dynamic Receive Window Adjustment (DRWA), through the running daemon.
    Policy {
        #[command(subcommand)]
        cmd: policy_cli::PolicyCmd,
    },
}

#[derive(Args)]
struct StartArgs {
    /// Stay in the foreground (for systemd and other service managers).
    #[arg(long)]
    foreground: bool,
    /// Prometheus listener address [default: 127.0.0.1:9477]
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Sampling interval in milliseconds [default: 100]
    #[arg(long, value_name = "MS")]
    interval: Option<u64>,
    /// Sockets the kernel tracks at most (the socket map's bound; beyond
    /// it new sockets are counted as dropped) [default: 65536]. The old
    /// spelling --map-entries works for one more release.
    #[arg(long, value_name = "N", alias = "map-entries")]
    map_capacity: Option<u32>,
    /// Queueing delay (ms) from which a socket counts as bloated [default: 100]
    #[arg(long, value_name = "MS")]
    bloat_threshold: Option<u64>,
    /// Congestion controls to register, comma separated
    /// [default: bloatd_westwood,bloatd_cubic]
    #[arg(long, value_name = "LIST", value_delimiter = ',', conflicts_with = "no_cc")]
    cc: Option<Vec<String>>,
    /// Register no congestion control.
    #[arg(long)]
    no_cc: bool,
    /// bloatd_westwood's ssthresh on three duplicate ACKs: kernel (Reno's
    /// half, BWE x RTTmin when the recovery completes, as Linux's
    /// tcp_westwood) or paper (BWE x RTTmin at once) [default: kernel]
    #[arg(long, value_name = "WHICH", value_parser = ["kernel", "paper"])]
    westwood_ssthresh: Option<String>,
    /// Keep no path floors: measure queueing delay against each socket's
    /// own minimum RTT (config `floors = false`; README, "Path floors").
    #[arg(long)]
    no_floors: bool,
    /// Enable the kernel's BPF run-time statistics while running, to see
    /// each probe's cost in /metrics (costs a little per event).
    #[arg(long)]
    bpf_stats: bool,
    /// A congestion control rule, as KEY=VALUE,... with the keys of a
    /// [[policy]] table (name, dport, sport, cgroup, bulk_bytes, cc, drwa,
    /// enabled), e.g. `sport=5201,cc=bloatd_westwood` or
    /// `name=bulk,bulk_bytes=1M,cc=bloatd_westwood`. Repeatable; after the
    /// config's rules.
    #[arg(long = "policy", value_name = "RULE")]
    policy: Vec<String>,
    /// The receiver's Dynamic Receive Window Adjustment: on (default when
    /// the flag is given), off (armed, to switch on live with `bloatd
    /// policy drwa on` or `bloatd top`'s D key) or disabled.
    #[arg(long, value_name = "MODE", num_args = 0..=1, default_missing_value = "on",
          value_parser = ["on", "off", "disabled"])]
    drwa: Option<String>,
}

#[derive(Args)]
struct TopArgs {
    /// Print one text frame of the socket table and exit.
    #[arg(long)]
    once: bool,
    /// With --once: print the snapshot as JSON.
    #[arg(long, requires = "once")]
    json: bool,
    /// Refresh period of the dashboard in milliseconds (the daemon samples
    /// at its own --interval). The old spelling --interval works for one
    /// more release.
    #[arg(long, value_name = "MS", default_value_t = 250, alias = "interval")]
    refresh: u64,
    /// Width of the --once frame (default: the terminal's, else 160).
    #[arg(long, value_name = "COLS")]
    width: Option<u16>,
}

#[derive(Subcommand)]
enum CcCmd {
    /// bloatd's algorithms and the kernel's available ones.
    List,
    /// Set the host's default congestion control (net.ipv4.tcp_congestion_control).
    /// Through a running daemon, `bloatd stop` restores the previous default.
    Default {
        /// Algorithm name, e.g. bloatd_westwood, cubic, bbr.
        name: String,
    },
}

fn load_config(cli: &Cli) -> Result<Config, config::ConfigError> {
    let mut cfg = Config::load(cli.config.as_deref())?;
    if let Some(d) = &cli.run_dir {
        cfg.run_dir = d.clone();
    }
    if let Cmd::Start(a) = &cli.cmd {
        if let Some(l) = a.listen {
            cfg.listen = l;
        }
        if let Some(i) = a.interval {
            cfg.interval_ms = i;
        }
        if let Some(n) = a.map_capacity {
            cfg.map_capacity = n;
        }
        if let Some(t) = a.bloat_threshold {
            cfg.bloat_threshold_ms = t;
        }
        if let Some(cc) = &a.cc {
            cfg.cc = cc.iter().filter(|s| !s.is_empty()).cloned().collect();
        }
        if a.no_cc {
            cfg.cc.clear();
        }
        if let Some(w) = &a.westwood_ssthresh {
            cfg.westwood_ssthresh = w.clone();
        }
        if a.no_floors {
            cfg.floors = false;
        }
        if a.bpf_stats {
            cfg.bpf_stats = true;
        }
        for spec in &a.policy {
            cfg.policy.push(policy::parse_flag(spec).map_err(config::ConfigError::Invalid)?);
        }
        if let Some(m) = a.drwa.as_deref().and_then(policy::DrwaMode::from_name) {
            cfg.drwa = m;
        }
    }
    cfg.validate()?;
    if let Cmd::Start(_) = &cli.cmd {
        daemon::check_run_dir(&cfg.run_dir).map_err(config::ConfigError::Invalid)?;
        // Algorithms and cgroups the rules name must exist: checked before
        // anything is attached, as bad input.
        policy::resolve(&cfg.policy, &cfg.cc).map_err(config::ConfigError::Invalid)?;
    }
    Ok(cfg)
}

fn init_logging(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("BLOATD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter));
    // SAFETY: isatty has no preconditions.
    let tty = unsafe { libc::isatty(libc::STDERR_FILENO) } == 1;
    tracing_subscriber::fmt().with_env_filter(filter).with_ansi(tty).with_writer(std::io::stderr).init();
}

fn main() -> ExitCode {
    // `bloatd generate-docs DIR`, for packaging, stays outside the CLI
    // definition so the pages and completions it writes show only commands.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.len() == 3 && args[1] == "generate-docs" {
        return generate_docs(std::path::Path::new(&args[2])).unwrap_or_else(|e| {
            eprintln!("bloatd: generate-docs: {e:#}");
            ExitCode::FAILURE
        });
    }
    let cli = Cli::parse();
    let cfg = match load_config(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("bloatd: {e}");
            return ExitCode::from(2);
        }
    };
    match run(cli, cfg) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("bloatd: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli, cfg: Config) -> anyhow::Result<ExitCode> {
    match cli.cmd {
        Cmd::Start(a) if a.foreground => {
            init_logging(&cfg.log);
            daemon::run_foreground(&cfg)
        }
        Cmd::Start(_) => {
            let args: Vec<String> = std::env::args().skip(1).collect();
            daemon::start_background(&cfg, &args)
        }
        Cmd::Stop => daemon::stop(&cfg),
        Cmd::Status { json } => daemon::status(&cfg, json),
        Cmd::Sockets { json, all } => sockets(&cfg, json, all),
        Cmd::Paths { json, prefix, floors } => paths(&cfg, json, prefix, floors),
        Cmd::Top(a) => {
            init_logging("warn");
            top::run(&cfg, &top::TopOptions { once: a.once, json: a.json, refresh_ms: a.refresh, width: a.width })
        }
        Cmd::Cc { cmd: CcCmd::List } => cc_list(&cfg),
        Cmd::Cc { cmd: CcCmd::Default { name } } => cc_default(&cfg, &name),
        Cmd::Policy { cmd } => policy_cli::run(&cfg, cmd),
    }
}

/// Man pages (bloatd.1 and one per subcommand, bloatd-start.1, ...) and
/// completions for bash, zsh and fish, from the CLI definition above.
fn generate_docs(dir: &std::path::Path) -> anyhow::Result<ExitCode> {
    use clap::CommandFactory;
    let cmd = Cli::command();
    let man = dir.join("man");
    std::fs::create_dir_all(&man)?;
    clap_mangen::generate_to(cmd.clone(), &man)?;
    let completions = dir.join("completions");
    std::fs::create_dir_all(&completions)?;
    for shell in [clap_complete::Shell::Bash, clap_complete::Shell::Zsh, clap_complete::Shell::Fish] {
        clap_complete::generate_to(shell, &mut cmd.clone(), "bloatd", &completions)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn sockets(cfg: &Config, json: bool, all: bool) -> anyhow::Result<ExitCode> {
    let target = if all { "/v1/sockets?all=1" } else { "/v1/sockets" };
    let client = Client::new(&cfg.socket_path());
    if json && !std::io::stdout().is_terminal() {
        // Into a pipe or file, the daemon's JSON as it came: decoding and
        // re-encoding 100,000 sockets would cost more than reading them.
        println!("{}", client.request("GET", target, None)?);
        return Ok(ExitCode::SUCCESS);
    }
    let socks: Vec<bloatd_tui::model::Socket> = client.get(target)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&socks)?);
    } else {
        print!("{}", top::sockets_table(&socks));
    }
    Ok(ExitCode::SUCCESS)
}

fn paths(cfg: &Config, json: bool, prefix: bool, floors: bool) -> anyhow::Result<ExitCode> {
    let client = Client::new(&cfg.socket_path());
    if floors {
        let f: api::Floors = client.get("/v1/floors")?;
        if json {
            println!("{}", serde_json::to_string_pretty(&f)?);
            return Ok(ExitCode::SUCCESS);
        }
        println!(
            "{} floors (capacity {}, window {} s; {} created, {} evicted by the bound)",
            f.floors.len(),
            f.capacity,
            f.window_s,
            f.created,
            f.evicted
        );
        println!("{:<10} {:<44} {:>10} {:<8} {:>8}", "NETNS", "PEER/PREFIX", "FLOOR", "SOURCE", "FED");
        for e in &f.floors {
            println!(
                "{:<10} {:<44} {:>10} {:<8} {:>7}s",
                e.netns,
                format!("{}/{}", e.peer, e.prefix_len),
                bloatd_tui::format::ms(e.floor_us as u64),
                e.floor_source.as_str(),
                e.updated_s_ago
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let target = if prefix { "/v1/paths?prefix=1" } else { "/v1/paths" };
    let paths: Vec<bloatd_tui::model::Path> = client.get(target)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&paths)?);
    } else {
        print!("{}", paths::paths_table(&paths));
    }
    Ok(ExitCode::SUCCESS)
}

fn cc_list(cfg: &Config) -> anyhow::Result<ExitCode> {
    let available = bloatd_cc::kernel_available()?;
    let default = bloatd_cc::kernel_default()?;
    let registered: Vec<String> = match Client::new(&cfg.socket_path()).get::<api::CcInfo>("/v1/cc") {
        Ok(info) => info.registered,
        Err(client::ClientError::NotRunning(_)) => Vec::new(),
        Err(e) => return Err(e.into()),
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

fn cc_default(cfg: &Config, name: &str) -> anyhow::Result<ExitCode> {
    let client = Client::new(&cfg.socket_path());
    let body = serde_json::to_string(&api::DefaultReq { name: name.to_string() })?;
    match client.request("POST", "/v1/cc/default", Some(&body)) {
        Ok(resp) => {
            let r: api::DefaultResp = serde_json::from_str(&resp)?;
            println!("default congestion control: {} (was {}; `bloatd stop` restores the original)", r.default, r.previous);
            Ok(ExitCode::SUCCESS)
        }
        Err(client::ClientError::NotRunning(_)) => {
            if bloatd_cc::Algo::from_name(name).is_some() {
                anyhow::bail!("{name} is registered only while bloatd runs: `sudo bloatd start` first");
            }
            let prev = cc::set_default(name)?;
            println!("default congestion control: {name} (was {prev}; bloatd is not running, so nothing will restore it)");
            Ok(ExitCode::SUCCESS)
        }
        Err(client::ClientError::Status { body, .. }) => anyhow::bail!("{body}"),
        Err(e) => Err(e.into()),
    }
}
