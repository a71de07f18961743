//! The journal: the flight recorder's SQLite file in the state directory
//! (`state_dir`, /var/lib/bloatd; the unit's StateDirectory), bounded by
//! size and age, oldest first.
//!
//! - One writer (the recorder's thread) holding `journal.lock` (flock: a
//!   second bloatd on the same directory records in memory instead), in
//!   WAL mode with `synchronous = NORMAL`: each read's writes are one
//!   transaction, in the log once committed, so a `kill -9` loses at most
//!   the read that was being written (a power loss may lose the last
//!   checkpoint's worth, which the size of the log bounds).
//! - Readers (the API, `bloatd incidents` with no daemon) open their own
//!   connection: WAL lets them read while the writer writes.
//! - A file that is not bloatd's journal (not SQLite, another
//!   application's, a newer schema, corrupt, a symlink) is renamed aside,
//!   never deleted, with one line, and a new journal starts.
//! - The bound counts the database and its log: the log is checkpointed
//!   before it grows past a sixteenth of the bound (256 kB to 4 MB), and
//!   data goes, oldest first, in steps small enough for the log, when the
//!   database's used pages near the rest; past `max_age` it goes too.

mod bound;
mod open;

use super::episodes::{EpisodeRecord, Point, Write};
use crate::error::Error;
use crate::rundir::{DirKind, RunDir};
use bloatd_model::journal::{
    Episode, EpisodeDetail, EpisodeFlow, FlowSeries, HistoryQuery, IncidentsQuery, MinuteRow,
};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write as _};
use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const FILE: &str = "journal.sqlite";
pub const LOCK: &str = "journal.lock";
/// `PRAGMA application_id`: "bloa".
const APP_ID: i64 = 0x626c_6f61;
const SCHEMA: i64 = 1;
/// The database's page (see `open_file`).
const PAGE_BYTES: u32 = 1024;
/// The journal's files: readable by the API group, like the API socket
/// (peer addresses are in it); only root writes.
const MODE: u32 = 0o640;
/// Age trims at most this often.
const AGE_EVERY_MS: u64 = 60_000;
/// The database's used pages are trimmed from HIGH to LOW percent of its
/// share of the bound.
const HIGH_PERCENT: u64 = 97;
const LOW_PERCENT: u64 = 90;

/// /var/lib/bloatd: the journal.
pub const STATE: DirKind = DirKind {
    what: "state directory",
    holds: "its journal",
    option: "--state-dir (config state_dir)",
    setgid: true,
};

#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub max_bytes: u64,
    pub max_age_ms: u64,
}

impl Bounds {
    /// The log's share: a sixteenth of the bound, 256 kB to 4 MB.
    fn wal_bytes(&self) -> u64 {
        (self.max_bytes / 16).clamp(256 << 10, 4 << 20)
    }

    /// The database's share: the rest, less the shared-memory index.
    fn db_bytes(&self) -> u64 {
        self.max_bytes.saturating_sub(self.wal_bytes() + (64 << 10))
    }
}

/// An SQLite error as the recorder acts on it: a full or read-only disk
/// is waited out, anything else named.
fn classify(path: &Path, e: rusqlite::Error) -> Error {
    use rusqlite::ErrorCode;
    let p = path.display().to_string();
    match e.sqlite_error_code() {
        Some(ErrorCode::DiskFull) => Error::JournalFull(p),
        Some(ErrorCode::ReadOnly) => Error::JournalReadOnly(p),
        _ => Error::JournalDb { path: p, err: e },
    }
}

fn io_error(path: &Path, what: &'static str, e: std::io::Error) -> Error {
    let p = path.display().to_string();
    match e.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => Error::JournalFull(p),
        Some(libc::EROFS) => Error::JournalReadOnly(p),
        _ => Error::JournalIo {
            path: p,
            what,
            source: e,
        },
    }
}

/// Why a file is not a journal bloatd can use: it is renamed aside.
struct NotAJournal(String);

pub struct Journal {
    conn: Connection,
    path: PathBuf,
    _lock: File,
    bounds: Bounds,
    page_size: u64,
    last_age_ms: u64,
    path_ids: HashMap<(u32, IpAddr, u8, String), i64>,
}

