//! Acting on bloat: per-flow congestion control policy and the receiver's
//! Dynamic Receive Window Adjustment (README, "Acting on bloat").
//!
//! Rules come from `[[policy]]` tables of the config and from `--policy` on
//! the command line, in that order; the first rule that selects a
//! connection at its handshake decides its congestion control (and whether
//! DRWA is forced on it), the first bulk rule that selects it switches it
//! once it has sent the rule's bytes. Everything is checked before anything
//! is attached: a rule naming an algorithm the kernel does not have, a
//! cgroup that does not exist, or a rule that can never apply because an
//! earlier one selects every connection it does, is bad input (exit 2).
//!
//! Three hops from the kernel to the screen: bpf/policy_ops.h (the sock_ops
//! program applies the rules and DRWA and writes what it did into the
//! socket's record, `bloatd_sock.pol`), this module (the record into
//! `SocketPolicy`, the counters into /metrics), the dashboard
//! (bloatd_tui::model::SocketPolicy).

use crate::api::PolicyCounts;
use crate::probes::abi::{policy_action, policy_count, policy_flag, policy_match};
use crate::probes::abi::{BloatdPolicyCounts, BloatdPolicyRule, BloatdSock};
use bloatd_tui::model::{Drwa, SocketPolicy};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::path::{Path, PathBuf};

/// Rules the kernel holds at most (bpf/policy.h).
pub const MAX_RULES: usize = crate::probes::abi::policy_limits::RULES as usize;
const CC_NAME_MAX: usize = 15;

/// Every key of a `[[policy]]` table, and what its value must be.
pub const RULE_KEYS: &[(&str, &str)] = &[
    (
        "name",
        "a name of letters, digits, '-', '_' or '.', like \"bulk-westwood\"",
    ),
    (
        "dport",
        "a port or a range, like 443 or \"8000-8099\" (the peer's port)",
    ),
    (
        "sport",
        "a port or a range, like 5201 or \"8000-8099\" (our port)",
    ),
    (
        "cgroup",
        "a cgroup v2 path, like \"system.slice/backup.service\"",
    ),
    (
        "bulk_bytes",
        "bytes, like 1000000 or \"1M\" (switch once the connection has sent them)",
    ),
    ("cc", "a congestion control name, like \"bloatd_westwood\""),
    (
        "drwa",
        "true or false (DRWA on the connections the rule selects)",
    ),
    ("enabled", "true or false"),
];

/// A port or an inclusive range of ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    pub lo: u16,
    pub hi: u16,
}

impl PortRange {
    fn parse(s: &str) -> Result<PortRange, String> {
        let port = |p: &str| -> Result<u16, String> {
            match p.trim().parse::<u16>() {
                Ok(v) if v > 0 => Ok(v),
                _ => Err("a port is 1..65535".to_string()),
            }
        };
        let r = match s.split_once('-') {
            Some((a, b)) => PortRange {
                lo: port(a)?,
                hi: port(b)?,
            },
            None => {
                let p = port(s)?;
                PortRange { lo: p, hi: p }
            }
        };
        if r.lo > r.hi {
            return Err(format!("the range {}-{} is empty", r.lo, r.hi));
        }
        Ok(r)
    }

    fn covers(&self, other: &PortRange) -> bool {
        self.lo <= other.lo && other.hi <= self.hi
    }
}

impl std::fmt::Display for PortRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.lo == self.hi {
            write!(f, "{}", self.lo)
        } else {
            write!(f, "{}-{}", self.lo, self.hi)
        }
    }
}

