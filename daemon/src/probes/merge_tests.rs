//! The per-CPU statistics merged as the metrics read them (`merge_cc_stats`).

use super::abi::{hist, BloatdCcStats};
use super::merge_cc_stats;

/// Merge the CPUs' copies as `Probes::cc_stats` does.
fn merged(cpus: &[BloatdCcStats]) -> BloatdCcStats {
    let mut sum = BloatdCcStats::default();
    for c in cpus {
        merge_cc_stats(&mut sum, c);
    }
    sum
}

/// Slot 1: CPU 0 and CPU 1 each sampled one bloated sender in second 41.
/// Slot 2: CPU 0 counted 2 in second 42, CPU 1 still holds 3 from second
/// 38, four seconds older.
fn two_cpus() -> [BloatdCcStats; 2] {
    let mut a = BloatdCcStats::default();
    let mut b = BloatdCcStats::default();
    a.role[0].bloated_sec[1] = 41;
    a.role[0].bloated[1] = 1;
    b.role[0].bloated_sec[1] = 41;
    b.role[0].bloated[1] = 1;
    b.role[0].bloated_sec[2] = 38;
    b.role[0].bloated[2] = 3;
    a.role[0].bloated_sec[2] = 42;
    a.role[0].bloated[2] = 2;
    [a, b]
}

#[test]
fn bloated_stamps_merge_by_value_not_by_sum() {
    let m = merged(&two_cpus());
    let s = &m.role[0];
    // Second 41: both CPUs' sockets, stamped 41 (a sum would say 82).
    assert_eq!((s.bloated_sec[1], s.bloated[1]), (41, 2));
    // Slot 2: CPU 0's second 42 is the newest; CPU 1's count of second 38
    // is not in it.
    assert_eq!((s.bloated_sec[2], s.bloated[2]), (42, 2));
    // Whatever order the CPUs come in.
    let [a, b] = two_cpus();
    assert_eq!(merged(&[b, a]), m);
}

#[test]
fn counts_and_sums_add_up() {
    let mut a = BloatdCcStats::default();
    let mut b = BloatdCcStats::default();
    a.role[1].delay[hist::QUEUE as usize][7] = 5;
    b.role[1].delay[hist::QUEUE as usize][7] = 2;
    a.role[0].delay_sum_us[hist::RTT as usize] = 1000;
    b.role[0].delay_sum_us[hist::RTT as usize] = 500;
    a.role[0].cwnd[3] = 1;
    b.role[0].cwnd[3] = 4;
    a.role[0].cwnd_sum = 10;
    b.role[0].cwnd_sum = 20;
    a.role[1].retrans = 3;
    b.role[1].retrans = 4;
    let m = merged(&[a, b]);
    assert_eq!(m.role[1].delay[hist::QUEUE as usize][7], 7);
    assert_eq!(m.role[0].delay_sum_us[hist::RTT as usize], 1500);
    assert_eq!(m.role[0].cwnd[3], 5);
    assert_eq!(m.role[0].cwnd_sum, 30);
    assert_eq!(m.role[1].retrans, 7);
}

/// Every u64 of the struct takes part in the merge: a field added to
/// `struct bloatd_role_stats` and forgotten in `merge_role_stats` fails
/// here. All ones on two CPUs: every count and sum is 2, every stamp 1
/// (equal stamps: their counts add up).
#[test]
fn every_field_is_merged() {
    const N: usize = std::mem::size_of::<BloatdCcStats>() / 8;
    let ones = [1u64; N];
    // SAFETY: BloatdCcStats is plain data made of u64s only (asserted in
    // probes/mod.rs), so any array of N u64s is one.
    let one: BloatdCcStats = unsafe { std::mem::transmute(ones) };
    let m = merged(&[one, one]);
    let want_one = |s: &super::abi::BloatdRoleStats| s.bloated_sec.to_vec();
    for r in &m.role {
        assert_eq!(want_one(r), vec![1; 4], "stamps are values");
    }
    // SAFETY: as above.
    let words: [u64; N] = unsafe { std::mem::transmute(m) };
    let stamps = 2 * 4;
    assert_eq!(words.iter().filter(|&&w| w == 1).count(), stamps);
    assert_eq!(words.iter().filter(|&&w| w == 2).count(), N - stamps);
}
