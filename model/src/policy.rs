//! A policy rule as the config, the command line and the API write it
//! (`[[policy]]` tables, `--policy`, `GET /v1/policy`): its wire form and
//! the value types it is made of. The daemon checks rules against the
//! system and gives them to the kernel (daemon/src/policy/).

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A port or an inclusive range of ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    pub lo: u16,
    pub hi: u16,
}

impl PortRange {
    pub fn parse(s: &str) -> crate::Result<PortRange> {
        let port = |p: &str| -> crate::Result<u16> {
            match p.trim().parse::<u16>() {
                Ok(v) if v > 0 => Ok(v),
                _ => Err(crate::Error::Port),
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
            return Err(crate::Error::EmptyRange { lo: r.lo, hi: r.hi });
        }
        Ok(r)
    }

    /// Whether every port of `other` is in this range.
    pub fn covers(&self, other: &PortRange) -> bool {
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

/// A type whose `Serialize` is written by hand gets its schema by hand:
/// `schema_by_hand!(Type, {json})`, the JSON what its answers carry.
macro_rules! schema_by_hand {
    ($t:ident, $schema:tt) => {
        impl JsonSchema for $t {
            fn schema_name() -> String {
                stringify!($t).into()
            }

            fn json_schema(_: &mut schemars::gen::SchemaGenerator) -> schemars::schema::Schema {
                serde_json::from_value(serde_json::json!($schema))
                    .expect("a schema written in this file")
            }
        }
    };
}

schema_by_hand!(PortRange, {
    "description": "A port (integer) or a range \"lo-hi\"",
    "anyOf": [
        {"type": "integer", "minimum": 0, "maximum": 65535},
        {"type": "string", "pattern": "^[0-9]+-[0-9]+$"}
    ]
});

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
    pub fn parse(s: &str) -> crate::Result<Bytes> {
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
        let v: f64 = num
            .trim()
            .parse()
            .map_err(|_| crate::Error::BytesNotNumber)?;
        if v.is_nan() || v <= 0.0 || v * mult as f64 > 1e15 {
            return Err(crate::Error::BytesRange);
        }
        Ok(Bytes((v * mult as f64) as u64))
    }
}

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

// Answers carry the count; a request may also write "64Ki".
schema_by_hand!(Bytes, {
    "description": "A byte count",
    "anyOf": [{"type": "integer", "minimum": 1}, {"type": "string"}]
});

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match IntOrStr::deserialize(d)? {
            IntOrStr::Int(i) if i > 0 => Ok(Bytes(i as u64)),
            IntOrStr::Int(_) => Err(serde::de::Error::custom("a byte count is above 0")),
            IntOrStr::Str(s) => Bytes::parse(&s).map_err(serde::de::Error::custom),
        }
    }
}

/// The path classes a rule selects (`path`): one class, several joined by
/// `+` (`"droptail+unknown"`), or a list of them. In the kernel's order of
/// `BottleneckClass::ALL`, each once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathClasses(pub Vec<crate::BottleneckClass>);

impl PathClasses {
    pub fn parse(s: &str) -> Option<PathClasses> {
        PathClasses::of(s.split('+').map(str::trim))
    }

    fn of<'a>(names: impl Iterator<Item = &'a str>) -> Option<PathClasses> {
        let mut v = Vec::new();
        for n in names {
            let c = crate::BottleneckClass::ALL
                .into_iter()
                .find(|c| c.as_str() == n)?;
            if !v.contains(&c) {
                v.push(c);
            }
        }
        v.sort();
        (!v.is_empty()).then_some(PathClasses(v))
    }

    /// Whether every class of `other` is one of these.
    pub fn covers(&self, other: &PathClasses) -> bool {
        other.0.iter().all(|c| self.0.contains(c))
    }
}

impl std::fmt::Display for PathClasses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.0.iter().map(|c| c.as_str()).collect();
        f.write_str(&names.join("+"))
    }
}

impl Serialize for PathClasses {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

schema_by_hand!(PathClasses, {
    "description": "Path classes: one, several joined by +, or a list",
    "anyOf": [
        {"type": "string", "pattern": "^(clear|droptail|aqm|ecn-aqm|unknown)(\\+(clear|droptail|aqm|ecn-aqm|unknown))*$"},
        {"type": "array", "items": {"enum": ["clear", "droptail", "aqm", "ecn-aqm", "unknown"]}}
    ]
});

impl<'de> Deserialize<'de> for PathClasses {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum OneOrMany {
            One(String),
            Many(Vec<String>),
        }
        let got = match OneOrMany::deserialize(d)? {
            OneOrMany::One(s) => PathClasses::parse(&s),
            OneOrMany::Many(v) => PathClasses::of(v.iter().map(|s| s.trim())),
        };
        got.ok_or_else(|| {
            serde::de::Error::custom("path is clear, droptail, aqm, ecn-aqm or unknown")
        })
    }
}

fn yes() -> bool {
    true
}

/// One `[[policy]]` table (or one `--policy` flag).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
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
    /// The classes of the connection's path (bottleneck.rs) the rule
    /// selects: at the handshake, or a bulk rule's at its switch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathClasses>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bulk_bytes: Option<Bytes>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cc: Option<String>,
    #[serde(default)]
    pub drwa: bool,
    /// TCP_NOTSENT_LOWAT on the connections the rule selects: the most
    /// bytes a sender keeps written and unsent before its writes wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notsent_lowat: Option<Bytes>,
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

schema_by_hand!(DrwaMode, {
    "description": "DRWA's setting",
    "enum": ["disabled", "off", "on"]
});

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