impl Serialize for PortRange {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.lo == self.hi {
            s.serialize_u16(self.lo)
        } else {
            s.serialize_str(&self.to_string())
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum IntOrStr {
    Int(i64),
    Str(String),
}

impl<'de> Deserialize<'de> for PortRange {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = match IntOrStr::deserialize(d)? {
            IntOrStr::Int(i) => i.to_string(),
            IntOrStr::Str(s) => s,
        };
        PortRange::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A byte count: an integer, or a number with a unit (k, M, G: powers of
/// 1000; Ki, Mi, Gi: of 1024; an optional trailing B).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl Bytes {
    fn parse(s: &str) -> Result<Bytes, String> {
        let t = s.trim();
        let t = t.strip_suffix('B').unwrap_or(t);
        let (num, mult) = [
            ("Ki", 1u64 << 10),
            ("Mi", 1 << 20),
            ("Gi", 1 << 30),
            ("k", 1000),
            ("K", 1000),
            ("M", 1_000_000),
            ("G", 1_000_000_000),
        ]
        .iter()
        .find_map(|(suf, m)| t.strip_suffix(suf).map(|n| (n, *m)))
        .unwrap_or((t, 1));
        let v: f64 = num.trim().parse().map_err(|_| {
            "a byte count is a number with an optional unit (k, M, G, Ki, Mi, Gi)".to_string()
        })?;
        if v.is_nan() || v <= 0.0 || v * mult as f64 > 1e15 {
            return Err("a byte count is above 0 and below 10^15".into());
        }
        Ok(Bytes((v * mult as f64) as u64))
    }
}

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match IntOrStr::deserialize(d)? {
            IntOrStr::Int(i) if i > 0 => Ok(Bytes(i as u64)),
            IntOrStr::Int(_) => Err(serde::de::Error::custom("a byte count is above 0")),
            IntOrStr::Str(s) => Bytes::parse(&s).map_err(serde::de::Error::custom),
        }
    }
}

fn yes() -> bool {
    true
}

/// One `[[policy]]` table (or one `--policy` flag).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dport: Option<PortRange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sport: Option<PortRange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bulk_bytes: Option<Bytes>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cc: Option<String>,
    #[serde(default)]
    pub drwa: bool,
    #[serde(default = "yes")]
    pub enabled: bool,
}

/// DRWA's setting: `disabled` asks the kernel for nothing (no callback, no
/// cost); `off` arms new connections so the switch (API, `bloatd top`'s key)
/// can turn it on live; `on` is armed and on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DrwaMode {
    #[default]
    Disabled,
    Off,
    On,
}

impl DrwaMode {
    pub fn as_str(self) -> &'static str {
        match self {
            DrwaMode::Disabled => "disabled",
            DrwaMode::Off => "off",
            DrwaMode::On => "on",
        }
    }

    pub fn from_name(s: &str) -> Option<DrwaMode> {
        match s {
            "disabled" | "false" => Some(DrwaMode::Disabled),
            "off" => Some(DrwaMode::Off),
            "on" | "true" => Some(DrwaMode::On),
            _ => None,
        }
    }
}

impl Serialize for DrwaMode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for DrwaMode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum BoolOrStr {
            Bool(bool),
            Str(String),
        }
        match BoolOrStr::deserialize(d)? {
            BoolOrStr::Bool(true) => Ok(DrwaMode::On),
            BoolOrStr::Bool(false) => Ok(DrwaMode::Disabled),
            BoolOrStr::Str(s) => DrwaMode::from_name(&s)
                .ok_or_else(|| serde::de::Error::custom("drwa is \"on\", \"off\" or \"disabled\"")),
        }
    }
}

/// A rule's name: its own, else `rule<N>` by its place.
pub fn rule_name(rule: &Rule, index: usize) -> String {
    rule.name
        .clone()
        .unwrap_or_else(|| format!("rule{}", index + 1))
}

/// `--policy KEY=VALUE,...`: the keys of a `[[policy]]` table.
pub fn parse_flag(spec: &str) -> Result<Rule, String> {
    let mut table = toml::Table::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').ok_or_else(|| {
            format!(
                "--policy {spec:?}: `{part}` is not KEY=VALUE (keys: {})",
                rule_keys()
            )
        })?;
        let (k, v) = (k.trim(), v.trim());
        let value = match k {
            "drwa" | "enabled" => match v {
                "true" | "yes" | "on" => toml::Value::Boolean(true),
                "false" | "no" | "off" => toml::Value::Boolean(false),
                _ => return Err(format!("--policy: `{k}` must be true or false")),
            },
            "bulk_bytes" | "bulk" | "dport" | "sport" => match v.parse::<i64>() {
                Ok(i) => toml::Value::Integer(i),
                Err(_) => toml::Value::String(v.to_string()),
            },
            _ => toml::Value::String(v.to_string()),
        };
        let key = if k == "bulk" { "bulk_bytes" } else { k };
        if table.insert(key.to_string(), value).is_some() {
            return Err(format!("--policy {spec:?}: `{key}` given twice"));
        }
    }
    rule_from_table(&table).map_err(|e| format!("--policy {spec:?}: {e}"))
}

