//! Every setting of bloatd, once: its key, type, default, unit, range,
//! help, `bloatd start` flag and where it goes. The `Config` struct, its
//! defaults, the range checks, the key list the config file is checked
//! against, the start flags (`SettingFlags`), the probes' constants
//! (`Config::globals`), the reference's table of keys (docs/reference.md)
//! and the Helm chart's schema of them come from this table or are tested
//! against it (tests at the end). Adding a setting: a row here, its use,
//! its test (CONTRIBUTING.md, "Adding a setting").

use crate::error::{Error, Result};
use crate::probes::abi::Globals;
use bloatd_model::policy::{DrwaMode, Rule};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Where a setting goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum To {
    /// A constant of the probes, set before load (`Config::globals`).
    Bpf,
    /// The daemon's own work in user space.
    Daemon,
    /// What the API and the dashboard show.
    Dashboard,
}

#[cfg_attr(not(test), allow(dead_code))] // the reference's table
impl To {
    fn as_str(self) -> &'static str {
        match self {
            To::Bpf => "probes",
            To::Daemon => "daemon",
            To::Dashboard => "dashboard",
        }
    }
}

/// A setting's `bloatd start` flag.
#[derive(Clone, Copy, Debug)]
pub enum Flag {
    /// `--LONG VALUE`.
    Value {
        long: &'static str,
        value_name: &'static str,
        choices: &'static [&'static str],
    },
    /// `--LONG[=VALUE]`: VALUE `missing` when left out.
    Optional {
        long: &'static str,
        value_name: &'static str,
        choices: &'static [&'static str],
        missing: &'static str,
    },
    /// `--LONG A,B,...`, and `--NONE` (with its help) for an empty list.
    List {
        long: &'static str,
        value_name: &'static str,
        none: &'static str,
        none_help: &'static str,
    },
    /// `--LONG VALUE`, repeatable: each appended to the list.
    Each {
        long: &'static str,
        value_name: &'static str,
    },
    /// `--LONG` sets the key true.
    On(&'static str),
    /// `--LONG` sets the key false; its own help.
    Off(&'static str, &'static str),
}

impl Flag {
    /// `--interval MS` (for the flag when it is only a value).
    pub const fn value(long: &'static str, value_name: &'static str) -> Flag {
        Flag::Value {
            long,
            value_name,
            choices: &[],
        }
    }

    fn long(&self) -> &'static str {
        match *self {
            Flag::Value { long, .. }
            | Flag::Optional { long, .. }
            | Flag::List { long, .. }
            | Flag::Each { long, .. }
            | Flag::On(long)
            | Flag::Off(long, _) => long,
        }
    }
}

/// One row's description; `Setting` adds what the macro knows (key, help,
/// default, type). `to`, `chart` and `schema` are read by the tests that
/// hold the reference and the chart to the table.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(test), allow(dead_code))]
pub struct Meta {
    /// The unit of a number ("ms", "s", "bytes"), or "".
    pub unit: &'static str,
    /// Inclusive bounds of a number.
    pub range: Option<(f64, f64)>,
    /// Said after the bounds when a value is out of them.
    pub range_why: &'static str,
    /// What the value must be (named when the config has another type).
    pub expects: &'static str,
    pub flag: Option<Flag>,
    pub to: To,
    /// Offered in the Helm chart's values (daemon/dist/helm).
    pub chart: bool,
    /// The chart schema's entry when the type alone does not tell it.
    pub schema: Option<&'static str>,
}

impl Meta {
    /// A row with nothing said: each row states what it needs over this.
    pub const NONE: Meta = Meta {
        unit: "",
        range: None,
        range_why: "",
        expects: "",
        flag: None,
        to: To::Daemon,
        chart: true,
        schema: None,
    };
}

/// A row of the table.
pub struct Setting {
    pub key: &'static str,
    /// The doc comment of the row: the config's and the flag's help.
    pub help: &'static str,
    pub meta: Meta,
    /// The value's JSON type, for the chart's schema.
    json: &'static str,
    /// The default, as the reference and `--help` show it.
    default: fn() -> String,
    /// The value of this key in `c`, as a number, if it is one.
    number: fn(&Config) -> Option<f64>,
    /// Take a flag's value into the key (Err: what is wrong with it).
    set: fn(&mut Config, &str) -> Result<()>,
}

/// What a setting's type can do for the table.
pub trait SettingValue {
    const JSON: &'static str;
    fn number(&self) -> Option<f64> {
        None
    }
    /// A flag's value (a switch's: "true" or "false").
    fn set_flag(&mut self, s: &str) -> Result<()>;
    /// As the reference and `--help` show it.
    fn shown(&self) -> String;
}

