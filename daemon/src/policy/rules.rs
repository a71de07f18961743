//! Policy rules as the user writes them (`[[policy]]` tables of the
//! config, `--policy KEY=VALUE,...` flags), parsed with errors that name the
//! key and what it expects, and the checks that need nothing from the
//! system: every rule well formed, names unique, no rule hidden by an
//! earlier one. The rule's wire form is bloatd_model::policy::Rule.

use crate::error::{Error, Result};
use crate::text::edit_distance;
use bloatd_model::format;
use bloatd_model::policy::{PortRange, Rule};
use serde::Deserialize;
use std::path::Path;

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
        "path",
        "path classes, like \"droptail\" or \"droptail+unknown\" (clear, droptail, aqm, ecn-aqm, unknown)",
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
    (
        "notsent_lowat",
        "bytes, like 131072 or \"128Ki\" (TCP_NOTSENT_LOWAT: unsent bytes a sender may keep)",
    ),
    ("enabled", "true or false"),
];

/// A rule's name: its own, else `rule<N>` by its place.
pub fn rule_name(rule: &Rule, index: usize) -> String {
    rule.name
        .clone()
        .unwrap_or_else(|| format!("rule{}", index + 1))
}

/// `--policy KEY=VALUE,...`: the keys of a `[[policy]]` table.
pub fn parse_flag(spec: &str) -> Result<Rule> {
    let mut table = toml::Table::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').ok_or_else(|| {
            Error::invalid(format!(
                "--policy {spec:?}: `{part}` is not KEY=VALUE (keys: {})",
                rule_keys()
            ))
        })?;
        let (k, v) = (k.trim(), v.trim());
        let value = match k {
            "drwa" | "enabled" => match v {
                "true" | "yes" | "on" => toml::Value::Boolean(true),
                "false" | "no" | "off" => toml::Value::Boolean(false),
                _ => {
                    return Err(Error::invalid(format!(
                        "--policy: `{k}` must be true or false"
                    )))
                }
            },
            "bulk_bytes" | "bulk" | "dport" | "sport" | "notsent_lowat" => match v.parse::<i64>() {
                Ok(i) => toml::Value::Integer(i),
                Err(_) => toml::Value::String(v.to_string()),
            },
            _ => toml::Value::String(v.to_string()),
        };
        let key = if k == "bulk" { "bulk_bytes" } else { k };
        if table.insert(key.to_string(), value).is_some() {
            return Err(Error::invalid(format!(
                "--policy {spec:?}: `{key}` given twice"
            )));
        }
    }
    rule_from_table(&table).map_err(|e| Error::invalid(format!("--policy {spec:?}: {e}")))
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
pub fn rule_from_table(table: &toml::Table) -> Result<Rule> {
    for key in table.keys() {
        if !RULE_KEYS.iter().any(|(k, _)| k == key) {
            let near = RULE_KEYS.iter().find(|(k, _)| edit_distance(k, key) <= 2);
            return Err(match near {
                Some((k, _)) => {
                    Error::invalid(format!("unknown key `{key}` (did you mean `{k}`?)"))
                }
                None => Error::invalid(format!("unknown key (a rule's keys: {})", rule_keys())),
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
                return Error::invalid(format!("`{key}` must be {expects}"));
            }
        }
        Error::invalid("invalid rule")
    })
}

/// The `policy` key of a config file: each table checked with messages
/// that name the rule and the key.
pub fn check_config_value(value: &toml::Value) -> Result<()> {
    let toml::Value::Array(rules) = value else {
        return Err(Error::invalid(
            "`policy` must be a list of [[policy]] tables",
        ));
    };
    for (i, r) in rules.iter().enumerate() {
        let toml::Value::Table(t) = r else {
            return Err(Error::invalid(
                "`policy` must be a list of [[policy]] tables",
            ));
        };
        rule_from_table(t).map_err(|e| Error::invalid(format!("policy rule {}: {e}", i + 1)))?;
    }
    Ok(())
}

