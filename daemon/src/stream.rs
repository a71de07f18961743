//! Answers with every socket, streamed: the JSON is written a chunk at a
//! time from one shared full read (`tracker::Rows`), each socket made into
//! a `Socket` only as its chunk is written, so answering for 100,000
//! sockets adds no more than a chunk and the read's order to the daemon's
//! memory (the whole answer was 62.8 MB, held twice, before streaming).
//! Same JSON as before: an array of sockets, or a snapshot object.

use crate::tracker::Rows;
use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bloatd_model::Snapshot;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

/// About this much JSON per chunk (some 110 sockets).
const CHUNK_BYTES: usize = 64 * 1024;

/// Every socket of `rows` as a JSON array.
pub fn sockets(rows: Rows) -> Response {
    json(b"[".to_vec(), rows, b"]".to_vec())
}

/// `snap` with `rows` as its sockets (`snap.sockets` is left out).
pub fn snapshot(snap: &Snapshot, rows: Rows) -> Result<Response, serde_json::Error> {
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
    Ok(json(br#"{"sockets":["#.to_vec(), rows, tail))
}

/// `head`, the rows separated by commas, then `tail`.
fn json(head: Vec<u8>, rows: Rows, tail: Vec<u8>) -> Response {
    let body = Body::from_stream(RowStream {
        head,
        rows,
        next: 0,
        tail: Some(tail),
    });
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

struct RowStream {
    head: Vec<u8>,
    rows: Rows,
    next: usize,
    /// Taken when written: the stream has ended.
    tail: Option<Vec<u8>>,
}

impl futures_core::Stream for RowStream {
    type Item = Result<Bytes, Infallible>;

    /// The next chunk, made now: each is a fraction of a millisecond of
    /// work, so other requests interleave with a long answer.
    fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.tail.is_none() {
            return Poll::Ready(None);
        }
        let mut buf = std::mem::take(&mut this.head);
        buf.reserve(CHUNK_BYTES + 4096);
        while this.next < this.rows.len() && buf.len() < CHUNK_BYTES {
            if this.next > 0 {
                buf.push(b',');
            }
            serde_json::to_writer(&mut buf, &this.rows.get(this.next))
                .expect("a Socket serializes to JSON");
            this.next += 1;
        }
        if this.next == this.rows.len() {
            buf.extend(this.tail.take().into_iter().flatten());
        }
        Poll::Ready(Some(Ok(Bytes::from(buf))))
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

    /// Every chunk of a streamed answer, and how many there were.
    fn collect(resp: Response) -> (Vec<u8>, usize) {
        let mut stream = resp.into_body().into_data_stream();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let (mut out, mut chunks) = (Vec::new(), 0);
        while let Poll::Ready(Some(chunk)) = Pin::new(&mut stream).poll_next(&mut cx) {
            out.extend_from_slice(&chunk.unwrap());
            chunks += 1;
        }
        (out, chunks)
    }

    #[test]
    fn a_streamed_answer_is_the_json_it_replaces() {
        let (t, clock) = rows(1000);
        let (bytes, chunks) = collect(sockets(t.rows(&clock, false)));
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
        };
        let (bytes, _) = collect(snapshot(&snap, t.rows(&clock, false)).unwrap());
        let streamed: Snapshot = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            streamed,
            Snapshot {
                sockets: t.sockets(&clock, false),
                ..snap
            }
        );
        let (none, _) = rows(0);
        let (bytes, chunks) = collect(sockets(none.rows(&clock, false)));
        assert_eq!((bytes.as_slice(), chunks), (&b"[]"[..], 1));
    }
}