fn rule_keys() -> String {
    RULE_KEYS
        .iter()
        .map(|(k, _)| *k)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A rule from a TOML table, with errors that name the key and what it
/// expects (and never quote a value: see config.rs).
pub fn rule_from_table(table: &toml::Table) -> Result<Rule, String> {
    for key in table.keys() {
        if !RULE_KEYS.iter().any(|(k, _)| k == key) {
            let near = RULE_KEYS
                .iter()
                .find(|(k, _)| crate::config::edit_distance(k, key) <= 2);
            return Err(match near {
                Some((k, _)) => format!("unknown key `{key}` (did you mean `{k}`?)"),
                None => format!("unknown key (a rule's keys: {})", rule_keys()),
            });
        }
    }
    Rule::deserialize(toml::Value::Table(table.clone())).map_err(|_| {
        for (key, value) in table {
            let one = toml::Table::from_iter([(key.clone(), value.clone())]);
            if Rule::deserialize(toml::Value::Table(one)).is_err() {
                let expects = RULE_KEYS
                    .iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, e)| *e)
                    .unwrap_or("?");
                return format!("`{key}` must be {expects}");
            }
        }
        "invalid rule".to_string()
    })
}

/// The `policy` key of a config file: each table checked with messages
/// that name the rule and the key.
pub fn check_config_value(value: &toml::Value) -> Result<(), String> {
    let toml::Value::Array(rules) = value else {
        return Err("`policy` must be a list of [[policy]] tables".into());
    };
    for (i, r) in rules.iter().enumerate() {
        let toml::Value::Table(t) = r else {
            return Err("`policy` must be a list of [[policy]] tables".into());
        };
        rule_from_table(t).map_err(|e| format!("policy rule {}: {e}", i + 1))?;
    }
    Ok(())
}

/// A cgroup path as given, relative to the cgroup v2 root, without
/// leading or trailing slashes ("" is the root).
fn cgroup_rel(path: &str, root: &Path) -> String {
    let p = Path::new(path);
    let rel = p.strip_prefix(root).unwrap_or(p);
    let s = rel.to_string_lossy();
    let s = s.trim_matches('/');
    // Without a mount to compare with, /sys/fs/cgroup is the usual root.
    s.strip_prefix("sys/fs/cgroup")
        .map(|r| r.trim_start_matches('/'))
        .unwrap_or(s)
        .to_string()
}

fn cgroup_covers(a: &str, b: &str) -> bool {
    a.is_empty() || a == b || b.starts_with(&format!("{a}/"))
}

/// Does rule `a` select every connection rule `b` selects (apart from the
/// byte count)?
fn covers(a: &Rule, b: &Rule, root: &Path) -> bool {
    let range = |x: &Option<PortRange>, y: &Option<PortRange>| match (x, y) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(x), Some(y)) => x.covers(y),
    };
    let cg = match (&a.cgroup, &b.cgroup) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(x), Some(y)) => cgroup_covers(&cgroup_rel(x, root), &cgroup_rel(y, root)),
    };
    range(&a.dport, &b.dport) && range(&a.sport, &b.sport) && cg
}

/// What a rule selects, in words (for messages and `bloatd policy list`).
pub fn describe_selectors(r: &Rule) -> String {
    let mut s = Vec::new();
    if let Some(p) = r.dport {
        s.push(format!("dport {p}"));
    }
    if let Some(p) = r.sport {
        s.push(format!("sport {p}"));
    }
    if let Some(c) = &r.cgroup {
        s.push(format!("cgroup {c}"));
    }
    if let Some(b) = r.bulk_bytes {
        s.push(format!("after {} sent", crate::policy::fmt_bytes(b.0)));
    }
    if s.is_empty() {
        "every connection".into()
    } else {
        s.join(", ")
    }
}

/// What a rule does, in words.
pub fn describe_actions(r: &Rule) -> String {
    let mut s = Vec::new();
    if let Some(cc) = &r.cc {
        s.push(format!("cc {cc}"));
    }
    if r.drwa {
        s.push("DRWA".into());
    }
    s.join(" + ")
}

pub fn fmt_bytes(b: u64) -> String {
    match b {
        0..1_000 => format!("{b} B"),
        1_000..1_000_000 => format!("{:.0} kB", b as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} MB", b as f64 / 1e6),
        _ => format!("{:.1} GB", b as f64 / 1e9),
    }
}

