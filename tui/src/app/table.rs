//! The socket table: which rows of the snapshot pass the filter, in which
//! order, which one is selected and which page is on screen.
//!
//! Only the rows the screen shows (plus the selected one) are ever sorted:
//! the first rows are selected in linear time, then sorted.

use bloatd_model::filter::Filter;
use bloatd_model::sort::SortKey;
use bloatd_model::Socket;
use std::cmp::Ordering;

#[derive(Debug)]
pub(super) struct Table {
    sort: SortKey,
    filter: Filter,
    /// Indices into the snapshot's sockets of the rows that pass the
    /// filter; `order[..sorted_prefix]` is in sort order and every row
    /// there sorts before every row after it.
    order: Vec<u32>,
    sorted_prefix: usize,
    /// Selected row (index into `order`) and its socket.
    selected: usize,
    selected_cookie: Option<u64>,
    /// Whether the selection follows its socket when the order changes. The
    /// top row stays on top (it always shows the worst queue, which moves
    /// between sockets every refresh); a row the user moved to follows its
    /// socket, so it does not slide away under the cursor.
    follow: bool,
    /// First row on screen and the number of rows that fit.
    offset: usize,
    page_rows: usize,
}

impl Table {
    pub(super) fn new() -> Table {
        Table {
            sort: SortKey::QueueDelay,
            filter: Filter::default(),
            order: Vec::new(),
            sorted_prefix: 0,
            selected: 0,
            selected_cookie: None,
            follow: false,
            offset: 0,
            page_rows: 0,
        }
    }

    pub(super) fn sort(&self) -> SortKey {
        self.sort
    }

    pub(super) fn filter(&self) -> &Filter {
        &self.filter
    }

    pub(super) fn offset(&self) -> usize {
        self.offset
    }

    pub(super) fn page_rows(&self) -> usize {
        self.page_rows
    }

    pub(super) fn row_count(&self) -> usize {
        self.order.len()
    }

    pub(super) fn selected(&self) -> Option<usize> {
        (!self.order.is_empty()).then_some(self.selected)
    }

    pub(super) fn selected_cookie(&self) -> Option<u64> {
        self.selected_cookie
    }

    pub(super) fn selected_socket<'a>(&self, sockets: &'a [Socket]) -> Option<&'a Socket> {
        self.selected().map(|i| &sockets[self.order[i] as usize])
    }

    /// The rows on screen, in order.
    pub(super) fn visible<'a>(
        &'a self,
        sockets: &'a [Socket],
    ) -> impl Iterator<Item = &'a Socket> + 'a {
        let end = (self.offset + self.page_rows).min(self.sorted_prefix);
        let start = self.offset.min(end);
        self.order[start..end].iter().map(|&i| &sockets[i as usize])
    }

    pub(super) fn set_sort(&mut self, sockets: &[Socket], sort: SortKey) {
        self.sort = sort;
        self.rebuild(sockets);
    }

    pub(super) fn set_filter(&mut self, sockets: &[Socket], filter: Filter) {
        self.filter = filter;
        self.rebuild(sockets);
    }

    /// How many rows fit on screen; scrolls so the selected row is visible
    /// and sorts just the rows that will be drawn.
    pub(super) fn set_page_rows(&mut self, sockets: &[Socket], rows: usize) {
        self.page_rows = rows;
        if self.selected < self.offset {
            self.offset = self.selected;
        } else if rows > 0 && self.selected >= self.offset + rows {
            self.offset = self.selected + 1 - rows;
        }
        self.offset = self.offset.min(self.order.len().saturating_sub(rows));
        self.ensure_sorted(sockets, self.offset + rows);
    }

    /// Filters the rows and finds the selected socket again.
    pub(super) fn rebuild(&mut self, sockets: &[Socket]) {
        self.order.clear();
        self.order.extend(
            sockets
                .iter()
                .enumerate()
                .filter(|(_, s)| self.filter.matches(s))
                .map(|(i, _)| i as u32),
        );
        self.sorted_prefix = 0;
        let followed = self.selected_cookie.filter(|_| self.follow);
        let rank = followed.and_then(|cookie| {
            let target = self
                .order
                .iter()
                .map(|&i| &sockets[i as usize])
                .find(|s| s.cookie == cookie)?;
            // Its row is the number of rows that sort before it: found in
            // one pass, without sorting the whole table.
            Some(
                self.order
                    .iter()
                    .filter(|&&i| self.sort.compare(&sockets[i as usize], target) == Ordering::Less)
                    .count(),
            )
        });
        // A socket that went away leaves the selection on the same row.
        self.selected = rank
            .unwrap_or(self.selected)
            .min(self.order.len().saturating_sub(1));
        self.ensure_sorted(sockets, self.selected + 1);
        self.selected_cookie = self.selected_socket(sockets).map(|s| s.cookie);
        self.set_page_rows(sockets, self.page_rows);
    }

    /// Moves the selection by `delta` rows, clamped to the table.
    pub(super) fn move_selection(&mut self, sockets: &[Socket], delta: isize) {
        if self.order.is_empty() {
            return;
        }
        let last = self.order.len() - 1;
        self.selected = self.selected.saturating_add_signed(delta).min(last);
        self.follow = self.selected != 0;
        self.ensure_sorted(sockets, self.selected + 1);
        self.selected_cookie = self.selected_socket(sockets).map(|s| s.cookie);
        self.set_page_rows(sockets, self.page_rows);
    }

    /// Puts the first `rows` rows in sort order: select the smallest ones
    /// (linear), then sort just those.
    fn ensure_sorted(&mut self, sockets: &[Socket], rows: usize) {
        let rows = rows.min(self.order.len());
        if rows <= self.sorted_prefix {
            return;
        }
        let sort = self.sort;
        let cmp = |a: &u32, b: &u32| sort.compare(&sockets[*a as usize], &sockets[*b as usize]);
        let rest = &mut self.order[self.sorted_prefix..];
        let need = rows - self.sorted_prefix;
        if need < rest.len() {
            rest.select_nth_unstable_by(need - 1, cmp);
        }
        rest[..need].sort_unstable_by(cmp);
        self.sorted_prefix = rows;
    }
}
