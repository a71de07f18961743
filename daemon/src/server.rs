//! The daemon's servers: the JSON API on the Unix socket (peer addresses
//! live here only) and Prometheus /metrics over TCP: they route the
//! requests of the contract (bloatd_model::api) to the engine's parts
//! (engine/).
//! Routes that change the kernel take an [`Actor`]: root or the admin
//! group (authority.rs); the API group reads.

use crate::authority::{Actor, Authority, Caller};
use crate::engine::control::Control;
use crate::engine::loaded::Loaded;
use crate::engine::reader::{Asker, Reader};
use crate::engine::scrape::Scraper;
use crate::engine::worker;
use crate::engine::Engine;
use crate::error::{Chain, Error};
use axum::extract::{FromRef, Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use bloatd_model::api::{
    route, DefaultReq, DefaultResp, DrwaReq, PathsQuery, RuleReq, SeriesQuery, SnapshotQuery,
    SocketsQuery,
};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};

/// Each route takes the part of the engine it uses (engine/mod.rs); work
/// that may read every socket (a read, a view) goes to the engine's worker
/// (`worker::run`): /metrics and the other connections go on meanwhile.
impl FromRef<Engine> for Arc<Loaded> {
    fn from_ref(e: &Engine) -> Self {
        e.loaded.clone()
    }
}
impl FromRef<Engine> for Arc<Reader> {
    fn from_ref(e: &Engine) -> Self {
        e.reader.clone()
    }
}
impl FromRef<Engine> for Arc<Control> {
    fn from_ref(e: &Engine) -> Self {
        e.control.clone()
    }
}

fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, msg.into()).into_response()
}

pub fn api_router(
    engine: Engine,
    authority: Authority,
    recorder: Option<crate::recorder::Reader>,
) -> Router {
    Router::new()
        .merge(read_routes())
        .merge(act_routes())
        .with_state(engine)
        .merge(recorder_routes(recorder))
        .layer(Extension(std::sync::Arc::new(authority)))
}

/// The flight recorder's routes (read access): answered from the journal
/// on a thread of their own, never under the engine's lock.
fn recorder_routes(recorder: Option<crate::recorder::Reader>) -> Router {
    use crate::recorder::Reader;
    use bloatd_model::journal::{HistoryQuery, IncidentsQuery};
    type R = Option<Reader>;
    fn off() -> Response {
        error(
            StatusCode::NOT_FOUND,
            "the flight recorder is off in this bloatd (journal_max_mb = 0)",
        )
    }
    fn answer<T: serde::Serialize>(r: crate::error::Result<T>) -> Response {
        match r {
            Ok(v) => Json(v).into_response(),
            Err(e @ Error::NoSuchEpisode(_)) => error(StatusCode::NOT_FOUND, e.to_string()),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        }
    }
    Router::new()
        .route(
            route::INCIDENTS,
            get(
                |State(r): State<R>, Query(q): Query<IncidentsQuery>| async move {
                    let Some(r) = r else { return off() };
                    let since = q.since_ms.unwrap_or(0);
                    answer(r.run(move |r| r.incidents(&q, since)).await)
                },
            ),
        )
        .route(
            route::INCIDENT,
            get(|State(r): State<R>, Path(id): Path<u64>| async move {
                let Some(r) = r else { return off() };
                answer(r.run(move |r| r.incident(id)).await)
            }),
        )
        .route(
            route::HISTORY,
            get(
                |State(r): State<R>, Query(q): Query<HistoryQuery>| async move {
                    let Some(r) = r else { return off() };
                    let since = q.since_ms.unwrap_or_else(|| {
                        crate::clock::Clock::now()
                            .unix_ms
                            .saturating_sub(86_400_000)
                    });
                    answer(r.run(move |r| r.history(&q, since)).await)
                },
            ),
        )
        .with_state(recorder)
}

