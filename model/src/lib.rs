//! bloatd-model: the one definition of what crosses between bloatd's
//! parts. The daemon fills it, serves it as JSON on its API and prints it;
//! the dashboard (bloatd-tui) draws it; scripts and the lab read the same
//! field names.
//!
//! - [`view`]: sockets, paths, snapshots, series: the view model.
//! - [`api`]: the API's routes and every type a route takes or returns.
//! - [`policy`]: a policy rule's wire form (config, `--policy`, API).
//! - [`journal`]: the flight recorder's episodes and per-minute history.
//! - [`sort`], [`filter`], [`select`]: which rows a dashboard asks for and
//!   in what order, computed by the source (daemon or embedded probes) with
//!   the same code the dashboard uses locally.
//! - [`format`]: numbers as every table prints them (`1.0MB`, `12ms`).
//! - [`schema`]: the API's JSON Schema, made from these types.
//! - [`error`]: why a text a user wrote does not parse.
//! - `fixtures` (feature `fixtures`): hosts and sockets for other crates'
//!   tests.
//!
//! No I/O, no BPF, no terminal: depends on serde, schemars (the API's
//! schema) and thiserror (its parse errors, [`Error`]) only.

pub mod api;
pub mod error;
pub mod filter;
#[cfg(feature = "fixtures")]
pub mod fixtures;
pub mod format;
pub mod journal;
pub mod policy;
pub mod schema;
pub mod select;
pub mod sort;
pub mod view;

pub use error::{Error, Result};
pub use view::*;