/// Take `journal.lock`, writing our pid in it; Err names the holder.
fn take_lock(dir: &RunDir, path: &Path) -> Result<File, Error> {
    let mut f = dir
        .open_file(LOCK, libc::O_RDWR | libc::O_CREAT, MODE)
        .map_err(|e| io_error(&dir.path().join(LOCK), "cannot open the lock", e))?;
    if !crate::rundir::flock(&f, libc::LOCK_EX | libc::LOCK_NB) {
        let mut s = String::new();
        let _ = f.read_to_string(&mut s);
        let pid = s.trim();
        return Err(Error::JournalLocked {
            path: path.display().to_string(),
            pid: if pid.is_empty() {
                String::new()
            } else {
                format!(" (pid {pid})")
            },
        });
    }
    // Best effort: the pid only helps the message above.
    let _ = f
        .set_len(0)
        .and_then(|_| writeln!(f, "{}", std::process::id()));
    Ok(f)
}

/// Rename `FILE` (and its log and index) aside as `journal.sqlite.WHY-T`;
/// the line to log.
fn move_aside(dir: &RunDir, why: &str, tag: &str) -> Result<String, Error> {
    let stamp = crate::clock::Clock::now().unix_ms / 1000;
    let aside = format!("{FILE}.{tag}-{stamp}");
    dir.rename(FILE, &aside)
        .map_err(|e| io_error(&dir.path().join(FILE), "cannot move it aside", e))?;
    for ext in ["-wal", "-shm"] {
        let _ = dir.rename(&format!("{FILE}{ext}"), &format!("{aside}{ext}"));
    }
    Ok(format!(
        "journal {}: {why}: moved aside to {} (nothing deleted), a new journal starts",
        dir.path().join(FILE).display(),
        dir.path().join(&aside).display()
    ))
}

/// Whether an open connection is a journal bloatd can write: ours (or
/// empty), not newer, intact.
fn check(conn: &Connection) -> Result<bool, Result<NotAJournal, rusqlite::Error>> {
    use rusqlite::ErrorCode;
    let bad = |e: rusqlite::Error| match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => Err(Ok(NotAJournal("not an SQLite database".into()))),
        Some(ErrorCode::DatabaseCorrupt) => Err(Ok(NotAJournal(format!("corrupt ({e})")))),
        _ => Err(Err(e)),
    };
    let app: i64 = match conn.query_row("PRAGMA application_id", [], |r| r.get(0)) {
        Ok(a) => a,
        Err(e) => return bad(e),
    };
    let tables: i64 = match conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0)) {
        Ok(n) => n,
        Err(e) => return bad(e),
    };
    if app == 0 && tables == 0 {
        return Ok(true);
    }
    if app != APP_ID {
        return Err(Ok(NotAJournal(
            "another program's SQLite database, not bloatd's journal".into(),
        )));
    }
    let version: i64 = match conn.query_row("PRAGMA user_version", [], |r| r.get(0)) {
        Ok(v) => v,
        Err(e) => return bad(e),
    };
    if version > SCHEMA {
        return Err(Ok(NotAJournal(format!(
            "the journal of a newer bloatd (schema {version}, this one writes {SCHEMA})"
        ))));
    }
    let verdict: String = match conn.query_row("PRAGMA quick_check(1)", [], |r| r.get(0)) {
        Ok(v) => v,
        Err(e) => return bad(e),
    };
    if verdict != "ok" {
        return Err(Ok(NotAJournal(format!("corrupt ({verdict})"))));
    }
    Ok(false)
}

