//! The journal's bounds: its age, the database's share of the size bound,
//! and the log, checkpointed before it grows.

use super::*;

impl Journal {
    pub(super) fn pragma_u64(&self, name: &str) -> rusqlite::Result<u64> {
        self.conn
            .query_row(&format!("PRAGMA {name}"), [], |r| r.get::<_, i64>(0))
            .map(|n| n.max(0) as u64)
    }

    /// Bytes of the database's pages in use (its free pages are reused
    /// before the file grows).
    pub(super) fn used_bytes(&self) -> rusqlite::Result<u64> {
        Ok(self
            .pragma_u64("page_count")?
            .saturating_sub(self.pragma_u64("freelist_count")?)
            * self.page_size)
    }

    /// The bounds: past `max_age` data goes (once a minute); when the used
    /// pages near the database's share, the oldest data goes; a file
    /// larger than its share (a lower bound since) gives pages back.
    pub(super) fn bound(&mut self, now_ms: u64) -> Result<(), Error> {
        self.bound_inner(now_ms)
            .map_err(|e| classify(&self.path, e))
    }

    fn bound_inner(&mut self, now_ms: u64) -> rusqlite::Result<()> {
        if now_ms >= self.last_age_ms + AGE_EVERY_MS {
            self.last_age_ms = now_ms;
            let cut = now_ms.saturating_sub(self.bounds.max_age_ms);
            while let Some(oldest) = self.oldest()? {
                if oldest >= cut {
                    break;
                }
                let step = self.step_ms()?;
                self.delete_before(cut.min(oldest.saturating_add(step)))?;
            }
        }
        let db = self.bounds.db_bytes();
        if self.used_bytes()? > db / 100 * HIGH_PERCENT {
            while self.used_bytes()? > db / 100 * LOW_PERCENT {
                let Some(oldest) = self.oldest()? else { break };
                let step = self.step_ms()?;
                if self.delete_before(oldest.saturating_add(step))? == 0 {
                    break;
                }
            }
        }
        let chunk = (self.bounds.wal_bytes() / 4 / self.page_size).max(1);
        while self.pragma_u64("page_count")? * self.page_size > db
            && self.pragma_u64("freelist_count")? > 0
        {
            self.conn
                .execute_batch(&format!("PRAGMA incremental_vacuum({chunk});"))?;
            self.checkpoint();
        }
        Ok(())
    }

    /// The oldest time held: the end of the oldest closed episode, or the
    /// oldest minute.
    fn oldest(&self) -> rusqlite::Result<Option<u64>> {
        self.conn
            .query_row(
                "SELECT min(t) FROM (SELECT min(end_ms) AS t FROM episodes WHERE open = 0
                                     UNION ALL SELECT min(t_ms) FROM minutes)",
                [],
                |r| r.get::<_, Option<i64>>(0),
            )
            .map(|t| t.map(|t| t.max(0) as u64))
    }

    /// A span of time holding about a quarter of the log's share of data:
    /// one trim step, so no transaction grows the log past its share.
    fn step_ms(&self) -> rusqlite::Result<u64> {
        let (lo, hi): (Option<i64>, Option<i64>) = self.conn.query_row(
            "SELECT min(t), max(t) FROM (SELECT start_ms AS t FROM episodes UNION ALL
                                         SELECT t_ms FROM minutes)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let span = (hi.unwrap_or(0) - lo.unwrap_or(0)).max(60_000) as u64;
        let used = self.used_bytes()?.max(1);
        let share = self.bounds.wal_bytes() / 4;
        Ok(((span as u128 * share as u128 / used as u128) as u64).max(60_000))
    }

    /// Delete what ended before `cut` (closed episodes and their points,
    /// minutes), in one transaction, then checkpoint; the rows deleted.
    fn delete_before(&mut self, cut: u64) -> rusqlite::Result<usize> {
        let cut = cut.min(i64::MAX as u64) as i64;
        let tx = self.conn.transaction()?;
        // Points by time: a closed episode's, and the oldest of one still
        // open longer than what the journal keeps.
        tx.execute("DELETE FROM points WHERE t_ms < ?1", [cut])?;
        let mut n = tx.execute("DELETE FROM episodes WHERE open = 0 AND end_ms < ?1", [cut])?;
        n += tx.execute("DELETE FROM minutes WHERE t_ms < ?1", [cut])?;
        tx.execute(
            "DELETE FROM paths WHERE id NOT IN (SELECT DISTINCT path FROM minutes)",
            [],
        )?;
        tx.commit()?;
        self.path_ids.clear();
        self.checkpoint();
        Ok(n)
    }

    /// Copy the log into the database and truncate it (best effort: a
    /// reader in the middle of a query makes it wait for the next).
    pub(super) fn checkpoint(&self) {
        let _ = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
    }
}
