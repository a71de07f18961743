//! `bloatd sockets`: every tracked socket with its numbers read from the
//! kernel now, as a table or JSON.

use crate::client::Client;
use crate::error::Result;
use crate::settings::Config;
use bloatd_model::Socket;
use clap::Args;
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::io::Write as _;
use std::process::ExitCode;

#[derive(Args)]
pub struct SocketsArgs {
    /// JSON output (an array of sockets; field names in the README).
    #[arg(long)]
    pub json: bool,
    /// Include sockets in other states than ESTABLISHED.
    #[arg(long)]
    pub all: bool,
}

pub fn run(cfg: &Config, args: &SocketsArgs) -> Result<ExitCode> {
    let client = Client::new(&cfg.socket_path());
    if args.json && !std::io::stdout().is_terminal() {
        // Into a pipe or file, the daemon's JSON as it comes: decoding and
        // re-encoding 100,000 sockets would cost more than reading them.
        let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
        client.sockets_json_to(args.all, &mut out)?;
        writeln!(out)?;
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let socks = client.sockets(args.all)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&socks)?);
    } else {
        print!("{}", sockets_table(&socks));
    }
    Ok(ExitCode::SUCCESS)
}

/// Milliseconds with three decimals, as `ss` prints them.
fn ms(us: u32) -> String {
    format!("{:.3}", us as f64 / 1000.0)
}

/// What bloatd's policy did to the socket: the rule that chose its
/// congestion control (`rule:NAME`, `bulk:NAME` for a bulk switch), a bulk
/// rule waiting for its bytes (`wait:NAME`), DRWA's clamp (`drwa:470kB`), or
/// "-".
fn policy_text(s: &Socket) -> String {
    let Some(p) = &s.policy else {
        return "-".into();
    };
    let mut parts = Vec::new();
    if let Some(r) = p.chose_cc() {
        let bulk = p.bulk_rule.as_deref() == Some(r) && !p.bulk_waiting;
        parts.push(format!("{}:{r}", if bulk { "bulk" } else { "rule" }));
    }
    if p.bulk_waiting {
        parts.push(format!("wait:{}", p.bulk_rule.as_deref().unwrap_or("?")));
    }
    if p.cc_failed {
        parts.push("cc-refused".into());
    }
    if let Some(r) = &p.notsent_lowat_rule {
        parts.push(format!("lowat:{r}"));
    }
    if p.notsent_lowat_failed {
        parts.push("lowat-refused".into());
    }
    if let Some(d) = &p.drwa {
        parts.push(if d.clamp_bytes > 0 {
            format!("drwa:{}", bloatd_model::format::bytes(d.clamp_bytes as u64))
        } else {
            "drwa".into()
        });
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(",")
    }
}

/// The inner state of a bloatd congestion control, compact: `key=value`,
/// RTTs in ms with three decimals as `ss` prints them.
fn cc_state_text(s: &Socket) -> String {
    use bloatd_model::CcValue;
    let Some(state) = &s.cc_state else {
        return String::new();
    };
    let value = |v: CcValue| match v {
        CcValue::Rate(bps) => format!("{:.2}Mbit/s", bps as f64 / 1e6),
        CcValue::Rtt(us) => ms(us),
        CcValue::Millis(m) => format!("{m}ms"),
        CcValue::Segments(n) => n.to_string(),
        CcValue::PipeRatio(r) => format!("{r:.1}"),
        CcValue::Round { n, found } => format!("{n}{}", if found { "/exit" } else { "" }),
        CcValue::Absent => "-".into(),
    };
    state
        .parts(None)
        .iter()
        .map(|p| format!("{}={}", p.key, value(p.value)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `bloatd sockets`: one line per socket, every number straight from the
/// kernel record (times in ms), and the inner state of bloatd's algorithms.
fn sockets_table(socks: &[Socket]) -> String {
    /// Column widths; negative means left-aligned. The last column is free.
    const WIDTHS: [i32; 19] = [
        -18, -20, 10, -24, -24, -15, -4, 6, 6, 9, 9, 9, 9, 14, 9, 9, 7, -8, -20,
    ];
    fn row(out: &mut String, cells: [String; 20]) {
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
        "PROCESS", "SERVICE", "NETNS", "LOCAL", "REMOTE", "CC", "ROLE", "CWND", "INFL", "SRTT",
        "MINRTT", "FLOOR", "QDELAY", "UNSENT", "RCVRTT", "RCVQDLY", "RETRANS", "CA", "POLICY",
        "CCSTATE",
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
                s.service.clone(),
                s.netns.to_string(),
                ep(&s.local_addr, s.local_port),
                ep(&s.remote_addr, s.remote_port),
                s.cc.clone(),
                role.into(),
                s.cwnd.to_string(),
                s.inflight.to_string(),
                ms(s.srtt_us),
                ms(s.min_rtt_us),
                ms(s.floor_us),
                ms(s.queue_delay_us),
                // the sender's own queue: bytes written, not yet sent, and
                // their time at the socket's delivery rate
                if s.unsent_bytes == 0 {
                    "-".into()
                } else {
                    format!(
                        "{} {}",
                        bloatd_model::format::bytes(s.unsent_bytes as u64),
                        ms(s.unsent_delay_us)
                    )
                },
                ms(s.rcv_ts_rtt_us.unwrap_or(s.rcv_rtt_us)),
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

#[cfg(test)]
mod tests {
    use super::cc_state_text;
    use bloatd_model::{fixtures, CcState};

    /// The column as it was before the meaning moved to the model.
    #[test]
    fn the_cc_state_column_keeps_its_text() {
        let mut s = fixtures::socket(1);
        s.cwnd = 80;
        s.cc_state = Some(CcState::Westwood {
            bwe_bytes_per_s: 1_000_000,
            min_rtt_us: 50_000,
            pipe_segments: 40,
        });
        assert_eq!(cc_state_text(&s), "bwe=8.00Mbit/s rttmin=50.000 pipe=40");
        s.cc_state = Some(CcState::Cubic {
            w_max_segments: 90,
            k_ms: 1200,
            epoch_age_ms: None,
            min_rtt_us: 20_500,
            hystart_round: 3,
            hystart_found: true,
        });
        assert_eq!(
            cc_state_text(&s),
            "wmax=90 K=1200ms epoch=- delaymin=20.500 hystart=3/exit"
        );
        s.cc_state = None;
        assert_eq!(cc_state_text(&s), "");
    }
}