/// The points are keyed by time first: each read's points of every open
/// episode go to the end of the tree together, so a commit writes the last
/// page or two, not a page per series (measured: 2.4 MB/s for a hundred
/// open episodes keyed by episode first; recorder/bench.rs).
const SCHEMA_SQL: &str = "
CREATE TABLE IF NOT EXISTS episodes(
    id INTEGER PRIMARY KEY, kind TEXT NOT NULL, start_ms INTEGER NOT NULL,
    end_ms INTEGER NOT NULL, open INTEGER NOT NULL, cut TEXT,
    summary TEXT NOT NULL, flows TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS episodes_end ON episodes(end_ms);
CREATE TABLE IF NOT EXISTS points(
    t_ms INTEGER NOT NULL, episode INTEGER NOT NULL, flow INTEGER NOT NULL,
    a INTEGER, b INTEGER, c INTEGER, d INTEGER, e INTEGER,
    PRIMARY KEY(t_ms, episode, flow)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS paths(
    id INTEGER PRIMARY KEY, netns INTEGER NOT NULL, peer TEXT NOT NULL,
    prefix_len INTEGER NOT NULL, interface TEXT NOT NULL,
    UNIQUE(netns, peer, prefix_len, interface));
CREATE TABLE IF NOT EXISTS minutes(
    t_ms INTEGER NOT NULL, path INTEGER NOT NULL,
    q50 INTEGER, q90 INTEGER, qmax INTEGER, rate INTEGER, sockets INTEGER,
    PRIMARY KEY(t_ms, path)) WITHOUT ROWID;
";

/// Open the journal's file for writing (created if missing), checked.
fn open_file(dir: &RunDir, path: &Path) -> Result<Connection, Result<NotAJournal, Error>> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NOFOLLOW
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| Err(classify(path, e)))?;
    let fresh = check(&conn).map_err(|e| e.map_err(|e| classify(path, e)))?;
    if let Ok(f) = dir.open_file(FILE, libc::O_RDONLY, 0) {
        let _ = f.set_permissions(std::fs::Permissions::from_mode(MODE));
    }
    if fresh {
        // Before the first table: pages freed by trims can be given back
        // to the file system (a lower bound shrinks the file); 1 kB pages,
        // since every commit rewrites the last page of what it appends
        // (each read's points): 4 kB pages wrote 52.6 kB/s where these
        // write 34.5 kB/s (1,000 paths, 100 bloated: recorder/bench.rs).
        conn.execute_batch(&format!(
            "PRAGMA page_size = {PAGE_BYTES}; PRAGMA auto_vacuum = INCREMENTAL;"
        ))
        .map_err(|e| Err(classify(path, e)))?;
    }
    Ok(conn)
}

impl Journal {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The id after the largest one written.
    pub fn next_id(&self) -> u64 {
        self.conn
            .query_row("SELECT coalesce(max(id), 0) + 1 FROM episodes", [], |r| {
                r.get::<_, i64>(0)
            })
            .map_or(1, |n| n.max(1) as u64)
    }

    /// The bound, bytes.
    pub fn max_bytes(&self) -> u64 {
        self.bounds.max_bytes
    }

    /// The database's and its log's bytes on disk now.
    pub fn bytes(&self) -> u64 {
        let len = |ext: &str| {
            std::fs::symlink_metadata(format!("{}{ext}", self.path.display()))
                .map_or(0, |m| m.len())
        };
        len("") + len("-wal") + len("-shm")
    }

    /// One read's writes in one transaction, then the bounds.
    pub fn write(&mut self, writes: &[Write], now_ms: u64) -> Result<(), Error> {
        self.write_tx(writes).map_err(|e| classify(&self.path, e))?;
        self.bound(now_ms)
    }

    fn write_tx(&mut self, writes: &[Write]) -> rusqlite::Result<()> {
        let tx = self.conn.transaction()?;
        for w in writes {
            match w {
                Write::Episode(r) => put_episode(&tx, r)?,
                Write::Points {
                    episode,
                    flow,
                    points,
                } => {
                    let mut st = tx.prepare_cached(
                        "INSERT OR REPLACE INTO points VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                    )?;
                    for p in points {
                        st.execute(params![
                            p.t_ms as i64,
                            *episode as i64,
                            *flow as i64,
                            p.v[0],
                            p.v[1],
                            p.v[2],
                            p.v[3],
                            p.v[4]
                        ])?;
                    }
                }
                Write::Prune { episode, keep } => {
                    let keep: Vec<String> = keep.iter().map(|k| k.to_string()).collect();
                    tx.execute(
                        &format!(
                            "DELETE FROM points WHERE t_ms >= (SELECT start_ms FROM episodes WHERE id = ?1)
                               AND episode = ?1 AND flow NOT IN (0{}{})",
                            if keep.is_empty() { "" } else { ", " },
                            keep.join(", ")
                        ),
                        [*episode as i64],
                    )?;
                }
                Write::Minutes(rows) => {
                    for m in rows {
                        let key = (m.netns, m.peer, m.prefix_len, m.interface.clone());
                        let id = match self.path_ids.get(&key) {
                            Some(&id) => id,
                            None => {
                                let id = path_id(&tx, m)?;
                                self.path_ids.insert(key, id);
                                id
                            }
                        };
                        tx.prepare_cached(
                            "INSERT OR REPLACE INTO minutes VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                        )?
                        .execute(params![
                            m.t_ms as i64,
                            id,
                            m.queue_p50_us as i64,
                            m.queue_p90_us as i64,
                            m.queue_max_us as i64,
                            m.rate_bps.min(i64::MAX as u64) as i64,
                            m.sockets as i64
                        ])?;
                    }
                }
            }
        }
        tx.commit()
    }

    /// At stop: the log into the database.
    pub fn close(self) {
        self.checkpoint();
    }
}

fn put_episode(tx: &rusqlite::Transaction, r: &EpisodeRecord) -> rusqlite::Result<()> {
    let e = &r.episode;
    let json = |r: serde_json::Result<String>| {
        r.map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))
    };
    let summary = json(serde_json::to_string(e))?;
    let flows = json(serde_json::to_string(&r.flows))?;
    tx.prepare_cached("INSERT OR REPLACE INTO episodes VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)")?
        .execute(params![
            e.id as i64,
            e.kind.as_str(),
            e.start_ms as i64,
            e.end_ms as i64,
            e.open as i64,
            e.cut,
            summary,
            flows
        ])?;
    Ok(())
}

