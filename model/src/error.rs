//! The model's one error type: why a text a user wrote (a filter, a sort
//! key, a span, a port range, a byte count) does not parse. The model does
//! no I/O, so nothing else fails here; each message is what the user reads
//! (and what serde's `de::Error::custom` puts in a config error).

/// `Result` with the model's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A filter's `port:` term that is not a port.
    #[error("'{0}': a port is a number from 0 to 65535")]
    FilterPort(String),
    #[error("unknown sort key {key:?} (one of {keys})")]
    SortKey { key: String, keys: String },
    #[error("'{0}' needs a unit: s, m, h or d (like 2h)")]
    SpanUnitMissing(String),
    #[error("'{0}' is not a span like 90s, 30m, 2h or 7d")]
    SpanNotNumber(String),
    #[error("'{span}': unknown unit '{unit}' (s, m, h or d)")]
    SpanUnit { span: String, unit: String },
    #[error("'{0}' is too long")]
    SpanTooLong(String),
    #[error("a port is 1..65535")]
    Port,
    #[error("the range {lo}-{hi} is empty")]
    EmptyRange { lo: u16, hi: u16 },
    #[error("a byte count is a number with an optional unit (k, M, G, Ki, Mi, Gi)")]
    BytesNotNumber,
    #[error("a byte count is above 0 and below 10^15")]
    BytesRange,
}

#[cfg(test)]
mod tests {
    use super::Error;

    /// The texts these had as Strings, which users (and the tests of the
    /// daemon's config) read.
    #[test]
    fn parse_errors_read_as_before() {
        assert_eq!(
            Error::FilterPort("port:x".into()).to_string(),
            "'port:x': a port is a number from 0 to 65535"
        );
        assert_eq!(
            Error::SortKey {
                key: "q".into(),
                keys: "a, b".into()
            }
            .to_string(),
            "unknown sort key \"q\" (one of a, b)"
        );
        assert_eq!(
            Error::SpanUnit {
                span: "2w".into(),
                unit: "w".into()
            }
            .to_string(),
            "'2w': unknown unit 'w' (s, m, h or d)"
        );
        assert_eq!(
            Error::EmptyRange { lo: 90, hi: 80 }.to_string(),
            "the range 90-80 is empty"
        );
    }
}
