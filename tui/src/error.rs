//! The dashboard's one error type: why a [`Source`](crate::Source) has no
//! answer. The dashboard shows it as it is (the status line, the history
//! view), so each reads as a sentence that names the cause and the fix.

/// `Result` with the dashboard's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// What the source answered instead (the daemon's own words, or why
    /// it cannot be reached), e.g. "bloatd daemon not reachable at
    /// /run/bloatd/bloatd.sock: retrying…".
    #[error("{0}")]
    Source(String),
    #[error("this source cannot switch DRWA")]
    NoDrwa,
    #[error("{}", crate::NO_RECORDER)]
    NoRecorder,
}