/// The checks that need nothing from the system: every rule well formed,
/// names unique, no rule shadowed by an earlier one.
pub fn validate(rules: &[Rule], drwa_lambda: f64, drwa_min_bytes: u64) -> Result<(), String> {
    if rules.len() > MAX_RULES {
        return Err(format!(
            "policy: {} rules, at most {MAX_RULES}",
            rules.len()
        ));
    }
    if !(1.0..=16.0).contains(&drwa_lambda) {
        return Err(format!(
            "drwa_lambda = {drwa_lambda} is out of range (1.0..=16.0; the paper's is 3)"
        ));
    }
    if drwa_min_bytes > 1 << 40 {
        return Err("drwa_min_bytes must be at most 2^40".into());
    }
    let root = Path::new("/sys/fs/cgroup");
    let mut names: Vec<String> = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        let name = rule_name(r, i);
        let bad_name = name.is_empty()
            || name.len() > 32
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if bad_name {
            return Err(format!(
                "policy rule {}: `name` must be {}",
                i + 1,
                RULE_KEYS[0].1
            ));
        }
        if names.contains(&name) {
            return Err(format!(
                "policy: two rules are named '{name}': names must be unique"
            ));
        }
        names.push(name.clone());
        if r.cc.is_none() && !r.drwa {
            return Err(format!(
                "policy rule '{name}' does nothing: give it a congestion control (cc = \"bloatd_westwood\") or drwa = true"
            ));
        }
        if let Some(cc) = &r.cc {
            if cc.is_empty()
                || cc.len() > CC_NAME_MAX
                || !cc.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                return Err(format!(
                    "policy rule '{name}': unknown congestion control (a name of at most {CC_NAME_MAX} letters, digits and '_', like bloatd_westwood)"
                ));
            }
        }
        if r.bulk_bytes.is_some() && r.drwa {
            return Err(format!(
                "policy rule '{name}': a bulk rule counts the bytes a connection sends, DRWA acts on the data it receives: give DRWA its own rule (it starts after drwa_min_bytes received by itself)"
            ));
        }
        if let Some(c) = &r.cgroup {
            if c.trim_matches('/').is_empty() && c != "/" || c.split('/').any(|p| p == "..") {
                return Err(format!(
                    "policy rule '{name}': `cgroup` must be {}",
                    RULE_KEYS[3].1
                ));
            }
        }
        for (j, earlier) in rules[..i].iter().enumerate() {
            if earlier.bulk_bytes.is_some() != r.bulk_bytes.is_some() || !covers(earlier, r, root) {
                continue;
            }
            let other = rule_name(earlier, j);
            let stage = if r.bulk_bytes.is_some() {
                "bulk rule"
            } else {
                "rule"
            };
            if covers(r, earlier, root)
                && r.bulk_bytes == earlier.bulk_bytes
                && describe_actions(r) != describe_actions(earlier)
            {
                return Err(format!(
                    "policy rules '{other}' and '{name}' conflict: both select {} and one sets {}, the other {}; keep one",
                    describe_selectors(r), describe_actions(earlier), describe_actions(r)
                ));
            }
            return Err(format!(
                "policy {stage} '{name}' can never apply: '{other}' comes first and selects every connection it does ({} covers {}; the first {stage} that selects a connection decides): remove it, or move it before '{other}'",
                describe_selectors(earlier), describe_selectors(r)
            ));
        }
    }
    Ok(())
}

/// What the kernel is given: the rules with their cgroups resolved and
/// their algorithms checked against the kernel's.
#[derive(Clone, Debug, Default)]
pub struct Resolved {
    pub names: Vec<String>,
    pub kernel: Vec<BloatdPolicyRule>,
}

/// A cgroup path (absolute, or relative to the cgroup v2 root) as the
/// kernel knows it: (kernfs id = inode, depth below the root).
pub fn resolve_cgroup(path: &str, root: &Path) -> Result<(u64, u32), String> {
    use std::os::unix::fs::MetadataExt;
    let full: PathBuf = if Path::new(path).is_absolute() && Path::new(path).starts_with(root) {
        PathBuf::from(path)
    } else {
        root.join(cgroup_rel(path, root))
    };
    let canon = full.canonicalize().map_err(|_| {
        format!(
            "no cgroup '{path}' (looked for {}): create it, or name one under {}",
            full.display(),
            root.display()
        )
    })?;
    if !canon.starts_with(root) {
        return Err(format!(
            "cgroup '{path}' is not under the cgroup v2 root {}",
            root.display()
        ));
    }
    let meta = std::fs::metadata(&canon).map_err(|e| format!("cgroup '{path}': {e}"))?;
    if !meta.is_dir() || !canon.join("cgroup.procs").exists() {
        return Err(format!(
            "'{path}' ({}) is not a cgroup v2 directory",
            canon.display()
        ));
    }
    let level = canon
        .strip_prefix(root)
        .map(|r| r.components().count())
        .unwrap_or(0);
    Ok((meta.ino(), level as u32))
}