/// What `bloatd top` draws, streamed when it asks for every socket; the
/// policy part says why this caller may not switch DRWA, if it may not.
async fn snapshot(
    State(engine): State<Engine>,
    caller: Caller,
    Extension(conn): Extension<Conn>,
    Query(q): Query<SnapshotQuery>,
) -> Response {
    let viewer = caller.viewer();
    let req = q.request();
    // A snapshot with every socket (no page asked for) is a whole answer.
    let mut flight = match req.limit {
        None => Some(crate::stream::Flight::enter(caller.uid(), &conn).await),
        Some(_) => None,
    };
    let fresh = q.fresh.is_set();
    let parts = worker::run(move || engine.snapshot_parts(&req, fresh, viewer)).await;
    match parts {
        Ok((mut s, rows)) => {
            // The dashboard tells its reader why its D key cannot act,
            // before it is pressed.
            if let Some(p) = s.policy.as_mut() {
                p.refused = caller
                    .may_act("switch DRWA (every receiver of every namespace)")
                    .err()
                    .map(|e| e.to_string());
            }
            match rows {
                None => Json(s).into_response(),
                Some(rows) => crate::stream::snapshot(&s, rows, flight.take().expect("one answer"))
                    .unwrap_or_else(|e| error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
            }
        }
        Err(e) => error(StatusCode::BAD_REQUEST, Chain(&e).to_string()),
    }
}

type Loads = State<Arc<Loaded>>;
type Reads = State<Arc<Reader>>;
type Controls = State<Arc<Control>>;

/// The routes that read: open to root and the API group.
fn read_routes() -> Router<Engine> {
    Router::new()
        .route(route::STATUS, get(|State(l): Loads| async move { Json(l.status()) }))
        .route(
            route::SOCKETS,
            get(|State(r): Reads, caller: Caller, Extension(conn): Extension<Conn>, Query(q): Query<SocketsQuery>| async move {
                let flight = crate::stream::Flight::enter(caller.uid(), &conn).await;
                let all = q.all.is_set();
                let rows = worker::run(move || r.views(Asker::Api).rows(all)).await;
                crate::stream::sockets(rows, flight)
            }),
        )
        .route(route::SNAPSHOT, get(snapshot))
        .route(
            route::SERIES,
            get(|State(r): Reads, Path(cookie): Path<u64>, Query(q): Query<SeriesQuery>| async move {
                match worker::run(move || r.series(cookie, q.since_ms.unwrap_or(0))).await {
                    Ok(s) => Json(s).into_response(),
                    Err(e @ Error::UnknownSeries(_)) => error(StatusCode::NOT_FOUND, e.to_string()),
                    Err(e @ Error::SeriesFull(_)) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
                    Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, Chain(&e).to_string()),
                }
            }),
        )
        .route(
            route::PATHS,
            get(|State(r): Reads, Query(q): Query<PathsQuery>| async move {
                // Made once per read, written out without a lock.
                let prefix = q.prefix.is_set();
                let paths = worker::run(move || r.views(Asker::Api).paths(prefix)).await;
                Json(paths.as_ref()).into_response()
            }),
        )
        .route(
            route::SERVICES,
            get(|State(r): Reads| async move {
                let services = worker::run(move || r.views(Asker::Api).services()).await;
                Json(services.as_ref()).into_response()
            }),
        )
        .route(
            route::FLOORS,
            get(|State(l): Loads| async move {
                match l.floors() {
                    Ok(f) => Json(f).into_response(),
                    Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, Chain(&e).to_string()),
                }
            }),
        )
        .route(
            route::CC,
            get(|State(l): Loads| async move {
                match l.cc_info() {
                    Ok(i) => Json(i).into_response(),
                    Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, Chain(&e).to_string()),
                }
            }),
        )
        .route(
            route::POLICY,
            get(|State(r): Reads, State(c): Controls| async move {
                let all = worker::run(move || r.views(Asker::Api).all()).await;
                Json(c.policy_info(&all))
            }),
        )
}