/// A cgroup path as given, relative to the cgroup v2 root, without
/// leading or trailing slashes ("" is the root).
pub(super) fn cgroup_rel(path: &str, root: &Path) -> String {
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
    let path = match (&a.path, &b.path) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(x), Some(y)) => x.covers(y),
    };
    range(&a.dport, &b.dport) && range(&a.sport, &b.sport) && cg && path
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
    if let Some(p) = &r.path {
        s.push(format!("path {p}"));
    }
    if let Some(b) = r.bulk_bytes {
        s.push(format!("after {} sent", format::bytes(b.0)));
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
    if let Some(b) = r.notsent_lowat {
        s.push(format!("notsent_lowat {}", format::bytes(b.0)));
    }
    s.join(" + ")
}

/// Rules given one by one (`--policy RULE`, settings.rs), after the
/// config's.
impl crate::settings::SettingValue for Vec<Rule> {
    const JSON: &'static str = "array";
    fn set_flag(&mut self, s: &str) -> Result<()> {
        self.push(parse_flag(s)?);
        Ok(())
    }
    fn shown(&self) -> String {
        "none".into()
    }
}

/// The checks that need nothing from the system: every rule well formed,
/// names unique, no rule shadowed by an earlier one.
pub fn validate(rules: &[Rule]) -> Result<()> {
    if rules.len() > MAX_RULES {
        return Err(Error::invalid(format!(
            "policy: {} rules, at most {MAX_RULES}",
            rules.len()
        )));
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
            return Err(Error::invalid(format!(
                "policy rule {}: `name` must be {}",
                i + 1,
                RULE_KEYS[0].1
            )));
        }
        if names.contains(&name) {
            return Err(Error::invalid(format!(
                "policy: two rules are named '{name}': names must be unique"
            )));
        }
        names.push(name.clone());
        check_rule(r, &name)?;
        check_not_shadowed(rules, i, &name, root)?;
    }
    Ok(())
}

/// A rule that selects only AQM paths (`path = "aqm"`, `"ecn-aqm"`, both)
/// for DRWA or a bulk switch would never act while the AQM gate holds
/// those back there (`act_on_aqm` off): refused, with the fix.
pub fn check_gate(rules: &[Rule], act_on_aqm: bool) -> Result<()> {
    use bloatd_model::BottleneckClass::{Aqm, EcnAqm};
    if act_on_aqm {
        return Ok(());
    }
    for (i, r) in rules.iter().enumerate() {
        let only_aqm = r
            .path
            .as_ref()
            .is_some_and(|p| p.0.iter().all(|c| matches!(c, Aqm | EcnAqm)));
        if only_aqm && (r.drwa || r.bulk_bytes.is_some()) {
            return Err(Error::invalid(format!(
                "policy rule '{}' selects only AQM paths (path {}) for {}, which stay off there unless act_on_aqm = true (--act-on-aqm): set it, or select other classes",
                rule_name(r, i),
                r.path.as_ref().map(|p| p.to_string()).unwrap_or_default(),
                if r.drwa { "DRWA" } else { "a bulk switch" }
            )));
        }
    }
    Ok(())
}

/// One rule's own checks: it does something, and its values are well formed.
fn check_rule(r: &Rule, name: &str) -> Result<()> {
    if r.cc.is_none() && !r.drwa && r.notsent_lowat.is_none() {
        return Err(Error::invalid(format!(
            "policy rule '{name}' does nothing: give it a congestion control (cc = \"bloatd_westwood\"), drwa = true or notsent_lowat = \"128Ki\""
        )));
    }
    if let Some(b) = r.notsent_lowat {
        if r.bulk_bytes.is_some() {
            return Err(Error::invalid(format!(
                "policy rule '{name}': notsent_lowat is set when a connection opens, a bulk rule acts later: select the senders by sport, dport or cgroup instead"
            )));
        }
        if !(1024..=1 << 30).contains(&b.0) {
            return Err(Error::invalid(format!(
                "policy rule '{name}': notsent_lowat must be from 1Ki to 1Gi bytes (a bulk sender keeps its link busy with a few bandwidth-delay products, like \"128Ki\")"
            )));
        }
    }
    if let Some(cc) = &r.cc {
        if cc.is_empty()
            || cc.len() > CC_NAME_MAX
            || !cc.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(Error::invalid(format!(
                "policy rule '{name}': unknown congestion control (a name of at most {CC_NAME_MAX} letters, digits and '_', like bloatd_westwood)"
            )));
        }
    }
    if r.bulk_bytes.is_some() && r.drwa {
        return Err(Error::invalid(format!(
            "policy rule '{name}': a bulk rule counts the bytes a connection sends, DRWA acts on the data it receives: give DRWA its own rule (it starts after drwa_min_bytes received by itself)"
        )));
    }
    if let Some(c) = &r.cgroup {
        if c.trim_matches('/').is_empty() && c != "/" || c.split('/').any(|p| p == "..") {
            return Err(Error::invalid(format!(
                "policy rule '{name}': `cgroup` must be {}",
                RULE_KEYS[3].1
            )));
        }
    }
    Ok(())
}