/// Values a flag gives as text, parsed as their type (`FromStr`) and shown
/// as it displays them; numbers are checked against the row's range.
macro_rules! parsed {
    ($($t:ty: $json:literal $(, $number:ident)?;)*) => {$(
        impl SettingValue for $t {
            const JSON: &'static str = $json;
            $(fn $number(&self) -> Option<f64> {
                Some(*self as f64)
            })?
            fn set_flag(&mut self, s: &str) -> Result<()> {
                *self = s.parse().map_err(|e| Error::Value(Box::new(e)))?;
                Ok(())
            }
            fn shown(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
parsed! {
    u8: "integer", number;
    u32: "integer", number;
    u64: "integer", number;
    f64: "number", number;
    SocketAddr: "string";
    String: "string";
    // A switch's flag gives "true" or "false" (`Flag::On`, `Flag::Off`).
    bool: "boolean";
}

macro_rules! by_name {
    ($($t:ty),*) => {$(
        impl SettingValue for $t {
            const JSON: &'static str = "string";
            fn set_flag(&mut self, s: &str) -> Result<()> {
                *self = <$t>::from_name(s)
                    .ok_or_else(|| Error::invalid(format!("'{s}' is not one of its values")))?;
                Ok(())
            }
            fn shown(&self) -> String {
                self.as_str().to_string()
            }
        }
    )*};
}
by_name!(Sampling, DrwaMode);

impl SettingValue for PathBuf {
    const JSON: &'static str = "string";
    fn set_flag(&mut self, s: &str) -> Result<()> {
        *self = PathBuf::from(s);
        Ok(())
    }
    fn shown(&self) -> String {
        self.display().to_string()
    }
}

impl SettingValue for Option<String> {
    const JSON: &'static str = "string";
    fn set_flag(&mut self, s: &str) -> Result<()> {
        *self = Some(s.to_string());
        Ok(())
    }
    fn shown(&self) -> String {
        self.clone().unwrap_or_default()
    }
}

/// A list given at once (`--cc a,b`; `--no-cc`: empty).
impl SettingValue for Vec<String> {
    const JSON: &'static str = "array";
    fn set_flag(&mut self, s: &str) -> Result<()> {
        *self = s
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        Ok(())
    }
    fn shown(&self) -> String {
        self.join(",")
    }
}

macro_rules! settings {
    ($(
        $(#[doc = $doc:literal])*
        $key:ident: $ty:ty = $default:expr, $meta:expr;
    )*) => {
        /// The configuration: the config file's keys with the flags given
        /// over them (settings.rs has the table).
        #[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
        #[serde(deny_unknown_fields, default)]
        pub struct Config {
            $( $(#[doc = $doc])* pub $key: $ty, )*
        }

        impl Default for Config {
            fn default() -> Self {
                Config { $( $key: $default, )* }
            }
        }

        /// The table, in the config file's order.
        pub static SETTINGS: &[Setting] = &[$(
            Setting {
                key: stringify!($key),
                help: concat!($($doc, "\n"),*),
                meta: $meta,
                json: <$ty as SettingValue>::JSON,
                default: || SettingValue::shown(&Config::default().$key),
                number: |c| SettingValue::number(&c.$key),
                set: |c, s| SettingValue::set_flag(&mut c.$key, s),
            },
        )*];
    };
}

const MS: &str = "ms";

settings! {
    /// Prometheus listener address.
    listen: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 9477)), Meta {
        expects: "an address and port, like \"127.0.0.1:9477\"",
        flag: Some(Flag::value("listen", "ADDR")),
        chart: false,
        ..Meta::NONE
    };
    /// Directory for the pid file, the API socket and the log.
    run_dir: PathBuf = PathBuf::from(DEFAULT_RUN_DIR), Meta {
        expects: "a directory path",
        chart: false,
        ..Meta::NONE
    };
    /// Directory of the flight recorder's journal, kept across restarts
    /// (the unit's StateDirectory).
    state_dir: PathBuf = PathBuf::from(DEFAULT_STATE_DIR), Meta {
        expects: "a directory path",
        chart: false,
        ..Meta::NONE
    };
    /// The flight recorder's journal bound, the database and its log
    /// together; the oldest data goes first. 0 turns the recorder off.
    journal_max_mb: u64 = 64, Meta {
        unit: "MB",
        range: Some((0.0, 65_536.0)),
        range_why: "; 0 turns the flight recorder off, else at least 2",
        expects: "an integer (megabytes; 0: no flight recorder)",
        ..Meta::NONE
    };
    /// What the flight recorder's journal keeps at most.
    journal_max_days: u32 = 30, Meta {
        unit: "days",
        range: Some((1.0, 3650.0)),
        expects: "an integer (days)",
        ..Meta::NONE
    };
    /// Sampling interval: at most one sample per socket per interval.
    interval_ms: u64 = 100, Meta {
        unit: MS,
        range: Some((10.0, 10_000.0)),
        expects: "an integer (milliseconds)",
        flag: Some(Flag::value("interval", "MS")),
        to: To::Bpf,
        ..Meta::NONE
    };
    /// Which intervals of a sparse socket are sampled: adaptive (on a busy
    /// CPU, a socket that is not bloated, watched, acted on or dense is
    /// looked at in a share of its segments, chosen from what a look costs;
    /// every segment on a quiet CPU; each look weighted so histograms stay
    /// unbiased in socket-time; reads stay exact) or exact (every socket
    /// every interval it carries traffic, ~8x the kernel's cost on a busy
    /// server).
    sampling: Sampling = Sampling::Adaptive, Meta {
        expects: "\"adaptive\" or \"exact\"",
        flag: Some(Flag::Value { long: "sampling", value_name: "MODE", choices: &["adaptive", "exact"] }),
        to: To::Bpf,
        schema: Some(r#"{"enum": ["adaptive", "exact"]}"#),
        ..Meta::NONE
    };
    /// Sockets the kernel tracks at most (the socket map's bound; beyond it
    /// new sockets are counted as dropped).
    map_capacity: u32 = 65536, Meta {
        range: Some((64.0, 4_194_304.0)),
        expects: "an integer",
        flag: Some(Flag::value("map-capacity", "N")),
        to: To::Bpf,
        ..Meta::NONE
    };
    /// Queueing delay from which a socket counts as bloated.
    bloat_threshold_ms: u64 = 100, Meta {
        unit: MS,
        range: Some((1.0, 60_000.0)),
        expects: "an integer (milliseconds)",
        flag: Some(Flag::value("bloat-threshold", "MS")),
        to: To::Bpf,
        ..Meta::NONE
    };
    /// A path whose losses or ECN marks come below this much
    /// queue has an AQM; a standing queue this long, or losses above it,
    /// is a drop-tail buffer; on a link slow enough, four packets' time at
    /// the path's rate instead (`bloatd paths`, docs/design.md "Bottleneck
    /// classes").
    aqm_queue_ms: u64 = 30, Meta {
        unit: MS,
        range: Some((6.0, 10_000.0)),
        range_why: "; below 6 ms it meets the 5 ms under which a path is clear",
        expects: "an integer (milliseconds)",
        ..Meta::NONE
    };
    /// How much history per socket the API keeps for `bloatd top`.
    series_seconds: u64 = 60, Meta {
        unit: "s",
        range: Some((0.0, 3600.0)),
        expects: "an integer (seconds)",
        to: To::Dashboard,
        ..Meta::NONE
    };
    /// The oldest the sockets a dashboard or a series client sees may be:
    /// reads for watchers are shared for a hundred times what they cost,
    /// up to this (engine/reader.rs).
    watch_max_age_ms: u64 = 5000, Meta {
        unit: MS,
        range: Some((100.0, 60_000.0)),
        expects: "an integer (milliseconds)",
        to: To::Dashboard,
        ..Meta::NONE
    };
    /// Congestion controls to register, comma separated.
    cc: Vec<String> = vec!["bloatd_westwood".into(), "bloatd_cubic".into()], Meta {
        expects: "a list of names, like [\"bloatd_westwood\"]",
        flag: Some(Flag::List { long: "cc", value_name: "LIST", none: "no-cc", none_help: "Register no congestion control" }),
        schema: Some(r#"{"type": "array", "items": {"enum": ["bloatd_westwood", "bloatd_cubic"]}, "uniqueItems": true}"#),
        ..Meta::NONE
    };
    /// bloatd_westwood's ssthresh on three duplicate ACKs: kernel (Reno's
    /// half, BWE x RTTmin when the recovery completes, as Linux's
    /// tcp_westwood) or paper (BWE x RTTmin at once).
    westwood_ssthresh: String = "kernel".into(), Meta {
        expects: "\"kernel\" or \"paper\"",
        flag: Some(Flag::Value { long: "westwood-ssthresh", value_name: "WHICH", choices: &["kernel", "paper"] }),
        schema: Some(r#"{"enum": ["kernel", "paper"]}"#),
        ..Meta::NONE
    };
    /// Measure queueing delay against path floors (README, "Path floors");
    /// false: against each socket's own minimum, with no floor kept.
    floors: bool = true, Meta {
        expects: "true or false",
        flag: Some(Flag::Off("no-floors", "Keep no path floors: measure queueing delay against each socket's own minimum RTT (config `floors = false`; README, \"Path floors\")")),
        to: To::Bpf,
        ..Meta::NONE
    };
    /// Path floors: how long the lowest RTT toward a peer is remembered.
    /// Longer than a standing queue lasts.
    floor_window_s: u32 = 1800, Meta {
        unit: "s",
        range: Some((10.0, 86_400.0)),
        expects: "an integer (seconds)",
        to: To::Bpf,
        ..Meta::NONE
    };
    /// How many peers keep a floor (least recently used go); prefixes keep
    /// theirs in a table of a quarter of this, apart.
    floor_entries: u32 = 32768, Meta {
        range: Some((64.0, 1_048_576.0)),
        expects: "an integer",
        to: To::Bpf,
        ..Meta::NONE
    };
    /// IPv4 prefix length whose floor serves a peer with no history (0: off).
    floor_prefix_v4: u8 = 24, Meta {
        range: Some((0.0, 31.0)),
        range_why: "; 0 turns the prefix fallback off",
        expects: "an integer (prefix length)",
        to: To::Bpf,
        ..Meta::NONE
    };
    /// IPv6 prefix length whose floor serves a peer with no history (0: off).
    floor_prefix_v6: u8 = 64, Meta {
        range: Some((0.0, 127.0)),
        range_why: "; 0 turns the prefix fallback off",
        expects: "an integer (prefix length)",
        to: To::Bpf,
        ..Meta::NONE
    };
    /// Infer a new peer's floor from the queue its route's bottleneck holds.
    floor_infer: bool = true, Meta {
        expects: "true or false",
        to: To::Bpf,
        ..Meta::NONE
    };
    /// Services with a `service` label value of their own in /metrics (the
    /// top N by socket-time; the rest are "other").
    service_labels: u32 = 20, Meta {
        range: Some((1.0, 1000.0)),
        expects: "an integer (services with a label of their own in /metrics)",
        flag: Some(Flag::value("service-labels", "N")),
        ..Meta::NONE
    };
    /// Per-service histograms (service x congestion control x role) the
    /// kernel keeps at most; beyond, samples count as "other".
    service_entries: u32 = 8192, Meta {
        range: Some((256.0, 1_048_576.0)),
        expects: "an integer (per-service histograms the kernel keeps)",
        to: To::Bpf,
        ..Meta::NONE
    };
    /// Enable the kernel's BPF run-time statistics while running, to see
    /// each probe's cost in /metrics (costs a little per event).
    bpf_stats: bool = false, Meta {
        expects: "true or false",
        flag: Some(Flag::On("bpf-stats")),
        ..Meta::NONE
    };
    /// tracing filter, e.g. "info" or "bloatd=debug".
    log: String = "info".into(), Meta {
        expects: "a string, like \"info\"",
        ..Meta::NONE
    };
    /// Group given access to the API socket (and the run directory). Unset:
    /// `bloatd` where that group exists (the package creates it), else root
    /// only.
    api_group: Option<String> = None, Meta {
        expects: "a group name, like \"bloatd\"",
        chart: false,
        ..Meta::NONE
    };
    /// Group whose members may change the kernel through the API (the
    /// default congestion control, DRWA, rules), besides root. Unset: root
    /// only. The API group watches.
    admin_group: Option<String> = None, Meta {
        expects: "a group name, like \"bloatd-admin\"",
        // In a pod /etc/group holds api.group only: only root acts there.
        chart: false,
        ..Meta::NONE
    };
    /// A congestion control rule, as KEY=VALUE,... with the keys of a
    /// [[policy]] table (name, dport, sport, cgroup, path, bulk_bytes, cc,
    /// drwa, notsent_lowat, enabled), e.g. `sport=5201,cc=bloatd_westwood`,
    /// `sport=8080,notsent_lowat=128Ki` or
    /// `name=bulk,bulk_bytes=1M,cc=bloatd_westwood`. Repeatable; after the
    /// config's rules (`[[policy]]` tables, applied by the sock_ops program
    /// in order: the first that selects a connection decides).
    policy: Vec<Rule> = Vec::new(), Meta {
        expects: "a list of [[policy]] tables (README, \"Acting on bloat\")",
        flag: Some(Flag::Each { long: "policy", value_name: "RULE" }),
        to: To::Bpf,
        schema: Some(r##"{"type": "array", "items": {"type": "object", "additionalProperties": false, "properties": {"name": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,32}$"}, "dport": {"$ref": "#/definitions/portOrRange"}, "sport": {"$ref": "#/definitions/portOrRange"}, "cgroup": {"type": "string"}, "path": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}, "bulk_bytes": {"type": ["integer", "string"]}, "cc": {"type": "string"}, "drwa": {"type": "boolean"}, "notsent_lowat": {"type": ["integer", "string"]}, "enabled": {"type": "boolean"}}}}"##),
        ..Meta::NONE
    };
    /// The receiver's Dynamic Receive Window Adjustment: on (default when
    /// the flag is given), off (armed, to switch on live with `bloatd
    /// policy drwa on` or `bloatd top`'s D key) or disabled (the kernel is
    /// asked for nothing).
    drwa: DrwaMode = DrwaMode::Disabled, Meta {
        expects: "\"on\", \"off\" or \"disabled\"",
        flag: Some(Flag::Optional { long: "drwa", value_name: "MODE", choices: &["on", "off", "disabled"], missing: "on" }),
        to: To::Bpf,
        schema: Some(r#"{"enum": ["on", "off", "disabled"]}"#),
        ..Meta::NONE
    };
    /// DRWA's lambda: the window is lambda x floor / RTT x data per RTT.
    drwa_lambda: f64 = 3.0, Meta {
        range: Some((DRWA_LAMBDA_MIN, 16.0)),
        range_why: ": the paper's is 3; below 2 a window with no queue behind it grows more slowly than the sender's slow start, and at 1 it can never grow",
        expects: "a number from 2.0 to 16.0 (the paper's lambda is 3; below 2 DRWA would slow a connection that builds no queue)",
        to: To::Bpf,
        ..Meta::NONE
    };
    /// Bytes a connection receives before DRWA clamps its window.
    drwa_min_bytes: u64 = 8_192, Meta {
        unit: "bytes",
        range: Some((0.0, (1u64 << 40) as f64)),
        expects: "an integer (bytes a connection receives before DRWA acts on it)",
        to: To::Bpf,
        ..Meta::NONE
    };
    /// DRWA and bulk rules' mid-flow switches act on paths the classifier
    /// calls `aqm` or `ecn-aqm` too. Off (the default), an AQM already
    /// holds those paths' queue near its target: DRWA gives back a window
    /// it clamped and runs no round there, and a bulk rule does not
    /// switch (README, "Acting on bloat"; docs/design.md, "Policy and
    /// path classes"). Unknown and unclassified paths are acted on as
    /// always.
    act_on_aqm: bool = false, Meta {
        expects: "true or false",
        flag: Some(Flag::On("act-on-aqm")),
        to: To::Bpf,
        ..Meta::NONE
    };
}

pub const DEFAULT_RUN_DIR: &str = "/run/bloatd";
pub const DEFAULT_STATE_DIR: &str = "/var/lib/bloatd";

/// DRWA's smallest lambda. With no queue the window grows by lambda x
/// RTT_min / RTT a round (bpf/policy.h, drwa_round), and RTT_min is never
/// above the RTT: at 1 the window can only shrink, and below 2 it grows
/// more slowly than a sender in slow start, which doubles its window each
/// RTT, so DRWA would hold back a connection that builds no queue.
const DRWA_LAMBDA_MIN: f64 = 2.0;

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

    pub fn from_name(s: &str) -> Option<Sampling> {
        match s {
            "adaptive" => Some(Sampling::Adaptive),
            "exact" => Some(Sampling::Exact),
            _ => None,
        }
    }
}

/// A number as the range messages show it: `2.0` for a fraction's bound,
/// `10000` for an integer's.
fn shown_bound(x: f64, json: &str) -> String {
    if json == "number" {
        format!("{x:.1}")
    } else {
        format!("{}", x as u64)
    }
}

impl Setting {
    /// The row of `key`.
    pub fn of(key: &str) -> Option<&'static Setting> {
        SETTINGS.iter().find(|s| s.key == key)
    }

    /// Err naming the key, its value and its bounds when `c`'s value is
    /// out of them.
    fn check_range(&self, c: &Config) -> Result<()> {
        let (Some((lo, hi)), Some(v)) = (self.meta.range, (self.number)(c)) else {
            return Ok(());
        };
        if (lo..=hi).contains(&v) {
            return Ok(());
        }
        Err(Error::invalid(format!(
            "{} = {v} is out of range ({}..={}){}",
            self.key,
            shown_bound(lo, self.json),
            shown_bound(hi, self.json),
            self.meta.range_why,
        )))
    }

    /// The chart schema's entry for this key.
    #[cfg(test)]
    pub fn schema(&self) -> serde_json::Value {
        if let Some(s) = self.meta.schema {
            return serde_json::from_str(s).expect("a row's schema is JSON");
        }
        let mut m = serde_json::Map::new();
        m.insert("type".into(), self.json.into());
        if let Some((lo, hi)) = self.meta.range {
            let n = |x: f64| -> serde_json::Value {
                if self.json == "integer" {
                    (x as u64).into()
                } else {
                    x.into()
                }
            };
            m.insert("minimum".into(), n(lo));
            m.insert("maximum".into(), n(hi));
        }
        serde_json::Value::Object(m)
    }

    /// The row's help on one line, without its last full stop (as clap
    /// shows a doc comment).
    fn one_line_help(&self) -> String {
        let help = self.help.split_whitespace().collect::<Vec<_>>().join(" ");
        help.trim_end_matches('.').to_string()
    }

    /// The flag's help: the row's, with the unit and the default.
    fn flag_help(&self) -> String {
        let unit = match self.meta.unit {
            "" => String::new(),
            u => format!(" ({u})"),
        };
        format!(
            "{}{unit} [default: {}]",
            self.one_line_help(),
            (self.default)()
        )
    }
}

/// The reference's table of keys (docs/reference.md, "Config keys").
#[cfg(test)]
pub fn reference_table() -> String {
    let mut t = String::from(
        "| key | default | unit | range | `bloatd start` flag | goes to | what it is |\n|---|---|---|---|---|---|---|\n",
    );
    for s in SETTINGS {
        let range = s
            .meta
            .range
            .map(|(lo, hi)| format!("{}–{}", shown_bound(lo, s.json), shown_bound(hi, s.json)))
            .unwrap_or_default();
        let flag = s
            .meta
            .flag
            .map(|f| format!("`--{}`", f.long()))
            .unwrap_or_default();
        let default = match (s.default)() {
            d if d.is_empty() => String::new(),
            d => format!("`{d}`"),
        };
        t += &format!(
            "| `{}` | {default} | {} | {range} | {flag} | {} | {} |\n",
            s.key,
            s.meta.unit,
            s.meta.to.as_str(),
            s.help
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .replace('|', "\\|"),
        );
    }
    t
}

impl Config {
    /// Every key's range (the table's).
    pub fn check_ranges(&self) -> Result<()> {
        SETTINGS.iter().try_for_each(|s| s.check_range(self))?;
        // Below 2 MB the journal's log alone (a checkpoint's worth) fills
        // the bound: the one value of the range refused.
        if self.journal_max_mb == 1 {
            return Err(Error::invalid("journal_max_mb = 1 is out of range (0..=65536); 0 turns the flight recorder off, else at least 2"));
        }
        Ok(())
    }

    /// What the key must be, for a config value of the wrong type.
    pub fn expects(key: &str) -> &'static str {
        Setting::of(key).map(|s| s.meta.expects).unwrap_or("?")
    }

    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms)
    }

    /// `bloat_threshold_ms` in the probes' unit (0 never: the range's
    /// least is 1 ms).
    pub fn bloat_threshold_us(&self) -> u32 {
        self.bloat_threshold_ms
            .saturating_mul(1000)
            .min(u32::MAX as u64) as u32
    }

    /// The probes' constants (bpf/probes.bpf.c's `const volatile`s), every
    /// one set here from the settings and what the start `found`.
    pub fn globals(&self, found: Found) -> Globals {
        Globals {
            sample_interval_ns: self.interval().as_nanos() as u64,
            sampling_adaptive: (self.sampling == Sampling::Adaptive) as u32,
            map_capacity: self.map_capacity as u64,
            bloat_threshold_us: self.bloat_threshold_us(),
            floor_window_s: self.floor_window_s,
            floor_prefix_v4: self.floor_prefix_v4 as u32,
            floor_prefix_v6: self.floor_prefix_v6 as u32,
            floor_infer_on: self.floor_infer as u32,
            floors_on: self.floors as u32,
            ca_state_from_sock: !found.cong_state_tracepoint as u32,
            policy_nrules: found.policy_nrules,
            drwa_armed: found.drwa_armed as u32,
            // The kernel takes lambda with 8 fraction bits.
            drwa_lambda_x256: (self.drwa_lambda * 256.0).round() as u32,
            drwa_min_bytes: self.drwa_min_bytes,
            act_on_aqm: self.act_on_aqm as u32,
        }
    }
}

/// What the start found that the probes' constants carry besides the
/// settings: whether the kernel has the congestion-state tracepoint, the
/// rules resolved, and whether DRWA is armed (the config asks for it and
/// the kernel can).
#[derive(Clone, Copy, Debug)]
pub struct Found {
    pub cong_state_tracepoint: bool,
    pub policy_nrules: u32,
    pub drwa_armed: bool,
}

/// The settings' flags of `bloatd start`, made from the table: the values
/// given, by row, in the order given.
#[derive(Clone, Debug, Default)]
pub struct SettingFlags {
    given: Vec<(&'static Setting, String)>,
}

impl SettingFlags {
    /// The flags given, over `cfg`.
    pub fn apply(&self, cfg: &mut Config) -> Result<()> {
        for (s, v) in &self.given {
            (s.set)(cfg, v).map_err(|e| {
                Error::context(
                    format!("--{}", s.meta.flag.map(|f| f.long()).unwrap_or(s.key)),
                    e,
                )
            })?;
        }
        Ok(())
    }
}

/// A flag's value checked as its key takes it, so a bad one is clap's
/// error (exit 2) naming the flag.
fn checked(s: &'static Setting) -> impl Fn(&str) -> Result<String> + Clone + Send + Sync {
    move |v: &str| {
        let mut c = Config::default();
        (s.set)(&mut c, v).map(|_| v.to_string())
    }
}

impl clap::Args for SettingFlags {
    fn augment_args(mut cmd: clap::Command) -> clap::Command {
        use clap::{Arg, ArgAction};
        for s in SETTINGS {
            let Some(flag) = s.meta.flag else { continue };
            let arg = Arg::new(s.key).long(flag.long());
            let arg = match flag {
                Flag::Value {
                    value_name,
                    choices,
                    ..
                } => {
                    let a = arg.value_name(value_name).help(s.flag_help());
                    if choices.is_empty() {
                        a.value_parser(checked(s))
                    } else {
                        a.value_parser(clap::builder::PossibleValuesParser::new(choices))
                    }
                }
                Flag::Optional {
                    value_name,
                    choices,
                    missing,
                    ..
                } => arg
                    .value_name(value_name)
                    .num_args(0..=1)
                    .default_missing_value(missing)
                    .help(s.flag_help())
                    .value_parser(clap::builder::PossibleValuesParser::new(choices)),
                Flag::List { value_name, .. } => arg
                    .value_name(value_name)
                    .action(ArgAction::Append)
                    .help(s.flag_help()),
                Flag::Each { value_name, .. } => arg
                    .value_name(value_name)
                    .action(ArgAction::Append)
                    .value_parser(checked(s))
                    .help(s.one_line_help()),
                Flag::On(_) => arg.action(ArgAction::SetTrue).help(s.one_line_help()),
                Flag::Off(_, help) => arg.action(ArgAction::SetTrue).help(help),
            };
            cmd = cmd.arg(arg);
            if let Flag::List {
                none, none_help, ..
            } = flag
            {
                cmd = cmd.arg(
                    Arg::new(none)
                        .long(none)
                        .action(ArgAction::SetTrue)
                        .conflicts_with(s.key)
                        .help(none_help),
                );
            }
        }
        cmd
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl clap::FromArgMatches for SettingFlags {
    fn from_arg_matches(m: &clap::ArgMatches) -> std::result::Result<Self, clap::Error> {
        let mut given = Vec::new();
        for s in SETTINGS {
            let Some(flag) = s.meta.flag else { continue };
            match flag {
                Flag::On(_) | Flag::Off(..) => {
                    if m.get_flag(s.key) {
                        let v = matches!(flag, Flag::On(_)).to_string();
                        given.push((s, v));
                    }
                }
                Flag::List { none, .. } => {
                    if m.get_flag(none) {
                        given.push((s, String::new()));
                    }
                    if let Some(v) = m.get_many::<String>(s.key) {
                        given.push((s, v.cloned().collect::<Vec<_>>().join(",")));
                    }
                }
                _ => given.extend(
                    m.get_many::<String>(s.key)
                        .into_iter()
                        .flatten()
                        .map(|v| (s, v.clone())),
                ),
            }
        }
        Ok(SettingFlags { given })
    }

    fn update_from_arg_matches(
        &mut self,
        m: &clap::ArgMatches,
    ) -> std::result::Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl std::fmt::Debug for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str) -> (std::path::PathBuf, String) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
        let text = std::fs::read_to_string(&path).unwrap();
        (path, text)
    }

    /// `text[start..end]` must be `want`; with BLOATD_BLESS=1 it is
    /// written so.
    fn generated(path: &std::path::Path, text: &str, start: usize, end: usize, want: &str) {
        if text[start..end] == *want {
            return;
        }
        if std::env::var_os("BLOATD_BLESS").is_some() {
            let new = format!("{}{want}{}", &text[..start], &text[end..]);
            std::fs::write(path, new).unwrap();
            return;
        }
        panic!(
            "{} is not what the settings table makes: `BLOATD_BLESS=1 cargo test -p bloatd settings` writes it",
            path.display()
        );
    }

    /// The reference's table of keys, between `<!-- settings -->` and
    /// `<!-- /settings -->`.
    #[test]
    fn the_reference_lists_the_table() {
        let (path, text) = file("../docs/reference.md");
        let (open, close) = ("<!-- settings -->\n", "<!-- /settings -->");
        let start = text.find(open).expect("the opening marker") + open.len();
        let end = text.find(close).expect("the closing marker");
        generated(&path, &text, start, end, &reference_table());
    }

    /// JSON on one line, as the chart's schema writes an entry.
    fn one_line(v: &serde_json::Value) -> String {
        match v {
            serde_json::Value::Object(m) => format!(
                "{{{}}}",
                m.iter()
                    .map(|(k, v)| format!(
                        "{}: {}",
                        serde_json::Value::from(k.as_str()),
                        one_line(v)
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            serde_json::Value::Array(a) => {
                format!(
                    "[{}]",
                    a.iter().map(one_line).collect::<Vec<_>>().join(", ")
                )
            }
            v => v.to_string(),
        }
    }

    /// Where the object that opens at `text[open]` closes (strings skipped).
    fn object_end(text: &str, open: usize) -> usize {
        let (mut depth, mut in_str, mut escaped) = (0, false, false);
        for (i, c) in text[open..].char_indices() {
            match (in_str, escaped, c) {
                (true, true, _) => escaped = false,
                (true, false, '\\') => escaped = true,
                (true, false, '"') => in_str = false,
                (true, false, _) => {}
                (false, _, '"') => in_str = true,
                (false, _, '{') => depth += 1,
                (false, _, '}') => {
                    depth -= 1;
                    if depth == 0 {
                        return open + i;
                    }
                }
                _ => {}
            }
        }
        panic!("unclosed object");
    }

    /// The Helm chart's schema (daemon/dist/helm/bloatd/values.schema.json)
    /// refuses at `helm install` what bloatd refuses at start: each key the
    /// chart offers (not listen, run_dir and api_group: the chart sets
    /// them), with the table's type and range, a line each.
    #[test]
    fn the_charts_schema_is_the_table() {
        let (path, text) = file("dist/helm/bloatd/values.schema.json");
        let config = text.find("\"config\": {").expect("config in the schema");
        let props = config
            + text[config..]
                .find("\"properties\": {")
                .expect("its properties");
        let open = props + text[props..].find('{').unwrap();
        let end = object_end(&text, open);
        let lines: Vec<String> = SETTINGS
            .iter()
            .filter(|s| s.meta.chart)
            .map(|s| format!("        \"{}\": {}", s.key, one_line(&s.schema())))
            .collect();
        let want = format!("{{\n{}\n      ", lines.join(",\n"));
        generated(&path, &text, open, end, &want);
    }

    #[test]
    fn defaults_are_in_range_and_flags_are_unique() {
        Config::default().check_ranges().unwrap();
        let mut longs: Vec<&str> = SETTINGS
            .iter()
            .filter_map(|s| s.meta.flag.map(|f| f.long()))
            .collect();
        let n = longs.len();
        longs.sort();
        longs.dedup();
        assert_eq!(longs.len(), n, "two rows with one flag");
    }

    #[test]
    fn every_key_has_what_it_expects() {
        for s in SETTINGS {
            assert!(!s.meta.expects.is_empty(), "{}: say what it expects", s.key);
            assert!(!s.help.is_empty(), "{}: a doc comment", s.key);
        }
    }

    #[test]
    fn the_globals_carry_the_settings_in_the_probes_units() {
        let c = Config {
            interval_ms: 250,
            bloat_threshold_ms: 60_000,
            sampling: Sampling::Exact,
            drwa: DrwaMode::Off,
            ..Config::default()
        };
        let g = c.globals(Found {
            cong_state_tracepoint: false,
            policy_nrules: 3,
            drwa_armed: true,
        });
        assert_eq!(g.sample_interval_ns, 250_000_000);
        assert_eq!(g.bloat_threshold_us, 60_000_000);
        assert_eq!(g.sampling_adaptive, 0);
        assert_eq!(g.ca_state_from_sock, 1);
        assert_eq!((g.policy_nrules, g.drwa_armed), (3, 1));
    }
}
