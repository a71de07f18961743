//! Configuration: a TOML file (`--config`, else /etc/bloatd/bloatd.toml if
//! present) with command-line flags overriding it. Unknown keys are errors:
//! a typo must not silently fall back to a default.

use crate::text::edit_distance;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

pub const DEFAULT_CONFIG: &str = "/etc/bloatd/bloatd.toml";
pub const DEFAULT_RUN_DIR: &str = "/run/bloatd";
pub const DEFAULT_STATE_DIR: &str = "/var/lib/bloatd";
pub const DEFAULT_API_GROUP: &str = "bloatd";

/// Every key of the config file, and what its value must be.
const KEYS: &[(&str, &str)] = &[
    ("listen", "an address and port, like \"127.0.0.1:9477\""),
    ("run_dir", "a directory path"),
    ("state_dir", "a directory path"),
    (
        "journal_max_mb",
        "an integer (megabytes; 0: no flight recorder)",
    ),
    ("journal_max_days", "an integer (days)"),
    ("interval_ms", "an integer (milliseconds)"),
    ("sampling", "\"adaptive\" or \"exact\""),
    ("map_capacity", "an integer"),
    ("bloat_threshold_ms", "an integer (milliseconds)"),
    ("series_seconds", "an integer (seconds)"),
    ("cc", "a list of names, like [\"bloatd_westwood\"]"),
    ("westwood_ssthresh", "\"kernel\" or \"paper\""),
    ("floors", "true or false"),
    ("floor_window_s", "an integer (seconds)"),
    ("floor_entries", "an integer"),
    ("floor_prefix_v4", "an integer (prefix length)"),
    ("floor_prefix_v6", "an integer (prefix length)"),
    ("floor_infer", "true or false"),
    (
        "service_labels",
        "an integer (services with a label of their own in /metrics)",
    ),
    (
        "service_entries",
        "an integer (per-service histograms the kernel keeps)",
    ),
    ("bpf_stats", "true or false"),
    ("log", "a string, like \"info\""),
    ("api_group", "a group name, like \"bloatd\""),
    ("admin_group", "a group name, like \"bloatd-admin\""),
    (
        "policy",
        "a list of [[policy]] tables (README, \"Acting on bloat\")",
    ),
    ("drwa", "\"on\", \"off\" or \"disabled\""),
    (
        "drwa_lambda",
        "a number from 2.0 to 16.0 (the paper's lambda is 3; below 2 DRWA would slow a connection that builds no queue)",
    ),
    (
        "drwa_min_bytes",
        "an integer (bytes a connection receives before DRWA acts on it)",
    ),
];

/// 1-based line and column of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rsplit('\n')
        .next()
        .map(|l| l.chars().count())
        .unwrap_or(0)
        + 1;
    (line, col)
}

