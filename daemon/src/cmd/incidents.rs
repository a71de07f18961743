//! `bloatd incidents`, `bloatd incident ID [--export DIR]`, `bloatd
//! history`: the flight recorder's journal (recorder/), from the running
//! daemon's API, else read from the journal file directly (state_dir).

use crate::client::Client;
use crate::error::{Error, Result};
use crate::recorder::journal;
use crate::settings::Config;
use bloatd_model::format;
use bloatd_model::journal::{
    parse_span_ms, Episode, EpisodeDetail, HistoryQuery, IncidentsQuery, MinuteRow,
};
use clap::Args;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct IncidentsArgs {
    /// How far back: episodes that went on at some time in the last SPAN
    /// (90s, 30m, 2h, 7d)
    #[arg(long, value_name = "SPAN", default_value = "24h", value_parser = span)]
    pub since: u64,
    /// Only the paths an address is in (10.9.2.2), a prefix (10.9.2.0/24),
    /// or an interface (eth0).
    #[arg(long, value_name = "P")]
    pub path: Option<String>,
    /// Only the episodes of a service, and of the paths it had flows on.
    #[arg(long, value_name = "S")]
    pub service: Option<String>,
    /// JSON output (an array of episodes; field names in docs/reference.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct IncidentArgs {
    /// The episode's id (`bloatd incidents` lists them).
    pub id: u64,
    /// JSON output: the episode, its flows and its series.
    #[arg(long, conflicts_with = "export")]
    pub json: bool,
    /// Write the episode as a lab bundle into DIR: a Mahimahi trace of the
    /// bottleneck's capacity estimated from its delivery rates, the floor
    /// as base RTT, the buffer, the flow mix (scripts/lab/lab.py --replay DIR).
    #[arg(long, value_name = "DIR")]
    pub export: Option<PathBuf>,
    /// Width of the charts (default: the terminal's, else 130).
    #[arg(long, value_name = "COLS")]
    pub width: Option<u16>,
}

#[derive(Args)]
pub struct HistoryArgs {
    /// How far back (90s, 30m, 2h, 7d)
    #[arg(long, value_name = "SPAN", default_value = "24h", value_parser = span)]
    pub since: u64,
    /// Only the paths an address is in, a prefix, or an interface.
    #[arg(long, value_name = "P")]
    pub path: Option<String>,
    /// One row a minute: the worst path's queue, every path's rate and
    /// sockets together.
    #[arg(long)]
    pub worst: bool,
    /// JSON output (an array of rows).
    #[arg(long)]
    pub json: bool,
}

fn span(s: &str) -> bloatd_model::Result<u64> {
    parse_span_ms(s)
}

fn now_ms() -> u64 {
    crate::clock::Clock::now().unix_ms
}

/// Where the answers come from: the daemon, or with none running the
/// journal itself (root, or whoever may write the state directory).
enum Source {
    Api(Client),
    File(rusqlite::Connection),
}

impl Source {
    fn open(cfg: &Config) -> Result<Source> {
        let client = Client::new(&cfg.socket_path());
        match client.status() {
            Ok(_) => Ok(Source::Api(client)),
            Err(Error::NotRunning(_)) => match journal::open_reader(&cfg.state_dir) {
                Ok(Some(c)) => Ok(Source::File(c)),
                Ok(None) => Err(Error::NoJournal(crate::recorder::journal_path(
                    &cfg.state_dir,
                ))),
                Err(e) => Err(Error::JournalUnreadable(Box::new(e))),
            },
            Err(e) => Err(e),
        }
    }

    fn incidents(&self, q: &IncidentsQuery) -> Result<Vec<Episode>> {
        match self {
            Source::Api(c) => Ok(c.incidents(q)?),
            Source::File(c) => Ok(journal::incidents(c, q, q.since_ms.unwrap_or(0))?),
        }
    }

    fn incident(&self, id: u64) -> Result<EpisodeDetail> {
        match self {
            Source::Api(c) => Ok(c.incident(id)?),
            Source::File(c) => journal::detail(c, id)?.ok_or(Error::NoSuchEpisode(id)),
        }
    }

    fn history(&self, q: &HistoryQuery) -> Result<Vec<MinuteRow>> {
        match self {
            Source::Api(c) => Ok(c.history(q)?),
            Source::File(c) => Ok(journal::history(c, q, q.since_ms.unwrap_or(0))?),
        }
    }
}