fn path_id(tx: &rusqlite::Transaction, m: &MinuteRow) -> rusqlite::Result<i64> {
    let peer = m.peer.to_string();
    tx.prepare_cached(
        "INSERT OR IGNORE INTO paths(netns, peer, prefix_len, interface) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![
        m.netns as i64,
        peer,
        m.prefix_len as i64,
        m.interface
    ])?;
    tx.prepare_cached(
        "SELECT id FROM paths WHERE netns = ?1 AND peer = ?2 AND prefix_len = ?3 AND interface = ?4",
    )?
    .query_row(
        params![m.netns as i64, peer, m.prefix_len as i64, m.interface],
        |r| r.get(0),
    )
}

// ------------------------------------------------------------ reading

/// A connection for reading the journal in `state_dir` (the API, `bloatd
/// incidents` with no daemon): None when there is no journal yet.
pub fn open_reader(state_dir: &Path) -> Result<Option<Connection>, Error> {
    let path = state_dir.join(FILE);
    match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(&path, "cannot read it", e)),
        Ok(m) if !m.file_type().is_file() => return Err(Error::JournalNotFile(path)),
        Ok(_) => {}
    }
    // Read-write without create: a reader of a WAL database may need to
    // make its index (-shm); `query_only` keeps it from writing anything.
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_NOFOLLOW
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(&path, flags).map_err(|e| classify(&path, e))?;
    conn.busy_timeout(Duration::from_millis(500))
        .and_then(|_| conn.execute_batch("PRAGMA query_only = 1;"))
        .map_err(|e| classify(&path, e))?;
    let app: i64 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .map_err(|e| classify(&path, e))?;
    if app != APP_ID {
        return Err(Error::JournalNotOurs(path));
    }
    Ok(Some(conn))
}

fn episode_of(row: &rusqlite::Row) -> rusqlite::Result<Episode> {
    let summary: String = row.get("summary")?;
    let mut e: Episode = serde_json::from_str(&summary).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
    })?;
    // The columns are what the journal changed since (an episode closed at
    // the next start).
    e.id = row.get::<_, i64>("id")? as u64;
    e.start_ms = row.get::<_, i64>("start_ms")? as u64;
    e.end_ms = row.get::<_, i64>("end_ms")? as u64;
    e.open = row.get::<_, i64>("open")? != 0;
    e.cut = row.get("cut")?;
    Ok(e)
}

/// Episodes overlapping `[since_ms, now]` that `q` asks for, newest first.
pub fn incidents(
    conn: &Connection,
    q: &IncidentsQuery,
    since_ms: u64,
) -> rusqlite::Result<Vec<Episode>> {
    let limit = q.limit.unwrap_or(1000);
    let mut st = conn.prepare_cached(
        "SELECT id, start_ms, end_ms, open, cut, summary FROM episodes
         WHERE end_ms >= ?1 OR open = 1 ORDER BY start_ms DESC, id DESC",
    )?;
    let mut out = Vec::new();
    let mut rows = st.query([since_ms.min(i64::MAX as u64) as i64])?;
    while let Some(row) = rows.next()? {
        let e = episode_of(row)?;
        if q.matches(&e) {
            out.push(e);
            if out.len() >= limit {
                break;
            }
        }
    }
    Ok(out)
}

