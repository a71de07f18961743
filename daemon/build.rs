// Builds the probe object (bpf/probes.bpf.c) and generates the Rust side of
// the records it shares with user space from the object's BTF.
// A build script fails by panicking with its message.
#![allow(clippy::unwrap_used)]
include!(concat!(env!("CARGO_MANIFEST_DIR"), "/../bpf/build_bpf.rs"));

use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let bpf = bpf_build::bpf_dir();
    // Each header of bpf/ stands alone (the probes include them all at the top).
    bpf_build::check_headers();
    let obj = out.join("probes.bpf.o");
    bpf_build::compile(&bpf.join("probes.bpf.c"), &obj, &[]);
    let abi = bpf_build::rust_types(
        &obj,
        &[
            "bloatd_sock",
            "bloatd_sample",
            "bloatd_cc_stats",
            "bloatd_sock_counts",
            "bloatd_control",
            "bloatd_sampler_cpu",
            "bloatd_floor",
            "bloatd_path_key",
            "bloatd_bottleneck",
            "bloatd_floor_subject",
            "bloatd_floor_cfg",
            "bloatd_policy_rule",
            "bloatd_policy_ctl",
            "bloatd_policy_counts",
            "bloatd_drwa_saved",
            "bloatd_drwa_path",
            "drwa_measure",
            "bloatd_owner",
            "bloatd_svc_key",
            "bloatd_svc_stats",
        ],
        &[
            "bloatd_limits",
            "bloatd_hist",
            "bloatd_role",
            "bloatd_flag",
            "bloatd_stat",
            "bloatd_floor_source",
            "bloatd_policy_limits",
            "bloatd_policy_match",
            "bloatd_policy_action",
            "bloatd_policy_count",
            "bloatd_policy_flag",
            "bloatd_drwa_base",
            "bloatd_path_class",
        ],
    );
    std::fs::write(out.join("abi.rs"), abi).unwrap();
    // The object's `const volatile`s as one struct (settings.rs fills it).
    std::fs::write(out.join("globals.rs"), bpf_build::rust_globals(&obj)).unwrap();
    // The feature probes loaded at start (src/probes/kernel.rs).
    bpf_build::compile(
        &bpf.join("features.bpf.c"),
        &out.join("features.bpf.o"),
        &[],
    );
    // The pure C the probes share with the daemon, for the host: reading a
    // floor (floor_host.c) and the histograms' buckets (stats_host.c). The
    // C only tests use is built by the bloatd-bpf-testing dev-dependency.
    for c in ["floor_host.c", "stats_host.c"] {
        println!("cargo:rerun-if-changed={}", bpf.join(c).display());
    }
    cc::Build::new()
        .compiler(bpf_build::clang())
        .file(bpf.join("floor_host.c"))
        .file(bpf.join("stats_host.c"))
        .include(&bpf)
        .warnings_into_errors(true)
        .compile("bloatd_floor_host");
}
