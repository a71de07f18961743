//! The table's filter (`f` in `bloatd top`, `filter=` of the API): its
//! syntax and matching.

use crate::Socket;

/// One condition of a filter.
#[derive(Clone, Debug, PartialEq)]
enum Term {
    /// `cc:NAME`: congestion control name contains NAME.
    Cc(String),
    /// `comm:NAME`: process name contains NAME.
    Comm(String),
    /// `svc:NAME`: service name contains NAME.
    Service(String),
    /// `port:N`: local or remote port is N.
    Port(u16),
    /// `addr:TEXT`: local or remote address contains TEXT.
    Addr(String),
    /// Plain text: process, service or cc name contains it, or it is a
    /// port number.
    Any { text: String, port: Option<u16> },
}

/// A filter typed after `f`: whitespace-separated terms that must all match.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Filter {
    text: String,
    terms: Vec<Term>,
}

impl Filter {
    /// Parses filter text. Terms: `cc:NAME`, `comm:NAME`, `svc:NAME`,
    /// `port:N`, `addr:TEXT`, or plain text (matches process, service, cc
    /// name or port).
    /// Matching ignores ASCII case.
    pub fn parse(text: &str) -> crate::Result<Filter> {
        let mut terms = Vec::new();
        for word in text.split_whitespace() {
            let lower = word.to_ascii_lowercase();
            let term = if let Some(v) = lower.strip_prefix("cc:") {
                Term::Cc(v.to_string())
            } else if let Some(v) = lower.strip_prefix("comm:") {
                Term::Comm(v.to_string())
            } else if let Some(v) = lower.strip_prefix("svc:") {
                Term::Service(v.to_string())
            } else if let Some(v) = lower.strip_prefix("addr:") {
                Term::Addr(v.to_string())
            } else if let Some(v) = lower.strip_prefix("port:") {
                let port = v
                    .parse()
                    .map_err(|_| crate::Error::FilterPort(word.to_string()))?;
                Term::Port(port)
            } else {
                Term::Any {
                    port: lower.parse().ok(),
                    text: lower,
                }
            };
            terms.push(term);
        }
        Ok(Filter {
            text: text.trim().to_string(),
            terms,
        })
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    pub fn matches(&self, s: &Socket) -> bool {
        self.terms.iter().all(|term| match term {
            Term::Cc(v) => contains_ignore_case(&s.cc, v),
            Term::Comm(v) => s
                .comm
                .as_deref()
                .is_some_and(|c| contains_ignore_case(c, v)),
            Term::Service(v) => contains_ignore_case(&s.service, v),
            Term::Port(p) => s.local_port == *p || s.remote_port == *p,
            Term::Addr(v) => {
                contains_ignore_case(&s.remote_addr.to_string(), v)
                    || contains_ignore_case(&s.local_addr.to_string(), v)
            }
            Term::Any { text, port } => {
                s.comm
                    .as_deref()
                    .is_some_and(|c| contains_ignore_case(c, text))
                    || contains_ignore_case(&s.service, text)
                    || contains_ignore_case(&s.cc, text)
                    || port.is_some_and(|p| s.local_port == p || s.remote_port == p)
            }
        })
    }
}

/// `needle` must already be lower case.
fn contains_ignore_case(hay: &str, needle: &str) -> bool {
    let (hay, needle) = (hay.as_bytes(), needle.as_bytes());
    needle.is_empty()
        || hay
            .windows(needle.len())
            .any(|w| w.eq_ignore_ascii_case(needle))
}
