//! Answers with every socket, streamed: the JSON is written a chunk at a
//! time from one shared full read (`tracker::Rows`), each socket made into
//! a `Socket` only as its chunk is made, so answering for 100,000 sockets
//! adds no more than a few chunks and the read's order to the daemon's
//! memory (the whole answer was 62.8 MB, held twice, before streaming).
//! Same JSON as before: an array of sockets, or a snapshot object.
//!
//! Chunks are made by a pool of MAKERS threads shared by every answer,
//! AHEAD of the socket each, and sent in order: the daemon's one runtime
//! thread only writes them out (and makes them itself while the system
//! refuses the daemon threads). Making the JSON was the longest part of a
//! whole answer (100,000 sockets: ~160 ms of one core, the kernel's read
//! ~110 ms); two makers on a 2-core server halve it, and however many
//! clients ask at once the pool never takes more than its MAKERS cores.

use crate::tracker::Rows;
use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bloatd_model::Snapshot;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use tokio::sync::oneshot;

/// Sockets per chunk: some 64 KiB of JSON (a socket is ~630 bytes).
const CHUNK_ROWS: usize = 100;
/// Threads making chunks, for every answer together.
const MAKERS: usize = 2;
/// Chunks an answer has asked for ahead of the one it waits for: enough
/// to keep every maker busy, few enough to bound its memory (~4 x 64 KiB).
const AHEAD: usize = 2 * MAKERS;

/// Whole answers in flight at most, per caller's uid and in all. Each
/// holds one full read until its client has read it all (~6 MB at 20,000
/// sockets, 30 MB at 100,000), so a client that asks and never reads could
/// make the daemon keep read after read. Past the bound the oldest answer
/// of that uid is shed (else the oldest of all): its connection ends, and
/// with it what the answer held. A connection that reads nothing for
/// server::WRITE_STALL ends too.
const FLIGHTS_PER_UID: usize = 4;
const FLIGHTS: usize = 16;
/// A user's next whole answer starts no sooner than this many times what
/// its last one took after that one ended (at most FLIGHT_PACE_MAX): making
/// the JSON of 100,000 sockets is ~160 ms of a core, so one client asking
/// in a loop may take about a seventh of a core, not all of it.
const FLIGHT_PACE: u32 = 6;
const FLIGHT_PACE_MAX: std::time::Duration = std::time::Duration::from_secs(5);
/// Users whose pace is remembered (the oldest forgotten first).
const PACED_USERS: usize = 1024;

struct FlightEntry {
    id: u64,
    uid: u32,
    conn: Option<tokio::task::AbortHandle>,
}

#[derive(Default)]
struct FlightList {
    next: u64,
    open: VecDeque<FlightEntry>,
    shed: u64,
    logged: Option<std::time::Instant>,
    /// When each user's next whole answer may start (FLIGHT_PACE).
    paced: VecDeque<(u32, std::time::Instant)>,
}

static FLIGHTS_OPEN: Mutex<FlightList> = Mutex::new(FlightList {
    next: 0,
    open: VecDeque::new(),
    shed: 0,
    logged: None,
    paced: VecDeque::new(),
});

/// One whole answer in flight (FLIGHTS); leaves the list when dropped.
pub struct Flight {
    id: u64,
    uid: u32,
    started: std::time::Instant,
}

impl FlightList {
    /// How long `uid` waits before its next whole answer starts.
    fn wait(&self, uid: u32, now: std::time::Instant) -> std::time::Duration {
        self.paced
            .iter()
            .find(|(u, _)| *u == uid)
            .map_or(std::time::Duration::ZERO, |(_, t)| {
                t.saturating_duration_since(now)
            })
    }

    /// `uid`'s answer that started at `started` ended now.
    fn ended(&mut self, uid: u32, started: std::time::Instant, now: std::time::Instant) {
        let pace = (now.duration_since(started) * FLIGHT_PACE).min(FLIGHT_PACE_MAX);
        self.paced.retain(|(u, _)| *u != uid);
        if self.paced.len() >= PACED_USERS {
            self.paced.pop_front();
        }
        self.paced.push_back((uid, now + pace));
    }
}