/// The routes that change the kernel: `Actor` lets only root and the
/// admin group through (SO_PEERCRED), everyone else gets 403.
fn act_routes() -> Router<Engine> {
    Router::new()
        .route(
            route::CC_DEFAULT,
            post(
                |State(c): Controls, Actor(who): Actor, Json(req): Json<DefaultReq>| async move {
                    match c.set_default_cc(&req.name, who.uid) {
                        Ok(previous) => Json(DefaultResp {
                            previous,
                            default: req.name,
                        })
                        .into_response(),
                        Err(e) => error(StatusCode::BAD_REQUEST, Chain(&e).to_string()),
                    }
                },
            ),
        )
        .route(
            route::POLICY_DRWA,
            post(
                |State(c): Controls, Actor(who): Actor, Json(req): Json<DrwaReq>| async move {
                    match c.set_drwa(req.on, who.uid) {
                        Ok(()) => Json(req).into_response(),
                        Err(e) => error(StatusCode::CONFLICT, Chain(&e).to_string()),
                    }
                },
            ),
        )
        .route(
            route::POLICY_RULE,
            post(
                |State(c): Controls,
                 Actor(who): Actor,
                 Path(name): Path<String>,
                 Json(req): Json<RuleReq>| async move {
                    match c.set_rule_enabled(&name, req.enabled, who.uid) {
                        Ok(()) => Json(req).into_response(),
                        Err(e) => error(StatusCode::NOT_FOUND, Chain(&e).to_string()),
                    }
                },
            ),
        )
}

/// /metrics takes the scrape alone: no read, no view.
pub fn metrics_router(scrape: Arc<Scraper>) -> Router {
    Router::new()
        .route(
            route::METRICS,
            get(|State(s): State<Arc<Scraper>>| async move {
                (
                    [(
                        header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    s.text(),
                )
            }),
        )
        .route("/", get(|| async { "bloatd: metrics at /metrics\n" }))
        .with_state(scrape)
}

/// What one client may hold of a listener. A connection that has not sent
/// a complete request head within `header_timeout` (a fresh one, or a
/// keep-alive one between requests) is closed; at most `max_connections`
/// are open at once, and one more closes the oldest. So idle connections
/// cost a bounded number of file descriptors (a daemon out of descriptors
/// can neither answer nor create the iterators it reads sockets with), and
/// a real request still gets through: it is the newest.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub header_timeout: Duration,
    pub max_connections: usize,
    /// An answer the client reads nothing of for this long ends its
    /// connection (WRITE_STALL).
    pub write_stall: Duration,
}

impl Limits {
    pub const DEFAULT: Limits = Limits {
        header_timeout: Duration::from_secs(10),
        max_connections: 256,
        write_stall: WRITE_STALL,
    };
}

/// A listening socket (TCP for /metrics, Unix for the API).
pub trait Listener {
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    fn accept_io(&self) -> impl Future<Output = std::io::Result<Self::Io>>;
    /// Who is on the other end, where the kernel says (Unix sockets).
    fn peer(_io: &Self::Io) -> Option<crate::authority::Peer> {
        None
    }
}

impl Listener for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;
    async fn accept_io(&self) -> std::io::Result<Self::Io> {
        self.accept().await.map(|(s, _)| s)
    }
}

impl Listener for tokio::net::UnixListener {
    type Io = tokio::net::UnixStream;
    async fn accept_io(&self) -> std::io::Result<Self::Io> {
        self.accept().await.map(|(s, _)| s)
    }
    fn peer(io: &Self::Io) -> Option<crate::authority::Peer> {
        crate::authority::Peer::of(io)
            .inspect_err(|e| tracing::warn!("cannot read the API client's credentials: {e}"))
            .ok()
    }
}

