// Builds the two struct_ops objects (bloatd_westwood, bloatd_cubic) and
// records the C layout of cc_state.h for the layout test in src/state.rs.
include!(concat!(env!("CARGO_MANIFEST_DIR"), "/../bpf/build_bpf.rs"));

use std::path::PathBuf;

fn main() {
    let here = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    for h in ["cc_state.h", "cc_bpf.h"] {
        println!("cargo:rerun-if-changed={}", here.join(h).display());
    }
    for name in ["westwood", "cubic"] {
        bpf_build::compile(
            &here.join(format!("{name}.bpf.c")),
            &out.join(format!("{name}.bpf.o")),
            &[&here],
        );
    }
    let layout = bpf_build::run_host_c(&here.join("cc_state_layout.c"), &out, &[&here]);
    std::fs::write(out.join("cc_state_layout.txt"), layout).unwrap();
}
