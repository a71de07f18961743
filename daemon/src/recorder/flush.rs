//! The writer's journal side: what waits goes to the journal when it can
//! take it; a journal that fails is waited out (a full or read-only disk)
//! or opened anew, its episodes' ids kept above the journal's.

use super::*;

impl Writer {
    /// What waits goes to the journal if it can take it.
    pub(super) fn flush(&mut self, now: u64) {
        if let Some((_, retry)) = &self.down {
            if now < *retry {
                return;
            }
            if self.journal.is_none() {
                self.open(now);
                if self.journal.is_none() {
                    return;
                }
            }
        }
        let Some(j) = self.journal.as_mut() else {
            return;
        };
        let mut written = 0usize;
        loop {
            let batch = self
                .shared
                .rec
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(CHUNK_WEIGHT);
            if batch.is_empty() {
                break;
            }
            match j.write(&batch, now) {
                Ok(()) => written += batch.len(),
                Err(e) => {
                    self.shared
                        .rec
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .put_back(batch);
                    self.fail(e, now);
                    return;
                }
            }
        }
        let path = j.path().display().to_string();
        if let Some((why, _)) = self.down.take() {
            tracing::info!(
                "journal {path}: writable again ({why} no longer): {written} held writes recorded"
            );
            self.warned = false;
        }
        let detail = format!(
            "{path} ({} of {})",
            bloatd_model::format::bytes(j.bytes()),
            bloatd_model::format::bytes(j.max_bytes())
        );
        self.publish_feature(FeatureState::On, detail);
    }

    pub(super) fn fail(&mut self, e: Error, now: u64) {
        let why = crate::error::Chain(&e).to_string();
        if !self.warned {
            self.warned = true;
            tracing::warn!(
                "journal: {why}: bloatd goes on, and holds what it records in memory ({MEMORY_WEIGHT} points at most) until it can be written"
            );
        }
        // A full or read-only disk is waited out on the same connection;
        // anything else opens the journal anew.
        if !matches!(e, Error::JournalFull(_) | Error::JournalReadOnly(_)) {
            self.journal = None;
        }
        self.publish_feature(FeatureState::Fallback, format!("in memory only: {why}"));
        self.down = Some((why, now + RETRY_MS));
    }

    pub(super) fn open(&mut self, now: u64) {
        match Journal::open(&self.settings.state_dir, self.settings.bounds, now) {
            Ok((j, notes)) => {
                for n in notes {
                    tracing::warn!("{n}");
                }
                self.renumber(j.next_id());
                self.publish_feature(FeatureState::On, j.path().display().to_string());
                self.journal = Some(j);
                if let Some((why, _)) = self.down.take() {
                    // `flush` says it is writable again once it wrote.
                    self.down = Some((why, 0));
                }
            }
            Err(e) => self.fail(e, now),
        }
    }

    /// Ids below the journal's next one (given while it could not be
    /// read) move above it.
    fn renumber(&mut self, next: u64) {
        let mut rec = self
            .shared
            .rec
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut ids: Vec<u64> = rec
            .pending
            .iter()
            .filter_map(Write::episode_id)
            .chain(rec.detector.open().iter().map(|e| e.id))
            .filter(|&id| id < next)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let map: HashMap<u64, u64> = ids
            .iter()
            .enumerate()
            .map(|(i, &id)| (id, next + i as u64))
            .collect();
        for w in rec.pending.iter_mut() {
            match w {
                Write::Episode(r) => {
                    if let Some(&n) = map.get(&r.episode.id) {
                        r.episode.id = n;
                    }
                }
                Write::Points { episode, .. } | Write::Prune { episode, .. } => {
                    if let Some(&n) = map.get(episode) {
                        *episode = n;
                    }
                }
                Write::Minutes(_) => {}
            }
        }
        rec.detector.renumber(&map, next + map.len() as u64);
    }
}