/// The checks against this system, for `start` (and `top`'s embedded
/// mode): every algorithm a rule names exists (bloatd's own only when this
/// bloatd registers it), every cgroup exists.
pub fn resolve(rules: &[Rule], registered: &[String]) -> Result<Resolved, String> {
    let mut out = Resolved::default();
    if rules.is_empty() {
        return Ok(out);
    }
    let available = bloatd_cc::kernel_available().unwrap_or_default();
    let root = crate::probes::cgroup2_root();
    for (i, r) in rules.iter().enumerate() {
        let name = rule_name(r, i);
        let mut k = BloatdPolicyRule {
            enabled: r.enabled as u8,
            ..Default::default()
        };
        if let Some(cc) = &r.cc {
            let ours = bloatd_cc::Algo::from_name(cc).is_some();
            if ours && !registered.iter().any(|x| x == cc) && !available.iter().any(|x| x == cc) {
                return Err(format!(
                    "policy rule '{name}': {cc} is registered by bloatd only when it is in `cc` (now: {}): add it, or drop --no-cc",
                    if registered.is_empty() { "none".into() } else { registered.join(", ") }
                ));
            }
            if !ours && !available.iter().any(|x| x == cc) {
                return Err(format!(
                    "policy rule '{name}': unknown congestion control '{cc}' (this kernel has: {}; bloatd adds bloatd_westwood and bloatd_cubic)",
                    available.join(" ")
                ));
            }
            k.actions |= policy_action::CC as u8;
            k.cc[..cc.len()].copy_from_slice(cc.as_bytes());
        }
        if r.drwa {
            k.actions |= policy_action::DRWA as u8;
        }
        if let Some(p) = r.dport {
            k.selectors |= policy_match::DPORT as u8;
            (k.dport_lo, k.dport_hi) = (p.lo, p.hi);
        }
        if let Some(p) = r.sport {
            k.selectors |= policy_match::SPORT as u8;
            (k.sport_lo, k.sport_hi) = (p.lo, p.hi);
        }
        if let Some(c) = &r.cgroup {
            let root = root.as_deref().ok_or_else(|| {
                format!(
                    "policy rule '{name}' selects a cgroup, but no cgroup v2 hierarchy is mounted"
                )
            })?;
            let (id, level) =
                resolve_cgroup(c, root).map_err(|e| format!("policy rule '{name}': {e}"))?;
            k.selectors |= policy_match::CGROUP as u8;
            (k.cgroup_id, k.cgroup_level) = (id, level);
        }
        if let Some(b) = r.bulk_bytes {
            k.selectors |= policy_match::BULK as u8;
            k.bulk_bytes = b.0;
        }
        out.names.push(name);
        out.kernel.push(k);
    }
    Ok(out)
}

/// What the policy did to a socket, from its record; None if nothing.
pub fn socket_policy(rec: &BloatdSock, names: &[String]) -> Option<SocketPolicy> {
    let p = &rec.pol;
    let flags = p.flags as u32;
    let name = |i: u8| -> Option<String> {
        (i > 0).then(|| {
            names
                .get(i as usize - 1)
                .cloned()
                .unwrap_or_else(|| format!("rule{i}"))
        })
    };
    let clamped = flags & policy_flag::DRWA_CLAMPED != 0;
    let drwa =
        (clamped || p.drwa_rounds > 0 || (p.drwa_rule > 0 && flags & policy_flag::DRWA_ARMED != 0))
            .then(|| {
                let mss = if rec.mss > 0 { rec.mss } else { 1448 };
                let clamp = if clamped { p.drwa_clamp } else { 0 };
                Drwa {
                    by: name(p.drwa_rule).unwrap_or_else(|| "switch".into()),
                    clamp_bytes: clamp,
                    clamp_segments: clamp.div_ceil(mss),
                    rcvd_per_rtt_bytes: p.drwa_rcvd_rtt,
                    rtt_us: p.drwa_rtt_us,
                    floor_us: p.drwa_floor_us,
                    rounds: p.drwa_rounds,
                }
            });
    let sp = SocketPolicy {
        cc_rule: name(p.cc_rule),
        bulk_rule: name(p.bulk_rule),
        bulk_waiting: flags & policy_flag::BULK_WAIT != 0,
        cc_failed: flags & policy_flag::CC_FAILED != 0,
        drwa,
    };
    (sp != SocketPolicy::default()).then_some(sp)
}

