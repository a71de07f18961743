//! The engine's worker: one thread for the work that may read every socket
//! (a read, a view, the sampler's tick), off the runtime's one thread, so
//! /metrics and the other connections are answered meanwhile. One thread
//! is enough: reads take the reader's lock one at a time anyway. Where the
//! system refuses it a thread (its cgroup's pids.max, RLIMIT_NPROC) the
//! work is done on the runtime's thread, as before there was a worker, and
//! the next job asks for a thread again; the refusal is logged once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex, PoisonError};

type Job = Box<dyn FnOnce() + Send>;

/// The worker's queue, once it runs.
static QUEUE: Mutex<Option<mpsc::Sender<Job>>> = Mutex::new(None);
static REFUSED: AtomicBool = AtomicBool::new(false);

/// The worker's queue, starting the worker if it does not run; None if the
/// system refuses the thread.
fn queue() -> Option<mpsc::Sender<Job>> {
    let mut q = QUEUE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(tx) = q.as_ref() {
        return Some(tx.clone());
    }
    let (tx, rx) = mpsc::channel::<Job>();
    let started = std::thread::Builder::new()
        .name("bloatd-engine".into())
        .spawn(move || rx.into_iter().for_each(|job| job()));
    match started {
        Ok(_) => {
            if REFUSED.swap(false, Ordering::Relaxed) {
                tracing::info!("the engine's worker thread started");
            }
            *q = Some(tx.clone());
            Some(tx)
        }
        Err(e) => {
            if !REFUSED.swap(true, Ordering::Relaxed) {
                tracing::warn!("no thread for the engine's work ({e}): done on the main thread until one starts");
            }
            None
        }
    }
}

/// `f`'s result, computed on the worker (or here, without one).
pub async fn run<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, result) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let _ = done.send(f());
    });
    match queue() {
        Some(tx) => {
            if let Err(mpsc::SendError(job)) = tx.send(job) {
                // The worker is gone: here, and a new one next time.
                QUEUE.lock().unwrap_or_else(PoisonError::into_inner).take();
                job();
            }
        }
        None => job(),
    }
    result
        .await
        .expect("the job ran: a panic in it ends the process (cmd/start.rs)")
}