/// Where a top-level key appears first (a line starting with it), else 0.
fn key_offset(text: &str, key: &str) -> usize {
    let mut off = 0;
    for l in text.split_inclusive('\n') {
        let t = l
            .trim_start()
            .trim_start_matches('[')
            .trim_start_matches(['"', '\'']);
        if t.starts_with(key) {
            return off;
        }
        off += l.len();
    }
    0
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Prometheus /metrics listener.
    pub listen: SocketAddr,
    /// Directory for the pid file, the API socket and the log.
    pub run_dir: PathBuf,
    /// Directory of the flight recorder's journal (kept across restarts).
    pub state_dir: PathBuf,
    /// The journal's bound (database and its log together), megabytes;
    /// 0 turns the flight recorder off. The oldest data goes first.
    pub journal_max_mb: u64,
    /// What the journal keeps at most, days.
    pub journal_max_days: u32,
    /// Sampling interval: at most one sample per socket per interval.
    pub interval_ms: u64,
    /// Which intervals of a sparse socket are sampled: "adaptive" (a share
    /// of a socket's segments chosen from what a look costs on a busy CPU,
    /// weighted so histograms stay unbiased in socket-time; bloated,
    /// watched, acted-on and dense sockets every interval) or "exact"
    /// (every socket every interval it carries traffic).
    pub sampling: Sampling,
    /// Capacity of the kernel's socket map.
    pub map_capacity: u32,
    /// Queueing delay from which a socket counts as bloated.
    pub bloat_threshold_ms: u64,
    /// How much history per socket the API keeps for `bloatd top`.
    pub series_seconds: u64,
    /// bloatd congestion controls to register at start.
    pub cc: Vec<String>,
    /// bloatd_westwood's ssthresh() on three duplicate ACKs: "kernel"
    /// (Reno's half, BWE x RTTmin when the recovery completes, as
    /// net/ipv4/tcp_westwood.c) or "paper" (BWE x RTTmin at once).
    pub westwood_ssthresh: String,
    /// Measure queueing delay against path floors (README, "Path floors");
    /// false: against each socket's own minimum, with no floor kept.
    pub floors: bool,
    /// Path floors: how long the lowest RTT toward a
    /// peer is remembered, in seconds. Longer than a standing queue lasts.
    pub floor_window_s: u32,
    /// How many peers keep a floor (least recently used go); prefixes
    /// keep theirs in a table of a quarter of this, apart.
    pub floor_entries: u32,
    /// Prefix lengths whose floor serves a peer with no history (0: off).
    pub floor_prefix_v4: u8,
    pub floor_prefix_v6: u8,
    /// Infer a new peer's floor from the queue its route's bottleneck holds.
    pub floor_infer: bool,
    /// Services with a `service` label value of their own in /metrics: the
    /// top N by socket-time; the others are summed as "other".
    pub service_labels: u32,
    /// Per-service histograms (service x congestion control x role) the
    /// kernel keeps at most; beyond, samples count as "other".
    pub service_entries: u32,
    /// Turn on the kernel's BPF run-time statistics while running
    /// (kernel.bpf_stats_enabled), so probe cost shows in /metrics.
    pub bpf_stats: bool,
    /// tracing filter, e.g. "info" or "bloatd=debug".
    pub log: String,
    /// Group given access to the API socket (and the run directory). None:
    /// `bloatd` where that group exists (the package creates it), else
    /// root only.
    pub api_group: Option<String>,
    /// Group whose members may change the kernel through the API (the
    /// default congestion control, DRWA, rules), besides root. None: root
    /// only. The API group watches.
    pub admin_group: Option<String>,
    /// Congestion control rules (`[[policy]]` tables), applied by the
    /// sock_ops program in order: the first that selects a connection
    /// decides (policy.rs).
    pub policy: Vec<bloatd_model::policy::Rule>,
    /// The receiver's Dynamic Receive Window Adjustment: "disabled" (the
    /// kernel is asked for nothing), "off" (armed, switched on live) or "on".
    pub drwa: bloatd_model::policy::DrwaMode,
    /// DRWA's lambda: the window is lambda x floor / RTT x data per RTT.
    pub drwa_lambda: f64,
    /// Bytes a connection receives before DRWA clamps its window.
    pub drwa_min_bytes: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:9477".parse().unwrap(),
            run_dir: PathBuf::from(DEFAULT_RUN_DIR),
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            journal_max_mb: 64,
            journal_max_days: 30,
            interval_ms: 100,
            sampling: Sampling::Adaptive,
            map_capacity: 65536,
            bloat_threshold_ms: 100,
            series_seconds: 60,
            cc: vec!["bloatd_westwood".into(), "bloatd_cubic".into()],
            westwood_ssthresh: "kernel".into(),
            floors: true,
            floor_window_s: 1800,
            floor_entries: 32768,
            floor_prefix_v4: 24,
            floor_prefix_v6: 64,
            floor_infer: true,
            service_labels: 20,
            service_entries: 8192,
            bpf_stats: false,
            log: "info".into(),
            api_group: None,
            admin_group: None,
            policy: Vec::new(),
            drwa: bloatd_model::policy::DrwaMode::Disabled,
            drwa_lambda: 3.0,
            drwa_min_bytes: 65_536,
        }
    }
}