/// A rule that an earlier one selects every connection of can never apply
/// (the first rule that selects a connection decides).
fn check_not_shadowed(rules: &[Rule], i: usize, name: &str, root: &Path) -> Result<()> {
    let r = &rules[i];
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
            return Err(Error::invalid(format!(
                "policy rules '{other}' and '{name}' conflict: both select {} and one sets {}, the other {}; keep one",
                describe_selectors(r), describe_actions(earlier), describe_actions(r)
            )));
        }
        return Err(Error::invalid(format!(
            "policy {stage} '{name}' can never apply: '{other}' comes first and selects every connection it does ({} covers {}; the first {stage} that selects a connection decides): remove it, or move it before '{other}'",
            describe_selectors(earlier), describe_selectors(r)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrText;

    /// The Helm chart's schema knows a rule's keys, and no others.
    #[test]
    fn the_charts_schema_knows_every_rule_key() {
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../../dist/helm/bloatd/values.schema.json"))
                .unwrap();
        let rule = &schema["properties"]["config"]["properties"]["policy"]["items"]["properties"];
        let mut chart: Vec<&str> = rule
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut ours: Vec<&str> = RULE_KEYS.iter().map(|(k, _)| *k).collect();
        chart.sort();
        ours.sort();
        assert_eq!(
            chart, ours,
            "add the new key to the policy items in daemon/dist/helm/bloatd/values.schema.json"
        );
    }
    use bloatd_model::policy::{Bytes, DrwaMode};

    fn rule(toml: &str) -> Rule {
        rule_from_table(&toml.parse::<toml::Table>().unwrap()).unwrap()
    }

    fn check(rules: &[&str]) -> Result<()> {
        let rules: Vec<Rule> = rules.iter().map(|r| rule(r)).collect();
        validate(&rules)
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
        let e = parse_flag("dprt=5201,cc=cubic").err_text();
        assert!(e.contains("`dprt`") && e.contains("`dport`"), "{e}");
        let e = parse_flag("dport=http,cc=cubic").err_text();
        assert!(e.contains("`dport` must be"), "{e}");
        assert!(parse_flag("cc").err_text().contains("KEY=VALUE"));
    }

    #[test]
    fn a_rule_must_do_something_and_bulk_cannot_carry_drwa() {
        assert!(check(&["dport = 443"]).err_text().contains("does nothing"));
        assert!(check(&["bulk_bytes = 1000\ndrwa = true"])
            .err_text()
            .contains("DRWA"));
        assert!(check(&["cc = \"a name far too long\""])
            .err_text()
            .contains("unknown congestion control"));
        assert!(check(&["name = \"x y\"\ncc = \"cubic\""])
            .err_text()
            .contains("`name`"));
        assert!(check(&[
            "name = \"a\"\ncc = \"cubic\"",
            "name = \"a\"\ndport = 1\ncc = \"reno\""
        ])
        .err_text()
        .contains("unique"));
    }

    /// notsent_lowat alone is an action; out of its range, or on a bulk
    /// rule (which acts after the handshake, where it is set), refused.
    #[test]
    fn notsent_lowat_is_bounded_and_not_for_bulk_rules() {
        assert!(check(&["sport = 8080\nnotsent_lowat = \"128Ki\""]).is_ok());
        let r = parse_flag("name=lowat,sport=8080,notsent_lowat=128Ki").unwrap();
        assert_eq!(r.notsent_lowat, Some(Bytes(131_072)));
        // Refused where it is read (0: no bytes) or where rules are checked.
        for (bad, why) in [
            ("0", "must be bytes"),
            ("1000", "from 1Ki to 1Gi"),
            ("\"2Gi\"", "from 1Ki to 1Gi"),
        ] {
            let table = format!("sport = 8080\nnotsent_lowat = {bad}");
            let e = rule_from_table(&table.parse::<toml::Table>().unwrap())
                .and_then(|r| validate(&[r]))
                .err_text();
            assert!(e.contains("notsent_lowat") && e.contains(why), "{bad}: {e}");
        }
        let e = check(&["bulk_bytes = \"1M\"\nnotsent_lowat = \"128Ki\""]).err_text();
        assert!(e.contains("bulk rule acts later"), "{e}");
    }

    /// `path` parses as one class, several joined by `+` or a list, and
    /// takes part in hiding; a rule that selects only AQM paths for DRWA
    /// or a bulk switch is refused unless act_on_aqm says it may act there.
    #[test]
    fn path_selects_classes_and_a_gated_only_rule_is_refused() {
        use bloatd_model::BottleneckClass::*;
        let r = rule("path = \"unknown+droptail\"\ncc = \"cubic\"");
        assert_eq!(r.path.unwrap().0, vec![Droptail, Unknown]);
        let r = rule("path = [\"aqm\", \"ecn-aqm\"]\ncc = \"cubic\"");
        assert_eq!(r.path.unwrap().to_string(), "aqm+ecn-aqm");
        let r = parse_flag("path=droptail,cc=cubic").unwrap();
        assert_eq!(describe_selectors(&r), "path droptail");
        let e = parse_flag("path=fifo,cc=cubic").err_text();
        assert!(e.contains("`path` must be"), "{e}");
        // No path first hides a path rule; a path rule does not hide one
        // that selects other classes.
        let e = check(&["cc = \"cubic\"", "path = \"droptail\"\ncc = \"reno\""]).err_text();
        assert!(e.contains("can never apply"), "{e}");
        check(&[
            "path = \"droptail\"\ncc = \"reno\"",
            "path = \"clear\"\ncc = \"cubic\"",
        ])
        .unwrap();
        let gated = [
            rule("path = \"aqm+ecn-aqm\"\ndrwa = true"),
            rule("path = \"aqm\"\nbulk_bytes = \"1M\"\ncc = \"reno\""),
        ];
        for r in &gated {
            let e = check_gate(std::slice::from_ref(r), false).err_text();
            assert!(e.contains("act_on_aqm"), "{e}");
            check_gate(std::slice::from_ref(r), true).unwrap();
        }
        // A congestion control at the handshake is not gated; other
        // classes beside aqm leave the rule something to act on.
        check_gate(&[rule("path = \"aqm\"\ncc = \"reno\"")], false).unwrap();
        check_gate(&[rule("path = \"aqm+droptail\"\ndrwa = true")], false).unwrap();
    }

    #[test]
    fn rules_an_earlier_rule_hides_are_conflicts() {
        // The same connections, two algorithms.
        let e = check(&[
            "sport = 5201\ncc = \"cubic\"",
            "sport = 5201\ncc = \"bloatd_westwood\"",
        ])
        .err_text();
        assert!(
            e.contains("conflict") && e.contains("rule1") && e.contains("rule2"),
            "{e}"
        );
        // A wider rule first hides a narrower one.
        let e = check(&[
            "dport = \"1-1024\"\ncc = \"cubic\"",
            "dport = 443\ncc = \"reno\"",
        ])
        .err_text();
        assert!(e.contains("can never apply"), "{e}");
        let e = check(&[
            "cgroup = \"system.slice\"\ncc = \"cubic\"",
            "cgroup = \"/sys/fs/cgroup/system.slice/x.service\"\ncc = \"reno\"",
        ])
        .err_text();
        assert!(e.contains("can never apply"), "{e}");
        let e = check(&[
            "bulk_bytes = 1000\ncc = \"cubic\"",
            "bulk_bytes = 5000\ncc = \"reno\"",
        ])
        .err_text();
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
}