impl Flight {
    /// The answer about to be made for `uid` on connection `conn`, once
    /// the user's pace allows it, shedding the oldest if that is one too
    /// many.
    pub async fn enter(uid: u32, conn: &crate::server::Conn) -> Flight {
        let wait = FLIGHTS_OPEN
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .wait(uid, std::time::Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let mut l = FLIGHTS_OPEN.lock().unwrap_or_else(PoisonError::into_inner);
        Flight::enter_in(&mut l, uid, conn.0.get().cloned())
    }

    fn enter_in(l: &mut FlightList, uid: u32, conn: Option<tokio::task::AbortHandle>) -> Flight {
        let mine = l.open.iter().filter(|e| e.uid == uid).count();
        let shed = if mine >= FLIGHTS_PER_UID {
            l.open.iter().position(|e| e.uid == uid)
        } else if l.open.len() >= FLIGHTS {
            Some(0)
        } else {
            None
        };
        if let Some(old) = shed.and_then(|i| l.open.remove(i)) {
            if let Some(c) = old.conn {
                c.abort();
            }
            l.shed += 1;
            if l.logged
                .is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(60))
            {
                tracing::warn!(
                    "shed an answer with every socket that uid {} did not read ({} shed so far):                      at most {FLIGHTS_PER_UID} such answers per user and {FLIGHTS} in all",
                    old.uid,
                    l.shed
                );
                l.logged = Some(std::time::Instant::now());
            }
        }
        let id = l.next;
        l.next += 1;
        l.open.push_back(FlightEntry { id, uid, conn });
        Flight {
            id,
            uid,
            started: std::time::Instant::now(),
        }
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        let mut l = FLIGHTS_OPEN.lock().unwrap_or_else(PoisonError::into_inner);
        l.open.retain(|e| e.id != self.id);
        l.ended(self.uid, self.started, std::time::Instant::now());
    }
}

/// Every socket of `rows` as a JSON array.
pub fn sockets(rows: Rows, flight: Flight) -> Response {
    json(b"[".to_vec(), rows, b"]".to_vec(), flight)
}

