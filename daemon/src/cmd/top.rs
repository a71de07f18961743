//! `bloatd top`: the dashboard.
//!
//! The dashboard (crate bloatd-tui) draws whatever a `Source` gives it:
//! here either the running daemon's API, or, with no daemon and enough
//! privilege, an engine running the probes inside this process (embedded
//! mode), so one command is enough on a laptop.

use crate::client::Client;
use crate::engine::Engine;
use crate::error::{Chain, Error, Result};
use crate::settings::Config;
use bloatd_model::{Snapshot, SnapshotRequest};
use bloatd_tui::Source;
use clap::Args;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Args)]
pub struct TopArgs {
    /// Print one text frame of the socket table and exit.
    #[arg(long)]
    pub once: bool,
    /// With --once: print the snapshot as JSON.
    #[arg(long, requires = "once")]
    pub json: bool,
    /// Refresh period of the dashboard in milliseconds (the daemon samples
    /// at its own interval, `start --interval`).
    #[arg(long, value_name = "MS", default_value_t = 250)]
    pub refresh: u64,
    /// Width of the --once frame (default: the terminal's, else 160).
    #[arg(long, value_name = "COLS")]
    pub width: Option<u16>,
}

/// Where `bloatd top` gets its snapshots: the daemon's API, or probes
/// running in this process (embedded mode).
enum Backend {
    Api(Client),
    Embedded(Engine),
}

impl Source for Backend {
    /// API errors become the message the dashboard shows while it keeps
    /// retrying, so a restarted daemon is picked up again.
    fn snapshot(&mut self, req: &SnapshotRequest) -> bloatd_tui::Result<Snapshot> {
        match self {
            Backend::Api(client) => client.snapshot(req, false).map_err(|e| match e {
                Error::NotRunning(p) => bloatd_tui::Error::Source(format!(
                    "bloatd daemon not reachable at {}: retrying… (sudo bloatd start)",
                    p.display()
                )),
                e => shown(&e),
            }),
            Backend::Embedded(engine) => {
                engine.tick();
                engine.snapshot(req, false, me()).map_err(|e| shown(&e))
            }
        }
    }

    /// The history view: the worst path each minute, and the episodes.
    fn history(
        &mut self,
        since_ms: u64,
    ) -> bloatd_tui::Result<(
        Vec<bloatd_model::journal::MinuteRow>,
        Vec<bloatd_model::journal::Episode>,
    )> {
        use bloatd_model::journal::{HistoryQuery, IncidentsQuery};
        match self {
            Backend::Api(client) => {
                let minutes = client.history(&HistoryQuery {
                    since_ms: Some(since_ms),
                    path: None,
                    worst: true.into(),
                });
                let episodes = client.incidents(&IncidentsQuery {
                    since_ms: Some(since_ms),
                    ..Default::default()
                });
                minutes
                    .and_then(|m| episodes.map(|e| (m, e)))
                    .map_err(api_message)
            }
            Backend::Embedded(_) => Err(bloatd_tui::Error::NoRecorder),
        }
    }

    fn incident(&mut self, id: u64) -> bloatd_tui::Result<bloatd_model::journal::EpisodeDetail> {
        match self {
            Backend::Api(client) => client.incident(id).map_err(api_message),
            Backend::Embedded(_) => Err(bloatd_tui::Error::NoRecorder),
        }
    }

    /// The D key: DRWA on or off through the daemon.
    fn set_drwa(&mut self, on: bool) -> bloatd_tui::Result<()> {
        match self {
            Backend::Api(client) => client.set_drwa(on).map(|_| ()).map_err(api_message),
            Backend::Embedded(engine) => {
                engine.control.set_drwa(on, me().uid).map_err(|e| shown(&e))
            }
        }
    }
}

/// An error as the dashboard shows it: its whole chain.
fn shown(e: &Error) -> bloatd_tui::Error {
    bloatd_tui::Error::Source(Chain(e).to_string())
}

/// An API error as the dashboard shows it: the daemon's own words.
fn api_message(e: Error) -> bloatd_tui::Error {
    match e {
        Error::Status { body, .. } => bloatd_tui::Error::Source(body),
        e => shown(&e),
    }
}

impl Backend {
    fn open(cfg: &Config) -> Result<Backend> {
        let client = Client::new(&cfg.socket_path());
        match client.status() {
            Ok(_) => Ok(Backend::Api(client)),
            Err(Error::NotRunning(_)) => {
                if crate::probes::preflight().is_err() {
                    return Err(Error::EmbeddedNeedsRoot);
                }
                // Embedded mode watches; it does not register congestion
                // controls, nor act on connections (policy, DRWA).
                let mut cfg = cfg.clone();
                cfg.cc.clear();
                cfg.policy.clear();
                cfg.drwa = bloatd_model::policy::DrwaMode::Disabled;
                let engine = Engine::start(&cfg, "embedded", false)?;
                // Probes started just now: give them a few intervals to see
                // the traffic of other namespaces.
                std::thread::sleep(cfg.interval() * 3);
                engine.tick();
                Ok(Backend::Embedded(engine))
            }
            Err(e) => Err(e),
        }
    }

    /// Every socket's numbers read from the kernel now: what `--once`
    /// prints, so it agrees with `bloatd sockets` taken beside it.
    fn fresh(&mut self) -> Result<Snapshot> {
        match self {
            Backend::Api(client) => Ok(client.snapshot(&SnapshotRequest::default(), true)?),
            Backend::Embedded(engine) => engine.snapshot(&SnapshotRequest::default(), true, me()),
        }
    }
}

/// The embedded dashboard is its own only viewer.
fn me() -> crate::authority::Viewer {
    let p = crate::authority::Peer::me();
    crate::authority::Viewer {
        uid: p.uid,
        pid: p.pid,
    }
}

pub(crate) fn terminal_size() -> Option<(u16, u16)> {
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ fills a winsize.
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    (ok && ws.ws_col > 0).then_some((ws.ws_col, ws.ws_row))
}

pub fn run(cfg: &Config, opts: &TopArgs) -> Result<ExitCode> {
    super::init_logging("warn", &cfg.run_dir);
    let mut backend = Backend::open(cfg)?;
    if !opts.once {
        bloatd_tui::run(
            &mut backend,
            &bloatd_tui::Options {
                refresh: Duration::from_millis(opts.refresh.max(50)),
                ..Default::default()
            },
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let snap = backend.fresh()?;
    if opts.json {
        println!("{}", serde_json::to_string_pretty(&snap)?);
    } else {
        let (w, _) = terminal_size().unwrap_or((160, 50));
        // A text frame is not bound to the terminal: never narrower than
        // the dashboard's minimum.
        let width = opts.width.unwrap_or(w).max(bloatd_tui::ui::MIN_WIDTH);
        let height = bloatd_tui::once_height(&snap);
        print!("{}", bloatd_tui::render_once(&snap, width, height));
    }
    Ok(ExitCode::SUCCESS)
}
