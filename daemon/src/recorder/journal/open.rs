//! Opening the journal: the file checked (or moved aside), its schema, and
//! the episodes a daemon that died left open, cut where their points end.

use super::*;

impl Journal {
    /// Open (or start) the journal in `state_dir`; the lines to log about
    /// files moved aside, and about episodes a daemon that died left open.
    pub fn open(
        state_dir: &Path,
        bounds: Bounds,
        now_ms: u64,
    ) -> Result<(Journal, Vec<String>), Error> {
        let dir = RunDir::open_kind(state_dir, &STATE)
            .map_err(|e| io_error(state_dir, "cannot open the state directory", e))?;
        let path = state_dir.join(FILE);
        let lock = take_lock(&dir, &path)?;
        let mut notes = Vec::new();
        match dir.lstat(FILE) {
            Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFLNK => notes.push(move_aside(
                &dir,
                "a symlink (bloatd does not follow it)",
                "symlink",
            )?),
            Ok(st) if st.st_mode & libc::S_IFMT != libc::S_IFREG => {
                notes.push(move_aside(&dir, "not a regular file", "notfile")?)
            }
            _ => {}
        }
        let conn = match open_file(&dir, &path) {
            Ok(c) => c,
            Err(Ok(NotAJournal(why))) => {
                notes.push(move_aside(&dir, &why, "bad")?);
                open_file(&dir, &path).map_err(|e| match e {
                    Ok(NotAJournal(why)) => Error::NotAJournal {
                        path: path.clone(),
                        why,
                    },
                    Err(e) => e,
                })?
            }
            Err(Err(e)) => return Err(e),
        };
        let mut j = Journal {
            page_size: 4096,
            conn,
            path,
            _lock: lock,
            bounds,
            last_age_ms: 0,
            path_ids: HashMap::new(),
        };
        j.setup().map_err(|e| classify(&j.path, e))?;
        let cut = j.close_interrupted().map_err(|e| classify(&j.path, e))?;
        if cut > 0 {
            notes.push(format!(
                "journal {}: {cut} episode(s) a bloatd that did not stop left open, closed at their last second",
                j.path.display()
            ));
        }
        j.bound(now_ms)?;
        Ok((j, notes))
    }

    /// Episodes a daemon that did not stop left open: closed as
    /// "interrupted" at their last point, their queue and bytes (the
    /// episode's and its flows') taken from their points: the summary on
    /// disk may be up to SUMMARY_EVERY_MS older than the points.
    fn close_interrupted(&mut self) -> rusqlite::Result<usize> {
        let open: Vec<(i64, i64, String, String)> = self
            .conn
            .prepare("SELECT id, start_ms, summary, flows FROM episodes WHERE open = 1")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let tx = self.conn.transaction()?;
        for (id, start, summary, flows) in &open {
            let (Ok(mut e), Ok(mut flows)) = (
                serde_json::from_str::<Episode>(summary),
                serde_json::from_str::<Vec<(u32, EpisodeFlow)>>(flows),
            ) else {
                continue;
            };
            let mut queue: Vec<u32> = Vec::new();
            let (mut end, mut peak) = (*start, 0u32);
            // Bytes per series: each point's rate over the time since the
            // point before it (the first one's interval began before the
            // episode).
            let mut bytes: HashMap<u32, (i64, u64)> = HashMap::new();
            let mut st = tx.prepare(
                "SELECT t_ms, flow, a, b, d FROM points WHERE t_ms >= ?1 AND episode = ?2
                 ORDER BY flow, t_ms",
            )?;
            let mut rows = st.query(params![start, id])?;
            while let Some(r) = rows.next()? {
                let (t, flow): (i64, u32) = (r.get(0)?, r.get::<_, i64>(1)? as u32);
                let rate = r.get::<_, i64>(4)?.max(0) as u64;
                let b = bytes.entry(flow).or_insert((t, 0));
                b.1 += rate * (t - b.0).max(0) as u64 / 8000;
                b.0 = t;
                if flow == 0 {
                    end = end.max(t);
                    queue.push(r.get::<_, i64>(2)?.clamp(0, u32::MAX as i64) as u32);
                    peak = peak.max(r.get::<_, i64>(3)?.clamp(0, u32::MAX as i64) as u32);
                }
            }
            queue.sort_unstable();
            if !queue.is_empty() {
                e.queue_p50_us = crate::service::view::percentile(&queue, 50);
                e.queue_p90_us = crate::service::view::percentile(&queue, 90);
                e.queue_peak_us = e.queue_peak_us.max(peak);
            }
            e.end_ms = e.end_ms.max(end.max(0) as u64);
            e.bytes = e.bytes.max(bytes.get(&0).map_or(0, |b| b.1));
            e.throughput_bps = (e.bytes * 8000)
                .checked_div(e.end_ms.saturating_sub(e.start_ms))
                .unwrap_or(0);
            for (idx, f) in flows.iter_mut() {
                f.bytes = f.bytes.max(bytes.get(idx).map_or(0, |b| b.1));
            }
            e.open = false;
            e.cut = Some("interrupted".into());
            let json = |r: serde_json::Result<String>| {
                r.map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))
            };
            tx.execute(
                "UPDATE episodes SET open = 0, cut = 'interrupted', end_ms = ?2, summary = ?3,
                   flows = ?4 WHERE id = ?1",
                params![
                    id,
                    e.end_ms as i64,
                    json(serde_json::to_string(&e))?,
                    json(serde_json::to_string(&flows))?
                ],
            )?;
        }
        tx.commit()?;
        Ok(open.len())
    }

    fn setup(&mut self) -> rusqlite::Result<()> {
        let wal_pages = (self.bounds.wal_bytes() / 2 / PAGE_BYTES as u64).max(16);
        self.conn.busy_timeout(Duration::from_millis(200))?;
        let mode: String = self
            .conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
        if mode != "wal" {
            return Err(rusqlite::Error::InvalidParameterName(format!(
                "journal mode {mode}, not WAL"
            )));
        }
        self.conn.execute_batch(&format!(
            "PRAGMA synchronous = NORMAL;
             PRAGMA journal_size_limit = {};
             PRAGMA wal_autocheckpoint = {wal_pages};
             PRAGMA application_id = {APP_ID};
             PRAGMA user_version = {SCHEMA};
             {SCHEMA_SQL}",
            self.bounds.wal_bytes()
        ))?;
        self.page_size = self
            .conn
            .query_row("PRAGMA page_size", [], |r| r.get::<_, i64>(0))?
            .max(512) as u64;
        Ok(())
    }
}
