//! `bloatd paths`: the sockets grouped by path, worst queue first, or the
//! floors the kernel keeps.

use crate::client::Client;
use crate::error::Result;
use crate::settings::Config;
use bloatd_model::format;
use bloatd_model::NetPath;
use clap::Args;
use std::fmt::Write as _;
use std::process::ExitCode;

#[derive(Args)]
pub struct PathsArgs {
    /// JSON output (an array of paths; field names in the README).
    #[arg(long)]
    pub json: bool,
    /// Group by prefix (floor_prefix_v4 / floor_prefix_v6) instead of by peer.
    #[arg(long, conflicts_with = "floors")]
    pub prefix: bool,
    /// List the floors the kernel keeps instead (peers and prefixes,
    /// alive or closed, with where each came from).
    #[arg(long)]
    pub floors: bool,
}

pub fn run(cfg: &Config, args: &PathsArgs) -> Result<ExitCode> {
    let (json, prefix, floors) = (args.json, args.prefix, args.floors);
    let client = Client::new(&cfg.socket_path());
    if floors {
        let f = client.floors()?;
        if json {
            println!("{}", serde_json::to_string_pretty(&f)?);
            return Ok(ExitCode::SUCCESS);
        }
        println!(
            "{} floors (capacity {} peers and {} prefixes, window {} s; {} created, {} evicted by the bound)",
            f.floors.len(),
            f.capacity,
            f.prefix_capacity,
            f.window_s,
            f.created,
            f.evicted
        );
        println!(
            "{:<10} {:<44} {:>10} {:<8} {:>8}",
            "NETNS", "PEER/PREFIX", "FLOOR", "SOURCE", "FED"
        );
        for e in &f.floors {
            println!(
                "{:<10} {:<44} {:>10} {:<8} {:>7}s",
                e.netns,
                format!("{}/{}", e.peer, e.prefix_len),
                format::ms(e.floor_us as u64),
                e.floor_source.as_str(),
                e.updated_s_ago
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let paths = client.paths(prefix)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&paths)?);
    } else {
        print!("{}", paths_table(&paths));
    }
    Ok(ExitCode::SUCCESS)
}

/// `bloatd paths`: one line per path.
fn paths_table(paths: &[NetPath]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<10} {:<28} {:<10} {:>9} {:<8} {:>9} {:>9} {:<5} {:>6} {:<8} {:<9} {:>5} {:>12}  {:<16} SERVICES",
        "NETNS",
        "PEER",
        "IFACE",
        "FLOOR",
        "SOURCE",
        "QUEUE",
        "QMAX",
        "GRADE",
        "RPM",
        "KIND",
        "WHOSE",
        "SOCKS",
        "THROUGHPUT",
        "CC"
    );
    for p in paths {
        let [floor, queue, qmax, grade, rpm] = p.measured_text();
        let _ = writeln!(
            out,
            "{:<10} {:<28} {:<10} {:>9} {:<8} {:>9} {:>9} {:<5} {:>6} {:<8} {:<9} {:>5} {:>12}  {:<16} {}",
            p.netns,
            p.peer_text(),
            if p.interface.is_empty() {
                "-"
            } else {
                &p.interface
            },
            floor,
            p.floor_source.as_str(),
            queue,
            qmax,
            grade,
            rpm,
            p.bottleneck_text(),
            p.owner_text(),
            p.sockets,
            format::rate(p.throughput_bps),
            p.ccs.join(","),
            p.services.join(",")
        );
    }
    if let Some(s) = bloatd_model::worst_path_sentence(paths) {
        let _ = writeln!(out, "\n{s}");
    }
    let classified: Vec<&NetPath> = paths.iter().filter(|p| p.bottleneck.is_some()).collect();
    if !classified.is_empty() {
        let _ = writeln!(out);
    }
    for p in classified {
        let _ = writeln!(
            out,
            "{}",
            bloatd_model::bottleneck_sentence(p).unwrap_or_default()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::paths::paths_of;
    use crate::paths::tests::sock;
    use bloatd_model::worst_path_sentence;

    #[test]
    fn the_worst_path_in_one_sentence() {
        let socks = vec![
            sock(1, "93.184.216.34", 40, 400, 0),
            sock(2, "93.184.216.34", 40, 460, 0),
            sock(3, "93.184.216.34", 40, 450, 0),
            sock(4, "1.1.1.1", 10, 2, 0),
        ];
        let s = worst_path_sentence(&paths_of(&socks, None)).unwrap();
        assert!(
            s.starts_with(
                "the link to 93.184.216.34 (wlan0) holds 450ms of queue, 3 flows wait behind it"
            ),
            "{s}"
        );
        assert!(
            worst_path_sentence(&paths_of(&[sock(1, "10.9.2.2", 40, 10, 0)], None)).is_none(),
            "no queue, no sentence"
        );
    }

    #[test]
    fn a_prefix_shows_its_length() {
        let socks = vec![sock(1, "10.9.2.2", 40, 100, 0), sock(2, "fd00::1", 5, 0, 0)];
        let paths = paths_of(&socks, Some((24, 64)));
        assert_eq!(paths[0].peer_text(), "10.9.2.0/24");
        assert_eq!(paths[1].peer_text(), "fd00::/64");
        assert_eq!(paths_of(&socks, None)[0].peer_text(), "10.9.2.2");
    }

    /// `bloatd paths` says each classified path's kind of queue in one
    /// sentence under the table; unclassified paths get none.
    #[test]
    fn each_classified_path_in_one_sentence() {
        let mut paths = paths_of(
            &[
                sock(1, "93.184.216.34", 40, 400, 0),
                sock(4, "1.1.1.1", 10, 2, 0),
            ],
            None,
        );
        paths[0].bottleneck = Some(bloatd_model::Bottleneck {
            class: bloatd_model::BottleneckClass::Droptail,
            why: "drop-tail buffer: 400ms of queue, 2 losses at 410ms of queue".into(),
            seconds: 12,
            owner: Some(bloatd_model::QueueOwner {
                class: bloatd_model::OwnerClass::Own,
                why: "the flows bloatd sees have the link (they carried 16Mbit/s lately): this path's own flows had 96%, neighbours 0%".into(),
                neighbours: Vec::new(),
            }),
        });
        let text = super::paths_table(&paths);
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("s of traffic)"))
            .collect();
        assert_eq!(
            lines,
            ["93.184.216.34 (wlan0): droptail, drop-tail buffer: 400ms of queue, 2 losses at 410ms of queue; whose: self, the flows bloatd sees have the link (they carried 16Mbit/s lately): this path's own flows had 96%, neighbours 0% (12 s of traffic)"],
            "{text}"
        );
        assert!(!text.contains("1.1.1.1 (wlan0):"), "{text}");
        // The table's KIND and WHOSE columns: the class and the owner,
        // `-` where unclassified.
        let kind = |peer: &str, col: usize| {
            let row = text.lines().find(|l| l.contains(peer)).unwrap();
            row.split_whitespace().nth(col).unwrap().to_string()
        };
        assert_eq!(
            (kind("93.184.216.34 ", 9), kind("1.1.1.1 ", 9)),
            ("droptail".into(), "-".into()),
            "{text}"
        );
        assert_eq!(
            (kind("93.184.216.34 ", 10), kind("1.1.1.1 ", 10)),
            ("self".into(), "-".into()),
            "{text}"
        );
        // The worst path's sentence says where its queue waits.
        assert!(
            text.contains("holds 400ms of queue in a drop-tail buffer, 1 flow waits behind it"),
            "{text}"
        );
    }
}
