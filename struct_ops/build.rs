// Builds the two struct_ops objects (bloatd_westwood, bloatd_cubic) and
// generates the Rust side of cc_state.h from the objects' BTF (the same
// generator as the probes' ABI: bpf/build_bpf.rs), so the exported state is
// defined once, in C. CUBIC's idle arithmetic (cc_idle.h) is compiled for
// the host by the bloatd-bpf-testing dev-dependency, for src/algo.rs's test.
// A build script fails by panicking with its message.
#![allow(clippy::unwrap_used)]
include!(concat!(env!("CARGO_MANIFEST_DIR"), "/../bpf/build_bpf.rs"));

use std::path::PathBuf;

fn main() {
    let here = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    for h in ["cc_state.h", "cc_bpf.h", "cc_idle.h"] {
        println!("cargo:rerun-if-changed={}", here.join(h).display());
    }
    for name in ["westwood", "cubic"] {
        bpf_build::compile(
            &here.join(format!("{name}.bpf.c")),
            &out.join(format!("{name}.bpf.o")),
            &[&here],
        );
    }
    let mut code = bpf_build::rust_types(
        &out.join("westwood.bpf.o"),
        &[
            "bloatd_westwood_state",
            "bloatd_westwood_config",
            "bloatd_ratio_hist",
        ],
        &["bloatd_ratio_le"],
    );
    code += &bpf_build::rust_types(
        &out.join("cubic.bpf.o"),
        &["bloatd_cubic_state"],
        &["bloatd_hystart"],
    );
    // The algorithms copy whole structs from their stack into the maps:
    // a byte of padding would be uninitialised stack to the verifier.
    assert!(
        !code.contains("_pad"),
        "cc_state.h: a struct has implicit padding:\n{code}"
    );
    std::fs::write(out.join("cc_state.rs"), code).unwrap();
}
