//! Loads a BPF object and attaches every program in it to the tp_btf
//! tracepoint its section names, then waits for SIGTERM/SIGINT (or stdin
//! EOF). Used by scripts/bench/probes.sh to run reference programs beside
//! bloatd's probes. Usage: bench_probes OBJECT TRACEPOINT [PROG...], where
//! OBJECT `baseline` is bpf/testing/baseline.bpf.c, built in (by the
//! bloatd-bpf-testing dev-dependency, which only examples and tests build).
// A test, a bench or an example stops at what it cannot do: unwraps are its way.
#![allow(clippy::unwrap_used)]

use aya::programs::BtfTracePoint;
use aya::{Btf, EbpfLoader};
use std::io::Read;

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // The whole chain: what failed, then what aya said under it.
            let mut line = format!("Error: {e}");
            let mut src = e.source();
            while let Some(inner) = src {
                line += &format!(": {inner}");
                src = inner.source();
            }
            eprintln!("{line}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let obj = args
        .next()
        .ok_or("usage: bench_probes OBJECT TRACEPOINT [PROG...]")?;
    let tp = args.next().ok_or("missing TRACEPOINT")?;
    let only: Vec<String> = args.collect();
    let btf = Btf::from_sys_fs()?;
    let mut loader = EbpfLoader::new();
    loader.btf(Some(&btf));
    let mut ebpf = if obj == "baseline" {
        loader.load(bloatd_bpf_testing::BASELINE_BPF_O)?
    } else {
        loader.load_file(&obj)?
    };
    let names: Vec<String> = ebpf.programs().map(|(n, _)| n.to_string()).collect();
    for name in names {
        if !only.is_empty() && !only.contains(&name) {
            continue;
        }
        let prog: &mut BtfTracePoint = ebpf.program_mut(&name).unwrap().try_into()?;
        prog.load(&tp, &btf)?;
        prog.attach()?;
        eprintln!("attached {name} to tp_btf/{tp}");
    }
    println!("ready");
    // Held until stdin closes: the caller owns our lifetime.
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    Ok(())
}