/// `bloatd incidents`.
pub fn incidents(cfg: &Config, args: &IncidentsArgs) -> Result<ExitCode> {
    let q = IncidentsQuery {
        since_ms: Some(now_ms().saturating_sub(args.since)),
        path: args.path.clone(),
        service: args.service.clone(),
        limit: None,
    };
    let list = Source::open(cfg)?.incidents(&q)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&list)?);
    } else {
        print!(
            "{}",
            incidents_table(&list, now_ms(), bloatd_tui::local_utc_offset_s())
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// One line per episode, newest first.
pub fn incidents_table(list: &[Episode], now_ms: u64, offset_s: i64) -> String {
    let mut out = String::new();
    if list.is_empty() {
        out.push_str("no bloat episode in that span\n");
        return out;
    }
    let _ = writeln!(
        out,
        "{:>5}  {:<19}  {:>8}  {:<40}  {:>7} {:>7} {:>7} {:<5} {:>5} {:>5} {:>11}  PROCESSES",
        "ID",
        "START",
        "DURATION",
        "PATH / SERVICE",
        "PEAK",
        "P50",
        "P90",
        "GRADE",
        "RPM",
        "FLOWS",
        "THROUGHPUT"
    );
    for e in list {
        let dur = e.duration_text(now_ms);
        let mut subject = e.subject_text();
        if let Some(c) = &e.cut {
            subject.push_str(&format!(" [{c}]"));
        }
        let _ = writeln!(
            out,
            "{:>5}  {:<19}  {:>8}  {:<40}  {:>7} {:>7} {:>7} {:<5} {:>5} {:>5} {:>11}  {}",
            e.id,
            format::date_time(e.start_ms, offset_s),
            dur,
            format::fit(&subject, 40, false),
            format::ms(e.queue_peak_us as u64),
            format::ms(e.queue_p50_us as u64),
            format::ms(e.queue_p90_us as u64),
            e.grade(),
            e.rpm(),
            e.flows,
            format::rate(e.throughput_bps),
            e.processes.join(",")
        );
    }
    if list.iter().any(|e| e.open) {
        out.push_str("\n+: still going\n");
    }
    out
}

/// `bloatd incident ID`.
pub fn incident(cfg: &Config, args: &IncidentArgs) -> Result<ExitCode> {
    let d = Source::open(cfg)?.incident(args.id)?;
    if let Some(dir) = &args.export {
        let x = crate::recorder::export::export(&d, dir)?;
        println!(
            "episode {} exported to {}: {} s of trace ({} measured, the rest estimated), base RTT {:.1} ms, buffer {}; replay it: sudo scripts/lab/lab.py --replay {}",
            d.episode.id,
            dir.display(),
            x.seconds,
            x.measured,
            x.base_rtt_ms,
            format::bytes(x.buffer_bytes),
            dir.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&d)?);
        return Ok(ExitCode::SUCCESS);
    }
    let width = args
        .width
        .or_else(|| crate::cmd::top::terminal_size().map(|(w, _)| w))
        .unwrap_or(130)
        .max(bloatd_tui::ui::MIN_WIDTH);
    print!(
        "{}",
        bloatd_tui::ui::episode_text(&d, now_ms(), bloatd_tui::local_utc_offset_s(), width)
    );
    Ok(ExitCode::SUCCESS)
}

/// `bloatd history`.
pub fn history(cfg: &Config, args: &HistoryArgs) -> Result<ExitCode> {
    let q = HistoryQuery {
        since_ms: Some(now_ms().saturating_sub(args.since)),
        path: args.path.clone(),
        worst: args.worst.into(),
    };
    let rows = Source::open(cfg)?.history(&q)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print!("{}", history_table(&rows, bloatd_tui::local_utc_offset_s()));
    }
    Ok(ExitCode::SUCCESS)
}

fn history_table(rows: &[MinuteRow], offset_s: i64) -> String {
    let mut out = String::new();
    if rows.is_empty() {
        out.push_str("no active path in that span\n");
        return out;
    }
    let _ = writeln!(
        out,
        "{:<19}  {:<10} {:<28} {:<10} {:>7} {:>7} {:>7} {:<5} {:>11} {:>5}",
        "MINUTE", "NETNS", "PEER", "IFACE", "Q50", "Q90", "QMAX", "GRADE", "RATE", "SOCKS"
    );
    for m in rows {
        let peer = match m.paths {
            Some(n) if n > 1 => format!("{} (worst of {n})", m.peer_text()),
            _ => m.peer_text(),
        };
        let _ = writeln!(
            out,
            "{:<19}  {:<10} {:<28} {:<10} {:>7} {:>7} {:>7} {:<5} {:>11} {:>5}",
            format::date_time(m.t_ms, offset_s),
            m.netns,
            format::fit(&peer, 28, false),
            if m.interface.is_empty() {
                "-"
            } else {
                &m.interface
            },
            format::ms(m.queue_p50_us as u64),
            format::ms(m.queue_p90_us as u64),
            format::ms(m.queue_max_us as u64),
            bloatd_model::grade(m.queue_p50_us),
            format::rate(m.rate_bps),
            m.sockets
        );
    }
    out
}
