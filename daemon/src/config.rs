//! Configuration: a TOML file (`--config`, else /etc/bloatd/bloatd.toml if
//! present) with command-line flags overriding it. Unknown keys are errors:
//! a typo must not silently fall back to a default.

use crate::error::{Error, Result};
use crate::settings::{Config, SETTINGS};
use crate::text::edit_distance;
use serde::Deserialize;
use std::path::{Path, PathBuf};

pub const DEFAULT_CONFIG: &str = "/etc/bloatd/bloatd.toml";
pub const DEFAULT_API_GROUP: &str = "bloatd";

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

impl Config {
    /// Load `path`, or the default file if it exists, or the defaults.
    pub fn load(path: Option<&Path>) -> Result<Config> {
        let (path, must_exist) = match path {
            Some(p) => (p.to_path_buf(), true),
            None => (PathBuf::from(DEFAULT_CONFIG), false),
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if !must_exist && e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Config::default())
            }
            Err(source) => return Err(Error::ConfigRead { path, source }),
        };
        Self::parse(&text).map_err(|e| Error::ConfigParse {
            path,
            source: Box::new(e),
        })
    }

    /// Parse a config file's text. Errors quote nothing from a file that
    /// is not bloatd's config (under a sudo rule for bloatd, `--config
    /// /etc/shadow` must not print a line of it): a syntax error gives only
    /// its line and column, an unknown key is named only when it is a typo
    /// of one of bloatd's keys, and a value of the wrong type is described
    /// by what the key expects, never quoted.
    pub fn parse(text: &str) -> Result<Config> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            let (line, col) = line_col(text, e.span().map(|s| s.start).unwrap_or(0));
            Error::invalid(format!("not valid TOML at line {line}, column {col} (bloatd's config is TOML, like daemon/dist/bloatd.toml)"))
        })?;
        for key in table.keys() {
            if !SETTINGS.iter().any(|s| s.key == key) {
                let known: Vec<&str> = SETTINGS.iter().map(|s| s.key).collect();
                return Err(Error::invalid(
                    match known
                        .iter()
                        .find(|k| edit_distance(k, key) <= (k.len() / 6).clamp(1, 2))
                    {
                        Some(k) => format!("unknown key `{key}` (did you mean `{k}`?)"),
                        None => format!(
                            "unknown key at line {} (bloatd's keys: {})",
                            line_col(text, key_offset(text, key)).0,
                            known.join(", ")
                        ),
                    },
                ));
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
                    return Error::invalid(format!("`{key}` must be {}", Config::expects(key)));
                }
            }
            Error::invalid("invalid value")
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<()> {
        self.check_ranges().map_err(Error::config)?;
        if let Some(g) = &self.api_group {
            if crate::rundir::group_id(g).is_none() {
                return Err(Error::bad_config(format!(
                    "api_group: there is no group '{g}' in /etc/group (create it with `groupadd --system {g}`, or remove the key)"
                )));
            }
        }
        if let Some(g) = &self.admin_group {
            if crate::rundir::group_id(g).is_none() {
                return Err(Error::bad_config(format!(
                    "admin_group: there is no group '{g}' in /etc/group (create it with `groupadd --system {g}`, or remove the key)"
                )));
            }
        }
        for name in &self.cc {
            if bloatd_cc::Algo::from_name(name).is_none() {
                return Err(Error::bad_config(format!(
                    "cc: unknown algorithm '{name}' (bloatd provides bloatd_westwood and bloatd_cubic)"
                )));
            }
        }
        if bloatd_cc::WestwoodSsthresh::from_name(&self.westwood_ssthresh).is_none() {
            return Err(Error::bad_config(
                "westwood_ssthresh must be \"kernel\" or \"paper\"",
            ));
        }
        crate::policy::validate(&self.policy).map_err(Error::config)?;
        crate::policy::check_gate(&self.policy, self.act_on_aqm).map_err(Error::config)?;
        Ok(())
    }

    /// How bloatd's congestion controls are set up at load.
    pub fn cc_options(&self) -> bloatd_cc::Options {
        bloatd_cc::Options {
            westwood_ssthresh: bloatd_cc::WestwoodSsthresh::from_name(&self.westwood_ssthresh)
                .unwrap_or_default(),
            ratio_interval_us: self.interval().as_micros().min(u32::MAX as u128) as u32,
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
    use crate::error::ErrText;

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
        let e = Config::parse("intervall_ms = 50\n").err_text();
        assert!(e.contains("intervall_ms"), "{e}");
    }

    #[test]
    fn out_of_range_and_unknown_cc_are_errors() {
        assert!(Config::parse("interval_ms = 1\n")
            .err_text()
            .contains("interval_ms"));
        assert!(Config::parse("cc = [\"vegas\"]\n")
            .err_text()
            .contains("vegas"));
        for t in [0, 60_001, u64::MAX / 1000] {
            let e = Config::parse(&format!("bloat_threshold_ms = {t}\n")).err_text();
            assert!(
                e.contains("bloat_threshold_ms") && e.contains("1..=60000"),
                "{e}"
            );
        }
        assert!(Config::parse("bloat_threshold_ms = 60000\n").is_ok());
        for bad in [1.0, 1.5, 1.99, 16.5] {
            let e = Config::parse(&format!("drwa_lambda = {bad}\n")).err_text();
            assert!(e.contains("out of range (2.0..=16.0)"), "{e}");
            assert!(e.contains("can never grow"), "{e}");
        }
        for good in [2.0, 3.0, 16.0] {
            assert!(Config::parse(&format!("drwa_lambda = {good}\n")).is_ok());
        }
        let e = Config::parse("series_seconds = 3601\n").err_text();
        assert!(
            e.contains("series_seconds = 3601 is out of range (0..=3600)"),
            "{e}"
        );
        let e = Config::parse("westwood_ssthresh = \"reno\"\n").err_text();
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
        let e = Config::parse(secret).err_text();
        assert!(
            e.contains("line 1") && !e.contains("hunter2") && !e.contains("root"),
            "{e}"
        );
        // Valid TOML, foreign keys and values.
        let e = Config::parse("[database]\npassword = \"hunter2\"\n").err_text();
        assert!(
            !e.contains("hunter2") && !e.contains("database") && !e.contains("password"),
            "{e}"
        );
        assert!(e.contains("line 1"), "{e}");
        let e = Config::parse("api_token = \"hunter2\"\n").err_text();
        assert!(!e.contains("hunter2") && !e.contains("api_token"), "{e}");
        // A known key with a value of the wrong type: described, not quoted.
        let e = Config::parse("listen = \"hunter2\"\n").err_text();
        assert!(e.contains("listen") && !e.contains("hunter2"), "{e}");
        let e = Config::parse("interval_ms = \"hunter2\"\n").err_text();
        assert!(
            e.contains("`interval_ms` must be an integer") && !e.contains("hunter2"),
            "{e}"
        );
    }

    #[test]
    fn a_typo_of_a_key_is_named_with_the_fix() {
        let e = Config::parse("bloat_treshold_ms = 10\n").err_text();
        assert!(
            e.contains("`bloat_treshold_ms`") && e.contains("`bloat_threshold_ms`"),
            "{e}"
        );
    }

    #[test]
    fn a_missing_api_group_is_an_error() {
        let e = Config::parse("api_group = \"no-such-group-here\"\n").err_text();
        assert!(e.contains("groupadd"), "{e}");
        assert!(Config::parse("api_group = \"root\"\n").is_ok());
        let e = Config::parse("admin_group = \"no-such-group-here\"\n").err_text();
        assert!(e.contains("admin_group") && e.contains("groupadd"), "{e}");
    }
}
