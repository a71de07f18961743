//! C that only bloatd's tests and benchmarks need, built only when they are
//! (a dev-dependency of `bloatd` and `bloatd-cc`).
//!
//! - The kernel side's pure C compiled for the host, linked into the unit
//!   tests: `bloatd_floor_path_refresh` (bpf/floor_path.h over a table the
//!   test supplies through `bloatd_test_floor_*` callbacks),
//!   `bloatd_drwa_window`, `bloatd_drwa_restore_clamp`,
//!   `bloatd_policy_ports_match` (bpf/policy.h), and [`cubic_idle_us`]
//!   (struct_ops/cc_idle.h). The tests declare the functions that take the
//!   daemon's generated record types themselves; `use bloatd_bpf_testing
//!   as _;` links them.
//! - [`BASELINE_BPF_O`]: the reference programs `scripts/bench/probes.sh`
//!   attaches beside the probes (`daemon/examples/bench_probes.rs`).

/// A BPF object embedded at build time, 8-byte aligned as libelf and aya
/// expect of an object read into memory.
#[repr(C, align(8))]
struct Aligned<B: ?Sized>(B);

static BASELINE: &Aligned<[u8]> =
    &Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/baseline.bpf.o")));

/// bpf/testing/baseline.bpf.c: an empty program and a cookie-keyed hash
/// update on `tcp_probe`, the floor and the reference of the probe's cost.
pub static BASELINE_BPF_O: &[u8] = &BASELINE.0;

extern "C" {
    fn bloatd_cubic_idle_us(now_jiffies: u32, lsndtime: u32, hz: u32) -> u64;
}

/// cc_idle.h's `cubic_idle_us`, the shift bloatd_cubic gives its epoch
/// after an idle period: (now in jiffies, the last send in jiffies, HZ) ->
/// microseconds.
pub fn cubic_idle_us(now_jiffies: u32, lsndtime: u32, hz: u32) -> u64 {
    // SAFETY: pure C arithmetic on its arguments.
    unsafe { bloatd_cubic_idle_us(now_jiffies, lsndtime, hz) }
}
