//! Configuration: a TOML file (`--config`, else /etc/bloatd/bloatd.toml if
//! present) with command-line flags overriding it. Unknown keys are errors:
//! a typo must not silently fall back to a default.

use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

pub const DEFAULT_CONFIG: &str = "/etc/bloatd/bloatd.toml";
pub const DEFAULT_RUN_DIR: &str = "/run/bloatd";

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Prometheus /metrics listener.
    pub listen: SocketAddr,
    /// Directory for the pid file, the API socket and the log.
    pub run_dir: PathBuf,
    /// Sampling interval: at most one sample per socket per interval.
    pub interval_ms: u64,
    /// Capacity of the kernel's socket map.
    pub map_entries: u32,
    /// Queueing delay from which a socket counts as bloated.
    pub bloat_threshold_ms: u64,
    /// How much history per socket the API keeps for `bloatd top`.
    pub series_seconds: u64,
    /// bloatd congestion controls to register at start.
    pub cc: Vec<String>,
    /// Path floors (README, "Path floors"): how long the lowest RTT toward a
    /// peer is remembered, in seconds. Longer than a standing queue lasts.
    pub floor_window_s: u32,
    /// How many peers and prefixes keep a floor (least recently used go).
    pub floor_entries: u32,
    /// Prefix lengths whose floor serves a peer with no history (0: off).
    pub floor_prefix_v4: u8,
    pub floor_prefix_v6: u8,
    /// Infer a new peer's floor from the queue its route's bottleneck holds.
    pub floor_infer: bool,
    /// Turn on the kernel's BPF run-time statistics while running
    /// (kernel.bpf_stats_enabled), so probe cost shows in /metrics.
    pub bpf_stats: bool,
    /// tracing filter, e.g. "info" or "bloatd=debug".
    pub log: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:9477".parse().unwrap(),
            run_dir: PathBuf::from(DEFAULT_RUN_DIR),
            interval_ms: 100,
            map_entries: 65536,
            bloat_threshold_ms: 100,
            series_seconds: 60,
            cc: vec!["bloatd_westwood".into(), "bloatd_cubic".into()],
            floor_window_s: 1800,
            floor_entries: 32768,
            floor_prefix_v4: 24,
            floor_prefix_v6: 64,
            floor_infer: true,
            bpf_stats: false,
            log: "info".into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {err}")]
    Read { path: PathBuf, err: std::io::Error },
    #[error("config file {path}: {err}")]
    Parse { path: PathBuf, err: String },
    #[error("config: {0}")]
    Invalid(String),
}

impl Config {
    /// Load `path`, or the default file if it exists, or the defaults.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let (path, must_exist) = match path {
            Some(p) => (p.to_path_buf(), true),
            None => (PathBuf::from(DEFAULT_CONFIG), false),
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if !must_exist && e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Config::default())
            }
            Err(err) => return Err(ConfigError::Read { path, err }),
        };
        Self::parse(&text).map_err(|err| ConfigError::Parse { path, err })
    }

    pub fn parse(text: &str) -> Result<Config, String> {
        let cfg: Config = toml::from_str(text).map_err(|e| e.to_string().trim().to_string())?;
        cfg.validate().map_err(|e| e.to_string())?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(10..=10_000).contains(&self.interval_ms) {
            return Err(ConfigError::Invalid(format!(
                "interval_ms = {} is out of range (10..=10000)",
                self.interval_ms
            )));
        }
        if !(64..=4_194_304).contains(&self.map_entries) {
            return Err(ConfigError::Invalid(format!(
                "map_entries = {} is out of range (64..=4194304)",
                self.map_entries
            )));
        }
        if !(10..=86_400).contains(&self.floor_window_s) {
            return Err(ConfigError::Invalid(format!(
                "floor_window_s = {} is out of range (10..=86400)",
                self.floor_window_s
            )));
        }
        if !(64..=1_048_576).contains(&self.floor_entries) {
            return Err(ConfigError::Invalid(format!(
                "floor_entries = {} is out of range (64..=1048576)",
                self.floor_entries
            )));
        }
        if self.floor_prefix_v4 > 31 || self.floor_prefix_v6 > 127 {
            return Err(ConfigError::Invalid(
                "floor_prefix_v4 must be 0..=31 and floor_prefix_v6 0..=127 (0 turns the prefix fallback off)".into(),
            ));
        }
        if self.series_seconds > 3600 {
            return Err(ConfigError::Invalid("series_seconds must be at most 3600".into()));
        }
        for name in &self.cc {
            if bloatd_cc::Algo::from_name(name).is_none() {
                return Err(ConfigError::Invalid(format!(
                    "cc: unknown algorithm '{name}' (bloatd provides bloatd_westwood and bloatd_cubic)"
                )));
            }
        }
        Ok(())
    }

    pub fn pid_file(&self) -> PathBuf {
        self.run_dir.join("bloatd.pid")
    }
    pub fn socket_path(&self) -> PathBuf {
        self.run_dir.join("bloatd.sock")
    }
    pub fn log_file(&self) -> PathBuf {
        self.run_dir.join("bloatd.log")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_gives_defaults() {
        assert_eq!(Config::parse("").unwrap(), Config::default());
    }

    #[test]
    fn shipped_config_is_the_defaults() {
        let shipped = Config::parse(include_str!("../dist/bloatd.toml")).unwrap();
        assert_eq!(shipped, Config::default());
    }

    #[test]
    fn keys_override_defaults() {
        let c = Config::parse("interval_ms = 50\nlisten = \"127.0.0.1:9999\"\ncc = []\n").unwrap();
        assert_eq!(c.interval_ms, 50);
        assert_eq!(c.listen.port(), 9999);
        assert!(c.cc.is_empty());
    }

    #[test]
    fn unknown_key_is_an_error_naming_it() {
        let e = Config::parse("intervall_ms = 50\n").unwrap_err();
        assert!(e.contains("intervall_ms"), "{e}");
    }

    #[test]
    fn out_of_range_and_unknown_cc_are_errors() {
        assert!(Config::parse("interval_ms = 1\n").unwrap_err().contains("interval_ms"));
        assert!(Config::parse("cc = [\"vegas\"]\n").unwrap_err().contains("vegas"));
    }
}
