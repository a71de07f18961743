// Builds the probe object (bpf/probes.bpf.c) and records the C layout of the
// shared record so a unit test can compare it with the Rust mirror.
include!(concat!(env!("CARGO_MANIFEST_DIR"), "/../bpf/build_bpf.rs"));

use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let bpf = bpf_build::bpf_dir();
    bpf_build::compile(&bpf.join("probes.bpf.c"), &out.join("probes.bpf.o"), &[]);
    // Reference programs for the benchmark (examples/bench_probes.rs).
    bpf_build::compile(&bpf.join("bench/baseline.bpf.c"), &out.join("baseline.bpf.o"), &[]);
    let layout = bpf_build::run_host_c(&bpf.join("abi_layout.c"), &out, &[]);
    std::fs::write(out.join("abi_layout.txt"), layout).unwrap();
}
