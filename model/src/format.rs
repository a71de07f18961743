//! Numbers with their units, the way the dashboard prints them.
//!
//! One function per quantity so the table, the header, the notices and the
//! `--once` text agree. Delays keep a unit suffix with no space ("412ms",
//! "4.2ms", "123s") so scripts can parse a column with one pattern.

/// A delay in microseconds: one decimal below 10 ms, whole milliseconds up to
/// 100 s, whole seconds above.
pub fn ms(us: u64) -> String {
    let tenths_ms = (us + 50) / 100;
    if tenths_ms < 100 {
        return format!("{}.{}ms", tenths_ms / 10, tenths_ms % 10);
    }
    let whole_ms = (us + 500) / 1000;
    if whole_ms < 100_000 {
        return format!("{whole_ms}ms");
    }
    format!("{}s", (us + 500_000) / 1_000_000)
}

/// An age or a time span in milliseconds, for people (not for parsing):
/// "0.3s", "2.5s", "12s", "4m05s", "2h03m".
pub fn age(ms: u64) -> String {
    let tenths = (ms + 50) / 100;
    if tenths < 100 {
        return format!("{}.{}s", tenths / 10, tenths % 10);
    }
    let s = (ms + 500) / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

/// A rate in bits per second: "812kbit/s", "9.8Mbit/s", "94Mbit/s", "1.2Gbit/s".
pub fn rate(bps: u64) -> String {
    scaled(bps, &["bit/s", "kbit/s", "Mbit/s", "Gbit/s", "Tbit/s"])
}

/// A byte count: "980B", "1.4kB", "312kB", "1.2MB" (SI, as `ss` and iperf3 print).
pub fn bytes(count: u64) -> String {
    scaled(count, &["B", "kB", "MB", "GB", "TB"])
}

/// A plain count with an SI suffix: "980", "12k", "3.4M".
pub fn count(n: u64) -> String {
    scaled(n, &["", "k", "M", "G", "T"])
}

/// `value` in the largest unit (steps of 1000) that keeps it at least 1, with
/// one decimal below 10 and none above. Rounding happens before the unit is
/// chosen, so 999_960 prints as "1.0M", never "1000k".
fn scaled(value: u64, units: &[&str]) -> String {
    if value < 1000 {
        return format!("{value}{}", units[0]);
    }
    let mut scaled = value as f64;
    let mut unit = 0;
    while unit + 1 < units.len() && round_for_display(scaled) >= 1000.0 {
        scaled /= 1000.0;
        unit += 1;
    }
    if round_for_display(scaled) < 10.0 {
        format!("{scaled:.1}{}", units[unit])
    } else {
        format!("{scaled:.0}{}", units[unit])
    }
}

/// The value as it will be printed: one decimal below 10, integer above.
fn round_for_display(v: f64) -> f64 {
    if (v * 10.0).round() / 10.0 < 10.0 {
        (v * 10.0).round() / 10.0
    } else {
        v.round()
    }
}

/// A time of day as "14:02:11", `offset_s` from UTC (the local zone's
/// offset, found by the caller: this crate reads no clock or zone).
pub fn clock(unix_ms: u64, offset_s: i64) -> String {
    let s = (unix_ms / 1000) as i64 + offset_s;
    let day = s.rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}", day / 3600, day % 3600 / 60, day % 60)
}

/// A date and time as "2026-12-05 14:02:11", `offset_s` from UTC.
pub fn date_time(unix_ms: u64, offset_s: i64) -> String {
    let s = (unix_ms / 1000) as i64 + offset_s;
    let (days, secs) = (s.div_euclid(86_400), s.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// A ratio as "9.9x" below 10 and "12x" above.
pub fn ratio(r: f64) -> String {
    if r < 9.95 {
        format!("{r:.1}x")
    } else {
        format!("{r:.0}x")
    }
}

/// `text` cut to `width` columns. Too long texts lose their end and show "…",
/// or with `keep_end` lose their start, so an endpoint keeps its port.
pub fn fit(text: &str, width: usize, keep_end: bool) -> String {
    let len = text.chars().count();
    if len <= width {
        return text.to_string();
    }
    if width == 0 {
        return String::new();
    }
    if keep_end {
        let tail: String = text.chars().skip(len - (width - 1)).collect();
        format!("…{tail}")
    } else {
        let head: String = text.chars().take(width - 1).collect();
        format!("{head}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_have_one_decimal_below_ten_ms() {
        assert_eq!(ms(0), "0.0ms");
        assert_eq!(ms(40), "0.0ms");
        assert_eq!(ms(50), "0.1ms");
        assert_eq!(ms(4_249), "4.2ms");
        assert_eq!(ms(9_949), "9.9ms");
        // 9.95 ms rounds up to 10 ms and then prints as whole milliseconds.
        assert_eq!(ms(9_950), "10ms");
        assert_eq!(ms(412_300), "412ms");
        assert_eq!(ms(99_999_000), "99999ms");
        assert_eq!(ms(99_999_500), "100s");
        assert_eq!(ms(u32::MAX as u64), "4295s");
    }

    #[test]
    fn ages_for_people() {
        assert_eq!(age(0), "0.0s");
        assert_eq!(age(2_505), "2.5s");
        assert_eq!(age(9_960), "10s");
        assert_eq!(age(59_400), "59s");
        assert_eq!(age(245_000), "4m05s");
        assert_eq!(age(7_380_000), "2h03m");
    }

    #[test]
    fn rates_scale_by_thousands() {
        assert_eq!(rate(0), "0bit/s");
        assert_eq!(rate(999), "999bit/s");
        assert_eq!(rate(1_000), "1.0kbit/s");
        assert_eq!(rate(812_000), "812kbit/s");
        assert_eq!(rate(999_960), "1.0Mbit/s");
        assert_eq!(rate(9_840_000), "9.8Mbit/s");
        assert_eq!(rate(9_960_000), "10Mbit/s");
        assert_eq!(rate(94_400_000), "94Mbit/s");
        assert_eq!(rate(1_200_000_000), "1.2Gbit/s");
    }

    #[test]
    fn bytes_and_counts() {
        assert_eq!(bytes(980), "980B");
        assert_eq!(bytes(1_448), "1.4kB");
        assert_eq!(bytes(312_000), "312kB");
        assert_eq!(bytes(1_234_567), "1.2MB");
        assert_eq!(count(12), "12");
        assert_eq!(count(12_345), "12k");
        assert_eq!(count(3_400_000), "3.4M");
    }

    #[test]
    fn clock_times_in_the_zone_asked() {
        let t = 1_764_943_331_000; // 2025-12-05 14:02:11 UTC
        assert_eq!(clock(t, 0), "14:02:11");
        assert_eq!(clock(t, 3600), "15:02:11");
        assert_eq!(clock(t, -15 * 3600), "23:02:11");
        assert_eq!(date_time(t, 0), "2025-12-05 14:02:11");
        assert_eq!(date_time(0, 0), "1970-01-01 00:00:00");
        assert_eq!(date_time(951_825_600_000, 0), "2000-02-29 12:00:00");
    }

    #[test]
    fn fit_keeps_the_port_of_an_endpoint() {
        assert_eq!(fit("10.0.0.2:443", 20, true), "10.0.0.2:443");
        assert_eq!(fit("[2001:db8::1]:443", 10, true), "…8::1]:443");
        assert_eq!(fit("firefox-esr", 8, false), "firefox…");
        assert_eq!(fit("abc", 0, false), "");
    }
}
