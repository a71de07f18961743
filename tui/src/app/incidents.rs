//! The history view's state (H): the last hours of the flight recorder's
//! journal (the worst path's queue each minute, the episodes in them), the
//! episode selected, and the one opened (Enter: its flows and charts).
//! What to ask the source comes out as requests; the answers come back in.

use bloatd_model::journal::{Episode, EpisodeDetail, MinuteRow};

/// The span the timeline shows.
pub const TIMELINE_MS: u64 = 6 * 3_600_000;
/// The history and an open episode are asked again this often.
pub const REFRESH_MS: u64 = 5_000;

#[derive(Debug, Default)]
pub struct Incidents {
    minutes: Vec<MinuteRow>,
    /// Newest first.
    episodes: Vec<Episode>,
    fetched_ms: Option<u64>,
    error: Option<String>,
    selected: usize,
    opened: Option<u64>,
    detail: Option<EpisodeDetail>,
    detail_fetched_ms: Option<u64>,
    detail_error: Option<String>,
}

impl Incidents {
    /// Since when to ask for the history, if it is due.
    pub fn request(&self, now_ms: u64) -> Option<u64> {
        self.fetched_ms
            .is_none_or(|t| now_ms.saturating_sub(t) >= REFRESH_MS)
            .then(|| now_ms.saturating_sub(TIMELINE_MS))
    }

    pub fn apply(&mut self, answer: crate::Result<(Vec<MinuteRow>, Vec<Episode>)>, now_ms: u64) {
        self.fetched_ms = Some(now_ms);
        match answer {
            Ok((minutes, episodes)) => {
                let was = self.selected().map(|e| e.id);
                self.minutes = minutes;
                self.episodes = episodes;
                self.error = None;
                // The selection stays on its episode as new ones come.
                self.selected = was
                    .and_then(|id| self.episodes.iter().position(|e| e.id == id))
                    .unwrap_or(0);
            }
            Err(e) => self.error = Some(e.to_string()),
        }
    }

    /// The episode to ask for, if one is open and due (an episode still
    /// going is asked again).
    pub fn detail_request(&self, now_ms: u64) -> Option<u64> {
        let id = self.opened?;
        let due = match (&self.detail, self.detail_fetched_ms) {
            (_, None) => true,
            (Some(d), Some(t)) => d.episode.open && now_ms.saturating_sub(t) >= REFRESH_MS,
            (None, Some(_)) => false,
        };
        due.then_some(id)
    }

    pub fn apply_detail(&mut self, answer: crate::Result<EpisodeDetail>, now_ms: u64) {
        self.detail_fetched_ms = Some(now_ms);
        match answer {
            Ok(d) if Some(d.episode.id) == self.opened => {
                self.detail = Some(d);
                self.detail_error = None;
            }
            Ok(_) => {}
            Err(e) => self.detail_error = Some(e.to_string()),
        }
    }

    pub fn select(&mut self, delta: isize) {
        if self.episodes.is_empty() {
            return;
        }
        let last = self.episodes.len() as isize - 1;
        self.selected = (self.selected as isize)
            .saturating_add(delta)
            .clamp(0, last) as usize;
    }

    /// Open the selected episode; false when there is none.
    pub fn open_selected(&mut self) -> bool {
        let Some(id) = self.selected().map(|e| e.id) else {
            return false;
        };
        if self.opened != Some(id) {
            self.detail = None;
            self.detail_error = None;
        }
        self.opened = Some(id);
        self.detail_fetched_ms = None;
        true
    }

    pub fn close(&mut self) {
        self.opened = None;
    }

    /// Ask for the history again at the next turn (the view was entered).
    pub fn refresh(&mut self) {
        self.fetched_ms = None;
    }

    pub fn minutes(&self) -> &[MinuteRow] {
        &self.minutes
    }

    pub fn episodes(&self) -> &[Episode] {
        &self.episodes
    }

    pub fn fetched(&self) -> bool {
        self.fetched_ms.is_some()
    }

    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    pub fn selected_index(&self) -> usize {
        self.selected
    }

    pub fn selected(&self) -> Option<&Episode> {
        self.episodes.get(self.selected)
    }

    pub fn detail(&self) -> Option<&EpisodeDetail> {
        self.detail
            .as_ref()
            .filter(|d| Some(d.episode.id) == self.opened)
    }

    pub fn detail_error(&self) -> Option<&str> {
        self.detail_error.as_deref()
    }
}
