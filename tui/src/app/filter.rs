//! The filter prompt that edits the table's filter (the syntax and the
//! matching are bloatd_model::filter).

use bloatd_model::filter::Filter;

/// The filter prompt while it is open.
#[derive(Clone, Debug, PartialEq)]
pub struct FilterPrompt {
    pub text: String,
    /// Why the text is not a valid filter yet, if it is not.
    pub error: Option<String>,
    /// The filter to go back to on Esc.
    pub(super) previous: Filter,
}