/// One episode with its flows and series.
pub fn detail(conn: &Connection, id: u64) -> rusqlite::Result<Option<EpisodeDetail>> {
    let found = conn
        .query_row(
            "SELECT id, start_ms, end_ms, open, cut, summary, flows FROM episodes WHERE id = ?1",
            [id as i64],
            |row| Ok((episode_of(row)?, row.get::<_, String>("flows")?)),
        )
        .optional()?;
    // Its points run up to the reads that closed it (a few seconds after
    // its end); an open one's to now.
    let Some((episode, flows)) = found else {
        return Ok(None);
    };
    let flows: Vec<(u32, EpisodeFlow)> = serde_json::from_str(&flows).unwrap_or_default();
    let mut series = Vec::new();
    let mut by_flow: HashMap<u32, Vec<bloatd_model::journal::FlowPoint>> = HashMap::new();
    let last = if episode.open {
        i64::MAX
    } else {
        (episode.end_ms + 2 * super::episodes::CLOSE_AFTER_MS) as i64
    };
    let mut st = conn.prepare_cached(
        "SELECT flow, t_ms, a, b, c, d, e FROM points
         WHERE t_ms BETWEEN ?1 AND ?2 AND episode = ?3 ORDER BY flow, t_ms",
    )?;
    let mut rows = st.query(params![episode.start_ms as i64, last, id as i64])?;
    while let Some(r) = rows.next()? {
        let flow = r.get::<_, i64>(0)? as u32;
        let p = Point {
            t_ms: r.get::<_, i64>(1)? as u64,
            v: [r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?],
        };
        if flow == 0 {
            series.push(p.path());
        } else {
            by_flow.entry(flow).or_default().push(p.flow());
        }
    }
    let flow_series = flows
        .iter()
        .map(|(idx, f)| FlowSeries {
            cookie: f.cookie,
            points: by_flow.remove(idx).unwrap_or_default(),
        })
        .collect();
    Ok(Some(EpisodeDetail {
        episode,
        flows: flows.into_iter().map(|(_, f)| f).collect(),
        series,
        flow_series,
    }))
}

/// The per-minute rows since `since_ms` that `q` asks for, oldest first.
pub fn history(
    conn: &Connection,
    q: &HistoryQuery,
    since_ms: u64,
) -> rusqlite::Result<Vec<MinuteRow>> {
    let since = since_ms.min(i64::MAX as u64) as i64;
    if q.worst.is_set() && q.path.is_some() {
        // The paths asked for first, then the worst of them each minute.
        let each = HistoryQuery {
            worst: false.into(),
            ..q.clone()
        };
        return Ok(worst_per_minute(history(conn, &each, since_ms)?));
    }
    let sql = if q.worst.is_set() {
        // SQLite takes the bare columns of an aggregate from the row of
        // its max(): the worst path's.
        "SELECT m.t_ms, max(m.q50), m.q90, m.qmax, sum(m.rate), sum(m.sockets), count(*),
                p.netns, p.peer, p.prefix_len, p.interface
         FROM minutes m JOIN paths p ON p.id = m.path
         WHERE m.t_ms >= ?1 GROUP BY m.t_ms ORDER BY m.t_ms"
    } else {
        "SELECT m.t_ms, m.q50, m.q90, m.qmax, m.rate, m.sockets, NULL,
                p.netns, p.peer, p.prefix_len, p.interface
         FROM minutes m JOIN paths p ON p.id = m.path
         WHERE m.t_ms >= ?1 ORDER BY m.t_ms, p.netns, p.peer, p.interface"
    };
    let mut st = conn.prepare_cached(sql)?;
    let mut rows = st.query([since])?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        let peer: String = r.get(8)?;
        let Ok(peer) = peer.parse::<IpAddr>() else {
            continue;
        };
        let m = MinuteRow {
            t_ms: r.get::<_, i64>(0)? as u64,
            queue_p50_us: r.get::<_, i64>(1)? as u32,
            queue_p90_us: r.get::<_, i64>(2)? as u32,
            queue_max_us: r.get::<_, i64>(3)? as u32,
            rate_bps: r.get::<_, i64>(4)?.max(0) as u64,
            sockets: r.get::<_, i64>(5)? as u32,
            paths: r.get::<_, Option<i64>>(6)?.map(|n| n as u32),
            netns: r.get::<_, i64>(7)? as u32,
            peer,
            prefix_len: r.get::<_, i64>(9)? as u8,
            interface: r.get(10)?,
        };
        if q.matches(&m) {
            out.push(m);
        }
    }
    Ok(out)
}

