//! `bloatd top` and the text table of `bloatd sockets`.
//!
//! The dashboard (crate bloatd-tui) draws whatever a `Source` gives it:
//! here either the running daemon's API, or, with no daemon and enough
//! privilege, an engine running the probes inside this process (embedded
//! mode), so one command is enough on a laptop.

use crate::client::{Client, ClientError};
use crate::config::Config;
use crate::core::Core;
use bloatd_tui::model::{Snapshot, SnapshotRequest, Socket};
use bloatd_tui::Source;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

pub struct TopOptions {
    pub once: bool,
    pub json: bool,
    pub refresh_ms: u64,
    pub width: Option<u16>,
}

/// Where `bloatd top` gets its snapshots: the daemon's API, or probes
/// running in this process (embedded mode).
enum Backend {
    Api(Client),
    Embedded(Box<Core>),
}

impl Source for Backend {
    /// API errors become the message the dashboard shows while it keeps
    /// retrying, so a restarted daemon is picked up again.
    fn snapshot(&mut self, req: &SnapshotRequest) -> Result<Snapshot, String> {
        match self {
            Backend::Api(client) => {
                let target = format!("/v1/snapshot?{}", req.query());
                client.get(&target).map_err(|e| match e {
                    ClientError::NotRunning(p) => format!(
                        "bloatd daemon not reachable at {}: retrying… (sudo bloatd start)",
                        p.display()
                    ),
                    e => e.to_string(),
                })
            }
            Backend::Embedded(core) => {
                core.tick();
                core.snapshot(req, false)
            }
        }
    }

    /// The D key: DRWA on or off through the daemon.
    fn set_drwa(&mut self, on: bool) -> Result<(), String> {
        match self {
            Backend::Api(client) => {
                let body = serde_json::to_string(&crate::policy::DrwaReq { on }).map_err(|e| e.to_string())?;
                client.request("POST", "/v1/policy/drwa", Some(&body)).map(|_| ()).map_err(|e| match e {
                    ClientError::Status { body, .. } => body,
                    e => e.to_string(),
                })
            }
            Backend::Embedded(core) => core.set_drwa(on),
        }
    }
}