impl PolicyCounts {
    /// The kernel's counters (bpf/policy.h, enum bloatd_policy_count).
    pub fn from_kernel(c: &BloatdPolicyCounts) -> PolicyCounts {
        let n = |i: u32| c.n[i as usize];
        let total = |i: u32| n(i).max(0) as u64;
        PolicyCounts {
            cc_sockets: n(policy_count::CC_SOCKETS).max(0),
            bulk_sockets: n(policy_count::BULK_SOCKETS).max(0),
            drwa_sockets: n(policy_count::DRWA_SOCKETS).max(0),
            cc_set_total: total(policy_count::CC_SET),
            bulk_switched_total: total(policy_count::BULK_SET),
            cc_failed_total: total(policy_count::CC_FAILED),
            drwa_rounds_total: total(policy_count::DRWA_ROUNDS),
            drwa_restored_total: total(policy_count::DRWA_RESTORED),
            drwa_failed_total: total(policy_count::DRWA_FAILED),
        }
    }
}

/// DRWA's lambda as the kernel takes it (8 fraction bits).
pub fn lambda_x256(lambda: f64) -> u32 {
    (lambda * 256.0).round() as u32
}

/// C functions of bpf/policy.h compiled for the host (bpf/policy_host.c):
/// the tests run the kernel's arithmetic.
#[cfg(test)]
mod c {
    extern "C" {
        pub fn bloatd_drwa_window(
            cwnd_est: u32,
            floor_us: u32,
            rtt_us: u32,
            lambda_x256: u32,
            min_bytes: u32,
            resolution_us: u32,
        ) -> u32;
        pub fn bloatd_drwa_restore_clamp(
            orig: u32,
            now: u32,
            rcvbuf: u32,
            scaling_ratio: u32,
        ) -> u32;
        pub fn bloatd_policy_ports_match(
            r: *const super::BloatdPolicyRule,
            sport: u16,
            dport: u16,
        ) -> i32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(toml: &str) -> Rule {
        rule_from_table(&toml.parse::<toml::Table>().unwrap()).unwrap()
    }

    fn check(rules: &[&str]) -> Result<(), String> {
        let rules: Vec<Rule> = rules.iter().map(|r| rule(r)).collect();
        validate(&rules, 3.0, 65536)
    }

    #[test]
    fn ports_bytes_and_modes_parse() {
        let r = rule(
            "dport = 443\nsport = \"8000-8099\"\nbulk_bytes = \"1.5M\"\ncc = \"bloatd_westwood\"",
        );
        assert_eq!(r.dport, Some(PortRange { lo: 443, hi: 443 }));
        assert_eq!(r.sport, Some(PortRange { lo: 8000, hi: 8099 }));
        assert_eq!(r.bulk_bytes, Some(Bytes(1_500_000)));
        assert!(r.enabled);
        assert_eq!(Bytes::parse("256KiB").unwrap(), Bytes(262_144));
        assert_eq!(Bytes::parse("400k").unwrap(), Bytes(400_000));
        assert!(Bytes::parse("-1").is_err() && Bytes::parse("lots").is_err());
        assert!(PortRange::parse("0").is_err() && PortRange::parse("90-80").is_err());
        assert!(PortRange::parse("70000").is_err());
        for (s, m) in [
            ("on", DrwaMode::On),
            ("off", DrwaMode::Off),
            ("disabled", DrwaMode::Disabled),
        ] {
            assert_eq!(DrwaMode::from_name(s), Some(m));
        }
    }

    #[test]
    fn the_flag_is_the_table_on_one_line() {
        let r = parse_flag("name=bulk,bulk=1M,cc=bloatd_westwood").unwrap();
        assert_eq!(r.name.as_deref(), Some("bulk"));
        assert_eq!(r.bulk_bytes, Some(Bytes(1_000_000)));
        let r = parse_flag("sport=5201, cc=bloatd_westwood, enabled=false").unwrap();
        assert_eq!((r.sport.unwrap().lo, r.enabled), (5201, false));
        let e = parse_flag("dprt=5201,cc=cubic").unwrap_err();
        assert!(e.contains("`dprt`") && e.contains("`dport`"), "{e}");
        let e = parse_flag("dport=http,cc=cubic").unwrap_err();
        assert!(e.contains("`dport` must be"), "{e}");
        assert!(parse_flag("cc").unwrap_err().contains("KEY=VALUE"));
    }

    #[test]
    fn a_rule_must_do_something_and_bulk_cannot_carry_drwa() {
        assert!(check(&["dport = 443"])
            .unwrap_err()
            .contains("does nothing"));
        assert!(check(&["bulk_bytes = 1000\ndrwa = true"])
            .unwrap_err()
            .contains("DRWA"));
        assert!(check(&["cc = \"a name far too long\""])
            .unwrap_err()
            .contains("unknown congestion control"));
        assert!(check(&["name = \"x y\"\ncc = \"cubic\""])
            .unwrap_err()
            .contains("`name`"));
        assert!(check(&[
            "name = \"a\"\ncc = \"cubic\"",
            "name = \"a\"\ndport = 1\ncc = \"reno\""
        ])
        .unwrap_err()
        .contains("unique"));
    }

    #[test]
    fn rules_an_earlier_rule_hides_are_conflicts() {
        // The same connections, two algorithms.
        let e = check(&[
            "sport = 5201\ncc = \"cubic\"",
            "sport = 5201\ncc = \"bloatd_westwood\"",
        ])
        .unwrap_err();
        assert!(
            e.contains("conflict") && e.contains("rule1") && e.contains("rule2"),
            "{e}"
        );
        // A wider rule first hides a narrower one.
        let e = check(&[
            "dport = \"1-1024\"\ncc = \"cubic\"",
            "dport = 443\ncc = \"reno\"",
        ])
        .unwrap_err();
        assert!(e.contains("can never apply"), "{e}");
        let e = check(&[
            "cgroup = \"system.slice\"\ncc = \"cubic\"",
            "cgroup = \"/sys/fs/cgroup/system.slice/x.service\"\ncc = \"reno\"",
        ])
        .unwrap_err();
        assert!(e.contains("can never apply"), "{e}");
        let e = check(&[
            "bulk_bytes = 1000\ncc = \"cubic\"",
            "bulk_bytes = 5000\ncc = \"reno\"",
        ])
        .unwrap_err();
        assert!(
            e.contains("bulk rule") && e.contains("can never apply"),
            "{e}"
        );
        // Narrow first, then wide; different stages; disjoint: all fine.
        check(&[
            "dport = 443\ncc = \"reno\"",
            "dport = \"1-1024\"\ncc = \"cubic\"",
        ])
        .unwrap();
        check(&[
            "sport = 8000\ncc = \"cubic\"",
            "bulk_bytes = 1000\ncc = \"bloatd_westwood\"",
        ])
        .unwrap();
        check(&[
            "cgroup = \"a\"\ncc = \"cubic\"",
            "cgroup = \"ab\"\ncc = \"reno\"",
        ])
        .unwrap();
        check(&["drwa = true\ndport = 80", "dport = 443\ncc = \"reno\""]).unwrap();
    }

    #[test]
    fn the_records_policy_reaches_the_view() {
        let names = vec!["web".to_string(), "bulk".to_string()];
        let mut rec = BloatdSock {
            mss: 1000,
            ..Default::default()
        };
        assert_eq!(socket_policy(&rec, &names), None);
        rec.pol.cc_rule = 1;
        rec.pol.bulk_rule = 2;
        rec.pol.flags = policy_flag::BULK_WAIT as u8;
        let p = socket_policy(&rec, &names).unwrap();
        assert_eq!(
            (p.cc_rule.as_deref(), p.chose_cc(), p.mark().as_str()),
            (Some("web"), Some("web"), "R")
        );
        rec.pol.flags =
            (policy_flag::BULK_DONE | policy_flag::DRWA_CLAMPED | policy_flag::DRWA_ARMED) as u8;
        rec.pol.drwa_clamp = 10_500;
        rec.pol.drwa_rounds = 3;
        let p = socket_policy(&rec, &names).unwrap();
        assert_eq!((p.chose_cc(), p.mark().as_str()), (Some("bulk"), "BD"));
        let d = p.drwa.unwrap();
        assert_eq!(
            (d.by.as_str(), d.clamp_bytes, d.clamp_segments),
            ("switch", 10_500, 11)
        );
    }

    #[test]
    fn drwa_window_is_the_papers() {
        // SAFETY: pure C functions of plain integers.
        unsafe {
            // No queue (RTT at the floor): lambda x what arrived.
            assert_eq!(
                c::bloatd_drwa_window(100_000, 80_000, 80_000, 768, 5_000, 0),
                300_000
            );
            // A queue of 2 floors (RTT = 3 x floor): the window holds.
            assert_eq!(
                c::bloatd_drwa_window(300_000, 80_000, 240_000, 768, 5_000, 0),
                300_000
            );
            // A deep queue shrinks it, never below the minimum.
            assert_eq!(
                c::bloatd_drwa_window(300_000, 80_000, 960_000, 768, 5_000, 0),
                75_000
            );
            assert_eq!(
                c::bloatd_drwa_window(1_000, 80_000, 960_000, 768, 5_000, 0),
                5_000
            );
            // A floor above the RTT (a stale floor) counts as the RTT.
            assert_eq!(
                c::bloatd_drwa_window(100_000, 90_000, 80_000, 768, 0, 0),
                300_000
            );
            assert_eq!(c::bloatd_drwa_window(100_000, 80_000, 0, 768, 0, 0), 0);
            // Millisecond timestamps on a LAN: a 40 us floor against an RTT
            // that reads 500 us is no queue of 12 floors.
            assert_eq!(
                c::bloatd_drwa_window(100_000, 40, 500, 768, 0, 1000),
                300_000
            );
            assert_eq!(c::bloatd_drwa_window(100_000, 40, 500, 768, 0, 0), 24_000);
            // A window-limited sender delivers its window per RTT: from any
            // queue, one round lands on lambda x the BDP (16 Mbit/s x 80 ms
            // = 160 kB): a 400 kB window, 200 ms RTT.
            assert_eq!(
                c::bloatd_drwa_window(400_000, 80_000, 200_000, 768, 0, 0),
                480_000
            );
            assert_eq!(
                c::bloatd_drwa_window(1_000_000, 80_000, 500_000, 768, 0, 0),
                480_000
            );
            // Given back: what autotuning made of the buffer, not less than before.
            assert_eq!(
                c::bloatd_drwa_restore_clamp(65_535, 20_000, 6_291_456, 128),
                3_145_728
            );
            assert_eq!(c::bloatd_drwa_restore_clamp(65_535, 20_000, 0, 0), 65_535);
        }
    }

    #[test]
    fn kernel_rule_ports_match_as_the_probes_do() {
        let r = BloatdPolicyRule {
            selectors: (policy_match::SPORT | policy_match::DPORT) as u8,
            sport_lo: 8000,
            sport_hi: 8099,
            dport_lo: 1,
            dport_hi: 65535,
            ..Default::default()
        };
        // SAFETY: a valid rule, read only.
        unsafe {
            assert_eq!(c::bloatd_policy_ports_match(&r, 8050, 40000), 1);
            assert_eq!(c::bloatd_policy_ports_match(&r, 8100, 40000), 0);
        }
    }

    #[test]
    fn resolving_names_unknown_algorithms_and_cgroups() {
        let r = vec![rule("cc = \"vegas_nope\"")];
        let e = resolve(&r, &[]).unwrap_err();
        assert!(e.contains("unknown congestion control 'vegas_nope'"), "{e}");
        let r = vec![rule("cc = \"bloatd_westwood\"")];
        if !bloatd_cc::kernel_available()
            .unwrap_or_default()
            .iter()
            .any(|a| a == "bloatd_westwood")
        {
            assert!(resolve(&r, &[])
                .unwrap_err()
                .contains("only when it is in `cc`"));
        }
        assert!(resolve(&r, &["bloatd_westwood".into()]).is_ok());
        let r = vec![rule("cgroup = \"no/such/cgroup/here\"\ncc = \"reno\"")];
        if crate::probes::cgroup2_root().is_some() {
            let e = resolve(&r, &[]).unwrap_err();
            assert!(e.contains("no cgroup 'no/such/cgroup/here'"), "{e}");
        }
    }
}