/// One row per minute: the worst path's queue (by median), every path's
/// rate and sockets, how many paths; `rows` oldest first.
pub fn worst_per_minute(rows: Vec<MinuteRow>) -> Vec<MinuteRow> {
    let mut out: Vec<MinuteRow> = Vec::new();
    for m in rows {
        match out.last_mut().filter(|w| w.t_ms == m.t_ms) {
            Some(w) => {
                let (rate, sockets, paths) = (
                    w.rate_bps + m.rate_bps,
                    w.sockets + m.sockets,
                    w.paths.unwrap_or(1) + 1,
                );
                if m.queue_p50_us > w.queue_p50_us {
                    *w = m;
                }
                (w.rate_bps, w.sockets, w.paths) = (rate, sockets, Some(paths));
            }
            None => out.push(MinuteRow {
                paths: Some(1),
                ..m
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recorder::episodes::{Detector, Settings};
    use bloatd_model::journal::{EpisodeKind, EpisodePath};
    use bloatd_model::Socket;

    const T0: u64 = 1_763_683_200_000;
    const BIG: Bounds = Bounds {
        max_bytes: 64 << 20,
        max_age_ms: 30 * 86_400_000,
    };

    /// A directory of the test's own, removed at the end.
    pub(crate) struct TempDir(pub PathBuf);
    impl TempDir {
        pub(crate) fn new(name: &str) -> TempDir {
            let p = std::env::temp_dir().join(format!(
                "bloatd-journal-{name}-{}-{}",
                std::process::id(),
                crate::clock::Clock::now().mono_ns
            ));
            std::fs::create_dir_all(&p).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            TempDir(p)
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn bulk(cookie: u64, queue_ms: u32, acked: u64) -> Socket {
        let mut s = bloatd_model::fixtures::sending(
            bloatd_model::fixtures::socket(cookie),
            80_000,
            queue_ms * 1000,
        );
        s.remote_addr = "10.9.2.2".parse().unwrap();
        s.interface = "eth0".into();
        s.bytes_acked = acked;
        s.idle_ms = 0;
        s
    }

    /// The writes of an episode of `secs` seconds of 400 ms of queue,
    /// starting at `t0`, and the drain after it.
    fn episode_writes(d: &mut Detector, t0: u64, secs: u64) -> Vec<Write> {
        let mut out = Vec::new();
        for i in 0..secs + 5 {
            let q = if i < secs { 400 } else { 5 };
            out.extend(d.observe(
                t0 + i * 1000,
                &[bulk(1, q, 250_000 * (i + 1))],
                None,
                &|_, _| None,
            ));
        }
        out
    }

    fn detector() -> Detector {
        Detector::new(
            Settings {
                threshold_us: 100_000,
                prefix: Some((24, 64)),
            },
            1,
        )
    }

    #[test]
    fn episodes_series_and_minutes_read_back() {
        let dir = TempDir::new("rw");
        let (mut j, notes) = Journal::open(&dir.0, BIG, T0).unwrap();
        assert!(notes.is_empty(), "{notes:?}");
        let mut d = Detector::new(
            Settings {
                threshold_us: 100_000,
                prefix: Some((24, 64)),
            },
            j.next_id(),
        );
        for w in episode_writes(&mut d, T0 + 10_000, 20) {
            j.write(std::slice::from_ref(&w), T0).unwrap();
        }
        // The minute ends.
        j.write(
            &d.observe(T0 + 60_000, &[bulk(1, 5, 10_000_000)], None, &|_, _| None),
            T0,
        )
        .unwrap();
        let r = open_reader(&dir.0).unwrap().unwrap();
        let list = incidents(&r, &IncidentsQuery::default(), 0).unwrap();
        assert_eq!(list.len(), 2, "{list:?}");
        let path = list.iter().find(|e| e.kind == EpisodeKind::Path).unwrap();
        assert_eq!(
            (path.start_ms, path.end_ms, path.open),
            (T0 + 10_000, T0 + 29_000, false),
            "20 s above: from the first to the last read over"
        );
        let det = detail(&r, path.id).unwrap().unwrap();
        assert_eq!(det.flows.len(), 1);
        assert_eq!(det.series.first().unwrap().t_ms, T0 + 10_000);
        assert!(det.series.len() >= 20, "{}", det.series.len());
        assert_eq!(det.flow_series[0].points.len(), det.series.len());
        let q = IncidentsQuery {
            path: Some("10.9.3.0/24".into()),
            ..Default::default()
        };
        assert!(incidents(&r, &q, 0).unwrap().is_empty());
        let rows = history(&r, &HistoryQuery::default(), 0).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].peer_text(), "10.9.2.0/24");
    }

    #[test]
    fn an_episode_left_open_is_closed_at_its_last_second_on_the_next_start() {
        let dir = TempDir::new("kill");
        {
            let (mut j, _) = Journal::open(&dir.0, BIG, T0).unwrap();
            let mut d = detector();
            // 8 s of queue, then the daemon dies (no finish, no close).
            for i in 0..8u64 {
                let w = d.observe(
                    T0 + i * 1000,
                    &[bulk(1, 400, 100_000 * i)],
                    None,
                    &|_, _| None,
                );
                j.write(&w, T0).unwrap();
            }
            drop(j); // no finish: as a daemon that died leaves it
        }
        let (_j, notes) = Journal::open(&dir.0, BIG, T0 + 60_000).unwrap();
        assert!(notes.iter().any(|n| n.contains("left open")), "{notes:?}");
        let r = open_reader(&dir.0).unwrap().unwrap();
        let e = &incidents(&r, &IncidentsQuery::default(), 0).unwrap()[0];
        assert_eq!((e.open, e.cut.as_deref()), (false, Some("interrupted")));
        assert_eq!(e.end_ms, T0 + 7000, "its last second");
        // The summary on disk was written when it opened (3 s in); its
        // bytes are taken from the points: 100 kB a second to the end.
        assert!(e.bytes >= 600_000, "{}", e.bytes);
    }

    #[test]
    fn what_is_not_a_journal_is_moved_aside_and_kept() {
        for (what, tag) in [
            ("garbage", "bad"),
            ("foreign", "bad"),
            ("symlink", "symlink"),
        ] {
            let dir = TempDir::new(what);
            let file = dir.0.join(FILE);
            let target = dir.0.join("elsewhere");
            match what {
                "garbage" => std::fs::write(&file, vec![0x5a; 8192]).unwrap(),
                "foreign" => {
                    let c = Connection::open(&file).unwrap();
                    c.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (42);")
                        .unwrap();
                }
                _ => {
                    std::fs::write(&target, b"not for bloatd").unwrap();
                    std::os::unix::fs::symlink(&target, &file).unwrap();
                }
            }
            let (mut j, notes) = Journal::open(&dir.0, BIG, T0).unwrap();
            assert_eq!(notes.len(), 1, "{what}: {notes:?}");
            assert!(notes[0].contains("moved aside"), "{}", notes[0]);
            let aside: Vec<String> = std::fs::read_dir(&dir.0)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    n.starts_with(&format!("{FILE}.{tag}-"))
                        && !n.ends_with("-wal")
                        && !n.ends_with("-shm")
                })
                .collect();
            assert_eq!(aside.len(), 1, "{what}: {aside:?}");
            let kept = dir.0.join(&aside[0]);
            match what {
                "garbage" => assert_eq!(std::fs::read(&kept).unwrap(), vec![0x5a; 8192]),
                "foreign" => {
                    let c = Connection::open(&kept).unwrap();
                    let x: i64 = c.query_row("SELECT x FROM t", [], |r| r.get(0)).unwrap();
                    assert_eq!(x, 42);
                }
                _ => {
                    assert!(std::fs::symlink_metadata(&kept)
                        .unwrap()
                        .file_type()
                        .is_symlink());
                    assert_eq!(std::fs::read(&target).unwrap(), b"not for bloatd");
                }
            }
            // And the new journal works.
            let mut d = detector();
            for w in episode_writes(&mut d, T0, 6) {
                j.write(&[w], T0).unwrap();
            }
            let r = open_reader(&dir.0).unwrap().unwrap();
            assert_eq!(
                incidents(&r, &IncidentsQuery::default(), 0).unwrap().len(),
                2
            );
            let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, MODE, "{what}");
        }
    }

    #[test]
    fn a_second_bloatd_finds_it_locked() {
        let dir = TempDir::new("lock");
        let (_j, _) = Journal::open(&dir.0, BIG, T0).unwrap();
        match Journal::open(&dir.0, BIG, T0) {
            Err(Error::JournalLocked { pid, .. }) => {
                assert_eq!(pid, format!(" (pid {})", std::process::id()))
            }
            other => panic!("{:?}", other.map(|_| ())),
        }
    }

    fn minute_rows(t_ms: u64, paths: u32) -> Vec<MinuteRow> {
        (0..paths)
            .map(|i| MinuteRow {
                t_ms,
                netns: 1,
                peer: IpAddr::from([10, (i >> 8) as u8, i as u8, 0]),
                prefix_len: 24,
                interface: "eth0".into(),
                queue_p50_us: 1000 + i,
                queue_p90_us: 2000 + i,
                queue_max_us: 3000 + i,
                rate_bps: 1_000_000 + i as u64,
                sockets: 2,
                paths: None,
            })
            .collect()
    }

    #[test]
    fn the_journal_stays_within_its_bound_oldest_first() {
        let dir = TempDir::new("bound");
        let bounds = Bounds {
            max_bytes: 4 << 20,
            max_age_ms: 30 * 86_400_000,
        };
        let (mut j, _) = Journal::open(&dir.0, bounds, T0).unwrap();
        let mut max_seen = 0;
        // 1,000 paths a minute for 4 hours: far more than 4 MB.
        for m in 0..240u64 {
            let t = T0 + m * 60_000;
            j.write(&[Write::Minutes(minute_rows(t, 1000))], t).unwrap();
            max_seen = max_seen.max(j.bytes());
        }
        assert!(
            max_seen <= bounds.max_bytes,
            "{max_seen} > {}",
            bounds.max_bytes
        );
        let r = open_reader(&dir.0).unwrap().unwrap();
        let rows = history(&r, &HistoryQuery::default(), 0).unwrap();
        // The newest minutes are kept, the oldest gone.
        assert_eq!(rows.last().unwrap().t_ms, T0 + 239 * 60_000);
        assert!(rows.first().unwrap().t_ms > T0, "the oldest went first");
        println!(
            "bound 4 MB: at most {max_seen} bytes on disk; kept {} minutes",
            rows.len() / 1000
        );
    }

    #[test]
    fn data_older_than_the_age_bound_goes() {
        let dir = TempDir::new("age");
        let bounds = Bounds {
            max_bytes: 64 << 20,
            max_age_ms: 3_600_000,
        };
        let (mut j, _) = Journal::open(&dir.0, bounds, T0).unwrap();
        let mut d = detector();
        for w in episode_writes(&mut d, T0, 6) {
            j.write(&[w], T0 + 20_000).unwrap();
        }
        j.write(&[Write::Minutes(minute_rows(T0, 3))], T0 + 20_000)
            .unwrap();
        j.write(
            &[Write::Minutes(minute_rows(T0 + 7_200_000, 3))],
            T0 + 7_200_000,
        )
        .unwrap();
        let r = open_reader(&dir.0).unwrap().unwrap();
        assert!(incidents(&r, &IncidentsQuery::default(), 0)
            .unwrap()
            .is_empty());
        let rows = history(&r, &HistoryQuery::default(), 0).unwrap();
        assert!(rows.iter().all(|m| m.t_ms == T0 + 7_200_000), "{rows:?}");
        let worst = history(
            &r,
            &HistoryQuery {
                worst: true.into(),
                ..Default::default()
            },
            0,
        )
        .unwrap();
        assert_eq!(worst.len(), 1);
        assert_eq!(
            (worst[0].paths, worst[0].queue_p50_us, worst[0].sockets),
            (Some(3), 1002, 6)
        );
        assert_eq!(worst[0].peer, IpAddr::from([10, 0, 2, 0]));
        let _ = EpisodePath {
            netns: 0,
            peer: worst[0].peer,
            prefix_len: 24,
            interface: String::new(),
            gateway: None,
        };
    }
}