/// Open connections of one listener, oldest first.
type Open = Arc<Mutex<BTreeMap<u64, tokio::task::AbortHandle>>>;

/// A connection's own task, for what its requests start: an answer with
/// every socket registers it (stream.rs, `Flights`), so that answers a
/// client does not read can be shed by ending their connection. Set once
/// the task is spawned, before it first runs.
#[derive(Clone, Default)]
pub struct Conn(pub Arc<std::sync::OnceLock<tokio::task::AbortHandle>>);

/// A connection whose answer makes no progress for this long is closed: a
/// client that stops reading would otherwise hold what the answer holds
/// (an answer with every socket: the whole read, ~6 MB at 20,000 sockets)
/// for as long as it likes.
pub const WRITE_STALL: Duration = Duration::from_secs(5);

/// The connection's stream, its writes bounded by WRITE_STALL: a write
/// the kernel has not taken for that long fails (TimedOut), and hyper ends
/// the connection, dropping its answer.
struct Stall<T> {
    io: T,
    stall: Duration,
    since: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl<T> Stall<T> {
    fn new(io: T, stall: Duration) -> Stall<T> {
        Stall {
            io,
            stall,
            since: None,
        }
    }

    /// After a pending write: whether it has waited too long (and, if not,
    /// a wake-up at the deadline).
    fn stalled(&mut self, cx: &mut std::task::Context<'_>) -> bool {
        let stall = self.stall;
        let sleep = self
            .since
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
        sleep.as_mut().poll(cx).is_ready()
    }

    fn wrote<R>(
        &mut self,
        r: std::task::Poll<std::io::Result<R>>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<R>> {
        use std::task::Poll;
        match r {
            Poll::Pending if self.stalled(cx) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client read nothing of its answer for too long",
            ))),
            Poll::Pending => Poll::Pending,
            done => {
                self.since = None;
                done
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Stall<T> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Stall<T> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.io).poll_write(cx, buf);
        self.wrote(r, cx)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let r = std::pin::Pin::new(&mut self.io).poll_flush(cx);
        self.wrote(r, cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Takes a connection off the open list when its task ends, however it ends.
struct Slot {
    open: Open,
    id: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
    }
}

/// Serve `router` on `listener` over HTTP/1.1 within `limits`.
pub async fn serve<L: Listener>(
    listener: L,
    router: Router,
    limits: Limits,
) -> std::io::Result<()> {
    let open: Open = Arc::default();
    let mut next_id = 0u64;
    loop {
        let io = match listener.accept_io().await {
            Ok(io) => io,
            Err(e) => {
                // Out of descriptors or memory: back off instead of spinning.
                tracing::warn!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let id = next_id;
        next_id += 1;
        let evicted: Vec<_> = {
            let mut slots = open.lock().unwrap_or_else(PoisonError::into_inner);
            let over = (slots.len() + 1).saturating_sub(limits.max_connections);
            (0..over).filter_map(|_| slots.pop_first()).collect()
        };
        for (_, oldest) in evicted {
            oldest.abort();
        }
        // Each request of the connection carries its peer's credentials,
        // and the connection's task (`Conn`).
        let conn = Conn::default();
        let router = router.clone().layer(Extension(conn.clone()));
        let router = match L::peer(&io) {
            Some(peer) => router.layer(Extension(peer)),
            None => router,
        };
        let service = hyper_util::service::TowerToHyperService::new(router);
        let slot = Slot {
            open: open.clone(),
            id,
        };
        let task = tokio::spawn(async move {
            let _slot = slot;
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .serve_connection(
                    hyper_util::rt::TokioIo::new(Stall::new(io, limits.write_stall)),
                    service,
                )
                .await;
        });
        // The task has not run yet (this runtime has one thread), so its
        // slot is on the list, and its handle in `conn`, before it can end
        // and take it off or serve a request.
        let _ = conn.0.set(task.abort_handle());
        open.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, task.abort_handle());
    }
}