impl Backend {
    fn open(cfg: &Config) -> anyhow::Result<Backend> {
        let client = Client::new(&cfg.socket_path());
        match client.get::<serde_json::Value>("/v1/status") {
            Ok(_) => Ok(Backend::Api(client)),
            Err(ClientError::NotRunning(_)) => {
                if crate::probes::preflight().is_err() {
                    anyhow::bail!(
                        "bloatd is not running, and running the probes here (embedded mode) needs root: \
                         `sudo bloatd start` then `bloatd top`, or `sudo bloatd top`"
                    );
                }
                // Embedded mode watches; it does not register congestion
                // controls, nor act on connections (policy, DRWA).
                let mut cfg = cfg.clone();
                cfg.cc.clear();
                cfg.policy.clear();
                cfg.drwa = crate::policy::DrwaMode::Disabled;
                let mut core = Core::start(&cfg, "embedded", false)?;
                // Probes started just now: give them a few intervals to see
                // the traffic of other namespaces.
                std::thread::sleep(Duration::from_millis(cfg.interval_ms * 3));
                core.tick();
                Ok(Backend::Embedded(Box::new(core)))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Every socket's numbers read from the kernel now: what `--once`
    /// prints, so it agrees with `bloatd sockets` taken beside it.
    fn fresh(&mut self) -> anyhow::Result<Snapshot> {
        match self {
            Backend::Api(client) => Ok(client.get("/v1/snapshot?fresh=1")?),
            Backend::Embedded(core) => {
                core.snapshot(&SnapshotRequest::default(), true).map_err(anyhow::Error::msg)
            }
        }
    }
}

fn terminal_size() -> Option<(u16, u16)> {
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ fills a winsize.
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    (ok && ws.ws_col > 0).then_some((ws.ws_col, ws.ws_row))
}

pub fn run(cfg: &Config, opts: &TopOptions) -> anyhow::Result<ExitCode> {
    let mut backend = Backend::open(cfg)?;
    if !opts.once {
        bloatd_tui::run(
            &mut backend,
            &bloatd_tui::Options { refresh: Duration::from_millis(opts.refresh_ms.max(50)), ..Default::default() },
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

/// Milliseconds with three decimals, as `ss` prints them.
fn ms(us: u32) -> String {
    format!("{:.3}", us as f64 / 1000.0)
}

/// The inner state of a bloatd congestion control, compact.
/// What bloatd's policy did to the socket, for the sockets table: the rule
/// that chose its congestion control, DRWA's clamp ("-" for nothing).
fn policy_text(s: &Socket) -> String {
    let Some(p) = &s.policy else { return "-".into() };
    let mut parts = Vec::new();
    match (p.chose_cc(), p.bulk_waiting) {
        (Some(r), _) if p.bulk_rule.as_deref() == Some(r) && !p.bulk_waiting => parts.push(format!("bulk:{r}")),
        (Some(r), _) => parts.push(format!("rule:{r}")),
        (None, _) => {}
    }
    if p.bulk_waiting {
        parts.push(format!("wait:{}", p.bulk_rule.as_deref().unwrap_or("?")));
    }
    if p.cc_failed {
        parts.push("cc-refused".into());
    }
    if let Some(d) = &p.drwa {
        parts.push(if d.clamp_bytes > 0 {
            format!("drwa:{}", bloatd_tui::format::bytes(d.clamp_bytes as u64))
        } else {
            "drwa".into()
        });
    }
    if parts.is_empty() { "-".into() } else { parts.join(",") }
}

fn cc_state_text(s: &Socket) -> String {
    use bloatd_tui::model::CcState;
    match &s.cc_state {
        Some(CcState::Westwood { bwe_bytes_per_s, min_rtt_us, pipe_segments, .. }) => format!(
            "bwe={:.2}Mbit/s rttmin={} pipe={}",
            *bwe_bytes_per_s as f64 * 8.0 / 1e6,
            ms(*min_rtt_us),
            pipe_segments
        ),
        Some(CcState::Cubic { w_max_segments, k_ms, epoch_age_ms, min_rtt_us, hystart_round, hystart_found, .. }) => {
            format!(
                "wmax={w_max_segments} K={k_ms}ms epoch={} delaymin={} hystart={}{}",
                epoch_age_ms.map(|a| format!("{a}ms")).unwrap_or_else(|| "-".into()),
                ms(*min_rtt_us),
                hystart_round,
                if *hystart_found { "/exit" } else { "" }
            )
        }
        None => String::new(),
    }
}

/// `bloatd sockets`: one line per socket, every number straight from the
/// kernel record (times in ms), and the inner state of bloatd's algorithms.
pub fn sockets_table(socks: &[Socket]) -> String {
    /// Column widths; negative means left-aligned. The last column is free.
    const WIDTHS: [i32; 16] = [-18, 10, -24, -24, -15, -4, 6, 6, 9, 9, 9, 9, 9, 7, -8, -20];
    fn row(out: &mut String, cells: [String; 17]) {
        let mut line = String::new();
        for (cell, &w) in cells.iter().zip(WIDTHS.iter().chain(std::iter::once(&0))) {
            let width = w.unsigned_abs() as usize;
            let _ = if w < 0 {
                write!(line, "{cell:<width$} ")
            } else {
                write!(line, "{cell:>width$} ")
            };
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    let mut out = String::new();
    let header = [
        "PROCESS", "NETNS", "LOCAL", "REMOTE", "CC", "ROLE", "CWND", "INFL", "SRTT", "MINRTT", "QDELAY",
        "RCVRTT", "RCVQDLY", "RETRANS", "CA", "POLICY", "CCSTATE",
    ];
    row(&mut out, header.map(String::from));
    let ep = |a: &std::net::IpAddr, p: u16| match a {
        std::net::IpAddr::V6(v6) => format!("[{v6}]:{p}"),
        v4 => format!("{v4}:{p}"),
    };
    for s in socks {
        let process = match (&s.comm, s.pid) {
            (Some(c), Some(p)) => format!("{c}/{p}"),
            (Some(c), None) => c.clone(),
            _ => "-".into(),
        };
        let role = s.role.short();
        row(
            &mut out,
            [
                process,
                s.netns.to_string(),
                ep(&s.local_addr, s.local_port),
                ep(&s.remote_addr, s.remote_port),
                s.cc.clone(),
                role.into(),
                s.cwnd.to_string(),
                s.inflight.to_string(),
                ms(s.srtt_us),
                ms(s.min_rtt_us),
                ms(s.queue_delay_us),
                ms(s.rcv_rtt_us),
                ms(s.rcv_queue_delay_us),
                s.retrans.to_string(),
                format!("{:?}", s.ca_state).to_lowercase(),
                policy_text(s),
                cc_state_text(s),
            ],
        );
    }
    out
}
