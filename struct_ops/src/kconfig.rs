//! The kernel config values the algorithms read (`extern ... __kconfig`),
//! for hosts that do not publish their config.
//!
//! bloatd_cubic reads `CONFIG_HZ` (the jiffies clock of `tp->lsndtime`,
//! which the idle shift converts to microseconds). libbpf looks for the
//! running kernel's config in /boot/config-RELEASE and /proc/config.gz and
//! refuses to load the object when neither exists, even for a `__weak`
//! extern: measured in a Debian guest without /boot/config. Then bloatd
//! measures HZ from the kernel's own clocks and hands libbpf that one value.

use std::path::Path;
use std::time::Duration;

/// Whether libbpf will find the running kernel's config by itself.
pub fn kernel_config_published() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    Path::new(&format!("/boot/config-{}", release.trim())).exists()
        || Path::new("/proc/config.gz").exists()
}

/// `(now in ns, jiffies)` from one read of /proc/timer_list (root only),
/// which prints both clocks at the top of the same snapshot.
fn timer_list_clocks() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/timer_list").ok()?;
    let mut now_ns = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("now at ") {
            now_ns = rest.split_whitespace().next()?.parse().ok();
        } else if let Some(rest) = line.strip_prefix("jiffies: ") {
            return Some((now_ns?, rest.trim().parse().ok()?));
        }
    }
    None
}

/// HZ from jiffies counted over `(ns, jiffies)` pairs `a` then `b`, snapped
/// to the values Linux offers (100, 250, 300, 1000) when within 8% (250
/// and 300, the nearest two, stay apart: 270 against 276).
pub fn hz_between(a: (u64, u64), b: (u64, u64)) -> Option<u32> {
    let ns = b.0.checked_sub(a.0)?;
    let jiffies = b.1.checked_sub(a.1)?;
    if ns == 0 {
        return None;
    }
    let hz = jiffies as f64 * 1e9 / ns as f64;
    [100u32, 250, 300, 1000]
        .into_iter()
        .find(|&v| (hz - f64::from(v)).abs() <= 0.08 * f64::from(v))
}

/// The kernel's HZ, measured over 200 ms (a few jiffies at HZ 100 are
/// enough to tell 100 from 250), again over 0.5 s and 1 s if a shorter
/// window gave no value Linux offers, or None where /proc/timer_list is
/// not readable. On a loaded emulated CPU (the VM matrix) ticks come late
/// and in bursts: one 200 ms window once missed every value, and the
/// congestion controls were declined.
pub fn measure_hz() -> Option<u32> {
    [200, 500, 1000].into_iter().find_map(|ms| {
        let a = timer_list_clocks()?;
        std::thread::sleep(Duration::from_millis(ms));
        hz_between(a, timer_list_clocks()?)
    })
}

/// What libbpf is given instead of the kernel's config file, if anything:
/// `Ok(None)` when libbpf finds the config itself, `Ok(Some("CONFIG_HZ=N"))`
/// otherwise, an error naming what is missing when HZ cannot be measured.
pub fn kconfig_override() -> crate::error::Result<Option<String>> {
    if kernel_config_published() {
        return Ok(None);
    }
    match measure_hz() {
        Some(hz) => Ok(Some(format!("CONFIG_HZ={hz}\n"))),
        None => Err(crate::Error::NoKconfig),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hz_is_snapped_to_what_linux_offers() {
        let s = 1_000_000_000;
        assert_eq!(hz_between((0, 0), (s / 5, 200)), Some(1000));
        assert_eq!(hz_between((0, 10), (s / 5, 60)), Some(250));
        assert_eq!(hz_between((0, 0), (s / 5, 61)), Some(300));
        assert_eq!(hz_between((0, 0), (s / 5, 20)), Some(100));
        assert_eq!(hz_between((0, 0), (s / 5, 40)), None); // 200 Hz: no such HZ
        assert_eq!(hz_between((0, 0), (s / 5, 215)), Some(1000)); // 1075: 7.5% off
        assert_eq!(hz_between((0, 0), (s, 272)), None); // neither 250 nor 300
        assert_eq!(hz_between((5, 0), (5, 10)), None);
        assert_eq!(hz_between((9, 0), (5, 10)), None);
    }

    /// What libbpf's refusal says when HZ cannot be measured: the text it
    /// had as a String.
    #[test]
    fn no_kconfig_reads_as_before() {
        assert_eq!(
            crate::Error::NoKconfig.to_string(),
            "the kernel publishes no config (/boot/config-RELEASE, /proc/config.gz) \
                     and /proc/timer_list does not give its HZ"
        );
    }
}
