//! One task per session that drives the small futures a session's holds leave running (one
//! follows the data watch on a held node, another times a hold's `max_hold`), so that holding
//! many locks costs no task per hold; and the watches admitted waiters no longer need, kept
//! until they fire (see `parked.rs`).
//!
//! A job is a future that owns what it needs and ends by itself (its hold was released, lost,
//! or dropped). The task starts with the first job and ends once the session is gone and its
//! last job has ended; should its runtime have shut down meanwhile, the next job starts it again.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::mpsc;

use super::parked::Parked;
use crate::util::lock;

/// A future driven to its end by the session's task.
pub(crate) type Job = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The sending side of the session's task, started on first use.
#[derive(Default)]
pub(crate) struct Driver {
    jobs: Mutex<Option<mpsc::UnboundedSender<Job>>>,
    /// The watches kept until they fire.
    parked: Parked,
}

impl Driver {
    /// Keeps `watches` (of generation `generation`, each with the path it watches) until they
    /// fire, on the session's task: one per path (see `parked.rs`).
    pub fn keep_until_fired<W>(&self, generation: u64, watches: Vec<(String, W)>)
    where
        W: Future + Send + 'static,
    {
        if let Some(job) = self.parked.keep(generation, watches) {
            self.drive(Box::pin(job));
        }
    }

    /// Hands `job` to the session's task (starting it on the current runtime if needed).
    ///
    /// The task is spawned after the lock is let go: on a runtime shutting down, spawning drops
    /// the task at once, and with it the job, whose drop may hand in another job.
    pub fn drive(&self, job: Job) {
        let rx = {
            let mut jobs = lock(&self.jobs);
            let job = match jobs.as_ref() {
                Some(tx) => match tx.send(job) {
                    Ok(()) => return,
                    // The task ended with its runtime: start another.
                    Err(mpsc::error::SendError(job)) => job,
                },
                None => job,
            };
            let (tx, rx) = mpsc::unbounded_channel();
            let _ = tx.send(job);
            *jobs = Some(tx);
            rx
        };
        tokio::spawn(run(rx));
    }
}

async fn run(mut incoming: mpsc::UnboundedReceiver<Job>) {
    let mut running = FuturesUnordered::new();
    loop {
        tokio::select! {
            job = incoming.recv() => match job {
                Some(job) => running.push(job),
                None => break,
            },
            Some(()) = running.next(), if !running.is_empty() => {}
        }
    }
    // The session is gone: let the last jobs end.
    while running.next().await.is_some() {}
}
