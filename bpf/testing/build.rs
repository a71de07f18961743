// The C only tests and benchmarks use, built only when they are: this crate
// is a dev-dependency of `bloatd` and `bloatd-cc`, so `cargo build` never
// compiles it. The kernel's pure C for the host (floor_path.h over a test's
// table, policy.h's DRWA arithmetic, cc_idle.h, sampler.h) goes into one static
// library the unit tests link; the benchmark's reference programs are one
// BPF object.
// A build script fails by panicking with its message.
#![allow(clippy::unwrap_used)]
include!(concat!(env!("CARGO_MANIFEST_DIR"), "/../build_bpf.rs"));

use std::path::PathBuf;

fn main() {
    let here = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let bpf = bpf_build::bpf_dir();
    let struct_ops = bpf.parent().unwrap().join("struct_ops");
    let host = [
        "floor_host_env.c",
        "policy_host.c",
        "cc_idle_host.c",
        "sampler_host.c",
    ];
    for c in host {
        println!("cargo:rerun-if-changed={}", here.join(c).display());
    }
    println!(
        "cargo:rerun-if-changed={}",
        struct_ops.join("cc_idle.h").display()
    );
    let mut build = cc::Build::new();
    build
        .compiler(bpf_build::clang())
        .include(&bpf)
        .include(&struct_ops)
        .warnings_into_errors(true);
    for c in host {
        build.file(here.join(c));
    }
    build.compile("bloatd_bpf_testing");
    bpf_build::compile(
        &here.join("baseline.bpf.c"),
        &out.join("baseline.bpf.o"),
        &[],
    );
}
