//! bloatd-tui: the dashboard of `bloatd top`.
//!
//! `model` is the view model: the daemon fills it (from its socket model) and
//! serves it as JSON on its API; this crate draws it.

pub mod app;
pub mod format;
pub mod model;