/// How the probes sample sockets (`sampling`; docs/design.md, "Adaptive
/// sampling").
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Sampling {
    /// Sparse sockets looked at in a share of their segments, weighted;
    /// bloated, watched, acted-on and dense sockets every interval.
    #[default]
    Adaptive,
    /// Every socket sampled every interval it carries traffic.
    Exact,
}

impl Sampling {
    pub fn as_str(self) -> &'static str {
        match self {
            Sampling::Adaptive => "adaptive",
            Sampling::Exact => "exact",
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

    /// Parse a config file's text. Errors quote nothing from a file that
    /// is not bloatd's config (under a sudo rule for bloatd, `--config
    /// /etc/shadow` must not print a line of it): a syntax error gives only
    /// its line and column, an unknown key is named only when it is a typo
    /// of one of bloatd's keys, and a value of the wrong type is described
    /// by what the key expects, never quoted.
    pub fn parse(text: &str) -> Result<Config, String> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            let (line, col) = line_col(text, e.span().map(|s| s.start).unwrap_or(0));
            format!("not valid TOML at line {line}, column {col} (bloatd's config is TOML, like daemon/dist/bloatd.toml)")
        })?;
        for key in table.keys() {
            if !KEYS.iter().any(|(k, _)| k == key) {
                let known: Vec<&str> = KEYS.iter().map(|(k, _)| *k).collect();
                return Err(
                    match KEYS
                        .iter()
                        .find(|(k, _)| edit_distance(k, key) <= (k.len() / 6).clamp(1, 2))
                    {
                        Some((k, _)) => format!("unknown key `{key}` (did you mean `{k}`?)"),
                        None => format!(
                            "unknown key at line {} (bloatd's keys: {})",
                            line_col(text, key_offset(text, key)).0,
                            known.join(", ")
                        ),
                    },
                );
            }
        }
        if let Some(rules) = table.get("policy") {
            crate::policy::check_config_value(rules)?;
        }
        let cfg = Config::deserialize(toml::Value::Table(table.clone())).map_err(|_| {
            // Deserialize key by key to find the one with the wrong type.
            for (key, value) in &table {
                let one = toml::Table::from_iter([(key.clone(), value.clone())]);
                if Config::deserialize(toml::Value::Table(one)).is_err() {
                    let expects = KEYS
                        .iter()
                        .find(|(k, _)| k == key)
                        .map(|(_, e)| *e)
                        .unwrap_or("?");
                    return format!("`{key}` must be {expects}");
                }
            }
            "invalid value".to_string()
        })?;
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
        if !(64..=4_194_304).contains(&self.map_capacity) {
            return Err(ConfigError::Invalid(format!(
                "map_capacity = {} is out of range (64..=4194304)",
                self.map_capacity
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
        if !(1..=1000).contains(&self.service_labels) {
            return Err(ConfigError::Invalid(format!(
                "service_labels = {} is out of range (1..=1000)",
                self.service_labels
            )));
        }
        if !(256..=1_048_576).contains(&self.service_entries) {
            return Err(ConfigError::Invalid(format!(
                "service_entries = {} is out of range (256..=1048576)",
                self.service_entries
            )));
        }
        if self.floor_prefix_v4 > 31 || self.floor_prefix_v6 > 127 {
            return Err(ConfigError::Invalid(
                "floor_prefix_v4 must be 0..=31 and floor_prefix_v6 0..=127 (0 turns the prefix fallback off)".into(),
            ));
        }
        if self.journal_max_mb > 0 && !(2..=65_536).contains(&self.journal_max_mb) {
            return Err(ConfigError::Invalid(format!(
                "journal_max_mb = {} is out of range (2..=65536, or 0: no flight recorder)",
                self.journal_max_mb
            )));
        }
        if !(1..=3650).contains(&self.journal_max_days) {
            return Err(ConfigError::Invalid(format!(
                "journal_max_days = {} is out of range (1..=3650)",
                self.journal_max_days
            )));
        }
        if !(1..=60_000).contains(&self.bloat_threshold_ms) {
            return Err(ConfigError::Invalid(format!(
                "bloat_threshold_ms = {} is out of range (1..=60000)",
                self.bloat_threshold_ms
            )));
        }
        if let Some(g) = &self.api_group {
            if crate::rundir::group_id(g).is_none() {
                return Err(ConfigError::Invalid(format!(
                    "api_group: there is no group '{g}' in /etc/group (create it with `groupadd --system {g}`, or remove the key)"
                )));
            }
        }
        if let Some(g) = &self.admin_group {
            if crate::rundir::group_id(g).is_none() {
                return Err(ConfigError::Invalid(format!(
                    "admin_group: there is no group '{g}' in /etc/group (create it with `groupadd --system {g}`, or remove the key)"
                )));
            }
        }
        if self.series_seconds > 3600 {
            return Err(ConfigError::Invalid(
                "series_seconds must be at most 3600".into(),
            ));
        }
        for name in &self.cc {
            if bloatd_cc::Algo::from_name(name).is_none() {
                return Err(ConfigError::Invalid(format!(
                    "cc: unknown algorithm '{name}' (bloatd provides bloatd_westwood and bloatd_cubic)"
                )));
            }
        }
        if bloatd_cc::WestwoodSsthresh::from_name(&self.westwood_ssthresh).is_none() {
            return Err(ConfigError::Invalid(
                "westwood_ssthresh must be \"kernel\" or \"paper\"".into(),
            ));
        }
        crate::policy::validate(&self.policy, self.drwa_lambda, self.drwa_min_bytes)
            .map_err(ConfigError::Invalid)?;
        Ok(())
    }

    /// How bloatd's congestion controls are set up at load.
    pub fn cc_options(&self) -> bloatd_cc::Options {
        bloatd_cc::Options {
            westwood_ssthresh: bloatd_cc::WestwoodSsthresh::from_name(&self.westwood_ssthresh)
                .unwrap_or_default(),
            ratio_interval_us: (self.interval_ms as u32).saturating_mul(1000),
            register_by: None,
        }
    }

    /// The API socket's group: `api_group`, else `bloatd` if it exists.
    pub fn api_gid(&self) -> Option<(String, libc::gid_t)> {
        let name = self.api_group.as_deref().unwrap_or(DEFAULT_API_GROUP);
        crate::rundir::group_id(name).map(|gid| (name.to_string(), gid))
    }

    /// Who may change the kernel through the API: root and `admin_group`.
    pub fn authority(&self) -> crate::authority::Authority {
        crate::authority::Authority {
            admin: self
                .admin_group
                .as_ref()
                .and_then(|name| crate::rundir::group_id(name).map(|g| (name.clone(), g))),
        }
    }

    pub fn pid_file(&self) -> PathBuf {
        self.run_dir.join(crate::rundir::PID_FILE)
    }
    pub fn socket_path(&self) -> PathBuf {
        self.run_dir.join(crate::rundir::SOCKET)
    }
    pub fn log_file(&self) -> PathBuf {
        self.run_dir.join(crate::rundir::LOG)
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
        assert!(Config::parse("interval_ms = 1\n")
            .unwrap_err()
            .contains("interval_ms"));
        assert!(Config::parse("cc = [\"vegas\"]\n")
            .unwrap_err()
            .contains("vegas"));
        for t in [0, 60_001, u64::MAX / 1000] {
            let e = Config::parse(&format!("bloat_threshold_ms = {t}\n")).unwrap_err();
            assert!(
                e.contains("bloat_threshold_ms") && e.contains("1..=60000"),
                "{e}"
            );
        }
        assert!(Config::parse("bloat_threshold_ms = 60000\n").is_ok());
        let e = Config::parse("westwood_ssthresh = \"reno\"\n").unwrap_err();
        assert!(
            e.contains("westwood_ssthresh") && !e.contains("reno"),
            "{e}"
        );
        let c = Config::parse("westwood_ssthresh = \"paper\"\n").unwrap();
        assert_eq!(
            c.cc_options().westwood_ssthresh,
            bloatd_cc::WestwoodSsthresh::Paper
        );
    }

    #[test]
    fn errors_quote_nothing_from_a_foreign_file() {
        let secret = "root:$y$j9T$hunter2:19000:0:99999:7:::\nalice:$y$XyZ:19001:0:99999:7:::\n";
        let e = Config::parse(secret).unwrap_err();
        assert!(
            e.contains("line 1") && !e.contains("hunter2") && !e.contains("root"),
            "{e}"
        );
        // Valid TOML, foreign keys and values.
        let e = Config::parse("[database]\npassword = \"hunter2\"\n").unwrap_err();
        assert!(
            !e.contains("hunter2") && !e.contains("database") && !e.contains("password"),
            "{e}"
        );
        assert!(e.contains("line 1"), "{e}");
        let e = Config::parse("api_token = \"hunter2\"\n").unwrap_err();
        assert!(!e.contains("hunter2") && !e.contains("api_token"), "{e}");
        // A known key with a value of the wrong type: described, not quoted.
        let e = Config::parse("listen = \"hunter2\"\n").unwrap_err();
        assert!(e.contains("listen") && !e.contains("hunter2"), "{e}");
        let e = Config::parse("interval_ms = \"hunter2\"\n").unwrap_err();
        assert!(
            e.contains("`interval_ms` must be an integer") && !e.contains("hunter2"),
            "{e}"
        );
    }

    #[test]
    fn every_field_has_its_key_description() {
        let mut fields: Vec<String> = toml::Table::try_from(Config::default())
            .unwrap()
            .keys()
            .cloned()
            .collect();
        fields.push("api_group".into()); // None: not serialized
        fields.push("admin_group".into());
        fields.sort();
        let mut keys: Vec<String> = KEYS.iter().map(|(k, _)| k.to_string()).collect();
        keys.sort();
        assert_eq!(fields, keys, "KEYS must list every Config field");
    }

    #[test]
    fn a_typo_of_a_key_is_named_with_the_fix() {
        let e = Config::parse("bloat_treshold_ms = 10\n").unwrap_err();
        assert!(
            e.contains("`bloat_treshold_ms`") && e.contains("`bloat_threshold_ms`"),
            "{e}"
        );
    }

    #[test]
    fn a_missing_api_group_is_an_error() {
        let e = Config::parse("api_group = \"no-such-group-here\"\n").unwrap_err();
        assert!(e.contains("groupadd"), "{e}");
        assert!(Config::parse("api_group = \"root\"\n").is_ok());
        let e = Config::parse("admin_group = \"no-such-group-here\"\n").unwrap_err();
        assert!(e.contains("admin_group") && e.contains("groupadd"), "{e}");
    }

    /// The Helm chart's schema (daemon/dist/helm/bloatd/values.schema.json)
    /// refuses unknown config keys at `helm install`, as bloatd does at
    /// start: it must know every key but the ones the chart sets itself.
    #[test]
    fn the_charts_schema_knows_every_key() {
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../dist/helm/bloatd/values.schema.json")).unwrap();
        let mut chart: Vec<&str> = schema["properties"]["config"]["properties"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        // listen, run_dir, state_dir, api_group: set by the chart; map_entries: a
        // deprecated name; admin_group: not offered (the pod's /etc/group
        // holds api.group only, so in a pod only root acts: kubectl exec).
        let by_chart = [
            "listen",
            "run_dir",
            "state_dir",
            "api_group",
            "map_entries",
            "admin_group",
        ];
        let mut ours: Vec<&str> = KEYS
            .iter()
            .map(|(k, _)| *k)
            .filter(|k| !by_chart.contains(k))
            .collect();
        chart.sort();
        ours.sort();
        assert_eq!(
            chart, ours,
            "add the new key to config.properties in daemon/dist/helm/bloatd/values.schema.json"
        );
    }
}