/// `snap` with `rows` as its sockets (`snap.sockets` is left out).
pub fn snapshot(
    snap: &Snapshot,
    rows: Rows,
    flight: Flight,
) -> Result<Response, serde_json::Error> {
    let mut fields = match serde_json::to_value(snap)? {
        serde_json::Value::Object(fields) => fields,
        _ => unreachable!("a snapshot serializes to an object"),
    };
    fields.remove("sockets");
    let mut tail = b"]".to_vec();
    for (k, v) in &fields {
        tail.push(b',');
        serde_json::to_writer(&mut tail, k)?;
        tail.push(b':');
        serde_json::to_writer(&mut tail, v)?;
    }
    tail.push(b'}');
    Ok(json(br#"{"sockets":["#.to_vec(), rows, tail, flight))
}

/// `head`, the rows separated by commas, then `tail`.
fn json(head: Vec<u8>, rows: Rows, tail: Vec<u8>, flight: Flight) -> Response {
    json_made_by(makers(), head, rows, tail, flight)
}

/// The same, its chunks made by `makers` (None: by the runtime thread).
fn json_made_by(
    makers: Option<mpsc::Sender<Job>>,
    head: Vec<u8>,
    rows: Rows,
    tail: Vec<u8>,
    flight: Flight,
) -> Response {
    let body = Body::from_stream(RowStream {
        _flight: flight,
        makers,
        chunks: rows.len().div_ceil(CHUNK_ROWS),
        rows: Arc::new(rows),
        head: Some(head),
        asked: 0,
        pending: VecDeque::new(),
        tail: Some(tail),
    });
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Chunk `k` of `rows`: its sockets, each after a comma but the first.
fn make_chunk(rows: &Rows, k: usize) -> Bytes {
    let (from, to) = (k * CHUNK_ROWS, ((k + 1) * CHUNK_ROWS).min(rows.len()));
    let mut buf = Vec::with_capacity(CHUNK_ROWS * 700);
    for i in from..to {
        if i > 0 {
            buf.push(b',');
        }
        serde_json::to_writer(&mut buf, &rows.get(i)).expect("a Socket serializes to JSON");
    }
    Bytes::from(buf)
}

/// One chunk to make, and where its answer waits for it.
struct Job {
    rows: Arc<Rows>,
    k: usize,
    done: oneshot::Sender<Bytes>,
}

/// The makers' queue, and whether the system refused them their threads.
#[derive(Default)]
struct Pool {
    tx: Option<mpsc::Sender<Job>>,
    refused: bool,
}

impl Pool {
    /// The queue, its makers started by `spawn` at the first answer. None
    /// while the system refuses the daemon a thread (its cgroup's pids.max
    /// reached, RLIMIT_NPROC): that answer is made on the runtime thread,
    /// slower but whole, and the next one tries again. Logged once when
    /// refused and once when the makers start after that, not on every
    /// answer in between.
    fn queue(
        &mut self,
        spawn: impl Fn(usize, Arc<Mutex<mpsc::Receiver<Job>>>) -> std::io::Result<()>,
    ) -> Option<mpsc::Sender<Job>> {
        if self.tx.is_none() {
            match start_makers(spawn) {
                Ok(tx) => {
                    if self.refused {
                        tracing::info!("threads for making answers started again");
                    }
                    self.refused = false;
                    self.tx = Some(tx);
                }
                Err(e) => {
                    if !self.refused {
                        tracing::warn!(
                            "no thread for making answers ({e}): made on the main thread \
                             until one starts"
                        );
                    }
                    self.refused = true;
                }
            }
        }
        self.tx.clone()
    }
}

/// The daemon's pool of makers (see `Pool::queue`).
fn makers() -> Option<mpsc::Sender<Job>> {
    static POOL: Mutex<Pool> = Mutex::new(Pool {
        tx: None,
        refused: false,
    });
    POOL.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .queue(|n, rx| {
            std::thread::Builder::new()
                .name(format!("bloatd-json-{n}"))
                .spawn(move || make_jobs(&rx))
                .map(drop)
        })
}

/// MAKERS threads started by `spawn` on one queue; the last refusal if
/// none started.
fn start_makers(
    spawn: impl Fn(usize, Arc<Mutex<mpsc::Receiver<Job>>>) -> std::io::Result<()>,
) -> std::io::Result<mpsc::Sender<Job>> {
    let (tx, rx) = mpsc::channel::<Job>();
    let rx = Arc::new(Mutex::new(rx));
    let mut refused = None;
    let started = (0..MAKERS)
        .filter(|&n| spawn(n, rx.clone()).map_err(|e| refused = Some(e)).is_ok())
        .count();
    match refused {
        Some(e) if started == 0 => Err(e),
        _ => Ok(tx),
    }
}

/// A maker: the queue's jobs until the queue closes.
fn make_jobs(rx: &Mutex<mpsc::Receiver<Job>>) {
    loop {
        let job = match rx.lock().unwrap_or_else(PoisonError::into_inner).recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        // An answer whose client went away no longer waits.
        if !job.done.is_closed() {
            let _ = job.done.send(make_chunk(&job.rows, job.k));
        }
    }
}

struct RowStream {
    /// Its place among the answers in flight, left when the stream goes.
    _flight: Flight,
    rows: Arc<Rows>,
    chunks: usize,
    /// The pool's queue; None: the chunks are made here.
    makers: Option<mpsc::Sender<Job>>,
    /// Taken when written.
    head: Option<Vec<u8>>,
    /// Chunks handed to the makers so far.
    asked: usize,
    /// Their answers, in order.
    pending: VecDeque<oneshot::Receiver<Bytes>>,
    /// Taken when written: the stream has ended.
    tail: Option<Vec<u8>>,
}

impl futures_core::Stream for RowStream {
    type Item = Result<Bytes, Infallible>;

    /// The head, then each chunk as its maker finishes it, then the tail.
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if let Some(head) = this.head.take() {
            return Poll::Ready(Some(Ok(Bytes::from(head))));
        }
        while this.asked < this.chunks && this.pending.len() < AHEAD {
            let (done, wait) = oneshot::channel();
            let job = Job {
                rows: this.rows.clone(),
                k: this.asked,
                done,
            };
            let unsent = match &this.makers {
                Some(queue) => queue.send(job).err().map(|e| e.0),
                None => Some(job),
            };
            if let Some(job) = unsent {
                let _ = job.done.send(make_chunk(&job.rows, job.k));
            }
            this.pending.push_back(wait);
            this.asked += 1;
        }
        if let Some(wait) = this.pending.front_mut() {
            return match Pin::new(wait).poll(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(chunk) => {
                    this.pending.pop_front();
                    let chunk = chunk.expect("a maker finishes every chunk it takes");
                    Poll::Ready(Some(Ok(chunk)))
                }
            };
        }
        Poll::Ready(this.tail.take().map(|t| Ok(Bytes::from(t))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::abi::{self, BloatdSock};
    use crate::tracker::Tracker;
    use futures_core::Stream;
    use std::collections::HashMap;

    /// `n` established senders, socket `c` queued c ms.
    fn rows(n: u64) -> (Tracker, crate::clock::Clock) {
        let recs = (1..=n)
            .map(|c| {
                let mut r = BloatdSock {
                    cookie: c,
                    family: 2, // AF_INET
                    state: abi::TCP_ESTABLISHED,
                    role: abi::role::SENDER as u8,
                    queue_delay_us: c as u32 * 1000,
                    ..Default::default()
                };
                r.cc[..5].copy_from_slice(b"cubic");
                r
            })
            .collect();
        let mut t = Tracker::new(100, 60);
        t.refresh(recs, HashMap::new());
        let clock = crate::clock::Clock {
            mono_ns: 1,
            unix_ms: 1_000,
        };
        (t, clock)
    }

    /// A place among the answers in flight, for tests of the JSON (a list
    /// of its own: no pace to wait for).
    fn any_flight() -> Flight {
        Flight::enter_in(&mut FlightList::default(), u32::MAX, None)
    }

    #[test]
    fn a_user_waits_six_times_what_its_last_answer_took() {
        let mut l = FlightList::default();
        let t0 = std::time::Instant::now();
        let ms = std::time::Duration::from_millis;
        assert_eq!(l.wait(1000, t0), ms(0));
        l.ended(1000, t0, t0 + ms(200));
        assert_eq!(l.wait(1000, t0 + ms(200)), ms(1200));
        assert_eq!(l.wait(1000, t0 + ms(900)), ms(500));
        assert_eq!(
            l.wait(2000, t0 + ms(200)),
            ms(0),
            "another user does not wait"
        );
        l.ended(1000, t0, t0 + ms(60_000));
        assert_eq!(l.wait(1000, t0 + ms(60_000)), FLIGHT_PACE_MAX, "bounded");
    }

    #[test]
    fn the_oldest_unread_answer_of_a_user_is_shed_past_the_bound() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut l = FlightList::default();
            // Connections that never end, standing for stalled clients.
            let conn = || tokio::spawn(std::future::pending::<()>());
            let mine: Vec<_> = (0..FLIGHTS_PER_UID).map(|_| conn()).collect();
            let flights: Vec<_> = mine
                .iter()
                .map(|c| Flight::enter_in(&mut l, 1000, Some(c.abort_handle())))
                .collect();
            assert_eq!(l.open.len(), FLIGHTS_PER_UID);
            // Another user's answer sheds nothing of uid 1000's.
            let other = conn();
            let _theirs = Flight::enter_in(&mut l, 2000, Some(other.abort_handle()));
            tokio::task::yield_now().await;
            assert!(mine.iter().all(|c| !c.is_finished()) && l.shed == 0);
            // One more of uid 1000: its oldest connection ends.
            let newest = conn();
            let _f = Flight::enter_in(&mut l, 1000, Some(newest.abort_handle()));
            tokio::task::yield_now().await;
            assert!(mine[0].is_finished(), "the oldest shed");
            assert!(mine[1..].iter().all(|c| !c.is_finished()) && !other.is_finished());
            assert_eq!((l.shed, l.open.len()), (1, FLIGHTS_PER_UID + 1));
            // The bound in all: the oldest of anyone's goes.
            let mut rest = Vec::new();
            for uid in 3000..3000 + FLIGHTS as u32 {
                let c = conn();
                rest.push(Flight::enter_in(&mut l, uid, Some(c.abort_handle())));
            }
            assert!(l.open.len() <= FLIGHTS);
            drop(flights);
        });
    }

    #[test]
    fn an_answer_leaves_the_list_when_it_goes() {
        let f = Flight::enter_in(
            &mut FLIGHTS_OPEN.lock().unwrap_or_else(PoisonError::into_inner),
            u32::MAX - 1,
            None,
        );
        let id = f.id;
        assert!(FLIGHTS_OPEN
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .open
            .iter()
            .any(|e| e.id == id));
        drop(f);
        assert!(!FLIGHTS_OPEN
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .open
            .iter()
            .any(|e| e.id == id));
    }

    /// Every chunk of a streamed answer, and how many there were.
    fn collect(resp: Response) -> (Vec<u8>, usize) {
        let mut stream = resp.into_body().into_data_stream();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let (mut out, mut chunks) = (Vec::new(), 0);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            assert!(std::time::Instant::now() < deadline, "the makers are stuck");
            match Pin::new(&mut stream).poll_next(&mut cx) {
                Poll::Ready(Some(chunk)) => {
                    out.extend_from_slice(&chunk.unwrap());
                    chunks += 1;
                }
                Poll::Ready(None) => return (out, chunks),
                // A maker is at work: wait for it as a runtime would.
                Poll::Pending => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        }
    }

    #[test]
    fn answers_are_whole_when_the_system_refuses_the_daemon_threads() {
        let refused = || Err(std::io::Error::from_raw_os_error(libc::EAGAIN));
        assert!(start_makers(|_, _| refused()).is_err(), "no maker: no pool");
        // Refused, then again (logged once), then granted: the pool starts.
        let mut pool = Pool::default();
        assert!(pool.queue(|_, _| refused()).is_none());
        assert!(pool.queue(|_, _| refused()).is_none() && pool.refused);
        let granted = pool.queue(|_, rx| {
            std::thread::spawn(move || make_jobs(&rx));
            Ok(())
        });
        assert!(granted.is_some() && !pool.refused);
        let (t, clock) = rows(1000);
        let want = t.sockets(&clock, false);
        let made_by = |makers| {
            let (bytes, chunks) = collect(json_made_by(
                makers,
                b"[".to_vec(),
                t.rows(&clock, false),
                b"]".to_vec(),
                any_flight(),
            ));
            assert!(chunks > 3, "in chunks, not at once: {chunks}");
            serde_json::from_slice::<Vec<bloatd_model::Socket>>(&bytes).unwrap()
        };
        assert_eq!(made_by(None), want, "made on the runtime thread");
        // One maker of two refused: the pool runs on the other.
        let one = start_makers(|n, rx| {
            if n == 0 {
                return refused();
            }
            std::thread::spawn(move || make_jobs(&rx));
            Ok(())
        });
        assert!(one.is_ok());
        assert_eq!(made_by(one.ok()), want, "made by the one maker");
    }

    #[test]
    fn a_streamed_answer_is_the_json_it_replaces() {
        let (t, clock) = rows(1000);
        let (bytes, chunks) = collect(sockets(t.rows(&clock, false), any_flight()));
        assert!(chunks > 3, "in chunks, not at once: {chunks}");
        let streamed: Vec<bloatd_model::Socket> = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(streamed, t.sockets(&clock, false));
        assert_eq!(streamed[0].cookie, 1000, "most queued first");

        let snap = Snapshot {
            taken_ms: 7,
            summary: None,
            matched: None,
            interval_ms: 100,
            bloat_threshold_us: 100_000,
            sockets: Vec::new(),
            series: Vec::new(),
            health: bloatd_model::Health {
                mode: "daemon".into(),
                ..Default::default()
            },
            paths: Vec::new(),
            policy: None,
            services: Vec::new(),
            episodes: Vec::new(),
        };
        let (bytes, _) = collect(snapshot(&snap, t.rows(&clock, false), any_flight()).unwrap());
        let streamed: Snapshot = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            streamed,
            Snapshot {
                sockets: t.sockets(&clock, false),
                ..snap
            }
        );
        // A client gone mid-answer leaves nothing stuck: its chunks not
        // yet made are skipped, and the makers go on with the next answer.
        let (many, _) = rows(5000);
        let mut gone = sockets(many.rows(&clock, false), any_flight())
            .into_body()
            .into_data_stream();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let _ = Pin::new(&mut gone).poll_next(&mut cx);
        let _ = Pin::new(&mut gone).poll_next(&mut cx);
        drop(gone);
        let (bytes, _) = collect(sockets(t.rows(&clock, false), any_flight()));
        let again: Vec<bloatd_model::Socket> = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(again.len(), 1000);

        let (none, _) = rows(0);
        let (bytes, chunks) = collect(sockets(none.rows(&clock, false), any_flight()));
        assert_eq!((bytes.as_slice(), chunks), (&b"[]"[..], 2), "head and tail");
    }
}
